"""Notebook 01's exercises (what no_grad does). The reference solutions and their checks."""
from __future__ import annotations

import torch
import torch.nn as nn


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2)).train()


def _forgets_no_grad(model, x):
    model.eval()
    out = model(x)
    model.train()
    return out


def _always_trains(model, x):
    model.eval()
    with torch.no_grad():
        out = model(x)
    model.train()  # wrong for a caller whose model was in eval mode
    return out


def _leaves_eval(model, x):
    model.eval()
    with torch.no_grad():
        return model(x)


from nogradlab.lab.exercises.registry import exercise  # noqa: E402  (the registry lives in the package)


@exercise("01.1", kind="code", wrong=[(_forgets_no_grad, "grad_fn"), (_leaves_eval, "mode"),
                                      (_always_trains, "was in eval mode")])
def predict(model, x):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return model(x)
    finally:
        model.train(was_training)


@predict.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a function predict(model, x), not a {type(fn).__name__}"
    model, x = _model(), torch.randn(3, 4)
    out = fn(model, x)
    if not isinstance(out, torch.Tensor):
        return f"predict returned a {type(out).__name__}; return the model's output tensor"
    if out.grad_fn is not None or out.requires_grad:
        return (f"the output has grad_fn {type(out.grad_fn).__name__}: the forward ran with grad on, so "
                "autograd built a graph and kept tensors for a backward that never comes; wrap the call in "
                "torch.no_grad()")
    if not model.training:
        return ("the model came back in eval mode: a caller that trains next would train with dropout off; "
                "remember model.training and restore it (model.train(was_training))")
    again = fn(model, x)
    if not torch.equal(out, again):
        return "two calls gave different outputs: dropout was active; call model.eval() before the forward"
    served = _model().eval()  # a caller serving predictions: its model is in eval mode already
    fn(served, x)
    if served.training:
        return ("a model that was in eval mode came back in training mode: predict should leave the mode as it "
                "found it, so remember model.training and restore that (model.train(was_training)), rather "
                "than calling model.train()")
    return None


# ---------------------------------------------------------------------------------------------- 01.2
# predict, then run: inside no_grad, with w = torch.ones(3, requires_grad=True), which results have
# requires_grad=True?  a) w.clone()  b) w.unsqueeze(0)  c) torch.ones_like(w)
# d) nn.Parameter(torch.zeros(2))  e) w.detach().requires_grad_()  f) w.sum()

_TRACKED_WHY = {
    "a": "a) w.clone() is a new result computed from w: under no_grad it comes out untracked",
    "b": "b) is the view: under no_grad a view of a tracked leaf keeps requires_grad (it shares the "
         "leaf's memory, so autograd must still know where it came from)",
    "c": "c) torch.ones_like(w) is a factory call: it copies w's shape, not its requires_grad",
    "d": "d) an nn.Parameter is created with requires_grad=True whatever the grad mode: that is how a "
         "model built under no_grad still trains",
    "e": "e) requires_grad_() sets the flag on a leaf directly; no_grad only stops recording operations",
    "f": "f) w.sum() is a new result: untracked under no_grad",
}


@exercise("01.2", kind="predict", wrong=[
    (set(), "view"),
    ({"d", "e"}, "the view"),
    ({"b", "e"}, "nn.Parameter"),
    ({"a", "b", "d", "e"}, "clone"),
])
def tracked_under_no_grad():
    w = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        made = {"a": w.clone(), "b": w.unsqueeze(0), "c": torch.ones_like(w),
                "d": nn.Parameter(torch.zeros(2)), "e": w.detach().requires_grad_(), "f": w.sum()}
    return {k for k, t in made.items() if t.requires_grad}


@tracked_under_no_grad.judge
def _(letters):
    try:
        got = {str(x).strip().lower().strip("()") for x in letters}
    except TypeError:
        return f"answer with a set of letters, e.g. {{'a', 'f'}}, not a {type(letters).__name__}"
    unknown = got - set(_TRACKED_WHY)
    if unknown:
        return f"the choices are a-f; {sorted(unknown)} is not one of them"
    right = tracked_under_no_grad.answer()
    if got == right:
        return None
    if not got:
        return ("nothing? That is the article's rule (\"everything created inside no_grad is untracked\"), "
                "and it is too strong: " + _TRACKED_WHY["b"])
    wrong = sorted((got - right) | (right - got))
    return "; ".join(_TRACKED_WHY[k] for k in wrong)


# ---------------------------------------------------------------------------------------------- 01.3
# predict, then run: y = w * w records MulBackward0, which saves w. Under no_grad, w.mul_(2).
# What does y.sum().backward() do?  "a": w.grad = 2 (the derivative at the old w = 1);
# "b": w.grad = 4 (at the new w = 2); "c": it raises a RuntimeError.

@exercise("01.3", kind="predict", wrong=[("a", "version"), ("b", "copy"), ("d", "a, b or c")])
def backward_after_inplace():
    w = torch.ones(3, requires_grad=True)
    y = w * w
    with torch.no_grad():
        w.mul_(2)
    try:
        y.sum().backward()
    except RuntimeError:
        return "c"
    return "a" if float(w.grad[0]) == 2.0 else "b"


@backward_after_inplace.judge
def _(letter):
    got = str(letter).strip().lower().strip("()")
    if got not in ("a", "b", "c"):
        return f"answer with one letter: a, b or c (got {letter!r})"
    if got == backward_after_inplace.answer():
        return None
    if got == "a":
        return ("autograd saved w itself, not a copy of its old values, so it cannot use w = 1; and "
                "no_grad does not hide the change: every in-place op bumps w._version, and backward "
                "checks the version it saved")
    return ("backward does not quietly use the new values either: the saved w is the same tensor, not a "
            "copy, and its version counter moved (w._version), so backward raises instead of computing a "
            "gradient of a formula nobody ran")
