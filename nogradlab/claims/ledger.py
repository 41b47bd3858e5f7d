"""The claims' declarations: :class:`Claim`, :func:`declare`, the registry (:func:`ids`, :func:`get`,
:func:`all_claims`, :data:`NOTEBOOKS`) and the :class:`Context` a check gets.

The registry (``_CLAIMS``) lives here and only here; the check modules (``nb01_...`` to ``nb09_...``)
declare their claims into it when the face, :mod:`nogradlab.claims`, loads them (:func:`use_loader`).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from nogradlab.core import device as _device
from nogradlab.core import workloads as _workloads
from nogradlab.core.loader import Loader
from nogradlab.claims.params import Params
from nogradlab.claims.rules import Rule
from nogradlab.claims import evidence as _evidence_module
from nogradlab.claims import rules as _rules_module

VERDICTS = ("holds", "does not hold", "depends", "inconclusive", "not testable", "needs re-measuring")
KINDS = ("semantic", "numeric", "semantic+numeric", "historical", "unsourced statistic",
         "unsourced statistic, testable mechanism")
#: the evidence a verdict stands on: "here" (this run's measurement, any device), "estimate" (a
#: memory or batch figure the article gives for GPUs: the full-size virtual-CUDA estimate, made
#: here), "gpu speed" (a speed figure the article gives for GPUs: a GPU's measurement, this run's on
#: a GPU, else the reference GPU's in results/), "mixed" (the judge reads both: the article's table)
BASES = ("here", "estimate", "gpu speed", "mixed")


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
    * ``case_quantity``: ``(what a case's figure is, its unit)`` for a claim the display shows as a table of
      cases (no band to draw: C04's batch ratios), so that a figure says what it measures;
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
    case_quantity: "tuple | None" = None  # (what a case's figure is, its unit): a claim shown as a table of cases
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


def declare(id: str, *, section: str, paraphrase: str, kind: str, notebook: str, rule: Rule,
            figure: "str | None" = None, basis: str = "here", key_chart: "tuple | None" = None,
            chart_rank: int = 99, tiny_cpu_threads: "int | None" = None, estimates_at: "str | None" = None,
            speedup_edges=None, stop_edges=None, shared_readings=None, with_cost=None,
            without_timings=None, case_quantity: "tuple | None" = None) -> Claim:
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
              estimates_at, case_quantity, speedup_edges, stop_edges, shared_readings, with_cost, without_timings)
    _CLAIMS[id] = c
    return c


#: imports every check module (each declares its claims), through the import the face, ``nogradlab.claims``,
#: gives when it is imported (:func:`use_loader`): only the face loads them, this module imports none of them
_LOAD = Loader("nogradlab.claims")
use_loader = _LOAD.use


def _load() -> None:
    """Import every check module (each declares its claims), once (through the face's loader)."""
    if not _LOAD(retry=True):
        return
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
