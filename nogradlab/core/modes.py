"""The gradient modes by name, and settings that combine them with train/eval and autocast.

    with modes.get("no_grad")():
        y = model(x)

    with modes.setting("eval+no_grad+bf16", model=model, device="cpu"):
        y = model(x)

A *mode* is one of ``names()``: ``"grad"`` (``torch.enable_grad``), ``"no_grad"`` and
``"inference_mode"``. A *setting* string joins a mode with optional parts by ``+``: ``"train"`` or
``"eval"`` (the model's mode, restored on exit), and an autocast dtype ``"bf16"``/``"fp16"``.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["names", "get", "parse", "setting", "Setting", "AUTOCAST_DTYPES", "run_composite"]

_MODES = {
    "grad": torch.enable_grad,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}
_MODEL_MODES = ("train", "eval")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def names() -> tuple:
    """The gradient modes known by name."""
    return tuple(_MODES)


def get(name: str):
    """The context-manager factory for gradient mode ``name``: ``with modes.get(name)(): ...``."""
    try:
        return _MODES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown gradient mode {name!r}; allowed: {', '.join(_MODES)}") from None


@dataclass(frozen=True)
class Setting:
    """A gradient mode plus, optionally, the model's train/eval flag and an autocast dtype."""

    mode: str = "grad"
    train: "bool | None" = None  # None: leave the model as it is
    autocast: "str | None" = None  # "bf16" | "fp16" | None

    @property
    def name(self) -> str:
        parts = []
        if self.train is not None:
            parts.append("train" if self.train else "eval")
        parts.append(self.mode)
        if self.autocast:
            parts.append(self.autocast)
        return "+".join(parts)

    def __str__(self) -> str:
        return self.name


def parse(spec: "str | Setting") -> Setting:
    """Parse ``"eval+no_grad+bf16"``-style strings (any order; the mode defaults to ``"grad"``)."""
    if isinstance(spec, Setting):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a setting is a string such as 'eval+no_grad'; got {spec!r}. "
                         f"Parts allowed: modes {', '.join(_MODES)}; {', '.join(_MODEL_MODES)}; "
                         f"autocast {', '.join(AUTOCAST_DTYPES)}")
    mode, train, cast = None, None, None
    for part in spec.strip().split("+"):
        p = part.strip()
        if p in _MODES:
            if mode is not None:
                raise ValueError(f"setting {spec!r} names two gradient modes")
            mode = p
        elif p in _MODEL_MODES:
            if train is not None:
                raise ValueError(f"setting {spec!r} names train/eval twice")
            train = p == "train"
        elif p in AUTOCAST_DTYPES:
            if cast is not None:
                raise ValueError(f"setting {spec!r} names two autocast dtypes")
            cast = p
        else:
            raise ValueError(f"unknown part {p!r} in setting {spec!r}; allowed: modes "
                             f"{', '.join(_MODES)}; model modes {', '.join(_MODEL_MODES)}; "
                             f"autocast {', '.join(AUTOCAST_DTYPES)}")
    return Setting(mode=mode or "grad", train=train, autocast=cast)


@contextlib.contextmanager
def setting(spec: "str | Setting" = "grad", model: "torch.nn.Module | None" = None, device=None):
    """Enter a setting: the model's train/eval flag (restored on exit, per submodule), the gradient
    mode and, if asked, autocast for ``device``'s type. Everything is restored even on error."""
    s = parse(spec)
    if s.train is not None and model is None:
        raise ValueError(f"setting {s.name!r} sets train/eval, so it needs model=")
    with contextlib.ExitStack() as stack:
        if s.train is not None:
            flags = [(m, m.training) for m in model.modules()]

            def _restore():
                for m, flag in flags:
                    m.training = flag

            stack.callback(_restore)
            model.train(s.train)
        stack.enter_context(get(s.mode)())
        if s.autocast:
            dev_type = torch.device(device).type if device is not None else "cpu"
            stack.enter_context(torch.autocast(device_type=dev_type, dtype=AUTOCAST_DTYPES[s.autocast]))
        yield s


# ----------------------------------------------------------------------------------------------
# what a TorchDispatchMode sees under each mode

_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


def run_composite(mode, func, args=(), kwargs=None):
    """Run ``func`` as its CompositeImplicitAutograd kernel with ``mode`` pushed back on the dispatch
    stack, so that ``mode`` (and every mode below it) sees the operators inside; ``NotImplemented``
    when ``func`` has no such kernel, or has a kernel of its own for these tensors.

    For a dispatch mode's ``__torch_dispatch__``. With autograd on (``grad``, ``no_grad``) a composite
    operator such as ``aten.linear``, ``aten.conv2d`` or ``aten.cross_entropy_loss`` is decomposed at
    the Autograd dispatch key, above the Python key, so a mode sees only the operators it runs
    (``addmm``, ``convolution``, ``_log_softmax``...). ``torch.inference_mode`` skips the autograd
    keys: the composite reaches the mode whole, and what it allocates inside would go unseen. Running
    its C++ composite kernel here is what the backend runs for it in eager mode. ``OpOverload.decompose``
    (torch 2.9.1 to 2.14.1: ``torch/_ops.py``) would first take a Python decomposition registered for
    tracing (``py_kernels``: ``aten.matmul``, ``aten.dropout``, even ``aten.native_batch_norm``, which
    has CPU and CUDA kernels of its own), so it is used only where there is none; otherwise the C++
    kernel is called as ``decompose`` calls it."""
    name = _composite_name(func)
    if name is None:
        return NotImplemented
    seen = False
    for a in _tensors((args, kwargs)):
        if a.layout != torch.strided or a.is_nested or a.is_quantized or a.is_mkldnn:
            return NotImplemented  # such tensors may have kernels of their own (NestedTensorCPU...)
        if _has_backend_kernel(name, a.device.type):
            return NotImplemented  # a kernel of its own for this device wins over the composite
        seen = True
    if not seen:
        return NotImplemented  # a factory: left whole, as the backend select decides
    TorchDispatchMode.__enter__(mode)  # not ``with mode``: a subclass's own enter/exit run once
    try:
        if _CIA in func.py_kernels:
            return func._op_dk(_CIA, *args, **(kwargs or {}))
        return func.decompose(*args, **(kwargs or {}))
    finally:
        TorchDispatchMode.__exit__(mode, None, None, None)


_COMPOSITE: dict = {}  # OpOverload -> its name if it has a C++ CompositeImplicitAutograd kernel, else None


def _composite_name(func):
    try:
        return _COMPOSITE[func]
    except KeyError:
        pass
    name = func.name() if isinstance(func, torch._ops.OpOverload) else None
    try:
        if name is not None and not torch._C._dispatch_has_kernel_for_dispatch_key(name, _CIA):
            name = None
    except RuntimeError:  # an operator the C++ dispatcher does not know by name (prim::device)
        name = None
    _COMPOSITE[func] = name
    return name


@functools.lru_cache(maxsize=None)
def _has_backend_kernel(name: str, device_type: str) -> bool:
    """Whether operator ``name`` has a kernel registered for ``device_type``'s dense dispatch key (the
    keys below the Python key: autocast and autograd run before a dispatch mode sees the operator)."""
    try:
        key = torch._C._dispatch_key_for_device(device_type)
    except RuntimeError:
        return True  # a device torch does not name: leave the operator whole
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)


def _tensors(tree):
    return [a for a in tree_flatten(tree)[0] if isinstance(a, torch.Tensor)]
