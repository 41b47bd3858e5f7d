"""Notebook 09's exercises (beyond no_grad). The reference solutions and their checks."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from nogradlab.lab.exercises.registry import exercise

with torch.random.fork_rng():  # the learner's random state is left alone
    torch.manual_seed(0)
    teacher = nn.Linear(8, 4)  # as in the notebook


# ----------------------------------------------------------------------------- 09.1: distillation targets


@torch.inference_mode()
def _inference_targets(x):
    return teacher(x)


def _tracked_targets(x):
    return teacher(x)


@exercise("09.1", kind="code", wrong=[(_inference_targets, "saved for backward"), (_tracked_targets, "graph")])
@torch.no_grad()
def targets(x):
    return teacher(x)


@targets.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a function of x, not a {type(fn).__name__}"
    with torch.random.fork_rng():
        torch.manual_seed(1)
        student, xb = nn.Linear(8, 4), torch.randn(16, 8)
    target = fn(xb)
    if not isinstance(target, torch.Tensor):
        return f"it returned a {type(target).__name__}; return the teacher's output tensor"
    if target.grad_fn is not None or target.requires_grad:
        return (f"the targets carry a graph (grad_fn {type(target.grad_fn).__name__}): the student's "
                "backward would run into the teacher too, and every batch keeps the teacher's activations; "
                "compute them under torch.no_grad()")
    try:
        F.mse_loss(student(xb), target).backward()
    except RuntimeError as e:
        return ("the student's backward raised: the targets are inference tensors, and mse_loss keeps its "
                "target to be saved for backward, which inference tensors cannot be outside the mode; use "
                f"torch.no_grad() (or .clone() them outside the mode) ({str(e).split('.')[0]})")
    if student.weight.grad is None:
        return "the student got no gradient"
    return None


# ----------------------------------------------------------------------------- 09.2: predict, then run

OPS = ("torch.cat([w, t])", "torch.sigmoid(w) * t", "t.requires_grad_()", "t.sin()")


def _raising() -> set:
    w = torch.randn(3, requires_grad=True)
    with torch.inference_mode():
        t0 = torch.ones(3)
    out = set()
    for name in OPS:
        try:
            eval(name, {"torch": torch, "w": w, "t": t0})  # noqa: S307 (the four fixed strings above)
        except RuntimeError:
            out.add(name)
    return out


@exercise("09.2", kind="predict", wrong=[
    ({"torch.sigmoid(w) * t"}, "require grad"),
    ({"torch.cat([w, t])", "torch.sigmoid(w) * t", "t.requires_grad_()"}, "cat"),
    ({"torch.sigmoid(w) * t", "t.requires_grad_()", "t.sin()"}, "sin"),
    ({"t.requires_grad_()"}, "saves t"),
])
def raising():
    return {"torch.sigmoid(w) * t", "t.requires_grad_()"}


@raising.judge
def _(a):
    try:
        a = set(a)
    except TypeError:
        return f"answer with a set of the strings above, not a {type(a).__name__}"
    unknown = a - set(OPS)
    if unknown:
        return f"{sorted(unknown)} is not one of the four: copy the strings as written"
    truth = _raising()
    if a == truth:
        return None
    for name, why in (
        ("torch.sigmoid(w) * t", "the product saves t to compute w's gradient (d(s*t)/ds = t): an inference "
                                 "tensor saved for backward outside the mode, which is refused"),
        ("t.requires_grad_()", "making an inference tensor require grad outside the mode is refused too: it "
                               "would become a leaf autograd tracks; clone it first"),
        ("torch.cat([w, t])", "cat saves no tensor for backward (only the sizes, to split the gradient), so this "
                              "release lets t be its input: it runs and the result has a grad_fn. The docs' "
                              "contract still rules it out (inference tensors are not for computations autograd "
                              "records), so it is current behaviour, not a guarantee"),
        ("t.sin()", "t.sin() outside the mode is an ordinary operation on a tensor that does not require grad: "
                    "nothing is recorded, nothing is saved; it works"),
    ):
        if (name in a) != (name in truth):
            return why
    return "not that set"
