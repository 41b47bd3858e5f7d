"""The claim ledger: every claim of the article (C01-C30) and what it leaves out (X01-X05),
each with a check that measures or asserts it in this run and returns a :class:`Result`.

    from nogradlab import claims
    r = claims.check("C06", device="cpu", scale="tiny")
    r.verdict, r.summary, r.evidence

Every check's verdict rule is data (:mod:`nogradlab.claims.rules`): each result carries it as
``rule``, one human sentence. Timings are measured once per run and condition and shared between
checks (:data:`nogradlab.timing.RUN`; :func:`new_run` forgets them).

Verdicts are computed from the run, never stored: ``holds``, ``does not hold``, ``depends`` (true
under some measured conditions, not others: the summary says which) and ``not testable`` (an
unsourced statistic; where the mechanism behind it can be tested, the evidence holds that test).

When the environment variable ``NOGRADLAB_LEDGER`` names a file, every result is appended to it
as one JSON line (with ``NOGRADLAB_NOTEBOOK`` as the notebook that checked it): that is how
``python -m nogradlab run`` collects the notebooks' verdicts into ``claims.json``.
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .. import device as _device
from .. import memory as _memory
from .. import workloads as _workloads

__all__ = ["VERDICTS", "KINDS", "Claim", "Result", "Context", "ids", "get", "all_claims", "check",
           "check_all", "claim_check", "NOTEBOOKS", "results_table", "band_verdict", "rule", "new_run",
           "format_ratio", "format_saved", "ledger_path"]

VERDICTS = ("holds", "does not hold", "depends", "not testable")
KINDS = ("semantic", "numeric", "semantic+numeric", "historical", "unsourced statistic",
         "unsourced statistic, testable mechanism")

# notebook stem -> the claims it checks (each claim in exactly one notebook)
NOTEBOOKS = {
    "01_what_no_grad_does": ["C01", "C02", "C03", "C04", "C05", "C06"],
    "02_inside_the_engine": ["C07", "C08", "C09", "C10", "C11"],
    "03_scoping_no_grad": ["C12", "C13", "X03", "X04"],
    "04_eval_vs_no_grad": ["C14", "C15", "C16", "C17"],
    "05_memory_and_speed_by_workload": ["C18", "C19", "C20", "C21"],
    "06_decorators_contexts_and_autocast": ["C22", "C23", "C24", "C28"],
    "07_production_serving": ["C25", "C26", "X02"],
    "08_faq": ["C27", "C29", "C30"],
    "09_beyond_no_grad": ["X01", "X05"],
}


@dataclass(frozen=True)
class Claim:
    id: str
    section: str
    paraphrase: str  # our words, not the article's
    figure: "str | None"  # the article's figure, as it gives it
    kind: str
    notebook: str = ""


# id, section, paraphrase, the article's figure, kind
_TABLE = [
    ("C01", "1", "no_grad switches gradient tracking off for everything run inside the block", None, "semantic"),
    ("C02", "1", "inside no_grad no autograd graph is built or stored", None, "semantic"),
    ("C03", "1", "wrapping inference in no_grad cuts its runtime", "20-40 %", "numeric"),
    ("C04", "1", "no_grad lets larger batches fit in memory", None, "semantic+numeric"),
    ("C05", "1", "every tensor created or modified inside no_grad has requires_grad=False", None, "semantic"),
    ("C06", "1", "a tracked tensor multiplied by 3 inside no_grad gives requires_grad False and grad_fn None",
     None, "semantic"),
    ("C07", "2", "operators still run under no_grad but record nothing for backward", None, "semantic"),
    ("C08", "2", "what backward keeps is the largest share of GPU memory in training", None, "numeric"),
    ("C09", "2", "on a 12 GB GPU, a ResNet-50 evaluated under no_grad takes a batch about 2.5 times the "
     "training batch", "~2.5x", "numeric"),
    ("C10", "2", "no_grad became the recommended idiom around PyTorch 0.4, replacing manual workarounds",
     "0.4", "historical"),
    ("C11", "2", "more than 60 % of tutorials and framework internals use no_grad by default", ">60 %",
     "unsourced statistic"),
    ("C12", "3", "nesting no_grad redundantly is an anti-pattern", None, "semantic+numeric"),
    ("C13", "3", "one no_grad around the whole validation loop gives about 30 % more throughput than no_grad "
     "around each call", "~30 %", "unsourced statistic, testable mechanism"),
    ("C14", "3/4", "model.eval() and no_grad are independent of each other", None, "semantic"),
    ("C15", "4", "no_grad never changes a model's predictions", None, "semantic"),
    ("C16", "4", "eval() alone cut metric variability by about 7 %", "~7 %",
     "unsourced statistic, testable mechanism"),
    ("C17", "4", "adding no_grad to eval cut validation time by about 35 % with the same accuracy", "~35 %",
     "numeric"),
    ("C18", "5", "for feed-forward networks no_grad cuts peak memory by 20-40 %", "20-40 %", "numeric"),
    ("C19", "5", "for transformers the saving per token is smaller but grows with sequence length", None,
     "numeric"),
    ("C20", "5", "the table: memory saved / speed gained / batch factor per model class, training vs "
     "eval+no_grad on a 16 GB GPU", "ResNet-50 30-35 % / 25-30 % / 1.8-2.2x; Transformer-base 25-30 % / "
     "20-25 % / 1.6-1.9x; U-Net 35-40 % / 30-35 % / 2.0-2.3x; two-layer MLP 15-20 % / 10-15 % / 1.2-1.4x",
     "numeric"),
    ("C21", "5", "at long sequences the memory saving can exceed 40 %", ">40 %", "numeric"),
    ("C22", "6", "@torch.no_grad() as a decorator covers the whole function", None, "semantic"),
    ("C23", "6", "profiling shows about 28 % less time in autograd-related operators, plus about 10 % from "
     "larger batches", "28 % / 10 %", "numeric"),
    ("C24", "6", "the torch.cuda.amp.autocast() pattern nested inside no_grad", None, "semantic"),
    ("C25", "7", "87 % of serving projects wrap endpoints in no_grad; those without are 2.1x likelier to hit "
     "memory limits", "87 % / 2.1x", "unsourced statistic, testable mechanism"),
    ("C26", "7", "apply no_grad at the highest level, e.g. around the whole request handler", None, "semantic"),
    ("C27", "FAQ", "do not use no_grad where backward is needed, e.g. gradient penalties or adversarial "
     "attacks", None, "semantic"),
    ("C28", "FAQ", "no_grad and autocast stack without interfering", None, "semantic"),
    ("C29", "FAQ", "no_grad removes activation storage but not parameters or optimizer state", None,
     "semantic+numeric"),
    ("C30", "FAQ", "factory functions called with requires_grad=True inside no_grad still create tracking "
     "leaves", None, "semantic"),
    ("X01", "beyond", "torch.inference_mode skips more than no_grad (version counters, view tracking), "
     "and its tensors cannot be saved for backward later", None, "semantic+numeric"),
    ("X02", "beyond", "grad mode is thread-local: thread pools and worker threads do not inherit it", None,
     "semantic"),
    ("X03", "beyond", "accumulating losses as tensors (no .item()) keeps every graph alive", None,
     "semantic+numeric"),
    ("X04", "beyond", "torch.set_grad_enabled(flag) and torch.enable_grad() for conditional and nested use",
     None, "semantic"),
    ("X05", "beyond", "the bigger inference levers beside no_grad: autocast, channels_last, torch.compile",
     None, "numeric"),
]

_NB_OF = {cid: nb for nb, cs in NOTEBOOKS.items() for cid in cs}
_CLAIMS = {row[0]: Claim(*row, notebook=_NB_OF.get(row[0], "")) for row in _TABLE}
_CHECKS: dict = {}


def ids() -> list:
    return list(_CLAIMS)


def get(claim_id: str) -> Claim:
    try:
        return _CLAIMS[claim_id]
    except KeyError:
        raise ValueError(f"unknown claim id {claim_id!r}; allowed: {', '.join(_CLAIMS)}") from None


def all_claims() -> list:
    return list(_CLAIMS.values())


@dataclass
class Context:
    """What a check gets: the resolved device, the scale, a seed, and notebook parameters."""

    device: torch.device
    scale: str
    seed: int = 0
    params: dict = field(default_factory=dict)

    @property
    def info(self) -> dict:
        return _device.describe(self.device)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    @property
    def reference(self) -> bool:
        """``params['reference']``: the reference run (benchmarks/gpu_reference.py), which measures
        what a learner's notebook leaves out to stay within its minute on a GPU (the compute-bound
        batch, the levers there, both C04 budgets by real OOM searches, torch.compile, the longer
        sequence sweep). Only GPU runs differ; on a CPU the scale decides."""
        return bool(self.params.get("reference", False))


@dataclass
class Result:
    id: str
    verdict: str
    summary: str  # one or two sentences with the measured figures
    evidence: dict  # JSON-able measurements
    figure: "str | None" = None
    section: str = ""
    kind: str = ""
    paraphrase: str = ""
    notebook: str = ""
    device: dict = field(default_factory=dict)
    torch: str = ""
    scale: str = ""
    seconds: float = 0.0
    rule: str = ""  # the verdict rule, one sentence (nogradlab.claims.rules)

    def to_dict(self) -> dict:
        return json.loads(json.dumps(asdict(self), default=_jsonable))

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
        where = _device.label(self.device) if self.device else ""
        lines.append(f"  ({where}, scale {self.scale}; evidence: .evidence)")
        return "\n".join(lines)

    @property
    def reading(self) -> str:
        """One line that follows from the printed numbers: the check's own (``evidence['reading']``)
        or the verdict put in words."""
        r = self.evidence.get("reading") if isinstance(self.evidence, dict) else None
        if r:
            return r
        fig = f" the article's {self.figure}" if self.figure else " the article's statement"
        return {"holds": f"The measurements agree with{fig}.",
                "does not hold": f"The measurements disagree with{fig}.",
                "depends": f"The measurements agree with{fig} under some conditions only (see below).",
                "not testable": "The statistic has no source to test; the mechanism behind it is measured."
                }.get(self.verdict, self.verdict)

    def _repr_html_(self) -> str:
        import html

        colour = {"holds": "#1a7f37", "does not hold": "#cf222e", "depends": "#9a6700",
                  "not testable": "#57606a"}.get(self.verdict, "#000")
        fig = f"<br><i>article's figure:</i> {html.escape(self.figure)}" if self.figure else ""
        rule = (f"<br><i>rule:</i> {html.escape(self.rule)}" if self.rule else "")
        where = html.escape(_device.label(self.device)) if self.device else ""
        return (f"<div class='nogradlab-result' style='border-left:4px solid {colour};padding:4px 8px'>"
                f"<b>{self.id}</b> <span style='color:{colour};font-weight:bold'>{self.verdict}</span>"
                f" &mdash; {html.escape(self.paraphrase)}{fig}"
                f"<br><b>{html.escape(self.reading)}</b>{rule}"
                f"<br><i>measured:</i> {html.escape(self.summary)}"
                f"<br><small>{where}, scale {html.escape(self.scale)}, {self.seconds:.1f} s</small>"
                f"<details><summary>evidence</summary>{_evidence_html(self.evidence)}</details></div>")


# --------------------------------------------------------------------------------------------
# numbers as a reader wants them


def format_ratio(point: float, lo: "float | None" = None, hi: "float | None" = None) -> str:
    """A speed ratio with its CI: ``1.15x [1.05, 1.22]``; a CI spanning 1 (both a slowdown and a
    speedup) reads ``no clear difference (noisy): 1.02x [0.95, 1.08]``."""
    if lo is None or hi is None:
        return f"{point:.2f}\u00d7"
    text = f"{point:.2f}\u00d7 [{lo:.2f}, {hi:.2f}]"
    return f"no clear difference (noisy): {text}" if lo < 1 < hi else text


def format_saved(point: float, lo: "float | None" = None, hi: "float | None" = None) -> str:
    """A fraction saved with its CI: ``23 % [18, 27]``; a CI spanning 0 reads ``no clear
    difference (noisy): ...``."""
    if lo is None or hi is None:
        return f"{point:.0%}"
    text = f"{point * 100:.0f} % [{lo * 100:.0f}, {hi * 100:.0f}]"
    return f"no clear difference (noisy): {text}" if lo < 0 < hi else text


def _fmt_value(key: str, v) -> str:
    """A scalar with units taken from its key: bytes in KiB/MiB/GiB, seconds in µs/ms/s, shares
    in %; everything else as is (never cut)."""
    k = key.lower()
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, float)):
        if k.endswith("bytes") or k.endswith("_bytes_per_request"):
            return _memory.format_bytes(v)
        if k.endswith("_ms"):
            return _time_text(v / 1e3)
        if k.endswith("_us"):
            return _time_text(v / 1e6)
        if k.endswith("_s") or k in ("seconds", "median", "iqr"):
            return _time_text(v)
        if isinstance(v, float) and any(w in k for w in ("saved", "share", "gain", "reduction")):
            return f"{v:.1%}"
        if isinstance(v, float) and ("speedup" in k or "factor" in k or "ratio" in k):
            return f"{v:.3g}\u00d7"
        if isinstance(v, float):
            return f"{v:.4g}"
    return str(v)


def _time_text(seconds: float) -> str:
    from ..timing import format_seconds

    return format_seconds(seconds).replace(" us", " \u00b5s")


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
                f"<td>{html.escape(_fmt_value(c, r.get(c)) if not isinstance(r.get(c), (dict, list)) else json.dumps(r.get(c), default=_jsonable))}</td>"
                for c in cols) + "</tr>" for r in v)
            cell = (f"<details><summary>{len(v)} rows</summary><table><thead><tr>{head}</tr></thead>"
                    f"<tbody>{body}</tbody></table></details>")
        elif isinstance(v, (list, tuple, dict)):
            cell = f"<code>{html.escape(json.dumps(v, default=_jsonable))}</code>"
        else:
            cell = html.escape(_fmt_value(k, v))
        rows.append(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th><td>{cell}</td></tr>")
    return f"<table>{''.join(rows)}</table>"


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


def claim_check(claim_id: str):
    """Decorator registering ``fn(ctx) -> (verdict, summary, evidence)`` as the check of a claim."""
    get(claim_id)

    def deco(fn):
        if claim_id in _CHECKS:
            raise RuntimeError(f"claim {claim_id} has two checks")
        _CHECKS[claim_id] = fn
        return fn

    return deco


def _load_checks():
    import importlib

    for mod in ("semantics", "numbers", "capacity"):
        try:
            importlib.import_module(f"{__name__}.{mod}")  # registers its checks
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{mod}":
                raise


def check(claim_id: str, device="auto", scale="auto", seed: int = 0, **params) -> Result:
    """Run one claim's check now and return its result (also appended to the ledger, if set)."""
    claim = get(claim_id)
    dev = _device.resolve(device)
    scale = _workloads.resolve_scale(scale, dev)
    seed = _device.check_seed(seed)
    ledger_path()  # a bad NOGRADLAB_LEDGER fails here, before the check runs
    _load_checks()
    fn = _CHECKS.get(claim_id)
    if fn is None:
        raise NotImplementedError(f"claim {claim_id} has no check registered")
    torch.manual_seed(seed)
    random.seed(seed)
    grad = torch.is_grad_enabled()
    t0 = time.perf_counter()
    try:
        verdict, summary, evidence = fn(Context(dev, scale, seed, dict(params)))
    finally:
        torch.set_grad_enabled(grad)
        _memory.release()  # the check's models and tensors are gone: hand their pages back
    if verdict not in VERDICTS:
        raise RuntimeError(f"check {claim_id} returned verdict {verdict!r}; allowed: {', '.join(VERDICTS)}")
    result = Result(id=claim.id, verdict=verdict, summary=summary, evidence=evidence, figure=claim.figure,
                    section=claim.section, kind=claim.kind, paraphrase=claim.paraphrase,
                    notebook=os.environ.get("NOGRADLAB_NOTEBOOK", ""), device=_device.describe(dev),
                    torch=torch.__version__, scale=scale, seconds=round(time.perf_counter() - t0, 3),
                    rule=rule(claim.id))
    _append_to_ledger(result)
    return result


def ledger_path() -> "str | None":
    """The file ``NOGRADLAB_LEDGER`` names (None when unset or empty); ``ValueError`` naming the variable
    when results cannot be appended there (a folder, a missing folder, not a regular file)."""
    path = os.environ.get("NOGRADLAB_LEDGER")
    if not path:
        return None
    p = Path(path)
    why = None
    if p.is_dir():
        why = "is a folder"
    elif p.exists() and not p.is_file():
        why = "is not a regular file"
    elif not p.parent.is_dir():
        why = f"is in a folder that does not exist ({str(p.parent)!r})"
    elif not os.access(p if p.exists() else p.parent, os.W_OK):
        why = "is not writable"
    if why:
        raise ValueError(f"NOGRADLAB_LEDGER={path!r} {why}; set it to a JSON-lines file (it is appended to) "
                         f"or unset it")
    return path


def _append_to_ledger(result: Result) -> None:
    path = ledger_path()
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(result.to_dict()) + "\n")


def rule(claim_id: str) -> str:
    """The verdict rule of a claim, one sentence (from :mod:`nogradlab.claims.rules`)."""
    from .rules import get as _rule

    get(claim_id)
    return _rule(claim_id).text


def new_run() -> None:
    """Start a new run: forget the timings shared between checks (:data:`nogradlab.timing.RUN`)."""
    from .. import timing

    timing.clear_cache()


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
    """A pandas DataFrame of results: id, section, verdict, article's figure, summary, rule."""
    import pandas as pd

    return pd.DataFrame([{"id": r.id, "section": r.section, "verdict": r.verdict, "article": r.figure or "",
                          "measured": r.summary, "rule": r.rule} for r in results])


def band_verdict(values, low, high, *, higher_is_better=True):
    """Verdict for measured values against the article's band [low, high].

    ``values`` are (point, ci_low, ci_high) triples, one per condition (workload, batch, ...).
    A condition agrees when its interval overlaps the band (or, with ``higher_is_better``, lies
    above it: the article claimed at least that much). All agree: ``holds``; none: ``does not
    hold``; some: ``depends``.
    """
    agree = []
    for point, lo, hi in values:
        lo = point if lo is None else lo
        hi = point if hi is None else hi
        ok = hi >= low and (lo <= high or higher_is_better)
        agree.append(ok)
    if not agree:
        raise ValueError("band_verdict needs at least one measured value")
    if all(agree):
        return "holds"
    if not any(agree):
        return "does not hold"
    return "depends"
