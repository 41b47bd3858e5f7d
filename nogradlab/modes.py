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
from dataclasses import dataclass

import torch

__all__ = ["names", "get", "parse", "setting", "Setting", "AUTOCAST_DTYPES"]

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
