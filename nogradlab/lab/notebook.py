"""Set-up helpers for the notebooks: check the parameters cell at once, say what hardware runs.

Every notebook has a cell tagged ``parameters`` (papermill replaces it) and, right after it::

    device, scale = notebook.setup(device=device, scale=scale, seed=seed, batch_sizes=batch_sizes)

``setup`` validates everything before any work starts: an unknown device or scale, or a batch size or
repeat count that is not a positive integer, raises ``ValueError`` naming what is allowed. It then seeds torch and Python, caps torch's
threads at the CPUs the process may use (:func:`nogradlab.device.cpu_budget`), and prints one line naming the hardware.
"""
from __future__ import annotations

import logging
import numbers
import random

import torch

from nogradlab.core import device as _device
from nogradlab.core import settings as _settings

__all__ = ["setup", "hardware_line", "scale_note", "quiet_cpu_only_torch", "check_session", "SWEEP_KINDS"]

# sweep parameter name -> what it must hold: "count", positive integers (one or a list of them), or
# "number", positive numbers. Any of them may be None: the check's own default.
SWEEP_KINDS = {"batch": "count", "batch_sizes": "count", "repeats": "count", "runs": "count",
               "requests": "count", "seq_lens": "count", "budget_gib": "number"}


# the sweeps that are lists (and how many values each needs); the others are single values
LIST_SWEEPS = {"batch_sizes": 1, "seq_lens": 2}


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _check_sweep(name: str, value):
    kind = SWEEP_KINDS.get(name)
    if kind is None:
        raise ValueError(f"unknown notebook parameter {name!r}; allowed: device, scale, seed, "
                         f"{', '.join(SWEEP_KINDS)}")
    if value is None:  # None: the check's own default
        return value
    if name in LIST_SWEEPS:
        need = LIST_SWEEPS[name]
        if not isinstance(value, (list, tuple)) or len(value) < need:
            raise ValueError(f"{name} must be a list of at least {need} positive integer(s), e.g. "
                             f"[1, 2, 4], or None for the check's default; got {value!r}")
    elif isinstance(value, (list, tuple)):
        raise ValueError(f"{name} must be a single value, got the list {value!r}")
    values = _as_list(value)
    if not values:
        raise ValueError(f"{name} must not be empty")
    for v in values:
        if kind == "count":
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
                raise ValueError(f"{name} must be positive integers (1, 2, ...), got {value!r}")
        elif isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < float("inf"):
            raise ValueError(f"{name} must be positive finite numbers, got {value!r}")
    return value


def hardware_line(dev) -> str:
    """One line naming the hardware, e.g. ``'hardware: NVIDIA H200 (cuda:0), torch 2.5.0'``."""
    return f"hardware: {_device.label(_device.describe(dev))}"


def quiet_cpu_only_torch() -> None:
    """On a machine without CUDA, keep torch's import-time note "No CUDA runtime is found" (logged by
    ``torch.utils.cpp_extension``, which ``torch.utils.benchmark`` imports) out of the notebook's
    stderr: it is true and harmless there, and the lessons time with ``torch.utils.benchmark``.
    Errors from that logger still show."""
    if not torch.cuda.is_available():
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)


def setup(device="auto", scale="auto", seed: int = 0, **sweeps) -> tuple:
    """Validate a notebook's parameters and return ``(device, scale)`` resolved.

    ``device``: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``; ``scale``: ``auto`` (``full``
    on CUDA, ``tiny`` elsewhere), ``tiny``, ``small`` or ``full``; ``seed``: an integer.
    ``sweeps``: what the notebook varies (see ``SWEEP_KINDS``), checked but not changed.
    Raises ``ValueError``/``RuntimeError`` naming the allowed values before any work starts.

    The settings are resolved here once (:func:`nogradlab.core.settings.resolve`) and remembered: the
    notebook's ``claims.check(..., device=device, scale=scale, seed=seed)`` with the strings returned
    here reuses them (:func:`nogradlab.core.settings.of`) instead of resolving them again.
    """
    settings = _settings.resolve(device, scale, seed)
    for name, value in sweeps.items():
        _check_sweep(name, value)
    dev, scale, seed = settings.device, settings.scale, settings.seed
    torch.manual_seed(int(seed))
    random.seed(int(seed))
    _device.limit_threads()  # no more torch threads than CPUs this process may use (containers)
    quiet_cpu_only_torch()
    print(f"{hardware_line(dev)}; scale {scale}; seed {seed}")
    note = scale_note(dev, scale)
    if note:
        print(note)
    return _settings.remember(settings)


def scale_note(dev, scale: str) -> str:
    """One line on what this run's figures mean for a reader's own GPU ('' on a GPU at full scale)."""
    dev = torch.device(dev)
    if dev.type == "cuda" and scale == "full":
        return ""
    where = "on this GPU" if dev.type == "cuda" else f"on the {dev.type.upper()}"
    shrunk = {"tiny": "models shrunk to run in seconds", "small": "reduced model sizes"}.get(scale, "full-size models")
    return (f"note: measured {where} with {shrunk}: times and bytes here are not your GPU's at the article's "
            f"sizes; the mechanisms are the same. On a GPU run with device='cuda', scale='full'.")


# the libraries a notebook session may have imported before its first cell installed nogradlab (on Colab, say)
SESSION_LIBRARIES = ("torch", "torchvision", "numpy", "pandas", "matplotlib", "ipywidgets", "tqdm")


def stale_imports(names=SESSION_LIBRARIES) -> list:
    """[(name, version this session runs, version now installed)] for each library that this session has
    imported and that pip has since replaced on disk: the session keeps running the old code until it restarts."""
    import importlib.metadata
    import sys

    stale = []
    for name in names:
        module = sys.modules.get(name)
        running = getattr(module, "__version__", None)
        if not isinstance(running, str):
            continue
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed.split("+")[0] != running.split("+")[0]:  # a wheel's local tag (+cu130) may be in one only
            stale.append((name, running, installed))
    return stale


def check_session() -> None:
    """Raise RuntimeError saying to restart when an install replaced a library this session had already imported
    (the notebooks' first cell calls it after installing nogradlab on Colab); quiet otherwise, so a notebook
    goes on without a restart when none is needed."""
    stale = stale_imports()
    if stale:
        what = ", ".join(f"{n} (running {r}, installed {i})" for n, r, i in stale)
        raise RuntimeError(f"pip replaced {what}, which this session had already imported: restart the session "
                           "(on Colab: Runtime > Restart session), then run the notebook again from the top; "
                           "nogradlab stays installed.")
