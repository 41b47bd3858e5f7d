"""Notebook 02's exercises (inside the engine: what autograd saves)."""
from __future__ import annotations

import torch

from nogradlab.lab.exercises.registry import exercise


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
# code: count_nodes(t) -> how many distinct nodes autograd recorded behind t (its grad_fn and everything
# reachable through next_functions, the leaves' AccumulateGrad nodes included); 0 when nothing was recorded

def _counts_paths(t):
    def walk(node):
        if node is None:
            return 0
        return 1 + sum(walk(n) for n, _ in node.next_functions)
    return walk(t.grad_fn)


def _direct_only(t):
    return 1 + sum(n is not None for n, _ in t.grad_fn.next_functions)


def _skips_leaves(t):
    seen, todo = set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo += [n for n, _ in node.next_functions]
    return sum(type(n).__name__ != "AccumulateGrad" for n in seen)


def _crashes_on_none(t):
    seen, todo = set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        todo += [n for n, _ in node.next_functions if n is not None]
    return len(seen)


@exercise("02.2", kind="code", wrong=[(_counts_paths, "twice"), (_direct_only, "recursively"),
                                       (_skips_leaves, "AccumulateGrad"), (_crashes_on_none, "return 0")])
def count_nodes(t):
    seen, todo = set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo += [n for n, _ in node.next_functions]
    return len(seen)


@count_nodes.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a function count_nodes(t), not a {type(fn).__name__}"
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    graphs = {"(x * w + x).sum()": (x * w + x).sum(), "torch.relu(x * 2).mean()": torch.relu(x * 2).mean()}
    for name, t in graphs.items():
        got, want = fn(t), count_nodes.reference(t)
        if got == want:
            continue
        if isinstance(got, int) and got > want:
            return (f"{got} nodes for {name}, expected {want}: a node reached by two paths (x feeds the product and "
                    "the addition) was counted twice; keep a set of the nodes already seen")
        if got == 1 + sum(n is not None for n, _ in t.grad_fn.next_functions):
            return (f"{got} for {name}: that is grad_fn and its direct inputs only; walk next_functions "
                    "recursively, down to the leaves")
        if got == want - 2 or got == want - 1:
            return (f"{got} for {name}, expected {want}: the leaves' AccumulateGrad nodes are nodes too (each leaf "
                    "that requires grad has one, reached through next_functions)")
        return f"{got} nodes for {name}, expected {want}"
    with torch.no_grad():
        untracked = x * w
    try:
        got = fn(untracked)
    except AttributeError:
        got = "an AttributeError"
    if got != 0:
        return (f"for a tensor made under no_grad it gave {got}: its grad_fn is None, nothing was recorded; "
                "return 0")
    return None
