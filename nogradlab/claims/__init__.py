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

import functools  # noqa: F401 (kept on the face: nogradlab.claims.X of before the split)
import importlib
import json  # noqa: F401
import random
import time
from collections.abc import Mapping  # noqa: F401
from dataclasses import asdict, dataclass, field  # noqa: F401
from pathlib import Path  # noqa: F401

import torch

from nogradlab.core import device as _device
from nogradlab.core import format as _format  # noqa: F401
from nogradlab.core import memory as _memory
from nogradlab.core import pipeline as _pipeline
from nogradlab.core import settings as _settings
from nogradlab.core.session import frozen_gc
from nogradlab.core.settings import Settings
from nogradlab.claims import evidence as _evidence_module  # noqa: F401
from nogradlab.claims import rules as _rules_module  # noqa: F401
from nogradlab.claims import runcache as _runcache
from nogradlab.claims.evidence import PROTOCOL, column_age, column_conflicts, conflict_text, protocol_of  # noqa: F401
from nogradlab.claims.params import Params
from nogradlab.claims.rules import Band, Rule  # noqa: F401
# the rooms: declarations and the registry, measurements and results, verdicts (the face re-exports their names)
from nogradlab.claims import ledger as _ledger
from nogradlab.claims.ledger import (  # noqa: F401
    _CLAIMS, BASES, KINDS, NOTEBOOKS, VERDICTS, Claim, Context, NeedsRemeasuring, _in_order, _load, _Notebooks,
    _shared_readings_of, all_claims, claim_figures, declare, figure, get, ids, searched_where)
from nogradlab.claims.result import (  # noqa: F401
    _DESCRIPTIVE, _FLAG_NAMES, _NON_NEGATIVE_NAMES, _NON_NEGATIVE_SUFFIXES, _NUMBER_FRAGMENTS, MAX_INT, Judgement,
    Measurements, Result, _evidence_html, _flag_name, _fmt_ci, _fmt_num, _fmt_value, _jsonable, _non_negative,
    _number_name, _rounded, _Stored, _stored, _time_text, format_ratio, format_saved, not_a_measurement, number)
from nogradlab.claims.verdict import (  # noqa: F401
    _REFS, ESTIMATE_VALIDATION, ESTIMATE_VALIDATIONS, PACKAGED_RESULTS, STRICT_ENV, JudgeError, _aged, _conflicted,
    _despite, _entry_measurements, _final, _gpu_reference_docs, _judge, _judge_or_needs, _needs, _neg,
    _reference_candidates, _scope, _stale_words, _summary_with_scope, _timed_workload, _where_text, _workload_of,
    estimate_validation, judge_entry, reference_entry, results_dir, strict)

__all__ = ["VERDICTS", "KINDS", "BASES", "Claim", "Result", "Context", "Measurements", "Judgement",
           "NeedsRemeasuring", "JudgeError", "declare", "ids", "get", "all_claims", "check", "check_all", "judge_entry",
           "NOTEBOOKS", "results_table", "rule", "new_run", "Params", "format_ratio", "format_saved", "ledger_path",
           "Band", "Rule", "reference_entry", "results_dir", "PROTOCOL", "column_age", "column_conflicts",
           "ESTIMATE_VALIDATION", "ESTIMATE_VALIDATIONS", "estimate_validation"]
#: the check modules, one per notebook, in the article's order
MODULES = ("nb01_what_no_grad_does", "nb02_inside_the_engine", "nb03_scoping_no_grad", "nb04_eval_vs_no_grad",
           "nb05_memory_and_speed_by_workload", "nb06_decorators_contexts_and_autocast",
           "nb07_production_serving", "nb08_faq", "nb09_beyond_no_grad")


def _import_checks() -> None:
    """Import every check module: each declares its claims into the ledger (only the face loads them)."""
    for mod in MODULES:
        importlib.import_module(f"{__name__}.{mod}")


_ledger.use_loader(_import_checks)


__getattr__, __dir__ = _ledger._LOAD.face_names(__name__)  # _LOADED: the room's flag


def check(claim_id: str, device="auto", scale="auto", seed: int = 0, *, settings: "Settings | None" = None,
          **params) -> Result:
    """Run one claim's check now, judge it by its rule, and return the result (also appended to the
    run's ledger when a run is collecting them). ``params`` are the check's knobs
    (:data:`nogradlab.claims.params.KNOBS`), checked before any work: an unknown key or a bad value
    raises ValueError naming the allowed ones.

    ``device``, ``scale`` and ``seed`` are resolved once, here (:func:`nogradlab.core.settings.given`);
    a caller that has resolved them already passes its ``settings`` instead and leaves them out."""
    claim = get(claim_id)
    knobs = Params.of(params)  # an unknown key or a bad value fails here, naming the allowed ones
    settings = _settings.given(settings, device, scale, seed)
    dev, scale, seed = settings.device, settings.scale, settings.seed
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
                    local=local, qualifier=j.qualifier)
    _pipeline.record(result.to_dict())
    return result

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
    settings = _settings.of(device, scale, seed)  # once for every check
    new_run()
    it = chosen
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(chosen, desc="claims", unit="claim")
    return [check(c, settings=settings) for c in it]



def results_table(results):
    """A pandas DataFrame of results: id, section, verdict, article's figure, summary, rule, evidence."""
    import pandas as pd

    return pd.DataFrame([{"id": r.id, "section": r.section, "verdict": r.verdict, "article": r.figure or "",
                          "measured": r.summary, "rule": r.rule, "evidence": (r.scope or {}).get("text", "")}
                         for r in results])
