"""The knobs a check reads from ``ctx.params``: one frozen spec, checked once when the Context is made.

``claims.check(id, **params)`` turns its keyword arguments into a :class:`Params` before any work: an
unknown key raises ``ValueError`` naming the allowed keys, a value of the wrong type or range raises
``ValueError`` naming what the knob takes. A check reads a knob as before (``ctx.params.get("runs",
20)``: a knob left unset reads the check's own default, which may depend on the device and scale), but
it can no longer meet a misspelt key or a string where a number belongs.

Every knob is optional; each check's docstring says which ones it reads. Sequences are stored as
tuples, so a :class:`Params` is hashable (a cache key may hold it).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping

from nogradlab.core import workloads as _workloads

__all__ = ["Params", "KNOBS", "REAL_SEARCH", "knobs_text"]

#: how many real OOM searches a GPU run makes (:func:`nogradlab.claims.searches._real_search`)
REAL_SEARCH = ("none", "one", "all")


def _int(minimum: int):
    def check(name, v):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
        return int(v)
    check.what = f"an integer >= {minimum}"
    return check


def _positive(name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (math.isfinite(float(v)) and v > 0):
        raise ValueError(f"{name} must be a positive, finite number, got {v!r}")
    return v


_positive.what = "a positive number"


def _optional(check):
    def opt(name, v):
        return None if v is None else check(name, v)
    opt.what = f"{check.what} or None"
    return opt


def _flag(name, v):
    if not isinstance(v, bool):
        raise ValueError(f"{name} must be True or False, got {v!r}")
    return v


_flag.what = "True or False"


def _batch(name, v):
    return _workloads.check_batch(v, name)


_batch.what = "a positive integer"


def _workload(name, v):
    if v not in _workloads.names():
        raise ValueError(f"{name}: unknown workload {v!r}; allowed: {', '.join(_workloads.names())}")
    return v


_workload.what = f"a workload name ({', '.join(_workloads.names())})"


def _real_search(name, v):
    if v not in REAL_SEARCH:
        raise ValueError(f"real_search must be one of {', '.join(REAL_SEARCH)}; got {v!r}")
    return v


_real_search.what = f"one of {', '.join(REAL_SEARCH)}"


def _seq(item, what: str):
    def check(name, v):
        if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__iter__"):
            raise ValueError(f"{name} must be a list of {what}, got {v!r}")
        return tuple(item(f"{name}[{i}]", x) for i, x in enumerate(v))
    check.what = f"a list of {what}"
    return check


#: knob -> (its check: name, value -> the stored value, raising ValueError; what it sets)
KNOBS = {
    # the timing protocol (nogradlab.claims.measure._knobs: the defaults depend on device and scale)
    "rounds": (_int(2), "the fewest timing rounds per case (raised to the first look's 10)"),
    "max_rounds": (_optional(_int(2)), "the most timing rounds a shared condition may take"),
    "min_run_time": (_positive, "timed seconds per case in total"),
    "warmup": (_int(0), "untimed calls per case before the rounds"),
    "num_threads": (_optional(_int(1)), "torch CPU threads while timing (None: torch's)"),
    "time_budget": (_optional(_positive), "seconds of rounds a shared condition may take"),
    # what is measured
    "workloads": (_seq(_workload, "workload names"), "the workloads a check sweeps"),
    "workload": (_workload, "the one workload a check measures"),
    "cpu_workload": (_workload, "the workload of a capacity check's real CPU search"),
    "batch": (_batch, "the batch a check times"),
    "batches": (_seq(_batch, "positive integers"), "the batches a check sweeps at the run's scale"),
    "full_batches": (_seq(_batch, "positive integers"), "the batches of the full-size estimates"),
    "seq_lens": (_seq(_batch, "positive integers"), "the sequence lengths a transformer check sweeps"),
    "iterations": (_seq(_batch, "positive integers"), "the loop lengths a scope check times"),
    "n_batches": (_int(1), "batches in a validation loop"),
    "runs": (_int(1), "repeated evaluations of a variability check"),
    "repeats": (_int(1), "repeated profiles of a profiler check"),
    "requests": (_int(1), "requests a serving check sends"),
    "clients": (_int(1), "concurrent clients of a serving check"),
    "deadline_s": (_positive, "seconds a serving check may take"),
    "budgets_gib": (_seq(_positive, "positive numbers"), "GPU memory budgets (GiB) of a largest-batch search"),
    "budget_gib": (_positive, "the GPU memory budget (GiB) of a largest-batch search"),
    "cpu_budget_mib": (_positive, "the memory cap (MiB) of a real CPU largest-batch search"),
    "real_search": (_real_search, "how many real OOM searches a GPU run makes"),
    "compare_estimate": (_flag, "check a real search against the estimate"),
    "batch_factor": (_flag, "search the largest batches of the article's table"),
    "train_step_timing": (_flag, "time the training step beside the forward"),
    "compile": (_flag, "time torch.compile too"),
    "reference": (_flag, "the reference run (benchmarks/gpu_reference.py): measure what a notebook leaves out"),
}


def knobs_text() -> str:
    """The allowed keys with what each takes, one per line."""
    return "\n".join(f"  {k}: {KNOBS[k][0].what}: {KNOBS[k][1]}" for k in sorted(KNOBS))


@dataclasses.dataclass(frozen=True)
class Params(Mapping):
    """The checked knobs of one check (:data:`KNOBS`); read like a dict of the knobs that were set
    (``ctx.params.get("runs", 20)``, ``"batch" in ctx.params``). Frozen and hashable. Make one with
    :meth:`of`, which refuses an unknown key or a bad value naming the allowed ones; a knob given as None
    is not set (the check's default)."""

    values: tuple = ()  # ((key, value), ...) sorted by key, only the knobs that were set

    @classmethod
    def of(cls, params: "Mapping | Params | None" = None) -> "Params":
        if isinstance(params, Params):
            return params
        params = dict(params or {})
        unknown = sorted(k for k in params if k not in KNOBS)
        if unknown:
            raise ValueError(f"unknown knob{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                             f"allowed: {', '.join(sorted(KNOBS))}. What each takes:\n{knobs_text()}")
        # a knob given as None is not set: the check's default (a notebook's parameter left at None)
        return cls(tuple((k, KNOBS[k][0](k, params[k])) for k in sorted(params) if params[k] is not None))

    def __getitem__(self, k):
        for key, v in self.values:
            if key == k:
                return v
        raise KeyError(k)

    def __iter__(self):
        return (k for k, _ in self.values)

    def __len__(self):
        return len(self.values)

    def __repr__(self):
        return f"Params({', '.join(f'{k}={v!r}' for k, v in self.values)})"
