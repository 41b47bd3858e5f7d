"""Your own model as a workload: any ``nn.Module`` (or a function that builds one) with an input spec,
for ``memory.estimate`` and ``batch.largest_batch``.

    from nogradlab import memory, batch
    import torchvision
    r = memory.estimate(lambda: torchvision.models.resnet101(weights=None), 8, "cuda", "no_grad",
                        inputs=(3, 224, 224))
    b = batch.largest_batch(torchvision.models.resnet101, "eval+no_grad", 24 * 2**30, "cuda",
                            inputs=(3, 224, 224))

``model``: a zero-argument builder (best: it is called inside ``FakeTensorMode`` and
``torch.device(...)``, so the weights are built fake and nothing is allocated: a 7-billion-parameter
model can be sized on a laptop; while it builds, a value read from a tensor reads 0, so initialisers
that sample until a condition holds stop at once) or a built ``nn.Module`` (copied with fake weights of the same shapes,
strides and dtypes for each estimate; the module itself is never changed, and one built on the
``"meta"`` device costs no memory either). A built module may hold plain tensor attributes besides its
parameters and buffers; they are copied fake as well.

``inputs``: one sample's shape, ``(3, 224, 224)`` or ``"3x224x224"`` (the batch dimension is put
first), optionally with its dtype, ``((16,), torch.int64)`` (default ``torch.float32``; integer and
bool inputs are zeros, valid token ids), or a function ``inputs(batch)`` returning the whole batch: a tensor, a tuple (passed as
positional arguments) or a dict (keyword arguments). It runs under ``torch.device(...)``, so
``torch.randn(batch, 16, 64)`` lands on the estimated device.

A training step needs a scalar loss: ``loss(output, target)``, with ``target(batch)`` building the
target (both optional). Without ``loss`` the step uses the mean of every floating-point tensor in the
output (summed), computed in float32; its backward is the model's own.
"""
from __future__ import annotations

import contextlib
import copy
import numbers
import re
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["Model", "resolve", "parse_shape", "parse_dtype", "DTYPES", "model_tensors"]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}


def parse_shape(spec) -> tuple:
    """``"3x224x224"``, ``(3, 224, 224)`` or ``torch.Size`` -> ``(3, 224, 224)``; ``ValueError``
    unless every dimension is a positive integer."""
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.lower().replace("*", "x").split("x")]
        if not parts or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
            raise ValueError(f"an input shape is positive integers joined by 'x', e.g. 3x224x224; "
                             f"got {spec!r}")
        dims = [int(p) for p in parts]
    elif isinstance(spec, (tuple, list, torch.Size)):
        dims = list(spec)
    else:
        raise ValueError(f"inputs must be one sample's shape (e.g. (3, 224, 224) or '3x224x224') "
                         f"or a function of the batch returning the inputs; got {spec!r}")
    if not dims or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1 for d in dims):
        raise ValueError(f"an input shape needs positive integer dimensions, e.g. (3, 224, 224); "
                         f"got {spec!r}")
    return tuple(int(d) for d in dims)


def parse_dtype(spec) -> torch.dtype:
    """A ``torch.dtype`` or one of ``DTYPES``' names (``"float32"``, ``"bfloat16"``...)."""
    if isinstance(spec, torch.dtype):
        return spec
    if isinstance(spec, str) and spec.strip().lower().replace("torch.", "") in DTYPES:
        return DTYPES[spec.strip().lower().replace("torch.", "")]
    raise ValueError(f"unknown dtype {spec!r}; allowed: {', '.join(DTYPES)}")


def _name_of(model) -> str:
    if isinstance(model, nn.Module):
        return type(model).__name__
    name = getattr(model, "__qualname__", None) or getattr(model, "__name__", None) or type(model).__name__
    return "model" if name == "<lambda>" else name


def _fake_copy(module: nn.Module, device) -> nn.Module:
    """A copy of ``module`` whose parameters, buffers and plain tensor attributes are new tensors of
    the same shapes, strides and dtypes on ``device`` (fake ones inside ``FakeTensorMode``); shared
    tensors (tied weights) stay shared. Nothing of the original is changed or read but shapes."""
    memo: dict = {}

    def new(t):
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device)

    for mod in module.modules():
        for p in mod._parameters.values():
            if p is not None and id(p) not in memo:
                memo[id(p)] = nn.Parameter(new(p), requires_grad=p.requires_grad)
        for b in mod._buffers.values():
            if b is not None and id(b) not in memo:
                memo[id(b)] = new(b)
        for v in vars(mod).values():
            if isinstance(v, torch.Tensor) and id(v) not in memo:
                memo[id(v)] = new(v)
    return copy.deepcopy(module, memo)


class _ValuesReadAsZero(TorchDispatchMode):
    """While a builder runs on fake tensors: a value read from a tensor (``.item()``, ``bool()``)
    reads 0. Weight initialisers that sample until a condition holds (``nn.init.trunc_normal_``'s
    ``if not mask.any()``) then stop at once; the weights' values never matter to memory."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            t = args[0]
            return False if t.dtype == torch.bool else (0.0 if t.is_floating_point() else 0)
        return func(*args, **(kwargs or {}))


def _in_fake_mode() -> bool:
    from torch._guards import detect_fake_mode

    return detect_fake_mode() is not None


def model_tensors(x) -> list:
    """The tensors in an input, target or output structure (tensor, tuple, list, dict)."""
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


@dataclass(eq=False)  # compared and hashed by identity: a search's caches key on the object itself
class Model:
    """Your own model and its inputs, usable wherever a built-in workload name is (see the module
    docstring). ``dtype``: the inputs' dtype for a shape spec. ``name``: for labels (default: the
    module's class or the builder's name)."""

    model: object
    inputs: object
    dtype: torch.dtype = torch.float32
    loss_fn: object = None
    target_fn: object = None
    name: str = ""
    scale: str = ""

    def __post_init__(self):
        if not isinstance(self.model, nn.Module) and not callable(self.model):
            raise TypeError(f"model must be an nn.Module or a zero-argument function that builds one, "
                            f"got {type(self.model).__name__}")
        if (isinstance(self.inputs, (tuple, list)) and len(self.inputs) == 2
                and isinstance(self.inputs[1], (torch.dtype, str))
                and isinstance(self.inputs[0], (tuple, list, torch.Size, str))):
            self.inputs, self.dtype = self.inputs  # (shape, dtype)
        self.dtype = parse_dtype(self.dtype)
        if not callable(self.inputs):
            self.inputs = parse_shape(self.inputs)
        for what, fn in (("loss", self.loss_fn), ("target", self.target_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{what} must be a function, got {type(fn).__name__}")
        self.name = self.name or _name_of(self.model)

    @property
    def description(self) -> str:
        what = (f"inputs {'x'.join(map(str, self.inputs))} {str(self.dtype).replace('torch.', '')} per "
                "sample" if isinstance(self.inputs, tuple) else "inputs from a function of the batch")
        return f"{self.name} (your own model), {what}"

    def build(self, device="cpu", dtype: "torch.dtype | None" = None) -> nn.Module:
        """The model on ``device``: the builder called under ``torch.device(device)`` (and ``dtype``
        as torch's default dtype, restored afterwards), or a copy of the given module (fake weights
        under ``FakeTensorMode``, a real copy otherwise), converted to ``dtype`` if given."""
        if isinstance(self.model, nn.Module):
            if _in_fake_mode():
                m = _fake_copy(self.model, device)
                return m.to(dtype) if dtype is not None else m
            m = copy.deepcopy(self.model).to(device)
            return m.to(dtype) if dtype is not None else m
        from .workloads import _default_dtype

        values = _ValuesReadAsZero() if _in_fake_mode() else contextlib.nullcontext()
        with torch.device(device), _default_dtype(dtype), values:
            m = self.model()
        if not isinstance(m, nn.Module):
            raise TypeError(f"the builder {self.name} returned {type(m).__name__}, not an nn.Module")
        return m

    def make_input(self, batch: int, device="cpu"):
        """The inputs of a batch: random floats (zeros for integer/bool dtypes) of
        ``(batch, *shape)``, or what the input function returns."""
        with torch.device(device):
            if callable(self.inputs):
                x = self.inputs(batch)
                if not model_tensors(x):
                    raise TypeError(f"the input function returned {type(x).__name__} without a tensor; "
                                    "return a tensor, a tuple of them (positional arguments) or a dict "
                                    "(keyword arguments)")
                return x
            shape = (batch, *self.inputs)
            if self.dtype.is_floating_point or self.dtype.is_complex:
                return torch.randn(shape, dtype=self.dtype)
            return torch.zeros(shape, dtype=self.dtype)

    def make_target(self, batch: int, device="cpu"):
        if self.target_fn is None:
            return None
        with torch.device(device):
            return self.target_fn(batch)

    def loss(self, output, target):
        if self.loss_fn is not None:
            return self.loss_fn(output, target)
        ts = [t for t in model_tensors(output) if t.is_floating_point()]
        if not ts:
            raise TypeError("the model's output holds no floating-point tensor to train on; give "
                            "loss=(output, target) -> scalar")
        return sum(t.float().mean() for t in ts)


def forward(model, x):
    """``model(x)``; a tuple or list input is passed as positional arguments, a dict as keywords."""
    if isinstance(x, (tuple, list)):
        return model(*x)
    if isinstance(x, dict):
        return model(**x)
    return model(x)


def resolve(workload, scale: str = "tiny", inputs=None):
    """A workload object: a built-in one (a name, or a ``workloads.Workload``) or a :class:`Model`
    (given, or made from an ``nn.Module``/builder and ``inputs``). Checked here, before any work."""
    from . import workloads

    if isinstance(workload, str):
        if inputs is not None:
            raise ValueError(f"inputs= is for your own model; the built-in workload {workload!r} has "
                             "its own")
        return workloads.get(workload, scale)
    if isinstance(workload, (workloads.Workload, Model)):
        if inputs is not None:
            raise ValueError("inputs= is given with the model; pass it to Model(...) only")
        return workload
    if isinstance(workload, nn.Module) or callable(workload):
        if inputs is None:
            raise ValueError("your own model needs inputs=: one sample's shape, e.g. (3, 224, 224) or "
                             "'3x224x224', or a function of the batch returning the inputs")
        return Model(workload, inputs)
    raise ValueError(f"unknown workload {workload!r}; allowed: {', '.join(workloads.names())}, an "
                     "nn.Module, a function that builds one, or nogradlab.ownmodel.Model")
