"""Notebook 03's exercises (where to put no_grad: scope)."""
from __future__ import annotations

import torch
import torch.nn as nn

from nogradlab.lab.exercises.registry import exercise


def _setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    batches = [torch.randn(5, 4) for _ in range(3)]
    return model, batches


def _expected(model, batches):
    with torch.no_grad():
        return sum(model(xb).square().mean().item() for xb in batches) / len(batches)


def _no_grad_tensor(model, batches):
    total = 0
    with torch.no_grad():
        for xb in batches:
            total = total + model(xb).square().mean()
    return total / len(batches)


def _item_only(model, batches):
    total = 0.0
    for xb in batches:
        total += model(xb).square().mean().item()
    return total / len(batches)


def _hoards(model, batches):
    total = 0
    for xb in batches:
        total = total + model(xb).square().mean()
    return (total / len(batches)).item()


# ---------------------------------------------------------------------------------------------- 03.1
# code: fix validate(model, batches) so it returns the mean loss as a float and records nothing

@exercise("03.1", kind="code", wrong=[(_no_grad_tensor, "a tensor"), (_item_only, "recorded"),
                                       (_hoards, "until the end")])
def validate(model, batches):
    total = 0.0
    with torch.no_grad():
        for xb in batches:
            total += model(xb).square().mean().item()
    return total / len(batches)


@validate.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a function validate(model, batches), not a {type(fn).__name__}"
    model, batches = _setup()
    saved = []
    peak = [0]

    def pack(t):
        saved.append(1)
        peak[0] = max(peak[0], len(saved))
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        got = fn(model, batches)
    if isinstance(got, torch.Tensor):
        return ("validate returned a tensor: a caller that keeps it (a list of losses, a running sum) keeps "
                "what it references; return a Python float with .item()")
    if not isinstance(got, float):
        return f"validate returned a {type(got).__name__}; return the mean loss as a float"
    want = _expected(model, batches)
    if abs(got - want) > 1e-6 * max(1.0, abs(want)):
        return f"the value is {got:.6g}, expected {want:.6g}: the mean over the batches of model(xb).square().mean()"
    if saved:
        if getattr(fn, "__code__", None) is not None and ".item()" in _source(fn) and "total = total +" in _source(fn):
            return ("it builds one graph over all batches and calls .item() only at the end: every batch's "
                    "activations stay alive until the end; wrap the loop in torch.no_grad()")
        return ("each batch's graph was recorded (autograd saved tensors for backward) even though .item() "
                "drops it after the batch: wrap the loop in torch.no_grad()")
    return None


def _source(fn) -> str:
    import inspect
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


# ---------------------------------------------------------------------------------------------- 03.2
# predict, then run: evaluate() calls torch.set_grad_enabled(False) as a plain function, not a `with`.
# After out = evaluate(lin, x); y = lin(x): (out.requires_grad, y.requires_grad, torch.is_grad_enabled())?

@exercise("03.2", kind="predict", wrong=[((False, True, True), "plain call"), ((True, True, True), "does switch"),
                                          ((False, False, True), "same switch"),
                                          (("False", "False", "False"), "without quotes")])
def grad_after_plain_call():
    lin = nn.Linear(3, 1)
    x = torch.ones(2, 3)
    before = torch.is_grad_enabled()
    try:
        def evaluate(model, x):
            torch.set_grad_enabled(False)
            return model(x)
        out = evaluate(lin, x)
        y = lin(x)
        return (out.requires_grad, y.requires_grad, torch.is_grad_enabled())
    finally:
        torch.set_grad_enabled(before)


@grad_after_plain_call.judge
def _(triple):
    if isinstance(triple, str) or any(isinstance(v, str) for v in (triple if isinstance(triple, (tuple, list)) else ())):
        return ("answer with three booleans, True or False without quotes: a string such as 'False' is not a "
                "boolean (bool('False') is True)")
    try:
        got = tuple(bool(v) for v in triple)
    except TypeError:
        return "answer with three booleans: (out.requires_grad, y.requires_grad, torch.is_grad_enabled())"
    if len(got) != 3:
        return f"answer with three booleans, got {len(got)}"
    right = grad_after_plain_call.answer()
    if got == right:
        return None
    if got[0]:
        return ("torch.set_grad_enabled(False) does switch grad off at once, with or without `with`: out is "
                "computed with grad off")
    if got[1] != got[2]:
        return ("y and torch.is_grad_enabled() read the same switch: y is computed with whatever mode the "
                "thread is in at that point")
    return ("called as a plain call (no `with`), set_grad_enabled(False) switches this thread's grad mode "
            "off and leaves it off after the function returns: nothing restores it, so y is untracked too")
