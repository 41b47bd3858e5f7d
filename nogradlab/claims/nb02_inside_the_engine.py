"""Notebook 02, inside the engine: the declarations and checks of C07, C08, C09, C10, C11.

Each claim is declared once here (``declare``) beside its check (``@C.measures``) and its judge
(``@C.judges``); see ``nogradlab/claims/README.md``.
"""
from __future__ import annotations

import math
import warnings

import torch
import torch.nn as nn

from nogradlab.estimate import batch as _batch
from nogradlab.core import format as _format
from nogradlab.core import memory
from nogradlab.core import modes
from nogradlab.core import workloads
from nogradlab.claims import ledger as claims  # the ledger room (searched_where), not the face
from nogradlab.lab import plots
from nogradlab.claims.ledger import NeedsRemeasuring, declare
from nogradlab.claims.result import Judgement, number
from nogradlab.claims.measure import _batches, estimate_row, param_bytes
from nogradlab.claims.probes import _max_abs_diff, _tracking, _workload
from nogradlab.claims.rules import Band, Rule, proxy_text, verdict_of
from nogradlab.claims.searches import GiB, _method, _one_real_search, _ratio, _real_note, _real_search, _row, _searches

NOTEBOOK = "02_inside_the_engine"


MIGRATION_GUIDE = "https://pytorch.org/blog/pytorch-0_4_0-migration-guide/"


RELEASE_NOTES = "https://github.com/pytorch/pytorch/releases/tag/v0.4.0"


C07 = declare(
    "C07", section='2', kind='semantic', notebook=NOTEBOOK,
    paraphrase='operators still run under no_grad but record nothing for backward',
    figure=None,
    rule=Rule("Holds when operators run under no_grad (same outputs) and record no graph and no "
              "saved tensors; otherwise does not hold."))


@C07.measures
def c07(ctx):
    """Operators still run (same output) but save nothing for backward: saved bytes > 0 with
    grad, 0 under no_grad (nogradlab.memory.measure)."""
    wl, model, x = _workload(ctx)
    reports, outs = {}, {}
    for mode in ("grad", "no_grad"):
        def fn(mode=mode):
            with modes.get(mode)():
                return model(x)
        reports[mode], outs[mode] = memory.measure(fn, ctx.device, return_result=True, label=mode)
    return {"workload": wl.name, "batch": x.shape[0], "max_abs_output_diff": _max_abs_diff(outs["grad"], outs["no_grad"]),
            "outputs_allclose": bool(torch.allclose(outs["grad"], outs["no_grad"])),
            "reports": {m: r.to_dict() for m, r in reports.items()}}


@C07.judges
def judge_c07(m, rule):
    g, ng = m["reports"]["grad"], m["reports"]["no_grad"]
    diff = m["max_abs_output_diff"]
    # columns made before "outputs_allclose" was stored: the outputs of one model on one input
    # (allclose's default tolerance; the stored diff was 0 in both reference columns)
    same = m.get("outputs_allclose", diff == 0)
    ok = number(g["saved_bytes"]) > 0 and number(ng["saved_bytes"]) == 0 and bool(same)
    summary = (f"{m['workload']} ({m.scale}, batch {m['batch']}): the same forward computed "
               f"{'the same' if same else 'a different'} output (max diff {diff:.3g}); autograd saved "
               f"{memory.format_bytes(g['saved_bytes'])} ({g['saved_tensors']} storages) with grad and "
               f"{memory.format_bytes(ng['saved_bytes'])} under no_grad.")
    return Judgement("holds" if ok else "does not hold", summary)


C10 = declare(
    "C10", section='2', kind='historical', notebook=NOTEBOOK,
    paraphrase='no_grad became the recommended idiom around PyTorch 0.4, replacing manual workarounds',
    figure='0.4',
    rule=Rule("Historical, decided by the cited sources on its first half only: holds on that half when the "
              "PyTorch 0.4.0 migration guide (April 2018) and the v0.4.0 release notes are the stored sources, "
              "which deprecate the volatile flag in favour of torch.no_grad() and torch.set_grad_enabled() (0.4 "
              "replaced volatile with no_grad). The second half, that no_grad replaced manual workarounds (detach, "
              "clone), is not supported by the sources: the verdict does not cover it, and its summary and reading "
              "begin by saying so. The evidence is the citation, not a measurement. Today's torch is shown "
              "(no_grad works; Variable(volatile=True) warns and has no effect): consistent with them or not, it "
              "dates nothing and never decides."))


@C10.measures
def c10(ctx):
    """Historical: PyTorch 0.4.0 replaced ``volatile=True`` Variables by torch.no_grad. Checked here:
    no_grad exists, and ``Variable(x, volatile=True)`` warns and has no effect."""
    x = torch.randn(3, device=ctx.device, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v = torch.autograd.Variable(torch.randn(3, device=ctx.device), volatile=True)
        y = x * v  # before 0.4 one volatile input made the whole result untracked
        volatile_attr = getattr(v, "volatile", None)
    messages = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    has_no_grad = hasattr(torch, "no_grad") and hasattr(torch, "set_grad_enabled")
    with torch.no_grad():
        no_grad_works = not (x * 2).requires_grad
    evidence = {
        "sources": {"PyTorch 0.4.0 migration guide, 'Deprecation of the volatile flag'": MIGRATION_GUIDE,
                    "PyTorch v0.4.0 release notes": RELEASE_NOTES},
        "what_the_sources_say": "0.4.0 merged Variable into Tensor and deprecated the volatile flag, "
                                "replacing it by the context managers torch.no_grad() and "
                                "torch.set_grad_enabled(mode)",
        "torch": torch.__version__, "torch.no_grad_exists": has_no_grad, "no_grad_stops_tracking": no_grad_works,
        "Variable(volatile=True)": {"type": type(v).__name__, "volatile_attribute": volatile_attr,
                                    "warnings": messages,
                                    "x_requiring_grad_times_volatile_v": _tracking(y)},
    }
    return evidence


@C10.judges
def judge_c10(m, rule):
    sources = m["sources"]
    if not isinstance(sources, dict) or not {MIGRATION_GUIDE, RELEASE_NOTES} <= set(sources.values()):
        raise NeedsRemeasuring("the cited 0.4.0 migration guide and release notes")
    v = m["Variable(volatile=True)"]
    y = v["x_requiring_grad_times_volatile_v"]
    volatile_ignored = y["requires_grad"] and y["grad_fn"] is not None
    messages = v["warnings"]
    today = m["torch.no_grad_exists"] and m["no_grad_stops_tracking"] and volatile_ignored and bool(messages)
    summary = (f"Holds on its first half only: 0.4 replaced volatile with no_grad; the workarounds half is not "
               f"supported by the sources and not covered by this verdict. The PyTorch 0.4.0 migration guide "
               f"({MIGRATION_GUIDE}) and the v0.4.0 "
               f"release notes ({RELEASE_NOTES}) deprecate the volatile flag in favour of torch.no_grad() and "
               f"torch.set_grad_enabled(); they name no detach/clone workaround that no_grad replaced. "
               f"Today's torch {m['torch']}, shown, not deciding: "
               f"Variable(x, volatile=True) returns a plain {v['type']}, warns (building it and reading its "
               f".volatile: {' / '.join(messages) or 'no warning'}) and has "
               + ("no effect" if volatile_ignored else "an effect")
               + f" (x * volatile_v has grad_fn {y['grad_fn']}), "
               + ("consistent with the sources." if today else "not as the sources describe (a later release "
                                                             "may have changed it; it dates nothing)."))
    scope = {"basis": "cited",
             "text": f"cited: the PyTorch 0.4.0 migration guide ({MIGRATION_GUIDE}) and the v0.4.0 release notes "
                     f"({RELEASE_NOTES}); today's torch ({m['torch']}) shown beside them, not deciding"}
    return Judgement("holds", summary, "Holds on its first half only: the 0.4.0 migration guide and release notes "
                                       "replaced volatile=True by torch.no_grad(); the workarounds half is not "
                                       "supported by them. Today's torch is shown, not counted.", scope=scope)


def _files_mentioning(package: str, needle: str = "no_grad") -> "dict | None":
    """How many .py files of an installed package contain ``needle``."""
    import importlib.util
    import pathlib

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    files = list(pathlib.Path(spec.origin).parent.rglob("*.py"))
    hits = sum(1 for f in files if needle in f.read_text(errors="ignore"))
    return {"files": len(files), "mentioning_no_grad": hits,
            "share": round(hits / len(files), 4) if files else None}


C11 = declare(
    "C11", section='2', kind='unsourced statistic', notebook=NOTEBOOK,
    paraphrase='more than 60 % of tutorials and framework internals use no_grad by default',
    figure='>60 %',
    rule=Rule("Not testable: an unsourced survey share (no population, sample or method). The mechanism is "
              "shown (torch's own helpers run with grad off), and the proxy, the share of the installed torch's "
              "Python files that mention no_grad, is read against 'more than 60 %' and shown first, never "
              "deciding: files are not the article's tutorials and methods.",
              band=Band("more than", 0.60)))


@C11.measures
def c11(ctx):
    """Unsourced survey figure (>60 % of tutorials and internals): not testable. The mechanism
    behind 'internals use no_grad' is shown on framework helpers that must not be recorded."""
    w = torch.randn(4, 4, device=ctx.device, requires_grad=True)
    nn.init.normal_(w)  # runs its in-place fill under no_grad internally
    p = nn.Parameter(torch.randn(4, device=ctx.device))
    p.grad = torch.full_like(p, 10.0)
    nn.utils.clip_grad_norm_([p], max_norm=1.0)
    internals = {
        "nn.init.normal_ on a leaf with grad on": {**_tracking(w), "as_expected": w.is_leaf and w.grad_fn is None},
        "clip_grad_norm_ rescales .grad without a graph": {"grad_requires_grad": bool(p.grad.requires_grad),
                                                            "grad_norm_after": float(p.grad.norm())},
    }
    scan = {pkg: _files_mentioning(pkg) for pkg in ("torch", "torchvision")}
    evidence = {"reason": "the article cites no survey, population or method for '>60 % of tutorials and "
                          "framework-internal methods (2021-2022)'; there is nothing to reproduce",
                "mechanism": internals, "installed_source_scan": scan,
                "scan_caveat": "a share of files that mention no_grad in the installed packages, not the "
                               "article's (unknown) population of tutorials and trainer loops"}
    return evidence


@C11.judges
def judge_c11(m, rule):
    t = m["installed_source_scan"].get("torch") or {}
    mech = m["mechanism"]
    init = mech.get("nn.init.normal_ on a leaf with grad on", {})
    clip = mech.get("clip_grad_norm_ rescales .grad without a graph", {})
    ran = ("torch's own helpers (nn.init, clip_grad_norm_) run with grad off, leaving no graph"
           if init.get("as_expected") and not clip.get("grad_requires_grad") else
           "torch's own helpers (nn.init, clip_grad_norm_) left a graph behind in this run (see measurements)")
    files, hits = t.get("files"), t.get("mentioning_no_grad")
    share = hits / files if files and hits is not None else None
    proxy = (f"Proxy, not deciding: {hits} of {files} Python files of the installed "
             f"torch ({share:.1%}) mention no_grad, {proxy_text(rule.band, share)}; files are a different "
             "population from the article's tutorials and methods. " if share is not None else "")
    summary = ("Not testable: no source or method is given for the >60 % figure. " + proxy
               + f"Mechanism: {ran}.")
    return Judgement("not testable", summary)


C08 = declare(
    "C08", case_quantity=("saved activations / weights, gradients and momentum", "x"),
    section='2', kind='numeric', notebook=NOTEBOOK, basis="estimate",
    estimates_at="full",  # its article-sized models are estimated at full size
    tiny_cpu_threads=1,  # its check times or traces models: one thread in a tiny CPU run
    paraphrase='what backward keeps is the largest share of GPU memory in training',
    figure=None,
    rule=Rule("Per workload at the article's model sizes and two batches (1 and the default), the "
              "estimated activation bytes a training step saves for backward are compared with parameter + "
              "gradient + SGD-momentum bytes (the allocator model's estimate on a virtual CUDA device): holds "
              "when activations are larger than those three together in every condition, does not hold when in "
              "none, depends otherwise (the crossover batch says where). Larger than each of the three alone (the "
              "largest single part) is a weaker reading of 'largest share': shown, not counted."))


@C08.measures
def c08(ctx):
    """Activation (saved-for-backward) bytes of one training step vs parameter + gradient +
    SGD-momentum bytes, per workload at the article's sizes (estimate on a virtual CUDA device),
    at batch 1 and the workload's default batch; the crossover batch follows from the slope.
    Knobs: ``batches`` (default ``(1, default)``)."""
    rows, crossovers = [], {}
    at = C08.estimates_at
    for name in workloads.names():
        wl = workloads.get(name, at)
        p = param_bytes(name, at)
        others = {"parameters": p, "gradients": p, "optimizer_state_sgd_momentum": p}
        batches = _batches(ctx, "batches", (1, wl.default_batch))
        acts = {}
        for b in batches:
            r = estimate_row(name, b, "train", scale=at)
            acts[b] = r["saved_bytes"]
            fixed = sum(others.values())
            rows.append({"workload": name, "batch": b, "activation_bytes": r["saved_bytes"],
                         **{f"{k}_bytes": v for k, v in others.items()},
                         "params_grads_optimizer_bytes": fixed,
                         "training_peak_bytes": r["total_peak_bytes"],
                         "activation_share_of_peak": r["saved_bytes"] / r["total_peak_bytes"],
                         "activations_exceed_the_rest": r["saved_bytes"] > fixed,
                         "activations_exceed_each_part": r["saved_bytes"] > p, "notes": r["notes"]})
        b1, b2 = min(acts), max(acts)
        slope = (acts[b2] - acts[b1]) / (b2 - b1) if b2 > b1 else acts[b1] / b1
        crossovers[name] = {"per_sample_activation_bytes": slope,
                            "crossover_batch_sgd": math.ceil(3 * p / slope) if slope > 0 else None,
                            "crossover_batch_adam": math.ceil(4 * p / slope) if slope > 0 else None}
    return {"rows": rows, "crossover": crossovers, "method": "memory.estimate, train step "
            "(forward, loss, backward, SGD-momentum step), scale full, virtual CUDA",
            "criterion": "activation (saved-for-backward) bytes > parameter + gradient + "
                         "optimizer-state bytes; the crossover batch assumes activations grow "
                         "linearly with the batch (exact between the two estimated batches)"}


@C08.judges
def judge_c08(m, rule):
    rows, crossovers = m["rows"], m["crossover"]
    conds = [{"condition": f"{r['workload']}@{r['batch']}",
              "value": r["activation_bytes"] / r["params_grads_optimizer_bytes"], "ci": None,
              "reading": "agrees" if r["activation_bytes"] > r["params_grads_optimizer_bytes"] else "disagrees",
              "side": None if r["activation_bytes"] > r["params_grads_optimizer_bytes"] else "below",
              "rounds": None, "rounds_to_decide": None, "estimated": True} for r in rows]
    verdict = verdict_of(c["reading"] for c in conds)
    names = list(crossovers)
    small = [min((r for r in rows if r["workload"] == n), key=lambda r: r["batch"]) for n in names]
    large = [max((r for r in rows if r["workload"] == n), key=lambda r: r["batch"]) for n in names]

    def exceed(rs):
        return sum(r["activation_bytes"] > r["params_grads_optimizer_bytes"] for r in rs)

    at = (f"{exceed(small)} of {len(small)} workloads at the smaller batch "
          f"({', '.join(str(r['batch']) for r in small)}), {exceed(large)} of {len(large)} at the larger "
          f"({', '.join(str(r['batch']) for r in large)})")
    parts = [f"{n} from batch {c['crossover_batch_sgd']}" for n, c in crossovers.items()]
    summary = ("At the article's model sizes (training step, estimated), activations kept for backward "
               f"outweigh parameters + gradients + SGD-momentum state in {at}. They take "
               f"over above a crossover batch: {'; '.join(parts)} (with SGD momentum, as counted here; Adam "
               "instead of SGD keeps two state tensors per parameter, which would put the crossover a third "
               "higher); below it the weights and their companions dominate.")
    single = (sum(r["activation_bytes"] > r["parameters_bytes"] for r in rows)
              if all("parameters_bytes" in r for r in rows) else None)
    reading = (f"Activations outweigh parameters + gradients + momentum together in "
               f"{sum(c['reading'] == 'agrees' for c in conds)} of {len(conds)} conditions: above each workload's "
               f"crossover batch, not below it"
               + (f" (as the largest single part, more than any one of the three, in {single} of {len(conds)}: "
                  "shown, not counted)" if single is not None else "") + ".")
    return Judgement(verdict, summary, reading, conds)


C09_FIGURE = 2.5


C09 = declare(
    "C09", section='2', kind='numeric', notebook=NOTEBOOK, basis="estimate",
    estimates_at="full",  # its article-sized models are estimated (and searched for real on a GPU) at full size
    chart_rank=1,
    key_chart=("C09: largest batch under the article's 12 GiB",
               "ResNet-50 at full size: training step, grad-enabled forward and eval + no_grad forward."),
    paraphrase='on a 12 GB GPU, a ResNet-50 evaluated under no_grad takes a batch up to about 2.5 times the training batch',
    figure='up to ~2.5x',
    rule=Rule("The factor largest eval+no_grad batch / largest training-step batch for ResNet-50 at full size under "
              "12 GiB (the allocator model's estimate, or on a GPU its real OOM search where one was made) is "
              "read against the article's 'up to about 2.5x' at its figure, about 2.5x: 2.0x to 3.0x (within "
              "20 %), unrounded: holds inside, does not hold outside (above, more fits than the article's 'up "
              "to'; below 2.0x, less than the figure it gives for this one model, GPU and batch). A search that reached its limit makes the factor a bound, deciding only where the bound "
              "lies outside the band (else inconclusive).",
              band=Band("about", C09_FIGURE, unit="x")))


C09_TOLERANCE = C09.rule.band  # "about 2.5x": 2.0x to 3.0x (rules.Band)


@C09.measures
def c09(ctx):
    """ResNet-50 (224x224, full size) under a 12 GiB budget: largest training-step batch vs
    eval+no_grad forward (the article's comparison), and grad-enabled forward vs eval+no_grad.

    Knobs: ``budget_gib`` (12), ``workload`` ("resnet50"), ``real_search`` ("one"; see the module docstring).
    """
    gib = float(ctx.params.get("budget_gib", 12))
    name = ctx.params.get("workload", "resnet50")
    at = C09.estimates_at
    workloads.get(name, at)
    if gib <= 0:
        raise ValueError(f"budget_gib must be positive, got {gib!r}")
    dev, method = _method(ctx)
    res = _searches(name, int(gib * GiB), dev, method, scale=at)
    real_check = _one_real_search(ctx, name, int(gib * GiB), res["eval+no_grad"], scale=at)
    b = {m: r.batch for m, r in res.items()}
    return {"budget_bytes": int(gib * GiB), "workload": name, "batches": b,
            "capped": {m: bool(r.at_limit) for m, r in res.items()},
            "no_grad_over_train": _ratio(b["eval+no_grad"], b["train"]),
            "no_grad_over_grad": _ratio(b["eval+no_grad"], b["grad"]),
            "article_factor": C09_FIGURE, "tolerance": list(C09_TOLERANCE.edges), "method": method,
            "searches": [_row(r) for r in res.values()], "real_check": real_check,
            "real_search": _real_search(ctx) if ctx.on_gpu else "none (no GPU)",
            "bytes_per_sample": {m: _slope(r) for m, r in res.items()}}


def _c09_capped(m) -> dict:
    """``{mode: capped}``: the check's own record, else its searches' ``at_limit`` (older columns)."""
    if isinstance(m.get("capped"), dict):
        return {k: bool(v) for k, v in m["capped"].items()}
    return {s["mode"]: bool(s.get("at_limit")) for s in (m.get("searches") or [])}


def _c09_read(band, factor, num_capped: bool, den_capped: bool) -> tuple:
    """(reading, bound) of the factor num/den: a capped numerator makes it a lower bound, a capped
    denominator an upper bound; a bound decides only when it lies outside the band."""
    a, b = band.edges
    if num_capped and den_capped:
        return "unresolved", "unknown"
    if num_capped:  # the true factor is at least this
        return ("disagrees" if factor > b else "unresolved"), "lower bound"
    if den_capped:  # the true factor is at most this
        return ("disagrees" if factor < a else "unresolved"), "upper bound"
    return band.read(factor), None


@C09.judges
def judge_c09(m, rule):
    b, name, gib = m["batches"], m["workload"], m["budget_bytes"] / GiB
    vs_train, vs_grad = m["no_grad_over_train"], m["no_grad_over_grad"]
    cap = _c09_capped(m)
    method = m.get("method", "estimate")
    real = m.on_gpu and method == "search"
    how = (f"real OOM search on {m.label}" if real else
           "estimates at full size, decided as the real cap decides: the step's allocations replayed through "
           "the CUDA caching allocator's model (native)")
    batches = ", ".join(f"{k} {_batch_text(b[k], cap.get(k, False))}"
                        for k in ("train", "grad", "eval+no_grad"))
    if vs_train is None:
        return Judgement("does not hold", f"{name} under {gib:g} GiB ({how}): batches {batches}; not even batch 1 "
                                          "of a training step fits, so the factor is undefined.",
                         conditions=[{"condition": f"{name} {gib:g} GiB", "value": None, "ci": None,
                                      "reading": "disagrees", "side": "below", "rounds": None,
                                      "rounds_to_decide": None, "estimated": not real}])
    reading, bound = _c09_read(rule.band, vs_train, cap.get("eval+no_grad", False), cap.get("train", False))
    verdict = verdict_of([reading])
    factor = _format.ratio(vs_train) + (f" (a {bound}: a search reached its limit)" if bound else "")
    side = ("above" if vs_train > rule.band.edges[1] else "below") if reading == "disagrees" else None
    lead = (f"No_grad fits {'more' if side == 'above' else 'less'} than the article says: {_format.ratio(vs_train)} the "
            f"training batch against up to about {_format.ratio(C09_FIGURE, 1)}. " if side else "")
    summary = (lead + f"{name} under {gib:g} GiB ({how}): largest batch {batches}; eval+no_grad fits {factor} the "
               f"training batch (article: up to {rule.band.text()})"
               + (f" and {_format.ratio(vs_grad)} the grad-enabled forward's" if vs_grad is not None else "") + ". ")
    summary += ("The direction holds (more fits under no_grad); " if vs_train > 1 else
                "Not even the direction holds (no more fits under no_grad); ")
    lo, hi = rule.band.edges
    summary += {"agrees": "the factor matches the article's.",
                "disagrees": f"the factor is {'larger' if vs_train > hi else 'smaller'} than the article's.",
                "unresolved": "the bound cannot say whether the factor lies in the band: a larger max_batch "
                              "would decide it."}[reading]
    summary += _real_note(m.get("real_check"))
    conds = [{"condition": f"{name} {gib:g} GiB", "value": vs_train, "ci": None, "reading": reading,
              "side": side, "rounds": None, "rounds_to_decide": None, "bound": bound,
              "estimated": not real}]
    scope = ({"basis": "measured", "text": f"measured here: {m.label}, real OOM searches under a memory cap"}
             if real else None)
    return Judgement(verdict, summary, f"No_grad fits {factor} the training batch, against the article's up to "
                                       f"about {C09_FIGURE}x.", conds, scope)


def _batch_text(n: int, capped: bool) -> str:
    """A searched batch as a reader should take it: ``≥ N (search limit)`` when the search was capped."""
    return f"\u2265 {n} (search limit)" if capped else f"{n}"


def _slope(r: _batch.BatchResult) -> "float | None":
    """Bytes per extra sample between the two largest batches that fitted in the search."""
    fit = sorted((b, n) for b, ok, n in r.trials if ok and n is not None)
    if len(fit) < 2 or fit[-1][0] == fit[-2][0]:
        return None
    (b0, n0), (b1, n1) = fit[-2], fit[-1]
    return (n1 - n0) / (b1 - b0)


# --------------------------------------------------------------------------------------------
# figures: each claim's measurements drawn with nogradlab.plots


@C09.draws
def _figure_c09(ev, device, scale):
    return plots.largest_batch({f"{ev['workload']}, {ev['budget_bytes'] / 2 ** 30:g} GiB": ev["batches"]},
                               device=claims.searched_where(ev["method"], device), scale=C09.estimates_at)
