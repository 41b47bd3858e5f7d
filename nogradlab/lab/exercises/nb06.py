"""Notebook 06's exercises (decorators, contexts and autocast). The reference solutions and their checks."""
from __future__ import annotations

import torch
import torch.nn as nn

from nogradlab.lab.exercises.registry import exercise


def _model():
    torch.manual_seed(0)
    return nn.Linear(8, 3)


# ----------------------------------------------------------------------------- 06.1: a generator's scope


def _with_block(model, batches):  # the block stays entered across each yield
    with torch.no_grad():
        for b in batches:
            yield model(b)


def _set_off(model, batches):  # turns grad off for the thread, and never back on
    torch.set_grad_enabled(False)
    for b in batches:
        yield model(b)


def _tracked(model, batches):  # no mode at all
    for b in batches:
        yield model(b)


@exercise("06.1", kind="code", wrong=[(_with_block, "across each yield"), (_set_off, "set_grad_enabled"),
                                      (_tracked, "grad_fn")])
@torch.no_grad()
def embed_stream(model, batches):
    for b in batches:
        yield model(b)


@embed_stream.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a generator function embed_stream(model, batches), not a {type(fn).__name__}"
    model = _model()
    batches = [torch.randn(2, 8) for _ in range(3)]
    before = torch.is_grad_enabled()
    try:
        with torch.enable_grad():
            gen = fn(model, batches)
            if isinstance(gen, torch.Tensor) or not hasattr(gen, "__next__"):
                return (f"embed_stream(...) returned a {type(gen).__name__}: it should be a generator "
                        "(a function with `yield`), yielding one output per batch")
            outs, body = [], []
            for out in gen:
                body.append(torch.is_grad_enabled())  # the caller's loop body
                outs.append(out)
            after = torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(before)
    if len(outs) != len(batches):
        return f"it yielded {len(outs)} outputs for {len(batches)} batches; yield one per batch"
    if not after:
        return ("the caller is left with grad off after the loop: torch.set_grad_enabled(False) switches "
                "the thread's mode until someone switches it back; use @torch.no_grad() on the generator")
    if any(o.grad_fn is not None for o in outs):
        return (f"the outputs have grad_fn {type(outs[0].grad_fn).__name__}: the forward ran with grad on; "
                "decorate the generator with @torch.no_grad()")
    if not all(body):
        return ("the caller's loop body ran with grad off: a `with torch.no_grad():` inside a generator "
                "stays entered across each yield, so it covers the caller's code too; the decorator "
                "@torch.no_grad() leaves the mode at each yield and enters it again at each resume")
    for b, o in zip(batches, outs):
        if not torch.allclose(o, model(b).detach()):
            return "the outputs are not model(batch) for each batch"
    return None


# ----------------------------------------------------------------------------- 06.2: predict, then run


def _truth_06_2():
    lin = _model()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        out = lin(torch.randn(2, 8))
    out.float().sum().backward()
    return None if lin.weight.grad is None else lin.weight.grad.dtype


@exercise("06.2", kind="predict", wrong=[(lambda: torch.bfloat16, "leaf"), (lambda: None, "records"),
                                         (lambda: torch.float16, "CPU")])
def weight_grad_dtype():
    return torch.float32  # the gradient of a leaf has the leaf's dtype; the cast's backward casts back


@weight_grad_dtype.judge
def _(a):
    truth = _truth_06_2()
    if a == truth:
        return None
    if a is None:
        return ("autocast does not stop autograd: it records each cast and each low-precision operator, "
                "so backward reaches the weight and fills lin.weight.grad")
    if a == torch.bfloat16:
        return ("the weight is a float32 leaf: autocast made a bfloat16 copy for the matmul, and the "
                "copy's backward casts the gradient back, so .grad has the leaf's dtype")
    if a == torch.float16:
        return ("float16 is autocast's default on CUDA; this region asked for bfloat16 on the CPU, and "
                "in any case .grad takes the dtype of the leaf, not of the copy")
    if not isinstance(a, torch.dtype):
        return f"answer with a torch dtype (e.g. torch.float64) or None, not a {type(a).__name__}"
    return f"{a} is not it: which tensor does the gradient belong to, the bfloat16 copy or the weight?"
