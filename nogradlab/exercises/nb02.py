"""Notebook 02's exercises (inside the engine: what autograd saves)."""
from __future__ import annotations

import torch

from . import exercise


def _count_saved(fn) -> int:
    n = [0]

    def pack(t):
        n[0] += 1
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return n[0]


# ---------------------------------------------------------------------------------------------- 02.1
# predict, then run: how many tensors does autograd save for torch.sigmoid(a * b), a and b tracked?

@exercise("02.1", kind="predict", wrong=[(2, "sigmoid"), (1, "product"), (4, "output"), (0, "grad is on")])
def saved_by_sigmoid_of_product():
    a = torch.randn(4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    return _count_saved(lambda: torch.sigmoid(a * b))


@saved_by_sigmoid_of_product.judge
def _(count):
    try:
        n = int(count)
    except (TypeError, ValueError):
        return f"answer with a whole number, not {count!r}"
    right = saved_by_sigmoid_of_product.answer()
    if n == right:
        return None
    return {
        0: "grad is on here, so both operations record a node and each node keeps what its backward needs",
        1: "the product needs both factors for its gradient (d(ab)/da = b, d(ab)/db = a): two tensors there",
        2: "the product's two factors, yes; but sigmoid saves one more: its output (sigmoid' = s * (1 - s))",
        4: "sigmoid saves its output, not its input; the product a * b is not kept as a separate tensor",
    }.get(n, f"{n} is not it: count per node what its backward formula needs (mul: both factors; "
              "sigmoid: its output)")


# ---------------------------------------------------------------------------------------------- 02.2
# code: saved_bytes(fn) -> the bytes autograd keeps for backward while fn() runs, each storage once

def _counts_every_tensor(fn):
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total[0]


def _counts_elements(fn):
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.numel()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def _runs_under_no_grad(fn):
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.no_grad():
        fn()
    return sum(seen.values())


@exercise("02.2", kind="code", wrong=[(_counts_every_tensor, "twice"), (_counts_elements, "elements"),
                                       (_runs_under_no_grad, "under no_grad")])
def saved_bytes(fn):
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


@saved_bytes.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a function saved_bytes(fn), not a {type(fn).__name__}"
    x = torch.randn(64, requires_grad=True)
    cases = {"x * x": lambda: x * x, "torch.sigmoid(x)": lambda: torch.sigmoid(x),
             "(x * 3).sum()": lambda: (x * 3).sum()}
    for name, case in cases.items():
        got, want = fn(case), saved_bytes.reference(case)
        if not isinstance(got, int) and not (isinstance(got, float) and got.is_integer()):
            return f"saved_bytes returned a {type(got).__name__} for {name}; return a number of bytes"
        if got == want:
            continue
        if got == 0:
            return (f"0 bytes for {name}: the function ran under no_grad (or without the hook), where "
                    "nothing is saved; count with grad on")
        if got == want // 4:
            return f"{got} for {name}: that counts elements; multiply by element_size() (4 bytes a float32)"
        if got > want:
            return (f"{got} bytes for {name}, expected {want}: x * x saves x twice, but it is one storage; "
                    "count each untyped_storage() once (key a dict by its data_ptr())")
        return f"{got} bytes for {name}, expected {want}"
    return None
