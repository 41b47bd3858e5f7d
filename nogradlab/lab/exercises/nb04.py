"""Notebook 04's exercises (model.eval() and no_grad)."""
from __future__ import annotations

import torch
import torch.nn as nn

from nogradlab.lab.exercises.registry import exercise

_CASES = ("train+grad", "train+no_grad", "eval+grad", "eval+no_grad")


# ---------------------------------------------------------------------------------------------- 04.1
# predict, then run: nn.BatchNorm1d(3) on a batch of ONE sample, torch.randn(1, 3). Which of the four
# settings raise an error?

@exercise("04.1", kind="predict", wrong=[({"train+grad"}, "no_grad does not change"), (set(), "batch's own"),
                                          (set(_CASES), "running statistics")])
def batch_of_one_raises():
    bn = nn.BatchNorm1d(3)
    raised = set()
    for case in _CASES:
        mode, grad = case.split("+")
        bn.train(mode == "train")
        try:
            with torch.set_grad_enabled(grad == "grad"):
                bn(torch.randn(1, 3))
        except ValueError:
            raised.add(case)
    return raised


@batch_of_one_raises.judge
def _(cases):
    try:
        got = {str(c).strip().replace(" ", "") for c in cases}
    except TypeError:
        return f"answer with a set of names from {set(_CASES)}"
    if got - set(_CASES):
        return f"unknown names {sorted(got - set(_CASES))}; use names from {sorted(_CASES)}"
    right = batch_of_one_raises.answer()
    if got == right:
        return None
    if got == {"train+grad"} or got == {"eval+grad"} or ("train+grad" in got) != ("train+no_grad" in got):
        return ("no_grad does not change what BatchNorm computes: in training mode it normalises by the batch's "
                "statistics, grad on or off, so train+no_grad fails exactly like train+grad")
    if not got:
        return ("in training mode BatchNorm normalises by the batch's own variance, which one sample per "
                "channel cannot give: PyTorch raises a ValueError")
    return ("in eval mode BatchNorm uses its running statistics, not the batch's, so a batch of one is fine; "
            "only the training-mode calls raise")


# ---------------------------------------------------------------------------------------------- 04.2
# code: freeze_batchnorm(model): for fine-tuning with a small batch, put only the BatchNorm layers in eval
# mode (running statistics fixed), leave Dropout and everything else training.

def _everything_eval(model):
    model.eval()
    return model


def _freeze_params(model):
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            for p in m.parameters():
                p.requires_grad_(False)
    return model


def _no_grad_only(model):
    model.forward = torch.no_grad()(model.forward)
    return model


def _stop_tracking(model):
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.track_running_stats = False  # the statistics stop moving, but the batch's own are used
    return model


@exercise("04.2", kind="code", wrong=[(_everything_eval, "Dropout"), (_freeze_params, "buffers"),
                                       (_no_grad_only, "under no_grad"), (_stop_tracking, "batch's own")])
def freeze_batchnorm(model):
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()
    return model


@freeze_batchnorm.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a function freeze_batchnorm(model), not a {type(fn).__name__}"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 2)).train()
    fn(model)
    bn, drop = model[1], model[3]
    before = bn.running_mean.clone()
    seen = []
    hook = bn.register_forward_hook(lambda m, i, o: seen.append(o.detach()))
    try:
        out = model(torch.randn(6, 4) + 3)
    finally:
        hook.remove()
    if out.grad_fn is None:
        return ("the forward ran under no_grad: the model can no longer be fine-tuned, and no_grad does not "
                "fix BatchNorm's running statistics anyway; put only the BatchNorm modules in eval mode")
    if not torch.equal(before, bn.running_mean):
        if bn.training:
            return ("BatchNorm's running statistics still moved: they are buffers, updated by every training-mode "
                    "forward whatever requires_grad or no_grad say; put the BatchNorm modules themselves in "
                    "eval mode (m.eval() for each nn.BatchNorm*)")
        return "BatchNorm's running statistics still moved"
    if seen and seen[0].mean(0).abs().max() < 1e-4:
        return ("BatchNorm still normalises each batch by the batch's own mean and variance (its output has mean "
                "0 over the batch): with track_running_stats=False the statistics stop moving, but they are not "
                "used either; put the BatchNorm modules in eval mode, which normalises by the running statistics")
    if not drop.training:
        return ("the Dropout layer is in eval mode too: model.eval() switches every submodule; call eval() only "
                "on the BatchNorm modules (loop over model.modules())")
    if not all(p.requires_grad for p in model.parameters()):
        return "some parameters were frozen (requires_grad False); the task only fixes the running statistics"
    return None
