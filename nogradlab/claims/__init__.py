"""The claim ledger: every claim of the article (C01-C30) and what it leaves out (X01-X05).

    from nogradlab import claims
    r = claims.check("C06", device="cpu", scale="tiny")
    r.verdict, r.summary, r.measurements, r.scope

**A claim is data.** Each claim is declared once, beside its check, in the module of the notebook
that teaches it (``nogradlab/claims/nb01_what_no_grad_does.py`` ... ``nb09_beyond_no_grad.py``):
:func:`declare` gives its id, section, paraphrase, the article's figure, kind, rule, the evidence a
verdict stands on (``basis``), plot and key chart; ``@C.measures`` registers the check, which
returns measurements (a JSON-able dict: values with their CIs, conditions); ``@C.judges``
registers the judge, a pure function ``(Measurements, Rule) -> Judgement``. Every table of the
package (``NOTEBOOKS``, the rules, the plots, the report's key charts) is built from these
declarations. The guide for adding or changing a claim is ``nogradlab/claims/README.md``.

**Measurements apart from judgement.** ``claims.json`` stores the measurements; ``claims``,
``run`` and the report judge every column with today's rules (:func:`judge_entry`), this run's and
every reference in ``results/``. A column that lacks what today's rule needs shows "needs
re-measuring" for that claim, never an old verdict.

**Every verdict names its evidence** (``Result.scope``): measured here (device, scale), estimated
for a GPU by the allocator model, cited sources (C10, a historical claim), or measured on a reference
machine. A speed claim about GPUs
(``basis="gpu speed"``) run on a CPU takes its verdict from the reference GPU's measurements in
``results/`` judged by today's rule; this machine's figures are shown beside it, "on your machine".

Verdicts: ``holds``, ``does not hold``, ``depends`` (true under some measured conditions, false under
others: the summary says which), ``inconclusive`` (some conditions' intervals straddle a band edge
and none of the decided ones conflict: the summary says how many more rounds would decide it),
``not testable`` (an unsourced statistic; the mechanism behind it is measured, a proxy of the
figure's kind shown against it, never deciding) and ``needs re-measuring`` (a stored column lacks
what today's rule reads, or holds something that is no measurement: :func:`not_a_measurement`).
How conditions make a verdict, and the policy for unsourced statistics: ``nogradlab/claims/README.md``. The band readings are
:mod:`nogradlab.claims.rules`. Timings are measured once per run and condition and shared between
checks (:data:`nogradlab.claims.runcache.RUN`; :func:`new_run` forgets them).
"""
from __future__ import annotations

import functools
import importlib
import json
import random
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from nogradlab.core import device as _device
from nogradlab.core import format as _format
from nogradlab.core import memory as _memory
from nogradlab.core import pipeline as _pipeline
from nogradlab.core import workloads as _workloads
from nogradlab.claims.evidence import PROTOCOL, column_age, column_conflicts, conflict_text, protocol_of
from nogradlab.claims.params import Params
from nogradlab.claims.rules import Band, Rule
from nogradlab.claims import evidence as _evidence_module
from nogradlab.claims import rules as _rules_module
from nogradlab.claims import runcache as _runcache
from nogradlab.core.session import frozen_gc

__all__ = ["VERDICTS", "KINDS", "BASES", "Claim", "Result", "Context", "Measurements", "Judgement",
           "NeedsRemeasuring", "JudgeError", "declare", "ids", "get", "all_claims", "check", "check_all", "judge_entry",
           "NOTEBOOKS", "results_table", "rule", "new_run", "Params", "format_ratio", "format_saved", "ledger_path",
           "Band", "Rule", "reference_entry", "results_dir", "PROTOCOL", "column_age", "column_conflicts",
           "ESTIMATE_VALIDATION", "ESTIMATE_VALIDATIONS", "estimate_validation"]

VERDICTS = ("holds", "does not hold", "depends", "inconclusive", "not testable", "needs re-measuring")
KINDS = ("semantic", "numeric", "semantic+numeric", "historical", "unsourced statistic",
         "unsourced statistic, testable mechanism")
#: the evidence a verdict stands on: "here" (this run's measurement, any device), "estimate" (a
#: memory or batch figure the article gives for GPUs: the full-size virtual-CUDA estimate, made
#: here), "gpu speed" (a speed figure the article gives for GPUs: a GPU's measurement, this run's on
#: a GPU, else the reference GPU's in results/), "mixed" (the judge reads both: the article's table)
BASES = ("here", "estimate", "gpu speed", "mixed")

#: the check modules, one per notebook, in the article's order
MODULES = ("nb01_what_no_grad_does", "nb02_inside_the_engine", "nb03_scoping_no_grad", "nb04_eval_vs_no_grad",
           "nb05_memory_and_speed_by_workload", "nb06_decorators_contexts_and_autocast",
           "nb07_production_serving", "nb08_faq", "nb09_beyond_no_grad")

#: what the allocator model's GPU estimates were validated against (README, results/h200-alloc-probe)
ESTIMATE_VALIDATION = ("nogradlab's CUDA allocator model on a virtual CUDA device, validated within 2.6 % "
                       "(median 1.35 %) of 26 largest-batch searches on an NVIDIA H200 "
                       "(results/h200-alloc-probe)")

#: the allocator model each measuring protocol's estimates came from: (words, its largest relative error
#: against the H200's 24 real largest-batch searches, results/h200-alloc-probe/allocator_vs_h200.txt:
#: column "old est" for protocol 1, "new est" for protocol 2)
ESTIMATE_VALIDATIONS = {
    1: ("the allocator model of 2026-11-30 (nogradlab up to 182a8d6) on a virtual CUDA device, whose "
        "largest-batch estimates were off by up to 30.6 % (median 5.3 %) from 24 real searches on an NVIDIA H200 "
        "(results/h200-alloc-probe/allocator_vs_h200.txt, 'old est'; today's model: within 2.6 %)", 0.306),
    2: (ESTIMATE_VALIDATION, 0.026),
    3: (ESTIMATE_VALIDATION, 0.026),  # protocol 3 changed the timing, not the allocator model
    4: (ESTIMATE_VALIDATION, 0.026),  # protocol 4 too (its clock, threads and calls per sample)
}


def estimate_validation(protocol: "int | None") -> tuple:
    """``(words, largest relative error)`` of the allocator model that made a column's estimates, by the
    column's measuring protocol (:data:`ESTIMATE_VALIDATIONS`). A column that did not record its
    protocol gets the oldest model's (largest) error: its estimates are not called validated to today's."""
    if protocol in ESTIMATE_VALIDATIONS:
        return ESTIMATE_VALIDATIONS[protocol]
    if isinstance(protocol, int) and protocol > PROTOCOL:
        return ESTIMATE_VALIDATIONS[PROTOCOL]
    words, err = ESTIMATE_VALIDATIONS[min(ESTIMATE_VALIDATIONS)]
    return (f"an allocator model of a version the column did not record (its oldest validated version: "
            f"{words})", err)


class NeedsRemeasuring(KeyError):
    """Raised by a judge when the measurements lack what its rule reads (a column made by older
    code): the claim shows "needs re-measuring" for that column."""


@dataclass
class Claim:
    """One claim, declared once (:func:`declare`) in its notebook's check module.

    ``paraphrase`` is our words, never the article's; ``figure`` the article's figure as it gives it
    (None when it gives none); ``rule`` the verdict rule; ``basis`` one of :data:`BASES`; ``key_chart`` a (title,
    caption) pair when the report shows that figure among its key charts, ``chart_rank`` its place among
    them (0 leads the report, above the columns). ``measure``, ``judge`` and ``draw`` are registered with
    the :meth:`measures`, :meth:`judges` and :meth:`draws` decorators.

    What generic code asks of a claim, declared with it (never by its id elsewhere):

    * ``tiny_cpu_threads``: torch's CPU thread count while its check runs in a tiny CPU run (1 for the
      checks that time or trace models: on a shared two-core machine a second OpenMP thread makes every
      call several times slower and noisier; bytes do not depend on it), restored afterwards; None
      leaves torch's.
    * ``estimates_at``: the scale of the article-sized estimates its check makes (``"full"``), whatever
      the run's scale; None for a claim that makes none.
    * ``speedup_edges(workload)``: the speedups over grad at which its own rule changes its reading of a
      no_grad case of a shared forward condition (None: its reading is not such a band);
      ``stop_edges(workload)``: the speedups a shared forward condition's rounds must decide for it.
    * ``shared_readings(values, protocol)``: yields ``(quantity key, value, interval)`` of the physical
      quantities several claims read (:func:`nogradlab.claims.evidence.readings`).
    * ``with_cost(values, seconds)``: its measurements with the cost of entering and leaving no_grad
      read as ``seconds`` (a column that contradicts itself on that cost: :func:`_despite`).
    * ``without_timings(values, workloads)``: its measurements without the timed conditions of those
      workloads (a column whose timings of them contradict each other): its judge's words then read only
      what the conflict leaves decided (:func:`_conflicted`)."""

    id: str
    section: str
    paraphrase: str
    figure: "str | None"
    kind: str
    notebook: str = ""
    rule: "Rule | None" = None
    basis: str = "here"
    key_chart: "tuple | None" = None
    chart_rank: int = 99
    tiny_cpu_threads: "int | None" = None
    estimates_at: "str | None" = None
    speedup_edges: object = field(default=None, repr=False, compare=False)
    stop_edges: object = field(default=None, repr=False, compare=False)
    shared_readings: object = field(default=None, repr=False, compare=False)
    with_cost: object = field(default=None, repr=False, compare=False)
    without_timings: object = field(default=None, repr=False, compare=False)
    measure: object = field(default=None, repr=False, compare=False)
    judge: object = field(default=None, repr=False, compare=False)
    draw: object = field(default=None, repr=False, compare=False)

    def measures(self, fn):
        """Decorator: ``fn(ctx: Context) -> dict`` measures this claim."""
        if self.measure is not None:
            raise RuntimeError(f"claim {self.id} has two checks")
        threads = self.tiny_cpu_threads
        if threads is None:
            self.measure = fn
            return fn

        @functools.wraps(fn)
        def run(ctx):
            from nogradlab.estimate.sweep import _torch_threads

            with _torch_threads(threads if ctx.quick else None):
                return fn(ctx)

        self.measure = run
        return fn

    def judges(self, fn):
        """Decorator: ``fn(m: Measurements, rule: Rule) -> Judgement`` judges this claim (pure: it
        reads only ``m`` and ``rule``)."""
        if self.judge is not None:
            raise RuntimeError(f"claim {self.id} has two judges")
        self.judge = fn
        return fn

    def draws(self, fn):
        """Decorator: ``fn(evidence: dict, device: str, scale) -> Figure`` draws this claim's
        measurements with :mod:`nogradlab.plots` (from a result or from its stored dict: :func:`figure`)."""
        if self.draw is not None:
            raise RuntimeError(f"claim {self.id} has two figures")
        self.draw = fn
        return fn


_CLAIMS: dict = {}
_LOADED = False


def declare(id: str, *, section: str, paraphrase: str, kind: str, notebook: str, rule: Rule,
            figure: "str | None" = None, basis: str = "here", key_chart: "tuple | None" = None,
            chart_rank: int = 99, tiny_cpu_threads: "int | None" = None, estimates_at: "str | None" = None,
            speedup_edges=None, stop_edges=None, shared_readings=None, with_cost=None,
            without_timings=None) -> Claim:
    """Declare a claim (once, in its notebook's check module) and return it. The keyword arguments
    after ``key_chart`` are what generic code asks of the claim (:class:`Claim`)."""
    if id in _CLAIMS:
        raise RuntimeError(f"claim {id} is declared twice")
    if kind not in KINDS:
        raise ValueError(f"claim {id}: kind {kind!r}; allowed: {', '.join(KINDS)}")
    if basis not in BASES:
        raise ValueError(f"claim {id}: basis {basis!r}; allowed: {', '.join(BASES)}")
    if not isinstance(rule, Rule):
        raise TypeError(f"claim {id}: rule must be a nogradlab.claims.rules.Rule")
    if tiny_cpu_threads is not None and (isinstance(tiny_cpu_threads, bool) or not isinstance(tiny_cpu_threads, int)
                                         or tiny_cpu_threads < 1):
        raise ValueError(f"claim {id}: tiny_cpu_threads {tiny_cpu_threads!r}; allowed: a positive int or None")
    if estimates_at is not None and estimates_at not in _workloads.SCALES:
        raise ValueError(f"claim {id}: estimates_at {estimates_at!r}; allowed: {', '.join(_workloads.SCALES)} or None")
    if basis in ("estimate", "mixed") and estimates_at is None:
        raise ValueError(f"claim {id}: basis {basis!r} judges estimates; declare their scale (estimates_at)")
    c = Claim(id, section, paraphrase, figure, kind, notebook, rule, basis, key_chart, chart_rank, tiny_cpu_threads,
              estimates_at, speedup_edges, stop_edges, shared_readings, with_cost, without_timings)
    _CLAIMS[id] = c
    return c


def _load() -> None:
    """Import every check module (each declares its claims), once."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    try:
        for mod in MODULES:
            importlib.import_module(f"{__name__}.{mod}")
    except BaseException:
        _LOADED = False
        raise
    order = {cid: i for i, cid in enumerate(sorted(_CLAIMS, key=lambda c: (c[0] != "C", c)))}
    ordered = sorted(_CLAIMS.items(), key=lambda kv: order[kv[0]])
    _CLAIMS.clear()
    _CLAIMS.update(ordered)


class _Notebooks(Mapping):
    """notebook stem -> the claims it checks, built from the declarations (each claim in one)."""

    def _table(self) -> dict:
        out: dict = {}
        for c in _in_order():
            out.setdefault(c.notebook, []).append(c.id)
        return dict(sorted(out.items()))

    def __getitem__(self, k):
        return self._table()[k]

    def __iter__(self):
        return iter(self._table())

    def __len__(self):
        return len(self._table())

    def __repr__(self):
        return repr(self._table())


#: notebook stem -> the claims it checks (from the declarations)
NOTEBOOKS = _Notebooks()


def _in_order() -> list:
    """The claims in id order (C01-C30, then X01-X05), whatever order their modules were imported in
    (a module imported by name before the others declares its claims first)."""
    _load()
    return sorted(_CLAIMS.values(), key=lambda c: (c.id[0] != "C", c.id))


def ids() -> list:
    return [c.id for c in _in_order()]


def get(claim_id: str) -> Claim:
    _load()
    try:
        return _CLAIMS[claim_id]
    except KeyError:
        raise ValueError(f"unknown claim id {claim_id!r}; allowed: {', '.join(_CLAIMS)}") from None


def all_claims() -> list:
    return _in_order()


def _shared_readings_of(claim_id):
    try:
        return get(claim_id).shared_readings
    except ValueError:
        return None


# rules and evidence read the registry through these, and import nothing of the ledger themselves
_rules_module.use_registry(get, ids)
_evidence_module.use_readers(_shared_readings_of)


def claim_figures() -> tuple:
    """The ids of the claims that have a figure (registered with ``@C.draws``)."""
    return tuple(c.id for c in all_claims() if c.draw is not None)


def figure(result):
    """The picture of a claim's measurements: ``claims.figure(claims.check(claim_id))``, or the same from
    the result's ``to_dict()`` (as stored in claims.json). Claims with a picture: :func:`claim_figures`."""
    d = result if isinstance(result, dict) else result.to_dict()
    c = get(d["id"])
    if c.draw is None:
        raise ValueError(f"no picture for claim {c.id!r}; allowed: {', '.join(claim_figures())}")
    info = d.get("device") or {}
    ev = d.get("measurements") if d.get("measurements") is not None else d.get("evidence", {})
    return c.draw(ev, _device.label(info) if info else "unknown device", d.get("scale"))


def searched_where(method: str, device: str) -> str:
    """A largest-batch figure's device line: a real out-of-memory search here, or the allocator model's
    estimates (0 to 2.6 % above 26 real H200 searches: ``benchmarks/allocator_vs_h200.py``)."""
    return (f"{device}, real OOM search" if method == "search"
            else "virtual CUDA device (allocator-model estimates)")


@dataclass
class Context:
    """What a check gets: the resolved device, the scale, a seed, and the notebook's knobs, checked
    once here (:class:`~nogradlab.claims.params.Params`: a dict is turned into one, refusing an unknown
    key or a bad value before any work)."""

    device: torch.device
    scale: str
    seed: int = 0
    params: Params = field(default_factory=Params)

    def __post_init__(self):
        self.params = Params.of(self.params)

    @property
    def info(self) -> dict:
        return _device.describe(self.device)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    @property
    def quick(self) -> bool:
        """A tiny CPU run: single-threaded checks (:attr:`Claim.tiny_cpu_threads`), few rounds, small sweeps."""
        return not self.on_gpu and self.scale == "tiny"

    @property
    def reference(self) -> bool:
        """``params['reference']``: the reference run (benchmarks/gpu_reference.py), which measures
        what a learner's notebook leaves out to stay within its minute on a GPU (the compute-bound
        batch, the levers there, both memory budgets by real OOM searches, torch.compile, the longer
        sequence sweep). Only GPU runs differ; on a CPU the scale decides."""
        return bool(self.params.get("reference", False))


#: the largest magnitude of an integer a measurement may hold (a signed 64-bit integer: every byte
#: count, batch and round count a check makes fits; a larger one is a corrupted or forged column)
MAX_INT = 2 ** 63 - 1

#: key names whose numbers cannot be negative: byte sizes, durations, counts
_NON_NEGATIVE_SUFFIXES = ("bytes", "_s", "_ms", "_us", "median", "iqr", "mean", "times")
_NON_NEGATIVE_NAMES = frozenset((
    "batch", "rounds", "runs", "calls", "ops", "distinct_ops", "n_batches", "requests", "seq_len", "iterations",
    "saved_tensors", "saved_tensor_hook_calls", "files", "mentioning_no_grad", "trials", "clients", "repeats",
    "max_alive_outputs", "max_concurrent_calls", "speed_rounds", "speed_batch", "memory_batch", "weight_casts",
    "number_per_sample", "threads", "max_rounds", "warmup", "min_run_time", "cells", "cells_in_band",
    "params_with_grad_after_forward", "outputs_requiring_grad", "version_after_one_inplace", "speedup",
    "speedup_ci", "no_grad_over_grad", "no_grad_over_train", "batch_factor", "max_abs_diff", "max_abs_output",
    "max_abs_output_diff", "max_logit_diff", "budget_gib", "budgets_gib"))


#: name fragments of signed measured quantities (a fraction saved, a ratio, a CI): a bool there is
#: no measurement (a string may be an error message, and fails where the judge formats it)
_NUMBER_FRAGMENTS = ("saved", "ratio", "share", "gain", "speedup", "factor", "diff", "band", "_ci")


def _number_name(name: str) -> bool:
    return name in ("ci", "value") or any(f in name for f in _NUMBER_FRAGMENTS)


#: names of yes/no observations (``requires_grad``, ``same_predictions``, ``is_leaf``): only a bool is one
#: (a string or a number there would read as a confident verdict: ``not "x"`` is False)
_FLAG_NAMES = frozenset(("requires_grad", "grad_enabled", "volatile_ignored"))


def _flag_name(name: str) -> bool:
    return name in _FLAG_NAMES or name.startswith(("is_", "same_", "has_"))


#: subtrees that describe (text or flags keyed by a quantity's name), never measure
_DESCRIPTIVE = frozenset(("definitions", "in_band"))


def _non_negative(name: str) -> bool:
    return name in _NON_NEGATIVE_NAMES or name.endswith(_NON_NEGATIVE_SUFFIXES) or name.startswith("max_abs")


def not_a_measurement(v, path: str = "") -> "str | None":
    """Why ``v`` (a stored measurement, nested dicts and lists) holds something that is no
    measurement, naming its place (``rows[2].time_saved: nan is not a finite number``), or None when
    every number in it is finite and fits in 64 bits, and every value under a name that counts,
    sizes or times something (:data:`_NON_NEGATIVE_NAMES`, names ending in ``bytes``, ``_s``,
    ``_ms``...) is a number that is not negative (or None: not measured). JSON reads ``NaN``,
    ``Infinity`` and integers of any length: none is a measurement."""
    import numbers

    stack = [(v, path, path.rsplit(".", 1)[-1])]
    while stack:
        x, where, name = stack.pop()
        if x is None:
            continue
        if isinstance(x, dict):
            if name not in _DESCRIPTIVE:
                stack.extend((y, f"{where}.{k}" if where else str(k), str(k)) for k, y in x.items())
        elif isinstance(x, (list, tuple)):
            if any(isinstance(y, bool) for y in x) and any(
                    isinstance(y, numbers.Real) and not isinstance(y, bool) for y in x):
                return f"{where}: a list of numbers holds a bool"
            stack.extend((y, f"{where}[{i}]", name) for i, y in enumerate(x))
        elif _flag_name(name) and not isinstance(x, bool):
            return f"{where}: {x!r} is not true or false, and {name!r} is a yes/no observation"
        elif isinstance(x, (bool, str)) or not isinstance(x, numbers.Real):
            if _non_negative(name) and isinstance(x, (bool, str)):
                return f"{where}: {x!r} is not a number, and {name!r} counts, sizes or times something"
            if _number_name(name) and isinstance(x, bool):
                return f"{where}: {x!r} is not a number, and {name!r} is a measured quantity"
        elif isinstance(x, numbers.Integral):
            if abs(int(x)) > MAX_INT:
                return f"{where}: an integer of {int(x).bit_length()} bits is no measurement"
            if x < 0 and _non_negative(name):
                return f"{where}: {int(x)} is negative, and {name!r} counts, sizes or times something"
        else:
            f = float(x)
            if f != f or f in (float("inf"), float("-inf")):
                return f"{where}: {f} is not a finite number"
            if f < 0 and _non_negative(name):
                return f"{where}: {f:g} is negative, and {name!r} counts, sizes or times something"
    return None


def number(x, what: str = "a measurement"):
    """``x`` when it is a number (int or float, not bool), else :class:`NeedsRemeasuring`: for a
    judge that compares a stored count with ``==``, where a list or a string would compare False
    and read as a confident verdict. (:class:`Measurements` has already refused non-finite ones.)"""
    import numbers

    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise NeedsRemeasuring(f"{what}: {x!r} is not a number")
    return x


class _Stored(dict):
    """A stored measurement's dict as a judge reads it: a missing key raises
    :class:`NeedsRemeasuring` naming its place (a column made before the key existed), not a bare
    KeyError that strict mode would take for the judge's bug."""

    __slots__ = ("_where",)

    def __missing__(self, k):
        where = getattr(self, "_where", "")  # a copy (copy.deepcopy, dataclasses.asdict) has none
        raise NeedsRemeasuring(f"{where}.{k}" if where else str(k))


def _stored(v, where: str = ""):
    """``v`` with every dict in it a :class:`_Stored` (lists and tuples become lists)."""
    if isinstance(v, dict):
        d = _Stored((k, _stored(x, f"{where}.{k}" if where else str(k))) for k, x in v.items())
        d._where = where
        return d
    if isinstance(v, (list, tuple)):
        return [_stored(x, f"{where}[{i}]") for i, x in enumerate(v)]
    return v


class Measurements(Mapping):
    """What a check measured (``values``, read like a dict) and where: ``device``
    (:func:`nogradlab.device.describe`), ``scale``, ``torch``. A judge reads nothing else.

    Reading a key validates everything stored under it (:func:`not_a_measurement`): a key that is
    missing, or whose values hold something that is no measurement (NaN, an infinity, an integer
    beyond 64 bits, a negative count, byte size or duration), raises :class:`NeedsRemeasuring`, so
    every judge reads only finite, plausible numbers; so does a key missing from a dict inside it. ``in`` and ``get`` see a key holding an invalid
    value as present: reading it raises, never falls back to a default."""

    def __init__(self, values: dict, device: "dict | None" = None, scale: str = "", torch_version: str = "",
                 protocol: "int | None" = PROTOCOL):
        # a column whose measurements or device are not objects has none that a judge can read
        self.values = dict(values) if isinstance(values, Mapping) else {}
        #: the measuring protocol the values were made by (today's for a fresh run; a stored column's
        #: ``meta.protocol``, None when it did not record one): it says which allocator model made the
        #: estimates (:func:`estimate_validation`)
        self.protocol = protocol
        self.device = dict(device) if isinstance(device, Mapping) else {}
        self.scale = scale
        self.torch = torch_version
        self._valid: dict = {}  # key -> its validated value, dicts reading missing keys as NeedsRemeasuring

    def __getitem__(self, k):
        try:
            v = self.values[k]
        except KeyError:
            raise NeedsRemeasuring(k) from None
        if k not in self._valid:
            why = not_a_measurement(v, str(k))
            if why:
                raise NeedsRemeasuring(why)
            self._valid[k] = _stored(v, str(k))
        return self._valid[k]

    def __contains__(self, k):
        return k in self.values

    def get(self, k, default=None):
        return self[k] if k in self.values else default

    def __iter__(self):
        return iter(self.values)

    def __len__(self):
        return len(self.values)

    @property
    def on_gpu(self) -> bool:
        return self.device.get("type") == "cuda"

    @property
    def tiny_cpu(self) -> bool:
        return not self.on_gpu and self.scale == "tiny"

    @property
    def label(self) -> str:
        where = _device.label(self.device) if self.device else "unknown device"
        return f"{where}, scale {self.scale}" if self.scale else where


@dataclass
class Judgement:
    """A judge's answer: ``verdict`` (one of :data:`VERDICTS`), ``summary`` (the measured figures in
    one or two sentences), ``reading`` (one line that follows from them), ``conditions`` (one row
    per judged condition: ``condition``, ``value``, ``ci``, ``reading``), ``scope`` (what the verdict
    stands on, when the judge knows better than the claim's basis: ``{"basis", "text"}``)."""

    verdict: str
    summary: str
    reading: str = ""
    conditions: list = field(default_factory=list)
    scope: "dict | None" = None


@dataclass
class Result:
    """One claim's result: the verdict its judge gave on its measurements, with what it stands on.

    ``measurements`` is what the check measured (``evidence`` is the same dict), ``scope`` what
    the verdict stands on (``basis``: measured / estimated / cited / reference, and ``text``), ``local`` the
    judgement of this machine's own measurements when the verdict stands on another machine's
    (a GPU speed claim run on a CPU), ``conditions`` the judged conditions."""

    id: str
    verdict: str
    summary: str
    measurements: dict
    figure: "str | None" = None
    section: str = ""
    kind: str = ""
    paraphrase: str = ""
    notebook: str = ""
    device: dict = field(default_factory=dict)
    torch: str = ""
    scale: str = ""
    seconds: float = 0.0
    rule: str = ""
    reading_text: str = ""
    scope: dict = field(default_factory=dict)
    conditions: list = field(default_factory=list)
    local: "dict | None" = None

    @property
    def evidence(self) -> dict:
        return self.measurements

    def to_dict(self) -> dict:
        d = json.loads(json.dumps(asdict(self), default=_jsonable))
        d["reading"] = d.pop("reading_text")
        return d

    def __str__(self) -> str:
        fig = f" (article: {self.figure})" if self.figure else ""
        return f"{self.id} [{self.verdict}]{fig}: {self.summary}"

    def __repr__(self) -> str:
        lines = [f"{self.id} [{self.verdict}] {self.paraphrase}"]
        if self.figure:
            lines.append(f"  article's figure: {self.figure}")
        lines.append(f"  reading: {self.reading}")
        lines.append(f"  rule: {self.rule}")
        lines.append(f"  measured: {self.summary}")
        if self.scope:
            lines.append(f"  evidence: {self.scope.get('text', '')}")
        where = _device.label(self.device) if self.device else ""
        lines.append(f"  ({where}, scale {self.scale}; measurements: .measurements)")
        return "\n".join(lines)

    @property
    def reading(self) -> str:
        """One sentence that follows from the printed numbers: the judge's own, else the measured
        summary's first sentence."""
        if self.reading_text:
            return self.reading_text
        import re

        first = re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join(self.summary.split()), maxsplit=1)[0]
        return first if len(first) <= 240 else first[:239] + "\u2026"

    def _repr_html_(self) -> str:
        """A compact box: the verdict and the answer in one sentence (numbers included), the article's
        figure and what the verdict stands on in one small line, a one-line count of the judged
        conditions; the rule, the full measured summary, the conditions and the measurements one
        click away (rounded, never wider than the cell)."""
        import html

        colour = {"holds": "#1a7f37", "does not hold": "#cf222e", "depends": "#9a6700",
                  "inconclusive": "#8250df", "not testable": "#57606a",
                  "needs re-measuring": "#57606a"}.get(self.verdict, "#000")
        e = html.escape
        small = []
        if self.figure:
            small.append(f"article: {e(self.figure)}")
        basis = (self.scope or {}).get("basis")
        if basis:
            small.append({"measured": "measured here", "estimated": "estimated for a GPU", "cited": "cited sources",
                          "reference": (f"on the reference GPU ({e(str(self.scope['machine']))}"
                                        + (f", older evidence: {e(str((self.scope.get('age') or {}).get('measured_on') or 'undated'))}"
                                           if self.scope.get("stale") else "") + ")"
                                        if (self.scope or {}).get("machine") else "no reference GPU measurement"),
                          "estimated + reference": "estimated + reference GPU"}.get(basis, e(basis)))
        if self.local:
            small.append(f"on your machine: {e(self.local.get('verdict', ''))}")
        counts = {}
        for c in self.conditions or []:
            r = c.get("reading")
            if r:
                counts[r] = counts.get(r, 0) + 1
        if counts:
            plural = {"agrees": "agree", "disagrees": "disagree"}
            sides = [c.get("side") for c in self.conditions or [] if c.get("reading") == "disagrees"]
            way = ", ".join(f"{sides.count(s)} {s}" for s in ("above", "below") if s in sides)
            small.append(", ".join(f"{n} {w if n == 1 else plural.get(w, w)}"
                                   + (f" ({way} the article)" if w == "disagrees" and way else "")
                                   for w, n in counts.items())
                         + f" of {sum(counts.values())} conditions")
        where = e(_device.label(self.device)) if self.device else ""
        small.append(f"{where}, scale {e(self.scale)}, {self.seconds:.1f} s")
        conds = ""
        if self.conditions:
            rows = "".join(
                f"<tr><td>{e(str(c.get('condition', '')))}</td><td>{e(_fmt_num(c.get('value')))}</td>"
                f"<td>{e(_fmt_ci(c.get('ci')))}</td><td>{e(str(c.get('reading', '')))}"
                f"{e(' (' + c['side'] + ')') if c.get('side') else ''}</td></tr>"
                for c in self.conditions if isinstance(c, dict))
            conds = (f"<p><b>Conditions</b></p><table><thead><tr><th>condition</th><th>value</th><th>95 % CI</th>"
                     f"<th>reading</th></tr></thead><tbody>{rows}</tbody></table>")
        box = ("max-width:100%;box-sizing:border-box;overflow-wrap:anywhere;"
               f"border-left:4px solid {colour};padding:4px 8px;line-height:1.4")
        inner = "max-width:100%;overflow-x:auto;font-size:90%"
        return (f"<div class='nogradlab-result' style='{box}'>"
                f"<div><b>{self.id}</b> <span style='color:{colour};font-weight:bold'>{self.verdict}</span>"
                f" &mdash; {e(self.reading)}</div>"
                f"<div class='nogradlab-result-meta' style='font-size:85%;color:#57606a'>{' &middot; '.join(small)}</div>"
                f"<details><summary style='cursor:pointer;font-size:85%'>rule, measured figures, evidence</summary>"
                f"<div style='{inner}'><p><i>{e(self.paraphrase)}</i></p><p><b>Rule.</b> {e(self.rule)}</p>"
                f"<p><b>Measured.</b> {e(self.summary)}</p>{conds}"
                f"<details><summary>measurements</summary>{_evidence_html(self.measurements)}</details>"
                f"</div></details></div>")


_fmt_num = _format.number


def _fmt_ci(ci) -> str:
    if not ci or not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return ""
    return _format.interval(ci[0], ci[1])


# --------------------------------------------------------------------------------------------
# numbers as a reader wants them


def format_ratio(point: float, lo: "float | None" = None, hi: "float | None" = None) -> str:
    """A speed ratio with its CI: ``1.15× [1.05×, 1.22×]``; a CI spanning 1 (both a slowdown and a
    speedup) reads ``no clear difference (noisy): 1.02× [0.95×, 1.08×]`` (:func:`~nogradlab.core.format.ratio_ci`)."""
    return _format.ratio_ci(point, lo, hi)


def format_saved(point: float, lo: "float | None" = None, hi: "float | None" = None) -> str:
    """A fraction saved with its CI: ``23% [18%, 27%]``; a CI spanning 0 reads ``no clear
    difference (noisy): ...`` (:func:`~nogradlab.core.format.percent_ci`)."""
    return _format.percent_ci(point, lo, hi)


def _fmt_value(key: str, v) -> str:
    """A scalar with units taken from its key: bytes in KiB/MiB/GiB, seconds in µs/ms/s, shares
    in %; everything else as is (never cut)."""
    k = key.lower()
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, float)):
        if k.endswith("bytes") or k.endswith("_bytes_per_request"):
            return _format.bytes_(v)
        if k.endswith("_ms"):
            return _time_text(v / 1e3)
        if k.endswith("_us"):
            return _time_text(v / 1e6)
        if k.endswith("_s") or k in ("seconds", "median", "iqr"):
            return _time_text(v)
        if isinstance(v, float) and any(w in k for w in ("saved", "share", "gain", "reduction")):
            return _format.percent(v, 1)
        if isinstance(v, float) and ("speedup" in k or "factor" in k or "ratio" in k):
            return _format.ratio(v)
        if isinstance(v, float):
            return f"{v:.4g}"
    return str(v)


_time_text = _format.seconds


def _evidence_html(ev, depth: int = 0) -> str:
    """Evidence as nested tables: scalars formatted with units, lists of flat rows as tables,
    deeper structures in their own collapsed block. Nothing is cut."""
    import html

    if not isinstance(ev, dict):
        return f"<code>{html.escape(json.dumps(ev, default=_jsonable))}</code>"
    rows = []
    for k, v in ev.items():
        if isinstance(v, dict) and depth < 3:
            cell = f"<details><summary>{len(v)} entries</summary>{_evidence_html(v, depth + 1)}</details>"
        elif isinstance(v, list) and v and all(isinstance(r, dict) for r in v) and depth < 3:
            cols = list(dict.fromkeys(c for r in v for c in r))
            head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
            body = "".join("<tr>" + "".join(
                f"<td>{html.escape(_fmt_value(c, r.get(c)) if not isinstance(r.get(c), (dict, list)) else json.dumps(_rounded(r.get(c)), default=_jsonable))}</td>"
                for c in cols) + "</tr>" for r in v)
            cell = (f"<details><summary>{len(v)} rows</summary><table><thead><tr>{head}</tr></thead>"
                    f"<tbody>{body}</tbody></table></details>")
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            cell = html.escape("[" + ", ".join(_fmt_num(x) for x in v) + "]")
        elif isinstance(v, (list, tuple, dict)):
            cell = f"<code>{html.escape(json.dumps(_rounded(v), default=_jsonable))}</code>"
        else:
            cell = html.escape(_fmt_value(k, v))
        rows.append(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th><td>{cell}</td></tr>")
    return f"<table>{''.join(rows)}</table>"


def _rounded(v):
    """``v`` with every float cut to 4 significant digits (for display only)."""
    if isinstance(v, float):
        return float(f"{v:.4g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_rounded(x) for x in v]
    return v


def _jsonable(o):
    if isinstance(o, (torch.device, torch.dtype)):
        return str(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, (set, tuple)):
        return list(o)
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
    except ImportError:
        pass
    return repr(o)


def _where_text(m: Measurements) -> str:
    return f"measured here: {m.label}"


def _scope(claim: Claim, m: Measurements, j: Judgement) -> dict:
    if j.scope:
        return dict(j.scope)
    if claim.basis == "estimate":
        return {"basis": "estimated",
                "text": f"estimated for a GPU at {claim.estimates_at} size by {estimate_validation(m.protocol)[0]}"}
    if claim.basis == "mixed" and m.on_gpu:  # the speed cells timed here; memory and batch cells are estimates
        return {"basis": "measured", "text": f"{_where_text(m)} (speed); memory and batch estimated for a GPU at "
                                             f"{claim.estimates_at} size by {estimate_validation(m.protocol)[0]}"}
    return {"basis": "measured", "text": _where_text(m)}


def _judge(claim: Claim, m: Measurements, ref: "Measurements | None" = None) -> Judgement:
    if claim.judge is None:
        raise NotImplementedError(f"claim {claim.id} has no judge registered")
    j = claim.judge(m, claim.rule, ref) if claim.basis == "mixed" else claim.judge(m, claim.rule)
    if not isinstance(j, Judgement):
        raise TypeError(f"the judge of {claim.id} returned {type(j).__name__}, not a Judgement")
    if j.verdict not in VERDICTS:
        raise RuntimeError(f"the judge of {claim.id} returned verdict {j.verdict!r}; allowed: {', '.join(VERDICTS)}")
    return j


def _needs(claim: Claim, m: Measurements, why) -> Judgement:
    return Judgement("needs re-measuring",
                     f"These measurements ({m.label}) lack what today's rule for {claim.id} reads "
                     f"({why}): measure it again with today's nogradlab.",
                     scope={"basis": "measured", "text": _where_text(m)})


#: set to 1 (as the tests do) to make a judge's own error on stored measurements raise
STRICT_ENV = "NOGRADLAB_STRICT_JUDGES"


class JudgeError(RuntimeError):
    """A judge failed on stored measurements that passed validation: a bug in the judge (raised in
    strict mode, :data:`STRICT_ENV`), or a column of the wrong shape (outside strict mode)."""


def strict() -> bool:
    """Whether a judge's own error on a stored column raises (:data:`STRICT_ENV` set to 1, as in the
    tests) rather than reading "needs re-measuring"."""
    import os

    return os.environ.get(STRICT_ENV, "") not in ("", "0")


def _judge_or_needs(claim: Claim, m: Measurements, ref: "Measurements | None" = None) -> Judgement:
    """The judge's answer on stored measurements: "needs re-measuring" when they lack what it reads
    or hold something that is no measurement (:class:`NeedsRemeasuring`, raised by the judge or by
    :class:`Measurements`' validation). Any other error is the judge's: it raises
    :class:`JudgeError` in strict mode (the tests); elsewhere the column, which today's judge cannot
    read, shows "needs re-measuring" with the error named, so that a forged or broken reference
    never crashes a run."""
    try:
        return _judge(claim, m, ref)
    except NeedsRemeasuring as e:
        return _needs(claim, m, f"{e.args[0] if e.args else e}")
    except Exception as e:  # noqa: BLE001 - a broken column must not crash a run; strict mode raises
        if strict():
            raise JudgeError(f"the judge of {claim.id} failed on {m.label}: {type(e).__name__}: {e}") from e
        return _needs(claim, m, f"today's judge cannot read this column: {type(e).__name__}: {e}")


# -------------------------------------------------------------------------------------------
# the reference GPU: the verdict of a GPU speed claim run elsewhere


_REFS: dict = {}

#: the reference columns inside an installed package (copied from the checkout's results/ into the wheel)
PACKAGED_RESULTS = Path(__file__).resolve().parents[1] / "_results"


def results_dir() -> "Path | None":
    """The reference runs' folder: ``results/`` of the source checkout this package lives in when there is
    one, else the copy an installed package carries (``nogradlab/_results``: every
    ``results/*/claims.json``, put there by the wheel build), else None."""
    d = Path(__file__).resolve().parents[2] / "results"
    if d.is_dir():
        return d
    return PACKAGED_RESULTS if PACKAGED_RESULTS.is_dir() else None


def _gpu_reference_docs() -> list:
    """``[(machine, doc)]`` for every ``results/cuda-*/claims.json`` (read once per process)."""
    if "docs" not in _REFS:
        docs = []
        root = results_dir()
        if root is not None:
            for p in sorted(root.glob("cuda-*/claims.json")):
                try:
                    if not p.is_file():
                        continue
                    doc = json.loads(p.read_text())
                    if isinstance(doc, dict) and isinstance(doc.get("meta"), dict) and \
                            isinstance(doc.get("claims"), list):
                        docs.append((p.parent.name, doc))
                except (OSError, ValueError, RecursionError):
                    continue
        _REFS["docs"] = docs
    return _REFS["docs"]


def _reference_candidates(claim_id: str) -> list:
    """``[(machine, meta, entry, conflicts)]``: every reference GPU column whose entry for the claim
    today's judge can read, best first: one that agrees with itself on what the claim reads before one
    that does not, today's measuring protocol before an older one, then the newest."""
    claim = get(claim_id)
    found = []
    for machine, doc in _gpu_reference_docs():
        meta = doc.get("meta") or {}
        for e in doc.get("claims", []):
            if not isinstance(e, dict) or e.get("id") != claim_id:
                continue
            m = _entry_measurements(e, meta)
            if not m.values:
                continue
            if _judge_or_needs(claim, m).verdict == "needs re-measuring":
                continue
            conflicts = [c for c in column_conflicts(doc) if claim_id in c["claims"]]
            found.append((machine, meta, e, conflicts))
    found.sort(key=lambda r: (bool(r[3]), column_age(r[1])["stale"], _neg(str(r[1].get("generated") or ""))))
    return found


def _neg(text: str) -> tuple:
    return tuple(-ord(ch) for ch in text)


def reference_entry(claim_id: str) -> "tuple | None":
    """``(machine, doc meta, entry)`` of the reference GPU column that decides the claim: the best one
    (:func:`_reference_candidates`) that does not contradict itself on what the claim reads, or None."""
    for machine, meta, e, conflicts in _reference_candidates(claim_id):
        if not conflicts:
            return machine, meta, e
    return None


def _entry_measurements(e: dict, meta: "dict | None" = None) -> Measurements:
    meta = meta or {}
    values = e.get("measurements", e.get("evidence")) or {}
    return Measurements(values, e.get("device") or meta.get("device") or {}, e.get("scale") or meta.get("scale", ""),
                        e.get("torch") or meta.get("torch", ""), protocol=protocol_of(meta))


def _stale_words(meta: dict) -> str:
    """A sentence for a verdict decided by a column of an older (or unrecorded) protocol; "" otherwise."""
    age = column_age(meta)
    if not age["stale"]:
        return ""
    when = f"on {age['measured_on']}" if age["measured_on"] else "on an unrecorded date"
    made = ", ".join(x for x in (f"nogradlab {age['commit']}" if age["commit"] else "",
                                 f"torch {age['torch']}" if age["torch"] else "") if x)
    p, now = age["protocol"], age["current_protocol"]
    how = (f"by a measuring protocol it did not record (today's: {now})" if p is None else
           f"by measuring protocol {p}, older than today's {now}" if p < now else
           f"by measuring protocol {p}, newer than this nogradlab's {now} (update nogradlab to judge it)")
    head = "Evidence of another protocol" if p is not None and p > now else "Older evidence"
    return (f"{head}: measured {when}{f' ({made})' if made else ''} {how}; measure it again with "
            f"today's protocol to confirm.")


def _aged(scope: dict, meta: dict) -> dict:
    """``scope`` with the column's age: ``age`` always, ``stale: true`` for an older protocol."""
    age = column_age(meta)
    scope = dict(scope, age={k: age[k] for k in ("protocol", "current_protocol", "measured_on", "commit",
                                                 "torch", "label")})
    if age["stale"]:
        scope["stale"] = True
    return scope


def _workload_of(condition) -> str:
    return str(condition).split("@")[0].split(" ")[0].split(",")[0]


def _timed_workload(row) -> "str | None":
    """The workload whose forward timing a condition row reads (``resnet50@16``, ``resnet50 speed ...``),
    None for a row that reads no timing (a table's ``resnet50 memory`` and ``resnet50 batch`` cells: estimates) or
    that does not count towards the verdict (``deciding: false``)."""
    if not isinstance(row, dict) or not row.get("deciding", True):
        return None
    name = str(row.get("condition"))
    w = _workload_of(name)
    rest = name[len(w):].strip()
    return w if rest == "" or rest.startswith("@") or rest.split(" ")[0] == "speed" else None


def _despite(claim: Claim, m: "Measurements | None", j: "Judgement | None", conflicts: list) -> tuple:
    """``(verdict or None, words)``: what a column that contradicts itself on ``conflicts`` still decides
    of the claim. A time-saving conflict makes the conditions of its workload(s) unresolved and the
    conditions are aggregated again (:func:`rules.verdict_of`); a conflicting cost (a claim that declares ``with_cost``) is read
    with each of its values. The verdict stands only when no reading in the conflict could change it (for
    conditions: when treating them as agreeing or as disagreeing gives the same word, or when the others
    already disagree, which the aggregate rule reads "does not hold" whatever unresolved ones beside them
    say); otherwise None (needs re-measuring)."""
    from nogradlab.claims.rules import verdict_of

    if j is None or m is None or j.verdict in ("needs re-measuring", "not testable"):
        return None, ""
    verdict, words = j.verdict, []
    seconds = [c for c in conflicts if c.get("workload") is None]
    saving = [c for c in conflicts if c.get("workload") is not None]
    for c in seconds:
        found = {}
        for value in c.get("values") or ():
            try:
                if claim.with_cost is None:
                    return None, ""
                v = claim.with_cost(m.values, value)
                jv = _judge(claim, Measurements(v, m.device, m.scale, m.torch, protocol=m.protocol))
            except Exception:  # noqa: BLE001 - a reading the judge cannot take decides nothing
                return None, ""
            found[value] = jv.verdict
        if len(set(found.values())) != 1 or verdict not in found.values():
            return None, (f"read with each of its values ({', '.join(_format.seconds(x) for x in found)}) "
                          f"the verdict changes ({', '.join(sorted(set(found.values())))})")
        words.append(f"read with either of its values ({', '.join(_format.seconds(x) for x in found)}) "
                     f"{claim.id} {verdict}: the conflict cannot change the verdict")
    if saving:
        rows = [r for r in j.conditions or [] if isinstance(r, dict) and r.get("reading") in
                ("agrees", "disagrees", "unresolved") and r.get("deciding", True)]
        if not rows or verdict_of(r["reading"] for r in rows) != verdict:
            return None, ""  # a verdict not made by the aggregate rule: no condition can be set apart
        doubt = {c["workload"] for c in saving}
        hit = [r for r in rows if _timed_workload(r) in doubt]
        if not hit:
            return verdict, ""
        rest = [r["reading"] for r in rows if r not in hit]
        unres = verdict_of(rest + ["unresolved"] * len(hit))
        agree = verdict_of(rest + ["agrees"] * len(hit))
        disagree = verdict_of(rest + ["disagrees"] * len(hit))
        names = ", ".join(str(r["condition"]) for r in hit)
        if agree != disagree and unres not in ("does not hold", "depends"):
            return None, (f"it cannot decide {names} (their timings are in doubt), and the verdict turns on them "
                          f"({agree} if they agreed, {disagree} if they disagreed)")
        verdict = unres
        words.append(f"it cannot decide {names} (their timings are in doubt), read unresolved: the other "
                     f"conditions decide, {verdict}")
    return verdict, "; ".join(words)


def _conflicted(claim: Claim, where: str, conflicts: list, local: "Judgement | None" = None,
                j: "Judgement | None" = None, m: "Measurements | None" = None) -> Judgement:
    """The verdict of a claim whose column contradicts itself on a quantity the claim reads: only what the
    conflict can change is withdrawn (:func:`_despite`); the claim is not decided ("needs re-measuring")
    when its verdict depends on a reading in the conflict. ``j`` is the column's own judgement of ``m``."""
    verdict, why = _despite(claim, m, j, conflicts)
    if verdict is not None:
        head = (f"{where} contradicts itself on what {claim.id} reads ({conflict_text(conflicts)}); "
                f"{why or 'no condition of the claim reads it'}. ")
        doubt = {c.get("workload") for c in conflicts if c.get("workload") is not None}
        # the judge's words below read every condition: a claim that can drop the conditions in doubt is judged
        # again without them; otherwise name those its words decide that the conflict leaves open
        touched = [str(r.get("condition")) for r in j.conditions or []
                   if _timed_workload(r) in doubt and r.get("reading") != "unresolved"]
        rest = None
        if touched and claim.without_timings is not None:
            try:
                rest = _judge(claim, Measurements(claim.without_timings(m.values, sorted(doubt)), m.device,
                                                  m.scale, m.torch, protocol=m.protocol))
            except Exception:  # noqa: BLE001 - the judge's full words, labelled, are shown instead
                rest = None
        if rest is not None and rest.verdict == verdict:
            body = (f"Without {', '.join(sorted(doubt))}'s timings (in doubt; their rows are shown unresolved): "
                    f"{rest.summary}")
        else:
            body = (f"Read as if its timings of {', '.join(sorted(doubt))} were sound (they are not: "
                    f"{', '.join(touched)} {'is' if len(touched) == 1 else 'are'} read unresolved above): {j.summary}"
                    if touched else j.summary)
        text = head + body + (f" On your machine: {local.summary}" if local is not None else "")
        rows = [dict(r, reading="unresolved", side=None, conflict=True)
                if _timed_workload(r) in doubt else r for r in j.conditions or []]
        return Judgement(verdict, text, j.reading, rows, j.scope)
    text = (f"{where} contradicts itself on what {claim.id} reads ({conflict_text(conflicts)}): one physical "
            f"quantity, several values{f', and {why}' if why else ''}, so it does not decide {claim.id}; a run "
            f"with today's protocol, which times each condition once for every claim, would.")
    if local is not None:
        text += f" On your machine: {local.summary}"
    doubt = {c.get("workload") for c in conflicts if c.get("workload") is not None}
    rows = [dict(r, reading="unresolved", side=None, conflict=True) if _timed_workload(r) in doubt else r
            for r in (j.conditions or [])] if j is not None and j.conditions else None
    return Judgement("needs re-measuring", text, local.reading if local is not None else "", rows)


def _final(claim: Claim, m: Measurements) -> tuple:
    """(judgement, scope, local) for measurements ``m``: a GPU speed claim measured off a GPU takes
    its verdict from the reference GPU's measurements, ``m``'s judgement kept as ``local``. A reference
    column of an older protocol is named as such (``scope.stale``); one that contradicts itself on what
    the claim reads does not decide it (``scope.conflicts``)."""
    j = _judge_or_needs(claim, m) if m.values else _needs(claim, m, "no measurements")
    if claim.basis not in ("gpu speed", "mixed") or m.on_gpu or not m.values:
        return j, _scope(claim, m, j), None
    candidates = _reference_candidates(claim.id)
    ref = reference_entry(claim.id)
    rejected = [c for c in candidates if c[3]] if ref is None else []
    if claim.basis == "mixed":  # the judge reads this run's estimates and the reference GPU's timings
        # a column that contradicts itself on a workload's timing is still read for the workloads the conflict
        # does not touch: its conditions of the workloads in doubt are read unresolved (_conflicted)
        used = ref if ref is not None else rejected[0][:3] if rejected else None
        rm = _entry_measurements(used[2], used[1]) if used else None
        jm = _judge_or_needs(claim, m, rm)
        if jm.verdict == "needs re-measuring":
            return jm, _scope(claim, m, j), None
        conflicts = rejected[0][3] if ref is None and rejected else []
        # every speed condition left unresolved because the column stored its gains without an interval
        # (an older protocol): the column is shown, it decides no speed cell
        speed_rows = [c for c in (jm.conditions or []) if " speed" in str(c.get("condition", ""))]
        uncounted = bool(speed_rows) and all("without an interval" in str(c.get("condition", ""))
                                             and c.get("reading") == "unresolved" for c in speed_rows)
        speed = (f"measured on a reference machine, {rm.label} ({used[0]}, {column_age(used[1])['label']}), "
                 + ("its gains stored without an interval: shown, not counted" if uncounted else
                    "judged by today's rule") + (f"; it contradicts itself on what {claim.id} reads, so its timings "
                                              f"of {', '.join(sorted({c['workload'] for c in conflicts if c.get('workload')}))} "
                                              f"are read unresolved" if conflicts else "")
                 if rm is not None else "no reference GPU measurement usable by today's rule")
        text = (f"memory and batch: estimated for a GPU at {claim.estimates_at} size by "
                f"{estimate_validation(m.protocol)[0]}; "
                f"speed: {speed}"
                f"; this machine's own timings ({m.label}) shown, not counted")
        scope = {"basis": "estimated + reference", "text": text, "machine": used[0] if used else None}
        if conflicts:
            scope["conflicts"] = conflicts
            jm = _conflicted(claim, f"The reference GPU column ({rm.label}, {used[0]})", conflicts, None, jm, m)
            if jm.verdict == "needs re-measuring":
                return jm, scope, None
        if used is not None:
            scope = _aged(scope, used[1])
            stale = _stale_words(used[1])
            if stale:
                jm = Judgement(jm.verdict, f"{jm.summary} Speed cells: {stale}", jm.reading, jm.conditions,
                               jm.scope)
        return jm, scope, None
    local = {"verdict": j.verdict, "summary": j.summary, "reading": j.reading, "where": m.label}
    if ref is None and rejected:
        machine, meta, e, conflicts = rejected[0]
        rm = _entry_measurements(e, meta)
        own = _judge_or_needs(claim, rm)
        jr = _conflicted(claim, f"The reference GPU column ({rm.label}, {machine})", conflicts, None, own, rm)
        decided = jr.verdict != "needs re-measuring"
        stale = _stale_words(meta)
        head = "On the reference GPU: " if decided else ""
        jr = Judgement(jr.verdict, f"{head}{jr.summary}" + (f" {stale}" if stale else "")
                       + f" On your machine: {j.summary}",
                       (f"On the reference GPU: {jr.reading}" if jr.reading else "") if decided else j.reading,
                       jr.conditions)
        scope = _aged({"basis": "reference", "machine": machine, "conflicts": conflicts,
                       "text": (f"measured on a reference machine: {rm.label} ({machine}, {column_age(meta)['label']}), "
                                f"judged by today's rule; it contradicts itself on what {claim.id} reads, which "
                                f"cannot change this verdict" if decided else
                                f"not decided: the reference machine's column ({rm.label}, {machine}, "
                                f"{column_age(meta)['label']}) contradicts itself on what {claim.id} reads")}, meta)
        return jr, scope, local
    if ref is None:
        jr = Judgement("needs re-measuring",
                       f"{claim.id} is judged on a GPU (its rule says why), and no reference GPU measurement in results/ "
                       f"has what today's rule needs: a GPU run would decide it. On your machine: "
                       f"{j.summary}", j.reading)
        return jr, {"basis": "reference", "text": "no reference GPU measurement usable by today's rule"}, local
    machine, meta, e = ref
    rm = _entry_measurements(e, meta)
    jr = _judge_or_needs(claim, rm)  # a broken reference column reads "needs re-measuring", never crashes
    age = column_age(meta)
    text = (f"measured on a reference machine: {rm.label} ({machine}, {age['label']}), judged by today's rule")
    stale = _stale_words(meta)
    summary = f"On the reference GPU: {jr.summary}" + (f" {stale}" if stale else "") + f" On your machine: {j.summary}"
    jr = Judgement(jr.verdict, summary, f"On the reference GPU: {jr.reading}" if jr.reading else "",
                   jr.conditions)
    return jr, _aged({"basis": "reference", "text": text, "machine": machine}, meta), local


def _summary_with_scope(claim: Claim, summary: str, scope: dict) -> str:
    if claim.kind in ("semantic", "historical") or not scope.get("text"):
        return summary
    return f"{summary} [Evidence: {scope['text']}.]"


def check(claim_id: str, device="auto", scale="auto", seed: int = 0, **params) -> Result:
    """Run one claim's check now, judge it by its rule, and return the result (also appended to the
    run's ledger when a run is collecting them). ``params`` are the check's knobs
    (:data:`nogradlab.claims.params.KNOBS`), checked before any work: an unknown key or a bad value
    raises ValueError naming the allowed ones."""
    claim = get(claim_id)
    knobs = Params.of(params)  # an unknown key or a bad value fails here, naming the allowed ones
    dev = _device.resolve(device)
    scale = _workloads.resolve_scale(scale, dev)
    seed = _device.check_seed(seed)
    _pipeline.ledger_path()  # a bad NOGRADLAB_LEDGER fails here, before the check runs
    if claim.measure is None:
        raise NotImplementedError(f"claim {claim_id} has no check registered")
    _runcache.attach_run_cache()
    torch.manual_seed(seed)
    random.seed(seed)
    grad = torch.is_grad_enabled()
    t0 = time.perf_counter()
    # What is alive before the check is frozen (batch.frozen_gc) for it: the release's full collection
    # then walks only what the check made (0.25 s a claim otherwise, with torch's objects and the
    # estimates' caches alive: a sixth of a tiny CPU `claims` run).
    with frozen_gc():
        try:
            values = claim.measure(Context(dev, scale, seed, knobs))
        finally:
            torch.set_grad_enabled(grad)
            _memory.release()  # the check's models and tensors are gone: hand their pages back
    if not isinstance(values, dict):
        raise TypeError(f"the check of {claim_id} returned {type(values).__name__}, not a dict of measurements")
    info = _device.describe(dev)
    m = Measurements(values, info, scale, torch.__version__)
    # a judge that cannot read fresh measurements is a bug: let it raise
    j = _judge(claim, m)
    if claim.basis in ("gpu speed", "mixed") and not m.on_gpu:
        j, scope, local = _final(claim, m)
    else:
        scope, local = _scope(claim, m, j), None
    result = Result(id=claim.id, verdict=j.verdict, summary=_summary_with_scope(claim, j.summary, scope),
                    measurements=m.values, figure=claim.figure, section=claim.section, kind=claim.kind,
                    paraphrase=claim.paraphrase, notebook=_pipeline.notebook_name(), device=info,
                    torch=torch.__version__, scale=scale, seconds=round(time.perf_counter() - t0, 3),
                    rule=claim.rule.text, reading_text=j.reading, scope=scope, conditions=j.conditions,
                    local=local)
    _pipeline.record(result.to_dict())
    return result


def judge_entry(entry: dict, meta: "dict | None" = None, conflicts=()) -> dict:
    """A stored claims.json entry judged again by today's rule: verdict, summary, reading, scope,
    conditions and rule replaced (the stored ones kept as ``stored_verdict``); an entry without
    measurements (a claim no check reached) is returned as it is.

    The paraphrase and the article's figure are replaced by today's declaration's as well.

    ``meta`` is its column's: a column of an older measuring protocol says so in the summary and in
    ``scope.stale``/``scope.age``. ``conflicts`` are its column's (:func:`column_conflicts`): a claim
    that reads a quantity the column contradicts itself on is not decided by it ("needs re-measuring",
    ``scope.conflicts``)."""
    e = dict(entry)
    if e.get("verdict") is None and not (e.get("measurements") or e.get("evidence")):
        return e
    try:
        claim = get(e["id"])
    except ValueError:
        return e
    m = _entry_measurements(e, meta)
    j, scope, local = _final(claim, m)
    if scope.get("text", "").startswith("measured here: "):  # a stored column: here is that machine
        scope = dict(scope, text="measured on " + scope["text"][len("measured here: "):])
    j.summary = j.summary.replace(f"[Evidence: measured here: {m.label}.]", f"[Evidence: measured on {m.label}.]")
    if meta is not None and scope.get("basis") in ("measured", "estimated", "cited"):  # decided by this column itself
        mine = [c for c in conflicts or () if claim.id in c.get("claims", ())]
        if mine and j.verdict != "needs re-measuring":
            j = _conflicted(claim, f"This column ({m.label})", mine, None, j, m)
            scope = dict(scope, conflicts=mine)
        scope = _aged(scope, meta)
        stale = _stale_words(meta)
        if stale:  # also when the column contradicts itself and still decides: it is as old either way
            j.summary = f"{j.summary} {stale}"
    elif meta is not None and scope.get("basis") == "reference" and local is not None:
        # decided by the reference GPU column (its age said before "On your machine"); this column's own
        # timings, shown and not counted, say their own age after them
        age = column_age(meta)
        local = dict(local, age={k: age[k] for k in ("protocol", "current_protocol", "measured_on", "commit",
                                                     "torch", "label")})
        stale = _stale_words(meta)
        if stale and "On your machine: " in j.summary:
            j.summary = f"{j.summary} Your machine's timings (shown, not counted) were {stale.split(': ', 1)[1]}"
    elif meta is not None and scope.get("basis") == "estimated + reference":
        # the memory and batch cells are this column's own estimates (its age: scope.age); the speed cells
        # the reference GPU column's (its age, when one was used: scope.speed_age)
        scope = dict(scope)
        if "age" in scope:
            scope["speed_age"] = scope.pop("age")
        speed_stale = scope.pop("stale", False)
        scope = _aged(scope, meta)
        if speed_stale:
            scope["stale"] = True
        stale = _stale_words(meta)
        if stale:
            j.summary = f"{j.summary} Memory and batch cells: {stale}"
    e.setdefault("stored_verdict", entry.get("verdict"))
    # what the claim says (its paraphrase, the article's figure as it gives it) is today's declaration too
    e.update(verdict=j.verdict, summary=_summary_with_scope(claim, j.summary, scope), reading=j.reading,
             scope=scope, conditions=j.conditions, local=local, rule=claim.rule.text, measurements=m.values,
             paraphrase=claim.paraphrase, figure=claim.figure)
    e.pop("evidence", None)
    return e


def ledger_path() -> "str | None":
    """The run's ledger file (:func:`nogradlab.pipeline.ledger_path`)."""
    return _pipeline.ledger_path()


def rule(claim_id: str) -> str:
    """The verdict rule of a claim, one sentence."""
    return get(claim_id).rule.text


def new_run() -> None:
    """Start a new run: forget the timings shared between checks (:data:`nogradlab.claims.runcache.RUN`)."""
    _runcache.clear_cache()


def check_all(claim_ids=None, device="auto", scale="auto", seed: int = 0, progress: bool = False) -> list:
    """Run several checks (all by default) as one run (shared timings start empty) and return
    their results in id order."""
    chosen = list(claim_ids) if claim_ids is not None else ids()
    for c in chosen:
        get(c)
    _device.resolve(device)
    new_run()
    it = chosen
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(chosen, desc="claims", unit="claim")
    return [check(c, device=device, scale=scale, seed=seed) for c in it]


def results_table(results):
    """A pandas DataFrame of results: id, section, verdict, article's figure, summary, rule, evidence."""
    import pandas as pd

    return pd.DataFrame([{"id": r.id, "section": r.section, "verdict": r.verdict, "article": r.figure or "",
                          "measured": r.summary, "rule": r.rule, "evidence": (r.scope or {}).get("text", "")}
                         for r in results])
