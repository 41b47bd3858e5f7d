"""Notebook 10's exercises (your own model). The reference solutions and their checks."""
from __future__ import annotations

import torch
import torch.nn as nn

from nogradlab.lab.exercises.registry import exercise

# ----------------------------------------------------------------------------- 10.1: count what is saved


def _models():
    """(model, x) pairs the check runs: a storage saved twice (ReLU's output, saved by the ReLU and by
    the next Linear), a view of a weight saved (the second Linear's transposed weight)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
        conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
        return [(mlp, torch.randn(4, 16)), (conv, torch.randn(2, 3, 8, 8))]


def _every_save(model, x):
    total = 0

    def pack(t):
        nonlocal total
        total += t.untyped_storage().nbytes()
        return t.detach()  # not t: the saved_tensors_hooks docs warn of a reference cycle

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total


def _with_weights(model, x):
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t.detach()  # not t: the saved_tensors_hooks docs warn of a reference cycle

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(seen.values())


def _under_no_grad(model, x):
    seen = {}
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in weights:
            seen[st.data_ptr()] = st.nbytes()
        return t.detach()  # not t: the saved_tensors_hooks docs warn of a reference cycle

    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(seen.values())


@exercise("10.1", kind="code", wrong=[(_every_save, "twice"), (_with_weights, "weights"),
                                      (_under_no_grad, "no_grad")])
def saved_bytes(model, x):
    seen = {}  # storage address -> bytes: each storage once
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in weights:
            seen[st.data_ptr()] = st.nbytes()
        return t.detach()  # not t: the saved_tensors_hooks docs warn of a reference cycle

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(seen.values())


@saved_bytes.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a function of (model, x), not a {type(fn).__name__}"
    from nogradlab.core.saved import saved_by_layer

    for model, x in _models():
        truth = saved_by_layer(model, x).total_bytes
        got = fn(model, x)
        if isinstance(got, bool) or not isinstance(got, int):
            return f"it returned {got!r}; return the number of bytes, an int"
        if got == truth:
            continue
        if got == 0:
            return ("it counted 0 bytes: under torch.no_grad() autograd records nothing, so nothing is saved and "
                    "the pack hook never runs; run the forward with grad on (torch.enable_grad())")
        if got == _every_save(model, x):
            return ("it counted a storage twice: ReLU's output is saved by the ReLU (for its own backward) and by "
                    "the next Linear (its input, for the weight's gradient), the same memory; count each storage "
                    "once (key on t.untyped_storage().data_ptr())")
        if got == _with_weights(model, x):
            return ("it counted the weights: a Linear saves its (transposed) weight, a view of the parameter, "
                    "which lives anyway; leave out every storage of model.parameters()")
        return f"it returned {got} bytes for {type(model[0]).__name__} first; one forward saves {truth}"
    return None


# ----------------------------------------------------------------------------- 10.2: twice the memory

CHOICES = ("less than double", "double", "more than double")


def _line(fixed: float, per_sample: float, memory: float) -> int:
    return int((memory - fixed) // per_sample)


@exercise("10.2", kind="predict", wrong=[("double", "paid once"), ("less than double", "grows with the batch"),
                                         ("twice", "one of")])
def doubled():
    return "more than double"


@doubled.judge
def _(a):
    if not isinstance(a, str) or a.strip().lower() not in CHOICES:
        return f"answer with one of {', '.join(repr(c) for c in CHOICES)}"
    fixed, per = 2.5 * 2**30, 20 * 2**20  # weights and workspaces; bytes per sample
    at40, at80 = _line(fixed, per, 40 * 2**30), _line(fixed, per, 80 * 2**30)
    truth = "more than double" if at80 > 2 * at40 else "double" if at80 == 2 * at40 else "less than double"
    a = a.strip().lower()
    if a == truth:
        return None
    if a == "double":
        return (f"memory is (weights and workspaces) + batch x (bytes per sample); the first part is paid once, "
                f"so the second GPU's extra 40 GiB all go to samples: for example, with 2.5 GiB fixed and 20 MiB a sample, "
                f"{at40} fit in 40 GiB and {at80} in 80 GiB")
    return ("only the bytes per sample grows with the batch, and it grows linearly: no part of the memory grows "
            "faster than the batch, so the batch cannot fall behind the memory")
