"""Which device to run on, what it is, and how to wait for it.

``resolve`` turns a user's string into a ``torch.device`` (raising before any work starts when the
name is unknown or the hardware is missing); ``describe`` gives the facts every result table is
labelled with; ``synchronize`` waits for queued kernels so that timers measure finished work.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import os
import platform
import re
import warnings

import torch

from nogradlab.core.resources import _cgroup_quotas, _quota, _read, cpu_budget  # noqa: F401 - kept here too

__all__ = ["ALLOWED", "resolve", "describe", "synchronize", "is_cuda", "total_memory",
           "cpu_budget", "limit_threads", "rng_preserved", "leaves_rng_alone", "check_seed", "SEED_RANGE"]

ALLOWED = ("auto", "cpu", "cuda", "cuda:N", "mps")
_CUDA_RE = re.compile(r"^cuda(?::(\d+))?$")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve(name: "str | torch.device | None" = "auto") -> torch.device:
    """Return the ``torch.device`` for ``name``.

    ``name`` is one of ``"auto"`` (CUDA if present, else MPS, else CPU), ``"cpu"``, ``"cuda"``,
    ``"cuda:N"`` or ``"mps"``; a ``torch.device`` is checked and returned. Unknown names and
    hardware that is not present raise ``ValueError`` / ``RuntimeError`` naming what is allowed.
    """
    if name is None:
        name = "auto"
    if isinstance(name, torch.device):
        name = str(name)
    if not isinstance(name, str):
        raise TypeError(f"device must be a string or torch.device, got {type(name).__name__}; "
                        f"allowed: {', '.join(ALLOWED)}")
    key = name.strip().lower()
    if key == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if key == "cpu":
        return torch.device("cpu")
    if key == "mps":
        if not _mps_available():
            raise RuntimeError("device 'mps' requested but MPS is not available on this machine; "
                               f"allowed here: {', '.join(available())}")
        return torch.device("mps")
    m = _CUDA_RE.match(key)
    if m:
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {name!r} requested but CUDA is not available on this machine "
                               f"(torch {torch.__version__}); allowed here: {', '.join(available())}")
        index = int(m.group(1)) if m.group(1) is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise RuntimeError(f"device {name!r} requested but only {torch.cuda.device_count()} CUDA "
                               f"device(s) exist; allowed here: {', '.join(available())}")
        return torch.device("cuda", index)
    raise ValueError(f"unknown device {name!r}; allowed: {', '.join(ALLOWED)}")


def available() -> list[str]:
    """Device names that ``resolve`` accepts on this machine."""
    out = ["auto", "cpu"]
    if torch.cuda.is_available():
        out.append("cuda")
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        out.append("mps")
    return out


def is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_memory() -> "int | None":
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def total_memory(device) -> "int | None":
    """Total memory of ``device`` in bytes (system RAM for the CPU), or None where unknown."""
    device = resolve(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type == "cpu":
        return _cpu_memory()
    return None


def limit_threads() -> int:
    """Lower torch's CPU thread pool to :func:`cpu_budget` when it is larger (torch sizes it from
    the host's cores, so a 2-CPU container on a 64-core host would run 64 threads on 2 CPUs and
    time mostly contention). Never raises it. Returns the thread count now in force."""
    budget = cpu_budget()
    if torch.get_num_threads() > budget:
        torch.set_num_threads(budget)
    return torch.get_num_threads()


@contextlib.contextmanager
def rng_preserved(device=None):
    """Leave torch's global random number generators as they were on entry: the CPU generator
    always, the CUDA generators when CUDA is in use (already initialised, or ``device`` is a CUDA
    device), MPS's when ``device`` is MPS; restored also when the block raises. Probes wrap their
    work in it, so measuring a call does not change the random numbers the notebook draws next."""
    kind = str(device).split(":")[0].strip().lower() if device is not None else None
    cpu = torch.get_rng_state()
    cuda = None
    if torch.cuda.is_available() and (torch.cuda.is_initialized() or kind in ("cuda", "auto")):
        cuda = torch.cuda.get_rng_state_all()
    mps = None
    if kind in ("mps", "auto") and _mps_available():
        mps = torch.mps.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        try:
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)
            if mps is not None:
                torch.mps.set_rng_state(mps)
        except RuntimeError as e:
            # a broken GPU context (after a device-side error): say so, but let the error that
            # broke it reach the caller rather than this one
            warnings.warn(f"could not restore the GPU's random number generator: {e}",
                          RuntimeWarning, stacklevel=3)


#: the seeds nogradlab accepts: a signed 64-bit integer (torch's generators take 64 bits, and the checks
#: derive a few more seeds from it by adding small offsets)
SEED_RANGE = (-(2 ** 63), 2 ** 63 - 1)


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` as an int; ``ValueError`` naming the range unless it is an integer in :data:`SEED_RANGE`."""
    import numbers

    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {seed!r}")
    lo, hi = SEED_RANGE
    if not lo <= seed <= hi:
        raise ValueError(f"{name} {seed} is out of range; allowed: {lo} to {hi} (a 64-bit signed integer)")
    return int(seed)


def leaves_rng_alone(fn=None, *, device_param: "str | None" = "device"):
    """Decorator: ``fn`` runs inside :func:`rng_preserved`, for the device named by its
    ``device_param`` argument (None: the CPU generator, and CUDA's when CUDA is initialised)."""
    if fn is None:
        return functools.partial(leaves_rng_alone, device_param=device_param)
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        dev = None
        if device_param is not None:
            try:
                dev = sig.bind_partial(*args, **kwargs).arguments.get(device_param)
            except TypeError:  # bad arguments: let fn itself say what is wrong
                dev = None
        with rng_preserved(dev):
            return fn(*args, **kwargs)
    return wrapper


def describe(device="auto") -> dict:
    """Facts about ``device`` for labelling a measurement: name, kind, torch version, threads,
    total memory in bytes (None where unknown), Python version and platform."""
    device = resolve(device)
    info = {
        "device": str(device),
        "type": device.type,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "threads": torch.get_num_threads(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "cpu_budget": cpu_budget(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, total_memory=props.total_memory,
                    cuda=torch.version.cuda, capability=f"{props.major}.{props.minor}")
    elif device.type == "mps":
        info.update(name="Apple MPS", total_memory=None)
    else:
        info.update(name=info["cpu"], total_memory=_cpu_memory())
    return info


def label(info_or_device) -> str:
    """One line naming the hardware, e.g. ``'NVIDIA H200 (cuda:0), torch 2.5.0'``."""
    info = info_or_device if isinstance(info_or_device, dict) else describe(info_or_device)
    extra = f", {info['threads']} threads" if info.get("type") == "cpu" else ""
    return f"{info['name']} ({info['device']}{extra}), torch {info['torch']}"


def synchronize(device=None) -> None:
    """Wait until all work queued on ``device`` has finished (no-op on the CPU)."""
    if device is None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        return
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
