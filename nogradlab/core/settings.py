"""One run's settings, made and checked once: :class:`Settings` (device, scale, seed), built by :func:`resolve`.

Each entry point builds one at its door, before any work: the command line (``python -m nogradlab
claims``/``run``), a notebook's ``notebook.setup``, ``runner.run``/``runner.check_claims`` and the keyword
doors a learner calls (``claims.check("C05", device="cpu", scale="tiny")``). What they call takes the
value and never resolves the strings again, so that ``"auto"`` means one thing for a whole run and a bad
value fails once, naming the allowed ones.

A notebook hands its settings on as the plain strings ``setup`` returns (``device, scale = notebook.setup(...)``,
then ``claims.check(..., device=device, scale=scale, seed=seed)``): :func:`of` knows those strings for the
settings ``setup`` made (:func:`remember`) and gives that value back instead of resolving them again.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from nogradlab.core import device as _device
from nogradlab.core import workloads as _workloads

__all__ = ["Settings", "resolve", "of", "given", "remember"]


@dataclass(frozen=True)
class Settings:
    """The resolved device, one of ``workloads.SCALES`` (never ``"auto"``) and a checked seed."""

    device: torch.device
    scale: str
    seed: int = 0

    def __post_init__(self):
        if not isinstance(self.device, torch.device):
            raise TypeError(f"Settings.device must be a torch.device (use settings.resolve), got {self.device!r}")
        if self.scale not in _workloads.SCALES:
            raise ValueError(f"Settings.scale {self.scale!r}; allowed: {', '.join(_workloads.SCALES)} "
                             "(use settings.resolve for 'auto')")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"Settings.seed must be an int (use settings.resolve), got {self.seed!r}")

    @property
    def names(self) -> tuple:
        """``(device, scale)`` as the strings a notebook's ``setup`` returns, e.g. ``("cpu", "tiny")``."""
        return str(self.device), self.scale


def resolve(device="auto", scale="auto", seed: int = 0, *, seed_name: str = "seed") -> Settings:
    """The one place ``device``, ``scale`` and ``seed`` are resolved and checked: ``device`` as
    :func:`nogradlab.core.device.resolve` takes it, ``scale`` as :func:`~nogradlab.core.workloads.resolve_scale`
    (``"auto"``: full on CUDA, tiny elsewhere), ``seed`` as :func:`~nogradlab.core.device.check_seed`
    (``seed_name`` names it in the error, e.g. ``--seed``). A bad value raises ``ValueError`` (or
    ``RuntimeError`` for a device this machine lacks) naming the allowed values."""
    dev = _device.resolve(device)
    return Settings(dev, _workloads.resolve_scale(scale, dev), _device.check_seed(seed, seed_name))


#: the settings a notebook's ``setup`` made, and the plain values it handed out for them
_REMEMBERED: "tuple | None" = None


def remember(settings: Settings) -> tuple:
    """Keep ``settings`` as this session's (a notebook's ``setup``) and return ``(device, scale)`` as strings:
    passed back to :func:`of` with the same seed, they give ``settings`` again, unresolved."""
    global _REMEMBERED
    if not isinstance(settings, Settings):
        raise TypeError(f"remember needs a Settings, got {type(settings).__name__}")
    _REMEMBERED = (settings.names + (settings.seed,), settings)
    return settings.names


def of(device="auto", scale="auto", seed: int = 0, *, seed_name: str = "seed") -> Settings:
    """The settings for a public door's keywords: the remembered ones when these are exactly the strings
    (and int seed) ``setup`` handed out for them, else :func:`resolve` (once, here). Only plain ``str``
    and ``int`` values are looked up, so ``seed=True`` or a ``str`` subclass is still checked."""
    if (_REMEMBERED is not None and type(device) is str and type(scale) is str and type(seed) is int
            and (device, scale, seed) == _REMEMBERED[0]):
        return _REMEMBERED[1]
    return resolve(device, scale, seed, seed_name=seed_name)


def given(settings: "Settings | None", device="auto", scale="auto", seed: int = 0, *,
          seed_name: str = "seed") -> Settings:
    """A public door's settings: ``settings`` when its caller resolved them already (and then gave no
    device, scale or seed of its own: both raise ``ValueError``), else the keywords' (:func:`of`)."""
    if settings is None:
        return of(device, scale, seed, seed_name=seed_name)
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be a nogradlab.core.settings.Settings, got {type(settings).__name__}")
    if not (isinstance(device, str) and device == "auto" and isinstance(scale, str) and scale == "auto"
            and type(seed) is int and seed == 0):
        raise ValueError("give settings= or device/scale/seed, not both")
    return settings
