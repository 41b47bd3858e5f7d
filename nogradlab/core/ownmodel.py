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
import threading
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


class _CountedReads(_ValuesReadAsZero):
    """:class:`_ValuesReadAsZero` that counts the values it made up."""

    reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads += 1
        return super().__torch_dispatch__(func, types, args, kwargs)


_WEIGHTS_ON_META_LOCK = threading.Lock()


@contextlib.contextmanager
def _weights_on_meta():
    """While a builder runs on the CPU: every parameter and buffer moves to ``meta`` as a module
    registers it (as ``accelerate.init_empty_weights`` does), so a builder that computes its layout
    from tensor values (torchvision's RegNet: ``.tolist()``) runs for real while its weights cost
    nothing. ``nn.Module.register_parameter``/``register_buffer`` are patched for the block only
    (process-wide: one block at a time), and restored whatever happens."""
    reg_p, reg_b = nn.Module.register_parameter, nn.Module.register_buffer

    def register_parameter(module, name, param):
        if type(param) is nn.Parameter and param.device.type != "meta":
            param = nn.Parameter(param.detach().to("meta"), requires_grad=param.requires_grad)
        return reg_p(module, name, param)

    def register_buffer(module, name, tensor, persistent=True):
        if tensor is not None and tensor.device.type != "meta":
            tensor = tensor.to("meta")
        return reg_b(module, name, tensor, persistent)

    with _WEIGHTS_ON_META_LOCK:
        nn.Module.register_parameter, nn.Module.register_buffer = register_parameter, register_buffer
        try:
            yield
        finally:
            nn.Module.register_parameter, nn.Module.register_buffer = reg_p, reg_b


def _named_tensors(module: nn.Module) -> list:
    return list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))


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
        from nogradlab.core.workloads import _default_dtype

        values = _ValuesReadAsZero() if _in_fake_mode() else contextlib.nullcontext()
        with torch.device(device), _default_dtype(dtype), values:
            m = self.model()
        if not isinstance(m, nn.Module):
            raise TypeError(f"the builder {self.name} returned {type(m).__name__}, not an nn.Module")
        return m

    def structure(self, dtype: "torch.dtype | None" = None, recorder_factory=None) -> tuple:
        """The model's structure on the ``meta`` device, built once outside any fake mode:
        ``(module, recorder or None, how)``. A builder is called under ``torch.device("meta")`` (its
        tensors recorded by ``recorder_factory()``, a dispatch mode, as they are made: the
        construction's allocations); one that reads a tensor's value while it builds (no value on
        ``meta``) runs on the CPU with its weights moved to ``meta`` as they are registered
        (:func:`_weights_on_meta`); only where that fails too is it built on fake tensors, values read
        as 0 (``how`` then says how many were read: a layout computed from them would be another
        model's). A given module is copied with ``meta`` tensors of the same shapes. Errors
        (``ValueError``): a builder that returns no module, or that puts its weights on a device of
        its own choosing (``device="cpu"`` inside it: the real model would not run on the GPU)."""
        from nogradlab.core.workloads import _default_dtype

        if isinstance(self.model, nn.Module):
            m = _fake_copy(self.model, "meta")
            return (m.to(dtype) if dtype is not None else m), None, "a copy of the given module"
        rec = recorder_factory() if recorder_factory is not None else None
        first = None
        try:
            with torch.device("meta"), _default_dtype(dtype), (rec if rec is not None else contextlib.nullcontext()):
                m = self.model()
            how = "built on the meta device"
        except (KeyboardInterrupt, SystemExit, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - a value read on meta (or anything else): try the CPU next
            first, rec = e, None
        if first is not None:
            try:
                with _weights_on_meta(), _default_dtype(dtype):
                    m = self.model()
                how = (f"built on the CPU with its weights on the meta device (on meta alone it failed: "
                       f"{type(first).__name__}: {str(first).splitlines()[0][:100] if str(first) else ''})")
            except (KeyboardInterrupt, SystemExit, MemoryError):
                raise
            except Exception:  # noqa: BLE001 - last resort: fake tensors, values read as 0
                from torch._subclasses.fake_tensor import FakeTensorMode

                reads = _CountedReads()
                with FakeTensorMode(), torch.device("cpu"), _default_dtype(dtype), reads:
                    m = self.model()
                if not isinstance(m, nn.Module):
                    raise TypeError(f"the builder {self.name} returned {type(m).__name__}, not an nn.Module") from None
                m = _fake_copy(m, "meta")
                how = ("built on fake tensors (on meta it failed: " + f"{type(first).__name__}: "
                       f"{str(first).splitlines()[0][:100] if str(first) else ''})"
                       + (f"; {reads.reads} tensor value(s) read while building read as 0: if the layout "
                          "depends on them, this is an estimate of another model" if reads.reads else ""))
        if not isinstance(m, nn.Module):
            raise TypeError(f"the builder {self.name} returned {type(m).__name__}, not an nn.Module")
        elsewhere = sorted({str(t.device) for _, t in _named_tensors(m) if t.device.type != "meta"})
        if elsewhere and first is None:
            raise ValueError(f"the builder {self.name} puts its weights on {', '.join(elsewhere)} itself "
                             "(device=... or .to(...) inside it): the real model would not run on the "
                             "estimated GPU with them there; build on the default device (nogradlab sets it)")
        if elsewhere:
            m = m.to("meta")
        return m, rec, how

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
    from nogradlab.core import workloads

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
