"""Timing PyTorch code the way the field does it.

Two entry points:

``measure(fn)``
    One function, one number. Built on ``torch.utils.benchmark.Timer.blocked_autorange``: a few
    warm-up calls, then blocks of calls sized so the timer's own cost is negligible, until
    ``min_run_time`` seconds have been spent. Returns a :class:`Timing` with the median and the
    interquartile range (IQR) of the per-call time.

``compare({"a": fa, "b": fb, ...})``
    Several functions against each other. Every case is warmed up and given its own number of calls
    per sample; then ``rounds`` rounds are run and each round times every case once, in an order
    drawn at random for that round (seeded by ``seed``), so that slow drift (thermal throttling, a
    browser waking up, turbo clocks settling) and the slot a case runs in hit all cases alike *by
    design*. The speedup of each case over the baseline is read from the per-round *paired* ratios
    (the baseline's time over the case's time in the same round): the Hodges-Lehmann estimate of
    their centre, with the Wilcoxon signed-rank confidence interval (:func:`paired_speedup`).

Why the interval holds (the protocol's own argument, checked by ``benchmarks/coverage.py``):

* The order of every round is random, so in a round the two cases' slots are swapped or not by a
  fair coin that nothing else sees. Whatever the machine does (drift, bursts, a heavy tail), the
  paired log-ratio is then symmetric about the true log-ratio (exactly, when the machine slows
  whichever case runs in a slot by the same factor; and exactly for two identical cases, an A/A
  run, whatever it does). The signed-rank interval is exact under that symmetry at any number of
  rounds: no normal approximation, no bootstrap that is too narrow at 10 rounds. (The samples of
  all cases last alike, :func:`_calibrate_all`, and identical cases get identical calls per sample: a
  case whose samples were longer would be preempted more often on a busy machine, and the symmetry
  would be lost. On a CPU the samples are read from a CPU-time clock, which preemption does not
  stretch at all. Measured: A/A runs at the claim checks' settings on a 2-core CPU excluded the truth
  in 1 of 50 quiet runs and beside 15 bursty torch neighbours in the figures of
  ``benchmarks/README-coverage.md``, table (c); the protocol before excluded it in 22 of 50 there.)
* Adaptive stopping (``until``) looks at the intervals only at pre-set round counts
  (:func:`looks`: ``rounds``, 1.5x, 2x, 3x, 4x that, ... up to ``max_rounds``), and every look's
  interval is computed at ``1 - 0.05 / looks`` (a union bound over the looks), so the interval
  reported when the rounds stop covers at 95 % whichever look they stopped at and why.

Why these choices:

* **Median and IQR, not mean and standard deviation.** Timings have a long right tail (an interrupt,
  a page fault, a garbage collection); one bad sample drags the mean and inflates the standard
  deviation, while the median and IQR barely move.
* **Explicit thread count.** ``torch.utils.benchmark.Timer`` defaults to ``num_threads=1``, which
  silently measures single-threaded CPU performance. Here the default is :func:`threads_here`: torch's
  own pool (never more threads than CPUs this process may use), except on a machine with 2 CPUs or
  fewer, or one whose load is above its CPUs, where it is one thread (a second thread there mostly
  times the neighbours: a small MLP forward took 1.6 ms on one thread and 81 ms on two, on a shared
  2-core VM). Each result records the count and why (``threads_reason``). The Timer sets the thread
  count only for the duration of a measurement and restores it afterwards; so does this module, even
  on error.
* **A clock preemption does not stretch.** On a CPU the samples are timed by this thread's CPU time
  (``time.thread_time``, given to ``Timer(timer=...)``) when torch runs one thread, by the process's
  CPU time (``time.process_time``) when it runs several or when a warm-up call shows the case working
  in other threads: a neighbour process that takes the core away stretches wall time, not the time
  this thread spent computing. Wall time is recorded beside every sample (``Timing.wall_times``), and
  every result names its clock (:data:`CLOCKS`). ``clock="wall"`` asks for wall time. GPU timing stays
  on synchronised wall time.
* **Samples of equal length.** Cases whose calibrated per-call costs lie within
  :data:`EQUAL_CALLS_WITHIN` of each other get the same calls per sample (an A/A pair always does);
  others get calls in inverse proportion to their cost. The realised lengths are checked after the
  rounds: :meth:`Comparison.unequal_samples` names any case whose samples lasted more than
  :data:`UNEQUAL_SAMPLES` longer or shorter than the baseline's, and the comparison's text says so.
* **Synchronize before reading the clock.** CUDA and MPS calls return as soon as the work is
  queued. Without a synchronize, the timer measures how fast Python can enqueue kernels. For
  ``device`` of type ``cuda``/``mps`` the timer function calls
  :func:`nogradlab.device.synchronize` before reading :func:`timeit.default_timer`.

Grad mode is not changed by this module: a function runs under whatever mode the caller has
(``torch.no_grad()`` around the call, or inside ``fn``). Grad mode and the thread count are restored
to their previous values when the measurement ends, also when ``fn`` raises; the exception reaches
the caller unchanged.
"""
from __future__ import annotations

import contextlib
import functools
import math
import numbers
import os
import statistics
import time
import timeit
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field

import logging

import numpy as np
import torch

if not torch.cuda.is_available():
    # torch.utils.benchmark imports torch.utils.cpp_extension, which logs "No CUDA runtime is
    # found" on every CPU-only machine: true, harmless, and alarming in a learner's notebook.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
from torch.utils.benchmark import Timer  # noqa: E402

from nogradlab.core import device as _device
from nogradlab.core import format as _format

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "CONFIDENCE",
    "INTERVAL_METHOD",
    "Timing",
    "Comparison",
    "measure",
    "compare",
    "resolves",
    "looks",
    "paired_speedup",
    "signed_rank_interval",
    "run_rounds",
    "bootstrap_speedup",
    "format_seconds",
    "bootstrap_ratio",
    "gpu_state",
    "timing_state",
    "CLOCKS",
    "EQUAL_CALLS_WITHIN",
    "UNEQUAL_SAMPLES",
    "threads_here",
    "clock",
    "describe_clock",
]

#: Number of bootstrap resamples of :func:`bootstrap_ratio` (and of the old :func:`bootstrap_speedup`).
BOOTSTRAP_RESAMPLES = 2000

#: Coverage of every confidence interval, at the time a comparison stops (all looks together).
CONFIDENCE = 0.95

#: The clocks a timing can read, by the name every result records (``Timing.clock``).
CLOCKS = {
    "thread": "this thread's CPU time (time.thread_time): a neighbour taking the core away does not stretch it",
    "process": "this process's CPU time, all its threads (time.process_time): a neighbour taking a core away does "
               "not stretch it",
    "wall": "wall time (timeit.default_timer), the device synchronised before each read on CUDA/MPS",
}

#: Cases of a comparison whose per-call costs lie within this factor of each other get the same calls
#: per sample (so identical cases always do, whatever noise the calibration saw).
EQUAL_CALLS_WITHIN = 1.2

#: A case whose realised samples lasted more than this factor longer or shorter than the baseline's is
#: named by :meth:`Comparison.unequal_samples` (a longer sample is preempted more often on a busy
#: machine, so the pair is not read as a speed-up without saying so).
UNEQUAL_SAMPLES = 1.2

#: How :func:`compare` reads its rounds, recorded in every :meth:`Comparison.to_dict`.
INTERVAL_METHOD = ("random order per round; Hodges-Lehmann speedup and Wilcoxon signed-rank interval of the "
                   "paired log-ratios; union bound over the pre-set looks")


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------

#: The time units, largest first: the formatting module's (``"µs"``, never ``"us"``).
_UNITS = _format.TIME_UNITS
_unit_for = _format.time_unit

#: ``0.0123`` -> ``'12.3 ms'``: :func:`nogradlab.core.format.seconds`, under its earlier name.
format_seconds = _format.seconds


@dataclass
class Timing:
    """The time one function takes per call.

    ``times`` holds one entry per sample: the per-call time of that sample in seconds (a sample is
    ``number_per_sample`` back-to-back calls, divided by ``number_per_sample``). ``median`` and
    ``iqr`` (75th minus 25th percentile) are computed from ``times``; ``relative_iqr`` is their
    ratio, a description of the spread. (There is no "noisy" flag any more: a flag on one case's
    spread decided nothing, and the spread that matters, that of the paired ratios, is priced into
    :func:`compare`'s interval. Stored columns that carry ``"noisy"`` still load:
    :meth:`from_dict`.) ``threads`` is the torch CPU thread count the function ran with and
    ``device`` the device the clock was synchronized with.
    """

    label: str
    median: float
    iqr: float
    times: list[float]
    number_per_sample: int
    threads: int
    device: str
    #: the clock the samples were read from (a key of :data:`CLOCKS`); "wall" for stored columns
    #: that predate the choice
    clock: str = "wall"
    #: per-call wall time of each sample, beside ``times`` (None where only one clock was read)
    wall_times: "list[float] | None" = None

    @property
    def mean(self) -> float:
        """Mean per-call time (s). Shown for contrast; prefer ``median``, which ignores outliers."""
        return float(np.mean(self.times)) if self.times else float("nan")

    @property
    def relative_iqr(self) -> float:
        """IQR as a fraction of the median (0.05 means the middle half of samples span 5 %)."""
        return self.iqr / self.median if self.median > 0 else float("inf")

    @property
    def samples(self) -> int:
        return len(self.times)

    def __str__(self) -> str:
        unit = _unit_for(self.median)
        text = (f"{format_seconds(self.median, unit)} \u00b1 {format_seconds(self.iqr, unit, 2)} IQR "
                f"(n={self.samples} samples x {self.number_per_sample} calls, {self.threads} "
                f"thread{'s' if self.threads != 1 else ''}, {_CLOCK_SHORT.get(self.clock, self.clock)})")
        if self.label:
            text = f"{self.label}: {text}"
        return text

    def to_dict(self) -> dict:
        out = asdict(self)
        out["times"] = list(self.times)
        if self.wall_times is None:
            out.pop("wall_times")
        out["mean"] = self.mean
        out["relative_iqr"] = self.relative_iqr
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> "Timing":
        """A ``Timing`` from :meth:`to_dict`'s output, also from a stored column's, whose entries may
        carry keys no longer kept (``noisy``) or derived (``mean``, ``relative_iqr``, ``speedup``)."""
        return cls.from_samples(d["times"], d["number_per_sample"], label=d.get("label", ""),
                                threads=d["threads"], device=d["device"], clock=d.get("clock", "wall"),
                                wall_times=d.get("wall_times"))

    @classmethod
    def from_samples(cls, times, number_per_sample: int, *, label: str = "", threads: int,
                     device: str, clock: str = "wall", wall_times=None) -> "Timing":
        """A ``Timing`` from per-call sample times (seconds)."""
        times = [float(t) for t in times]
        if not times:
            raise ValueError("a Timing needs at least one sample")
        arr = np.asarray(times, dtype=np.float64)
        # Linear-interpolated quantiles, as torch.utils.benchmark.Measurement computes them.
        q1, median, q3 = (float(q) for q in np.quantile(arr, (0.25, 0.5, 0.75)))
        iqr = q3 - q1
        walls = None if wall_times is None else [float(t) for t in wall_times]
        return cls(label=label, median=median, iqr=iqr, times=times,
                   number_per_sample=int(number_per_sample), threads=int(threads), device=str(device),
                   clock=str(clock), wall_times=walls)

    @property
    def wall_median(self) -> "float | None":
        """Median per-call wall time of the samples (None where it was not recorded)."""
        return float(np.median(self.wall_times)) if self.wall_times else None

    @property
    def sample_seconds(self) -> float:
        """How long a typical sample lasted on its clock: ``median * number_per_sample``."""
        return self.median * self.number_per_sample


@dataclass
class Comparison:
    """Several functions timed against each other by :func:`compare`.

    ``speedup[name]`` is the typical per-round ratio ``baseline / name`` (:func:`paired_speedup`):
    above 1 means ``name`` is faster. ``ci[name]`` is its confidence interval, 95 % (:data:`CONFIDENCE`)
    at the time the rounds stopped, whatever stopped them: each of the ``looks`` (the round counts at
    which ``until`` was asked) was read at ``look_confidence``. The baseline's own entry is exactly
    ``1.0`` with interval ``(1.0, 1.0)``. ``orders`` records the (random) order the cases were timed
    in, one tuple per round.
    """

    timings: dict[str, Timing]
    baseline: str
    speedup: dict[str, float]
    ci: dict[str, tuple[float, float]]
    rounds: int
    device: str
    threads: int
    seed: "int | None" = 0
    orders: list[tuple[str, ...]] = field(default_factory=list)
    #: why the rounds stopped: "rounds" (the fixed number asked for), "decided" (``until`` said the
    #: intervals were narrow enough), "time budget" or "max rounds" (``until`` had not said so yet:
    #: what rests on these intervals is provisional)
    stopped: str = "rounds"
    seconds: float = 0.0  # wall time of the rounds (calibration and warm-up not included)
    #: the confidence of each look's interval (:func:`look_confidence`; :data:`CONFIDENCE` for one look)
    look_confidence: float = CONFIDENCE
    #: the round counts at which the intervals were (or would have been) looked at (:func:`looks`)
    looks: tuple = ()
    #: the clock every case was timed by (a key of :data:`CLOCKS`)
    clock: str = "wall"
    #: why this many threads (:func:`threads_here`; empty where the caller chose)
    threads_reason: str = ""
    #: what the comparison itself noticed (a clock switched, samples of unequal length), for the reader
    notes: list = field(default_factory=list)

    def unequal_samples(self, limit: float = UNEQUAL_SAMPLES) -> dict:
        """``{case: its sample length / the baseline's}`` for every case whose realised samples lasted
        more than ``limit`` times longer or shorter than the baseline's (:attr:`Timing.sample_seconds`):
        the cases got calls per sample their costs could not balance (one call lasting a whole sample),
        or the calibration misjudged them. Such a pair's ratio is read with that said."""
        base = self.timings[self.baseline].sample_seconds
        out = {}
        for name, t in self.timings.items():
            if name == self.baseline or base <= 0:
                continue
            r = t.sample_seconds / base
            if r > limit or r < 1.0 / limit:
                out[name] = r
        return out

    @property
    def decided(self) -> bool:
        """False when an adaptive comparison ran out of time or rounds before ``until`` held."""
        return self.stopped in ("rounds", "decided")

    def time_saved(self, name: str) -> float:
        """Fraction of the baseline's runtime that ``name`` saves: ``1 - median(name)/median(baseline)``.

        0.25 reads "cuts runtime by 25 %"; a negative value means ``name`` is slower.
        """
        self._check_name(name)
        return 1.0 - 1.0 / self.speedup[name]

    def time_saved_ci(self, name: str) -> tuple[float, float]:
        """Confidence interval of :meth:`time_saved`, mapped from the speedup interval.

        ``time_saved = 1 - 1/speedup`` is increasing in the speedup, so the interval's ends map
        directly (an unbounded speedup interval, from too few rounds, maps to ``-inf``).
        """
        self._check_name(name)
        low, high = self.ci[name]
        return (1.0 - 1.0 / low if low > 0 else -math.inf, 1.0 - 1.0 / high)

    def ratio(self, a: str, b: str) -> tuple[float, float, float]:
        """(typical per-round ratio ``a / b`` of two cases' times, CI low, CI high): ``b``'s speedup
        over ``a``, read from the same rounds at the same confidence as :attr:`ci`."""
        self._check_name(a)
        self._check_name(b)
        t = self.timings
        sp, ci = paired_speedup({a: t[a].times, b: t[b].times}, a, confidence=self.look_confidence)
        return sp[b], ci[b][0], ci[b][1]

    def _check_name(self, name: str) -> None:
        if name not in self.timings:
            raise KeyError(f"unknown case {name!r}; allowed: {', '.join(map(repr, self.timings))}")

    def to_frame(self):
        """A pandas DataFrame, one row per case: case, median_ms, iqr_ms, speedup, ci_low, ci_high."""
        import pandas as pd

        rows = []
        for name, t in self.timings.items():
            low, high = self.ci[name]
            rows.append({"case": name, "median_ms": t.median * 1e3, "iqr_ms": t.iqr * 1e3,
                         "speedup": self.speedup[name], "ci_low": low, "ci_high": high})
        return pd.DataFrame(rows, columns=["case", "median_ms", "iqr_ms", "speedup", "ci_low",
                                           "ci_high"])

    def to_dict(self) -> dict:
        return {
            "baseline": self.baseline,
            "rounds": self.rounds,
            "device": self.device,
            "threads": self.threads,
            "seed": self.seed,
            "stopped": self.stopped,
            "seconds": self.seconds,
            "confidence": CONFIDENCE,
            "look_confidence": self.look_confidence,
            "looks": list(self.looks),
            "interval": INTERVAL_METHOD,
            "clock": self.clock,
            "threads_reason": self.threads_reason,
            "notes": list(self.notes),
            "unequal_samples": self.unequal_samples(),
            "orders": [list(o) for o in self.orders],
            "cases": {
                name: {
                    **t.to_dict(),
                    "speedup": self.speedup[name],
                    "ci": list(self.ci[name]),
                    "time_saved": self.time_saved(name),
                    "time_saved_ci": list(self.time_saved_ci(name)),
                }
                for name, t in self.timings.items()
            },
        }

    def __str__(self) -> str:
        why = {"rounds": "", "decided": " (stopped: intervals decided)",
               "time budget": " (stopped by its time budget: undecided)",
               "max rounds": " (stopped at its most rounds: undecided)"}.get(self.stopped, "")
        header = (f"{len(self.timings)} cases on {self.device}, {self.threads} "
                  f"thread{'s' if self.threads != 1 else ''}, {_CLOCK_SHORT.get(self.clock, self.clock)}, "
                  f"{self.rounds} interleaved rounds{why}; baseline {self.baseline!r}; "
                  f"{CONFIDENCE:.0%} signed-rank CI of the paired ratios"
                  + (f" (each of {len(self.looks)} looks at {self.look_confidence:.2%})"
                     if len(self.looks) > 1 else ""))
        unit = _unit_for(min(t.median for t in self.timings.values()))
        rows = [("case", "median", "IQR", "calls", "speedup", f"{CONFIDENCE:.0%} CI", "time saved")]
        for name, t in self.timings.items():
            low, high = self.ci[name]
            rows.append((
                name,
                format_seconds(t.median, unit),
                format_seconds(t.iqr, unit, 2),
                str(t.number_per_sample),
                _format.ratio(self.speedup[name], 3),
                _format.interval(low, high, lambda v: _format.ratio(v, 3)),
                _format.percent(self.time_saved(name), 1, signed=True),
            ))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [header]
        for i, r in enumerate(rows):
            cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
            lines.append("  ".join(cells).rstrip())
            if i == 0:
                lines.append("  ".join("-" * w for w in widths).rstrip())
        if self.threads_reason:
            lines.append(self.threads_reason)
        lines += [str(n) for n in self.notes]
        unequal = self.unequal_samples()
        if unequal:
            lines.append("samples of unequal length: " + ", ".join(
                f"{n}'s lasted {_format.ratio(r, 2)} the baseline's" for n, r in unequal.items())
                + ": on a busy machine the longer one is interrupted more often; read these ratios with care")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

def _check_positive_number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return value


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


#: the clocks' short names in a result's text
_CLOCK_SHORT = {"thread": "thread CPU time", "process": "process CPU time", "wall": "wall time"}


def _load_average() -> "float | None":
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows
        return None


def threads_here(*, budget: "int | None" = None, load: "float | None" = None,
                 torch_threads: "int | None" = None) -> tuple[int, str]:
    """``(threads, why)``: the torch CPU thread count a timing uses by default, and a sentence saying why.

    Torch's pool, capped at the CPUs this process may use (:func:`nogradlab.core.device.cpu_budget`),
    except where the CPUs are few or busy: with 2 CPUs or fewer, or a load average above the CPU
    count, one thread. There a second OpenMP thread mostly waits for a core a neighbour holds (Binder,
    Colab's two vCPUs, a shared JupyterHub, CI): the same small MLP forward took 1.6 ms on one thread
    and 81 ms on two beside other work. A learner can still ask for more (``num_threads=``).
    ``budget``, ``load`` and ``torch_threads`` are for tests (default: this machine now)."""
    budget = _device.cpu_budget() if budget is None else int(budget)
    load = _load_average() if load is None else float(load)
    pool = torch.get_num_threads() if torch_threads is None else int(torch_threads)
    n = max(1, min(pool, budget))
    if n > 1 and budget <= 2:
        return 1, (f"1 thread: this process may use {budget} CPUs, where a second thread mostly times its "
                   "neighbours (pass num_threads= for more)")
    if n > 1 and load is not None and load > budget:
        return 1, (f"1 thread: the machine's load ({load:.1f}) is above its {budget} CPUs, where more threads "
                   "mostly time the neighbours (pass num_threads= for more)")
    if n == 1:
        return 1, "1 thread (torch's pool here)" if pool == 1 else f"1 thread: this process may use {budget} CPU"
    return n, f"{n} threads: torch's pool, within the {budget} CPUs this process may use"


def _check_threads(num_threads) -> int:
    if num_threads is None:  # torch's pool, but one thread where CPUs are few or busy
        return threads_here()[0]
    return _check_int("num_threads", num_threads, 1)


def _threads_reason(num_threads, threads: int) -> str:
    return threads_here()[1] if num_threads is None else f"{threads} thread{'s' if threads != 1 else ''}, as asked"


_CLOCK_CHOICES = ("auto", "cpu", "wall")


def _check_clock(value) -> str:
    if value not in _CLOCK_CHOICES:
        raise ValueError(f"clock must be one of {', '.join(map(repr, _CLOCK_CHOICES))}, got {value!r}")
    return value


def _clock_name(dev: torch.device, threads: int, clock: str = "auto") -> str:
    """The key of :data:`CLOCKS` a timing on ``dev`` with ``threads`` reads: synchronised wall time on
    CUDA/MPS whatever is asked (the work runs on the device, not in a CPU thread); on a CPU, "wall"
    when asked, else the thread's CPU time for one thread and the process's for several."""
    if dev.type in ("cuda", "mps") or clock == "wall":
        return "wall"
    return "thread" if threads == 1 else "process"


def clock(device=None, threads: "int | None" = None, kind: str = "auto") -> Callable[[], float]:
    """The clock function to give ``torch.utils.benchmark.Timer(timer=...)``: this thread's CPU time on
    a CPU timed with one thread (``time.thread_time``), the process's with several
    (``time.process_time``), wall time after a device synchronize on CUDA/MPS. ``kind="wall"`` asks for
    wall time on a CPU too. ``threads`` defaults to :func:`threads_here`'s."""
    dev = _resolve_device(device)
    threads = _check_threads(threads)
    return _CLOCKS_FN[_clock_name(dev, threads, _check_clock(kind))](dev)


def _resolve_device(device) -> torch.device:
    """``None``: the CPU, unless CUDA is already initialised in this process, in which case the
    current CUDA device (so GPU work is never timed unsynchronised by accident). Pass ``device``
    explicitly for MPS."""
    if device is None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    return _device.resolve(device)


def _clock_for(dev: torch.device, name: str = "wall") -> Callable[[], float]:
    """The timer function of clock ``name`` (:data:`CLOCKS`): on CUDA/MPS always wall time after a
    device synchronize, so that queued kernels are counted."""
    if dev.type in ("cuda", "mps"):
        def sync_clock() -> float:
            _device.synchronize(dev)
            return timeit.default_timer()
        return sync_clock
    return _CLOCKS_FN[name](dev) if name in _CLOCKS_FN else timeit.default_timer


def describe_clock(fn: Callable[[], float]) -> str:
    """What a clock function given to ``Timer(timer=...)`` reads, in words for a printed timing: "thread
    CPU time", "process CPU time" or "wall time"."""
    return {time.thread_time: _CLOCK_SHORT["thread"], time.process_time: _CLOCK_SHORT["process"]}.get(
        fn, _CLOCK_SHORT["wall"])


_CLOCKS_FN = {"thread": lambda dev: time.thread_time, "process": lambda dev: time.process_time,
              "wall": lambda dev: _clock_for(dev, "")}


@contextlib.contextmanager
def _preserved_state(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` torch threads; afterwards restore the thread count and grad
    mode exactly as they were, also when the block raises (the exception propagates unchanged)."""
    grad_before = torch.is_grad_enabled()
    threads_before = torch.get_num_threads()
    try:
        if threads != threads_before:
            torch.set_num_threads(threads)
        yield
    finally:
        if torch.get_num_threads() != threads_before:
            torch.set_num_threads(threads_before)
        if torch.is_grad_enabled() != grad_before:
            torch.set_grad_enabled(grad_before)


def _timer(fn: Callable[[], object], dev: torch.device, threads: int, label: str = "",
           clock_name: str = "wall") -> Timer:
    return Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads, timer=_clock_for(dev, clock_name),
                 label=label or None)


def _works_elsewhere(fn: Callable[[], object], calls: int = 3) -> bool:
    """Whether ``fn`` does a good part of its work in threads other than the calling one (a thread
    pool, a DataLoader's threads, torch's own pool): over ``calls`` calls the process's CPU time grew
    well beyond this thread's. Its work is then timed by the process's CPU time."""
    t0, p0 = time.thread_time(), time.process_time()
    for _ in range(calls):
        fn()
    dt, dp = time.thread_time() - t0, time.process_time() - p0
    return dp > 1.5 * dt + 1e-3


def _schedstat() -> "tuple[int, int] | None":
    """(ns this thread ran, ns it waited runnable for a CPU) from Linux's ``/proc/thread-self/schedstat``;
    None where the kernel does not give it (another OS, schedstats off)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            run, wait = f.read().split()[:2]
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


def _voluntary_switches() -> "int | None":
    """How often this thread has given up its CPU by itself (to sleep, wait on I/O or a lock): Linux's
    ``getrusage(RUSAGE_THREAD).ru_nvcsw``; None elsewhere. A preemption by a neighbour is not counted."""
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    except (ImportError, AttributeError, OSError, ValueError):
        return None


def _waits(fn: Callable[[], object], calls: int = 2) -> bool:
    """Whether ``fn`` spends a good part of its time neither computing nor waiting for a CPU: asleep,
    on I/O, on a lock or on another thread's result. A CPU-time clock would not count that time, so
    such a case is timed by wall time. On Linux it must both give up its CPU by itself (a voluntary
    context switch: a preemption by a busy neighbour is an involuntary one) and spend over a quarter of
    the time it did not wait runnable neither running nor waiting runnable, that is blocked (the thread's
    schedstat: a busy machine makes it wait runnable, not blocked, and that wait is left out of the share). Elsewhere a thread CPU time under half the wall time of the
    calls counts as waiting (on a busy machine too: wall time then, as before)."""
    v0, s0, c0, w0 = _voluntary_switches(), _schedstat(), time.thread_time(), time.perf_counter()
    for _ in range(calls):
        fn()
    wall, s1, v1 = time.perf_counter() - w0, _schedstat(), _voluntary_switches()
    if v0 is not None and v1 is not None and v1 == v0:
        return False  # it never gave up its CPU by itself: whatever the wall time, it computed or was preempted
    if s0 is not None and s1 is not None:
        ran = (s1[0] - s0[0]) / 1e9
        blocked = wall - ran - (s1[1] - s0[1]) / 1e9
        # a part of the time it did not wait for a CPU: on a very busy machine the wait runnable after each
        # wake-up grows the wall time, and a sleeping case read as a share of it looked like computing
        return blocked > 0.25 * (blocked + ran) and blocked > 1e-4
    return time.thread_time() - c0 < 0.5 * wall


def _sample_both(timer: Timer, fn: Callable[[], object], number: int, dev: torch.device) -> tuple[float, float]:
    """(seconds on the timer's clock, wall seconds) of one sample of ``number`` calls (:func:`_sample`).
    Wall time is read around the sample (synchronised on CUDA/MPS, where the timer's clock is it)."""
    if dev.type in ("cuda", "mps"):
        t = _sample(timer, fn, number)
        return t, t
    w0 = time.perf_counter()
    t = _sample(timer, fn, number)
    return t, time.perf_counter() - w0


def _sample(timer: Timer, fn: Callable[[], object], number: int) -> float:
    """Seconds for ``number`` calls of ``fn`` by ``timer``, after one untimed call (the caches the
    previous case of a round disturbed are this case's again), except where one call is a whole
    sample (``number`` 1: the call takes at least ``min_run_time / rounds``, 10 ms in a tiny run,
    and what the previous case left in the caches is a small part of it; the random order gives
    every case the same predecessors on average anyway). ``Timer.timeit`` itself makes ``max(number // 100, 2)``
    untimed calls first: for a ResNet-50 forward on a CPU that was two calls in three spent
    untimed. The timed calls go through the Timer's own ``_timeit`` (its clock and statement; in
    every torch release nogradlab supports), else through ``timeit`` where a release lacks it."""
    timed = getattr(timer, "_timeit", None)
    if timed is None:
        return timer.timeit(number).raw_times[0]
    if number > 1:
        fn()
    return timed(number)


def _warm_up(fn: Callable[[], object], dev: torch.device, warmup: int, name: str = "fn") -> None:
    """``warmup`` untimed calls; the first one's result is looked at (one call is made for that when
    ``warmup`` is 0): lazy work (a generator, an iterator, a future) warns, since timing it times
    only the call that built it."""
    from nogradlab.core.memory import LazyResultWarning, _lazy_kind

    kind = _lazy_kind(fn())
    if kind is not None:
        import warnings

        warnings.warn(f"timing: {name} returned {kind}: its work runs only when the result is consumed, "
                      f"so the time measured is just the call that built it; time lambda: list(...) of it "
                      f"(or .result() of a future) instead", LazyResultWarning, stacklevel=4)
    for _ in range(warmup - 1):
        fn()
    if dev.type in ("cuda", "mps"):
        _device.synchronize(dev)


# --------------------------------------------------------------------------------------------
# measure
# --------------------------------------------------------------------------------------------

@_device.leaves_rng_alone  # a probe leaves the global RNG as it found it
def measure(fn: Callable[[], object], device=None, min_run_time: float = 0.2, warmup: int = 3,
            label: str = "", num_threads: "int | None" = None, clock: str = "auto") -> Timing:
    """Time ``fn()`` (called with no arguments) and return a :class:`Timing`.

    ``device``: where ``fn``'s work runs; CUDA/MPS are synchronized before each clock read (see
    :func:`_resolve_device` for ``None``). ``min_run_time``: seconds of timed calls to collect.
    ``warmup``: untimed calls first (lazy initialisation, caches, allocator). ``num_threads``: torch
    CPU threads during the measurement, by default :func:`threads_here`'s (torch's pool; one thread
    where CPUs are few or busy). ``clock``: "auto" (on a CPU, this thread's CPU time for one thread,
    the process's for several or when ``fn`` works in other threads; on CUDA/MPS synchronised wall
    time), "cpu" (the same) or "wall"; the result's ``clock`` says which.

    Uses ``torch.utils.benchmark.Timer(...).blocked_autorange(min_run_time=...)``; the thread count
    and grad mode are the same afterwards as before, and exceptions from ``fn`` propagate.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable (a function taking no arguments), got "
                         f"{type(fn).__name__}")
    min_run_time = _check_positive_number("min_run_time", min_run_time)
    warmup = _check_int("warmup", warmup, 0)
    if not isinstance(label, str):
        raise ValueError(f"label must be a string, got {type(label).__name__}")
    threads = _check_threads(num_threads)
    clock = _check_clock(clock)
    dev = _resolve_device(device)

    with _preserved_state(threads):
        _warm_up(fn, dev, warmup)
        name = _clock_name(dev, threads, clock)
        if name != "wall" and _waits(fn):
            name = "wall"
        elif name == "thread" and _works_elsewhere(fn):
            name = "process"
        m = _timer(fn, dev, threads, label, name).blocked_autorange(min_run_time=min_run_time)

    return Timing.from_samples(m.times, m.number_per_run, label=label, threads=threads,
                               device=str(dev), clock=name)


# --------------------------------------------------------------------------------------------
# intervals
# --------------------------------------------------------------------------------------------

def looks(rounds: int, max_rounds: "int | None" = None) -> tuple[int, ...]:
    """The round counts at which an adaptive comparison looks at its intervals: ``rounds`` times 1,
    1.5, 2, 3, 4, 6, 8, ... (rounded up), and ``max_rounds`` last (``looks(10, 40) == (10, 15, 20,
    30, 40)``, ``looks(6, 14) == (6, 9, 12, 14)``). Set before the first round, so that each look's
    interval can be given its share of the 5 % (:func:`look_confidence`); steps of 1.5x and 1.33x
    let a time budget stop the rounds near it without a look ever ending past it. ``max_rounds``
    None: one look."""
    rounds = _check_int("rounds", rounds, 2)
    if max_rounds is None:
        return (rounds,)
    max_rounds = _check_int("max_rounds", max_rounds, rounds)
    out, j = [rounds], 1
    while True:
        nxt = math.ceil(rounds * 2 ** (j // 2) * (1.5 if j % 2 else 1.0))
        if nxt >= max_rounds:
            break
        out.append(nxt)
        j += 1
    if out[-1] != max_rounds:
        out.append(max_rounds)
    return tuple(out)


def look_confidence(n_looks: int, confidence: float = CONFIDENCE) -> float:
    """The confidence of each look's interval so that all ``n_looks`` together miss with at most
    ``1 - confidence`` (a union bound: 5 looks at 95 % are each read at 99 %)."""
    return 1.0 - (1.0 - confidence) / _check_int("n_looks", n_looks, 1)


@functools.lru_cache(maxsize=64)
def _signed_rank_cdf(n: int) -> np.ndarray:
    """``cdf[t] = P(T <= t)`` for the Wilcoxon signed-rank statistic of ``n`` pairs under the null
    (each of the ranks 1..n counted with probability 1/2, independently): exact, by convolution."""
    p = np.zeros(n * (n + 1) // 2 + 1)
    p[0] = 1.0
    for i in range(1, n + 1):
        shifted = np.zeros_like(p)
        shifted[i:] = p[:-i]
        p = 0.5 * (p + shifted)
    return np.cumsum(p)


#: up to this many rounds the signed-rank distribution is computed exactly; beyond, its normal
#: approximation (with continuity correction) is within 1e-4 of it in the tails that matter
_EXACT_SIGNED_RANK = 400


def _signed_rank_k(n: int, alpha: float) -> int:
    """The largest ``k`` with ``P(T <= k - 1) <= alpha / 2``: the interval runs from the ``k``-th
    smallest to the ``k``-th largest Walsh average (0 when ``n`` is too small for ``alpha``)."""
    if n <= _EXACT_SIGNED_RANK:
        return int(np.searchsorted(_signed_rank_cdf(n), alpha / 2.0 * (1 + 1e-12), side="right"))
    mean, sd = n * (n + 1) / 4.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    z = statistics.NormalDist().inv_cdf(alpha / 2.0)
    return max(0, int(math.floor(mean + z * sd - 0.5)) + 1)


def signed_rank_interval(d, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(Hodges-Lehmann estimate, low, high) of the centre of ``d``: the median of the Walsh averages
    ``(d_i + d_j) / 2, i <= j``, and the Wilcoxon signed-rank interval at ``confidence``, from the
    ``k``-th smallest to the ``k``-th largest Walsh average. Its coverage is exact at any ``n``
    (at least ``confidence``; the distribution is discrete) when ``d`` is symmetric about its centre,
    which a random order per round makes it for paired log-ratios (:mod:`nogradlab.timing`). Too few
    values for ``confidence`` (5 or fewer at 95 %) give ``(-inf, inf)``."""
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 1 or d.size < 1 or not np.all(np.isfinite(d)):
        raise ValueError("signed_rank_interval needs a non-empty list of finite numbers")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    n = d.size
    i, j = np.triu_indices(n)
    walsh = (d[i] + d[j]) / 2.0
    point = float(np.median(walsh))
    k = _signed_rank_k(n, 1.0 - confidence)
    if k < 1:
        return point, -math.inf, math.inf
    m = walsh.size
    low, high = np.partition(walsh, (k - 1, m - k))[[k - 1, m - k]]
    return point, float(low), float(high)


def _paired_samples(samples: Mapping[str, "list[float]"], baseline: str) -> tuple:
    """``(names, data)``: the cases' per-round samples as a (cases, rounds) array, after checking that
    ``baseline`` is one of them and that every case has the same number (>= 1) of rounds."""
    if baseline not in samples:
        raise ValueError(f"baseline {baseline!r} is not one of the cases; allowed: "
                         f"{', '.join(map(repr, samples))}")
    names = list(samples)
    data = np.asarray([samples[n] for n in names], dtype=np.float64)  # (cases, rounds)
    if data.ndim != 2 or data.shape[1] < 1:
        raise ValueError("every case needs the same number (>= 1) of per-round samples")
    return names, data


def paired_speedup(samples: Mapping[str, "list[float]"], baseline: str, confidence: float = CONFIDENCE
                   ) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """Speedups over ``baseline`` with their confidence intervals, from per-round paired samples.

    ``samples[name][r]`` is case ``name``'s per-call time in round ``r``; all cases have the same
    rounds. Per round, ``d_r = log(baseline_r / name_r)``; the speedup is ``exp`` of the
    Hodges-Lehmann centre of the ``d_r`` and its interval ``exp`` of the signed-rank interval
    (:func:`signed_rank_interval`): the typical paired ratio, which for a case that is a fixed
    factor faster than the baseline is that factor. Deterministic (no resampling)."""
    names, data = _paired_samples(samples, baseline)
    if not np.all(data > 0):
        raise ValueError("per-round times must be positive")
    logs = np.log(data)
    b = names.index(baseline)
    speedup: dict[str, float] = {}
    ci: dict[str, tuple[float, float]] = {}
    for i, name in enumerate(names):
        if i == b:
            speedup[name], ci[name] = 1.0, (1.0, 1.0)
            continue
        point, low, high = signed_rank_interval(logs[b] - logs[i], confidence)
        speedup[name] = math.exp(point)
        ci[name] = (math.exp(low), math.exp(high))
    return speedup, ci


# --------------------------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------------------------

def run_rounds(sample: Callable[[str], float], names: Iterable[str], baseline: "str | None" = None, *,
               rounds: int = 20, until: "Callable[[Comparison], bool] | None" = None,
               max_rounds: "int | None" = None, time_budget: "float | None" = None,
               seed: "int | None" = 0, clock: Callable[[], float] = time.perf_counter,
               number: "Mapping[str, int] | None" = None, threads: int = 1, device: str = "cpu",
               on_round: "Callable[[], None] | None" = None, clock_name: str = "wall") -> Comparison:
    """The rounds of :func:`compare` and its stopping rule, with the sampling injected: what every
    comparison runs, and what ``benchmarks/coverage.py`` feeds with simulated times.

    ``sample(name)`` returns one sample of case ``name``: its per-call time in seconds (or a pair, that
    time and the per-call wall time read beside it, kept as ``Timing.wall_times``). Each round
    calls it once per case, in an order drawn at random for that round (``numpy.random.default_rng
    (seed)``; ``orders`` keeps them). Without ``until``: ``rounds`` rounds, ``stopped="rounds"``,
    intervals at :data:`CONFIDENCE`. With ``until``: the rounds go on to each of :func:`looks`
    ``(rounds, max_rounds)`` in turn (``max_rounds`` defaults to ``4 * rounds``), every look's
    interval at :func:`look_confidence`; at each look ``until(comparison so far)`` is asked and the
    rounds stop when it says yes ("decided"), at the last look ("max rounds"), or when ``clock()``
    says the rounds have taken ``time_budget`` seconds or the next look would end past it, by the
    mean round so far ("time budget"). Whichever look they stop at, its interval covers at
    :data:`CONFIDENCE`. ``number``, ``threads``, ``device`` and ``clock_name`` are recorded in the result."""
    names = list(names)
    if baseline is None:
        baseline = names[0]
    rounds = _check_int("rounds", rounds, 2)
    if until is None:
        plan = (rounds,)
    else:
        plan = looks(rounds, rounds * 4 if max_rounds is None else max_rounds)
    level = look_confidence(len(plan))
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {n: [] for n in names}
    walls: dict[str, list[float]] = {n: [] for n in names}
    orders: list[tuple[str, ...]] = []
    number = {n: 1 for n in names} if number is None else dict(number)

    def one_round():
        order = tuple(names[i] for i in rng.permutation(len(names)))
        orders.append(order)
        for n in order:
            got = sample(n)
            if isinstance(got, tuple):
                got, wall = got
                walls[n].append(float(wall))
            samples[n].append(float(got))
        if on_round is not None:
            on_round()

    def snapshot():
        return _comparison(samples, number, names, baseline, threads, device, seed, orders, level, plan,
                           clock_name, walls)

    stopped = "rounds"
    t0 = clock()
    for _ in range(rounds):
        one_round()
    if until is not None:
        for nxt in plan[1:] + (None,):
            if until(snapshot()):
                stopped = "decided"
                break
            if nxt is None:
                stopped = "max rounds"
                break
            if time_budget is not None:
                spent = clock() - t0
                if spent >= time_budget or spent + spent / len(orders) * (nxt - len(orders)) > time_budget:
                    stopped = "time budget"
                    break
            while len(orders) < nxt:
                one_round()
    seconds = clock() - t0
    out = snapshot()
    out.stopped, out.seconds = stopped, round(seconds, 4)
    return out



def bootstrap_speedup(samples: Mapping[str, "list[float]"], baseline: str,
                      resamples: int = BOOTSTRAP_RESAMPLES, seed: "int | None" = 0,
                      confidence: float = CONFIDENCE
                      ) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """Speedups over ``baseline`` with paired percentile-bootstrap confidence intervals: the method
    :func:`compare` used before :func:`paired_speedup`, kept for comparison (``benchmarks/coverage.py``
    runs it as "before"). At 10 rounds its 95 % interval is too narrow (an A/A run of one function as
    two cases excluded 1 in about one run of nine on a shared CPU), and read after adaptive
    stopping it is not a 95 % interval at all.

    ``samples[name][r]`` is case ``name``'s per-call time in round ``r``; all cases have the same
    rounds. The point estimate is ``median(baseline) / median(name)``. Each resample draws round
    indices with replacement, *the same indices for every case* (pairing: a round where the machine
    was slow counts against all cases together), and recomputes the ratio of medians. The interval
    is the ``(1-confidence)/2`` and ``(1+confidence)/2`` percentiles of the resampled ratios.
    Deterministic for a given ``seed`` (a ``numpy.random.default_rng``).
    """
    names, data = _paired_samples(samples, baseline)
    rounds = data.shape[1]
    b = names.index(baseline)
    medians = np.median(data, axis=1)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, rounds, size=(int(resamples), rounds))
    boot = np.median(data[:, idx], axis=2)  # (cases, resamples)
    alpha = (1.0 - confidence) / 2.0
    speedup: dict[str, float] = {}
    ci: dict[str, tuple[float, float]] = {}
    for i, name in enumerate(names):
        if i == b:
            speedup[name], ci[name] = 1.0, (1.0, 1.0)
            continue
        speedup[name] = float(medians[b] / medians[i])
        ratios = boot[b] / boot[i]
        low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
        ci[name] = (float(low), float(high))
    return speedup, ci


def _calibrate(timer: Timer, target: float, repeats: int = 1) -> int:
    """Calls per sample so that one sample of this case alone takes about ``target`` seconds (at
    least 1 call), from the fastest of ``repeats`` timings. :func:`compare` calibrates its cases
    together (:func:`_calibrate_all`); this one-timing form is what it did before."""
    return _calibrate_all({"fn": timer}, target, repeats)["fn"]


def _calibrate_all(timers: Mapping[str, Timer], target: float, repeats: int = 5) -> dict[str, int]:
    """Calls per sample of each case so that one sample takes about ``target`` seconds (at least
    1 call). The samples of all cases must last alike for their ratio to mean anything: on a shared
    machine the scheduler stretches a long sample often and a short one rarely, and a case
    calibrated on one stretched timing got a sample many times shorter than its neighbour's (25
    calls against 5817 for the same function, on this two-core machine under load: it then read 5x
    faster than itself). So each case's per-call time is the fastest of ``repeats`` timings, taken
    in turns across the cases (a busy spell of the machine slows every case's timings alike), and
    one factor common to all cases scales them to the machine's typical speed during the timings
    (on a loaded machine a sample then lasts ``target`` seconds, not several times that)."""
    number, seen = {}, {}
    for name, timer in timers.items():
        m = 1
        while True:
            e = timer.timeit(m).raw_times[0]  # seconds for `m` calls
            if target / 5 <= e < 1.5 * target and m < 100:
                # a few calls that read long enough to stop growing: one timing may have caught a stretch (a
                # cold cache, an interrupt) that would leave this case far fewer calls than an identical one;
                # the fastest of three decides (a call that takes a whole sample is not timed again)
                e = min([e] + [timer.timeit(m).raw_times[0] for _ in range(2)])
            if e >= target / 5 or m >= 10**8:
                break
            # Grow quickly but without overshooting wildly: at most x10 per step.
            m *= int(min(10, max(2, target / 5 / max(e, 1e-9))))
        number[name], seen[name] = m, [e]
    # a case whose one call is well over a sample's length gets one call a sample whatever its
    # fastest timing: it is not timed again (a ResNet-50 forward on a loaded CPU takes a second)
    again = [name for name in timers if number[name] > 1 or seen[name][0] < 1.5 * target]
    for _ in range(repeats - 1):
        for name in again:
            seen[name].append(timers[name].timeit(number[name]).raw_times[0])
    fastest = {name: max(min(seen[name]), 1e-12) for name in timers}
    # one factor for all cases from how much slower than its fastest a typical timing ran: the
    # samples last about ``target`` on the machine as it is, and still alike across the cases
    slower = float(np.median([e / fastest[name] for name in again for e in seen[name]])) if again else 1.0
    cost = {name: fastest[name] / number[name] * slower for name in timers}  # seconds a call
    return _equal_calls(cost, target)


def _equal_calls(cost: Mapping[str, float], target: float, within: float = EQUAL_CALLS_WITHIN) -> dict[str, int]:
    """Calls per sample from each case's per-call ``cost`` (seconds), so that a sample lasts about
    ``target``: cases whose costs lie within ``within`` of each other (groups of neighbours in cost
    order, each group spanning at most ``within``) share one count, from their geometric mean cost.
    Identical cases then always get the same count, however the calibration's timings scattered (on a
    shared 2-core machine two identical cases had got median 1.2x, at worst 244x, different counts, and
    the case with the longer samples read slower in 84 of 111 A/A runs)."""
    order = sorted(cost, key=lambda n: cost[n])
    groups: list[list[str]] = []
    for name in order:
        if groups and cost[name] <= within * cost[groups[-1][0]]:
            groups[-1].append(name)
        else:
            groups.append([name])
    out = {}
    for g in groups:
        mean = math.exp(sum(math.log(max(cost[n], 1e-12)) for n in g) / len(g))
        k = max(1, round(target / mean))
        out.update({n: k for n in g})
    return {name: out[name] for name in cost}


def _check_cases(cases, baseline) -> tuple:
    """``compare``'s cases and baseline checked: ``(names, baseline)``, the baseline the first case's name
    by default. A ``ValueError`` names what is wrong (not a dict, empty, a name not a string, a case not
    callable, a baseline not among the cases)."""
    if not isinstance(cases, Mapping):
        raise ValueError("cases must be a non-empty dict mapping names to functions, got "
                         f"{type(cases).__name__}")
    if len(cases) == 0:
        raise ValueError("cases must be a non-empty dict mapping names to functions, got {}")
    names = list(cases)
    for name in names:
        if not isinstance(name, str):
            raise ValueError(f"case names must be strings, got {name!r}")
        if not callable(cases[name]):
            raise ValueError(f"case {name!r} must be callable (a function taking no arguments), "
                             f"got {type(cases[name]).__name__}")
    if baseline is None:
        baseline = names[0]
    if baseline not in cases:
        raise ValueError(f"baseline {baseline!r} is not one of the cases; allowed: "
                         f"{', '.join(map(repr, names))}")
    return names, baseline


def _clock_of_cases(cases, dev, threads, clock: str) -> tuple:
    """``compare``'s clock for these (warmed-up) cases, with a note for each change: ``(clock name, notes)``.
    A case that waits (asleep, I/O, a lock) is timed by wall time, one that works in other threads by the
    process's CPU time rather than this thread's: neither CPU-time clock would count what it spends there."""
    names = list(cases)
    clock_name, notes = _clock_name(dev, threads, clock), []
    waiting = [n for n in names if clock_name != "wall" and _waits(cases[n], 1)]
    if waiting:
        clock_name = "wall"
        notes.append(f"timed by wall time: {', '.join(map(repr, waiting))} waits (asleep, on I/O, a lock or "
                     "another thread) for part of its time, which a CPU-time clock would not count")
    if clock_name == "thread":
        elsewhere = [n for n in names if _works_elsewhere(cases[n], 1)]
        if elsewhere:
            clock_name = "process"
            notes.append(f"timed by the process's CPU time: {', '.join(map(repr, elsewhere))} works in "
                         "other threads too, which this thread's CPU time would not count")
    return clock_name, notes


def _rounds_bar(total: int):
    """``compare(progress=True)``'s tqdm bar over the rounds (at most ``total``)."""
    from tqdm.auto import tqdm
    return tqdm(desc="rounds", total=total)


@_device.leaves_rng_alone  # a probe leaves the global RNG as it found it
def compare(cases: Mapping[str, Callable[[], object]], baseline: "str | None" = None, device=None,
            rounds: int = 20, min_run_time: float = 0.5, warmup: int = 3, seed: "int | None" = 0,
            num_threads: "int | None" = None, progress: bool = False,
            until: "Callable[[Comparison], bool] | None" = None, max_rounds: "int | None" = None,
            time_budget: "float | None" = None, clock: str = "auto") -> Comparison:
    """Time several no-argument functions against each other, interleaved, and report speedups.

    1. Every case is called ``warmup`` times (untimed).
    2. Each case gets a ``number`` of calls per sample, calibrated so a sample takes about
       ``min_run_time / rounds`` seconds; cases whose costs lie within :data:`EQUAL_CALLS_WITHIN` of
       each other get the same number (:func:`_equal_calls`).
    3. ``rounds`` rounds: each round times every case once (a ``torch.utils.benchmark.Timer`` of
       ``number`` calls), in an order drawn at random for each round (seeded by ``seed``; a random
       order is what makes the interval exact, see the module's docstring). One untimed call comes
       just before each sample of several calls, so no case pays for the cache the previous case
       disturbed (:func:`_sample`).
    4. Per case, a :class:`Timing` over its per-round samples; speedup over ``baseline`` (default:
       the first case) from the per-round paired ratios, with the signed-rank interval
       (:func:`paired_speedup`).

    ``min_run_time`` is the timed seconds per case in total. ``progress=True`` shows a tqdm bar over
    the rounds. Grad mode and the torch thread count are as before afterwards, also on error.

    ``num_threads``: torch CPU threads, by default :func:`threads_here`'s (one where CPUs are few or
    busy; ``threads_reason`` says why). ``clock``: "auto" (on a CPU the thread's CPU time for one
    thread, the process's for several or where a case works in other threads; on CUDA/MPS
    synchronised wall time), "cpu" (the same) or "wall". Every sample's wall time is kept beside it.

    **Stopping when it knows enough.** With ``until`` (a function of the comparison so far, true when
    its intervals are narrow enough for the question asked: :func:`resolves` builds one from a
    rule's band edges), ``rounds`` is the minimum, and ``until`` is asked at each of the pre-set
    :func:`looks` (``rounds``, 1.5x, 2x, 3x, 4x that, ... and ``max_rounds``, default
    ``4 * rounds``); rounds go on while it says no, up to ``max_rounds``, or until the rounds have
    taken ``time_budget`` seconds or the next look would end past it (default: no limit). Each
    look's intervals are read at ``1 - 0.05 / len(looks)``, so ``ci`` covers at 95 % when the rounds
    stop. ``stopped`` says which of the three ended it ("decided", "max rounds", "time budget"); a
    fixed comparison (no ``until``) says "rounds" and reads its one look at 95 %. The same protocol
    on CPU and GPU; :func:`run_rounds` is its loop, with the sampling injected.
    """
    names, baseline = _check_cases(cases, baseline)
    rounds = _check_int("rounds", rounds, 2)
    min_run_time = _check_positive_number("min_run_time", min_run_time)
    warmup = _check_int("warmup", warmup, 0)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise ValueError(f"seed must be an integer or None, got {seed!r}")
    threads = _check_threads(num_threads)
    reason = _threads_reason(num_threads, threads)
    clock = _check_clock(clock)
    dev = _resolve_device(device)
    if until is not None and not callable(until):
        raise ValueError(f"until must be a function of the comparison so far, got {type(until).__name__}")
    max_rounds = rounds * 4 if max_rounds is None else _check_int("max_rounds", max_rounds, rounds)
    if time_budget is not None:
        time_budget = _check_positive_number("time_budget", time_budget)

    target = min_run_time / rounds

    with _preserved_state(threads):
        for n in names:
            _warm_up(cases[n], dev, warmup, f"case {n!r}")
        clock_name, notes = _clock_of_cases(cases, dev, threads, clock)
        timers = {n: _timer(cases[n], dev, threads, n, clock_name) for n in names}
        number = _calibrate_all(timers, target)

        bar = _rounds_bar(rounds if until is None else max_rounds) if progress else None
        try:
            def sample(n):
                t, wall = _sample_both(timers[n], cases[n], number[n], dev)
                return t / number[n], wall / number[n]

            out = run_rounds(sample, names, baseline,
                             rounds=rounds, until=until, max_rounds=max_rounds, time_budget=time_budget,
                             seed=seed, number=number, threads=threads, device=str(dev),
                             on_round=None if bar is None else (lambda: bar.update(1)), clock_name=clock_name)
            out.threads_reason, out.notes = reason, notes
            return out
        finally:
            if bar is not None:
                bar.close()


def _comparison(samples, number, names, baseline, threads, dev, seed, orders, level=CONFIDENCE,
                plan=None, clock_name: str = "wall", walls=None) -> Comparison:
    timings = {n: Timing.from_samples(samples[n], number[n], label=n, threads=threads,
                                      device=str(dev), clock=clock_name,
                                      wall_times=(walls or {}).get(n) or None) for n in names}
    speedup, ci = paired_speedup(samples, baseline, confidence=level)
    return Comparison(timings=timings, baseline=baseline, speedup=speedup, ci=ci, rounds=len(orders),
                      device=str(dev), threads=threads, seed=seed, orders=list(orders),
                      look_confidence=level, looks=tuple(plan or (len(orders),)), clock=clock_name)


def resolves(edges: "Mapping[str, Iterable[float]] | Iterable[float]", *, min_width: float = 0.0):
    """An ``until`` for :func:`compare`: true once no case's speedup interval straddles one of its
    ``edges`` (speedups: 1.25 is "25 % faster"; a band of time saved ``(a, b)`` has the edges
    ``1/(1-a)`` and ``1/(1-b)``), or is narrower than ``min_width`` (an interval that small around an
    edge will not leave it soon: more rounds would not decide). ``edges`` is one list for every case
    but the baseline, or ``{case: [edges]}`` for the cases named."""
    per_case = dict(edges) if isinstance(edges, Mapping) else None
    common = None if per_case is not None else [float(e) for e in edges]

    def until(cmp: Comparison) -> bool:
        for name, (low, high) in cmp.ci.items():
            if name == cmp.baseline:
                continue
            es = common if per_case is None else per_case.get(name, ())
            if high - low < min_width:
                continue
            if any(low < e < high for e in es):
                return False
        return True

    return until


# --------------------------------------------------------------------------------------------
# bootstrap of independent measurements
# --------------------------------------------------------------------------------------------

def bootstrap_ratio(numerator: "list[float]", denominator: "list[float]",
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: "int | None" = 0,
                    confidence: float = CONFIDENCE) -> tuple[float, tuple[float, float]]:
    """``median(numerator) / median(denominator)`` with a percentile-bootstrap interval that
    resamples the two sample lists *independently* (for timings that were not taken in the same
    interleaved rounds, e.g. a training step measured on its own against a shared forward timing;
    unpaired, so wider than :func:`bootstrap_speedup`'s paired interval)."""
    a = np.asarray(numerator, dtype=np.float64)
    b = np.asarray(denominator, dtype=np.float64)
    if a.size < 1 or b.size < 1:
        raise ValueError("bootstrap_ratio needs at least one sample on each side")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, a.size, size=(int(resamples), a.size))
    ib = rng.integers(0, b.size, size=(int(resamples), b.size))
    ratios = np.median(a[ia], axis=1) / np.median(b[ib], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return float(np.median(a) / np.median(b)), (float(low), float(high))


# --------------------------------------------------------------------------------------------
# one timing per condition: the per-run cache
# --------------------------------------------------------------------------------------------

def gpu_state(device=None) -> dict:
    """The settings that change what a CUDA timing means: ``cudnn.benchmark``, TF32 for matmuls
    and for cuDNN convolutions, the float32 matmul precision (empty dict on other devices)."""
    dev = _resolve_device(device)
    if dev.type != "cuda":
        return {}
    return {"cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


@contextlib.contextmanager
def timing_state(device=None, *, cudnn_benchmark: bool = True, clock_warmup_s: float = 0.5,
                 warm_fn: "Callable[[], object] | None" = None) -> Iterator[dict]:
    """The protocol around every shared timing. On CUDA: ``torch.backends.cudnn.benchmark`` set to
    ``cudnn_benchmark`` for the block (what a practitioner timing inference would do; restored on
    exit), and ``warm_fn`` called for ``clock_warmup_s`` seconds first so the GPU's clocks have
    ramped up. Yields the state the timing ran under (:func:`gpu_state`, TF32 included, as set
    by the caller: it is reported, not changed)."""
    dev = _resolve_device(device)
    if dev.type != "cuda":
        yield {}
        return
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = bool(cudnn_benchmark)
    try:
        if warm_fn is not None and clock_warmup_s > 0:
            t0 = timeit.default_timer()
            while timeit.default_timer() - t0 < clock_warmup_s:
                warm_fn()
                _device.synchronize(dev)
        yield dict(gpu_state(dev), clock_warmup_s=clock_warmup_s)
    finally:
        torch.backends.cudnn.benchmark = before


