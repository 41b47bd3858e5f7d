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


def _leaves_eval(model, x):
    model.eval()
    with torch.no_grad():
        return model(x)


from . import exercise  # noqa: E402  (the registry lives in the package)


@exercise("01.1", kind="code", wrong=[(_forgets_no_grad, "grad_fn"), (_leaves_eval, "mode")])
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
    return None
