"""Notebook 05, memory and speed by workload: the declarations and checks of C18, C19, C20, C21.

Each claim is declared once here (``declare``) beside its check (``@C.measures``) and its judge
(``@C.judges``); see ``nogradlab/claims/README.md``.
"""
from __future__ import annotations

import copy
import functools
import math

import torch

from nogradlab.core import format as _format
from nogradlab.core import timing
from nogradlab.core import workloads
from nogradlab.lab import plots
from nogradlab.claims.ledger import NeedsRemeasuring, declare
from nogradlab.claims.result import Judgement
from nogradlab.claims.verdict import estimate_validation
from nogradlab.claims import evidence as _ev
from nogradlab.claims.measure import ARTICLE_GPU_BYTES, ARTICLE_TABLE, FEED_FORWARD, _batches, _build, _knobs, _names, _pct, _samples_note, _speed_batch, _torch_threads, _train_fn, estimate_row, estimate_sweep, forward_condition, measure_forward, memory_saved, param_bytes, with_seq_len
from nogradlab.claims.rules import AGGREGATE, Band, MIN_BOOTSTRAP_ROUNDS, Rule, SELF_CONTRADICTION, TIE, direction_text, read_conditions, readings_text, verdict_of
from nogradlab.claims.searches import _quick, shared_largest_batch
from nogradlab.claims import runcache as _runcache
from nogradlab.core.session import frozen_gc

NOTEBOOK = "05_memory_and_speed_by_workload"


def _pairs(rows, base: str, case: str) -> list:
    """Memory saved per (seq_len, batch) from a sweep's rows."""
    by = {(r["seq_len"], r["batch"], r["setting"]): r for r in rows}
    out = []
    for (L, b, s), r in by.items():
        if s != base or (L, b, case) not in by:
            continue
        c = by[(L, b, case)]
        out.append({"seq_len": L, "batch": b, "baseline": base, "case": case,
                    "baseline_total_bytes": r["total_peak_bytes"],
                    "case_total_bytes": c["total_peak_bytes"],
                    "memory_saved": memory_saved(r["total_peak_bytes"], c["total_peak_bytes"])})
    return out


# C20's training-step row (shown, never deciding a cell) in a tiny CPU run: a ResNet-50 training step holds
# its weights three times (weights, gradients, SGD momentum: 300 MB) beside the forward's model, the
# largest share of notebook 05's kernel on a 1-2 GB Binder machine
_TRAIN_QUICK_NOTE = ("not timed in a tiny CPU run (a training step holds the weights three times, weights, "
                     "gradients and momentum, which a learner's 1-2 GB kernel should not pay for a row that "
                     "decides nothing; pass train_step_timing=True)")


C18 = declare(
    "C18", section='5', kind='numeric', notebook=NOTEBOOK, basis="estimate",
    estimates_at="full",  # its article-sized models are estimated at full size
    tiny_cpu_threads=1,  # its check times or traces models: one thread in a tiny CPU run
    chart_rank=2,
    key_chart=("C18: peak memory against batch size",
               "Total bytes the device holds at the peak of one forward pass (weights and input included)."),
    paraphrase='for feed-forward networks no_grad cuts peak memory by 20-40 %',
    figure='20-40 %',
    rule=Rule("Per feed-forward workload and batch, memory saved = 1 - total peak(no_grad)/total peak(grad "
              "forward), read against 20-40 % (unrounded; above 40 % disagrees as below 20 % does). The "
              "article speaks of GPUs: the full-size estimates on a virtual CUDA device decide (on a GPU, "
              "its own full-size measurements too); a tiny run's bytes are shown, not counted. An estimate "
              f"carries its allocator model's validation error on each peak ({estimate_validation(2)[1]:.1%} "
              f"today; {estimate_validation(1)[1]:.1%} for the model of protocol 1: claims.ESTIMATE_VALIDATIONS), "
              "and is unresolved when that interval reaches across an edge; a GPU's "
              "measured bytes are exact. Over the conditions: " + AGGREGATE + ".",
              band=Band("range", 0.20, 0.40)))


@C18.measures
def c18(ctx):
    """Peak memory of a forward pass, grad vs no_grad (eval mode in both), for the feed-forward
    workloads (mlp, resnet50, unet: no recurrent connections; the transformer is C19's): real
    measurements of the ``ctx.scale`` models on ``ctx.device`` over a batch sweep, and estimates
    at the article's sizes on a virtual CUDA device. Knobs: ``batches``, ``full_batches``."""
    real, est = [], []
    for key in ("batches", "full_batches"):  # both lists checked before any model is built
        if ctx.params.get(key) is not None:
            _batches(ctx, key, ())
    for name in FEED_FORWARD:
        wl, model, _, _ = _build(name, ctx.scale, ctx.device, 1, ctx.seed)
        d = wl.default_batch
        for b in _batches(ctx, "batches", (1, d, 2 * d)):
            x = wl.make_input(b, ctx.device)
            g, ng = (measure_forward(model, x, s, ctx.device, _knobs(ctx)["num_threads"])
                     for s in ("eval+grad", "eval+no_grad"))
            real.append({"workload": name, "scale": ctx.scale, "batch": b,
                         "grad_total_bytes": g["total_peak_bytes"], "no_grad_total_bytes": ng["total_peak_bytes"],
                         "grad_peak_bytes": g["peak_bytes"], "no_grad_peak_bytes": ng["peak_bytes"],
                         "resident_bytes": g["resident_bytes"], "method": g["method"],
                         "memory_saved": memory_saved(g["total_peak_bytes"], ng["total_peak_bytes"])})
        del model
        full = workloads.get(name, C18.estimates_at).default_batch
        # the estimates' sweep: four batches on a CPU at every scale (a verdict from estimates must not change
        # with --scale) and in the GPU reference run; the default batch alone in a learner's GPU run
        fb = _batches(ctx, "full_batches", (full,) if ctx.on_gpu and not ctx.reference
                      else (1, full // 4, full, 4 * full))
        rows = estimate_sweep(name, fb, ("eval+grad", "eval+no_grad"), scale=C18.estimates_at)
        for p in _pairs(rows, "eval+grad", "eval+no_grad"):
            est.append({"workload": name, "scale": C18.estimates_at, "batch": p["batch"],
                        "grad_total_bytes": p["baseline_total_bytes"],
                        "no_grad_total_bytes": p["case_total_bytes"], "method": "estimate (virtual cuda)",
                        "memory_saved": p["memory_saved"]})
    return {"measured": real, "estimated_full_size": est, "feed_forward_workloads": list(FEED_FORWARD),
            "metric": "memory_saved = 1 - total_peak(eval+no_grad forward) / total_peak(eval+grad "
                      "forward); total = weights + buffers + input + the call's own peak"}


def saving_interval(saved: float, err: float) -> tuple:
    """The interval of a memory saving ``1 - a/b`` whose two peaks ``a`` (no_grad) and ``b`` (grad) are each
    estimated within a relative error ``err``: ``[1 - (1-s)(1+err)/(1-err), 1 - (1-s)(1-err)/(1+err)]``."""
    r = 1.0 - saved
    return 1.0 - r * (1 + err) / (1 - err), 1.0 - r * (1 - err) / (1 + err)


@C18.judges
def judge_c18(m, rule):
    real, est = m["measured"], m["estimated_full_size"]
    counted = [r for r in real if r.get("scale") == "full"] if m.on_gpu else []
    deciding = est + counted
    err = estimate_validation(m.protocol)[1]
    def name(r):
        return f"{r['workload']}@{r['batch']} ({'estimate' if r in est else m.device.get('type', 'real')})"

    def item(r):  # an estimate carries its allocator model's validation error; a real run is exact bytes
        lo, hi = saving_interval(r["memory_saved"], err) if r in est else (None, None)
        return name(r), r["memory_saved"], lo, hi, None

    verdict, rows = read_conditions([item(r) for r in deciding], rule.band,
                                    estimated=[r in est for r in deciding])
    def span(rs):
        return f"{min(r['memory_saved'] for r in rs):.0%}-{max(r['memory_saved'] for r in rs):.0%}"

    lead = direction_text(rows, "no_grad saves more memory than the article says", "no_grad saves less memory than the article says",
                          nothing="no_grad saves nothing")
    summary = ((f"{lead[0].upper()}{lead[1:]}. " if lead else "")
               + f"At the article's sizes (estimates, virtual CUDA) no_grad cut the forward pass's total peak "
               f"(weights and input included) by {span(est)} (article: 20-40 %): {readings_text(rows)}"
               + ". What no_grad removes is the activations kept for backward; how much of the peak that is "
               "depends on the model: large where many kept activations would be alive at once (deep CNNs), "
               "next to nothing where they are alive at the peak anyway (a shallow MLP) or weights dominate."
               + f" Each estimate is read with its allocator model's validation error (within {err:.1%} on each "
               "peak), so one that close to an edge is unresolved."
               + (f" Real runs on this GPU ({m.label}; the full-size ones counted): {span(real)}." if counted else
                  f" On your machine ({m.label}, real runs, not counted): {span(real)}." if real else ""))
    n_in = sum(r["reading"] == "agrees" for r in rows)
    return Judgement(verdict, summary, f"no_grad's memory saving lies in 20-40 % in {n_in} of {len(rows)} "
                     "full-size conditions.", rows)


def _seq_sweep(ctx, estimates_at: str) -> dict:
    """Memory saved (eval+grad vs eval+no_grad forward, totals) vs sequence length: real runs of
    the ``ctx.scale`` transformer, and estimates at full size (batch 16) on a virtual CUDA device
    (math attention) and on the fake CPU device (fused flash attention), at the claims' declared
    ``estimates_at`` scale. Both are exact and
    deterministic, so C19 and C21 share one sweep per process."""
    lens = tuple(_batches(ctx, "seq_lens", (32, 64, 128, 256, 512) if _quick(ctx) else
                          (128, 512, 2048) if ctx.on_gpu and not ctx.reference else
                          (128, 256, 512, 1024, 2048, 4096)))
    # the estimates' longer list of sequence lengths: on a CPU at every scale, and in the GPU reference
    reference = ctx.reference or not ctx.on_gpu
    return copy.deepcopy(_seq_sweep_cached(str(ctx.device), ctx.scale, ctx.seed, lens, reference, estimates_at))


@functools.lru_cache(maxsize=8)
def _seq_sweep_cached(device: str, scale: str, seed: int, lens: tuple, reference: bool,
                      estimates_at: str) -> dict:
    dev = torch.device(device)
    quick = dev.type != "cuda" and scale == "tiny"
    wl0, model, _, _ = _build("transformer_base", scale, dev, 1, seed)
    real, notes = [], []
    for L in lens:
        wl = with_seq_len(wl0, L)
        x = wl.make_input(wl.default_batch, dev)
        try:
            g, ng = (measure_forward(model, x, s, dev, 1 if quick else None) for s in ("eval+grad", "eval+no_grad"))
        except torch.OutOfMemoryError:
            notes.append(f"out of memory at sequence length {L} on {dev}: the real sweep stops there")
            break
        finally:
            del x
        real.append({"seq_len": L, "batch": wl.default_batch, "scale": scale,
                     "grad_total_bytes": g["total_peak_bytes"], "no_grad_total_bytes": ng["total_peak_bytes"],
                     "saved_for_backward_bytes": g["saved_bytes"],
                     "saved_per_token_bytes": g["saved_bytes"] / (wl.default_batch * L),
                     "memory_saved": memory_saved(g["total_peak_bytes"], ng["total_peak_bytes"])})
    del model
    full_b = workloads.get("transformer_base", estimates_at).default_batch
    est = {}
    # with a GPU, the estimate uses whatever kernel this GPU selects; without one, the virtual CUDA
    # device's label is taken from the estimate's own notes (which attention kernel it traced)
    variants = {"cuda": ("cuda", (128, 256, 512, 1024, 2048, 4096)),
                "fused flash attention (fake cpu)": ("cpu", (128, 512, 1024, 4096))}
    if not reference:
        variants = {"cuda": ("cuda", (128, 1024, 4096)),
                    "fused flash attention (fake cpu)": ("cpu", (128, 4096))}
    for label, (dev, lens) in variants.items():
        rows = estimate_sweep("transformer_base", (full_b,), device=dev, scale=estimates_at, seq_lens=lens)
        if label == "cuda":
            label = _cuda_label(rows)
        grad = {r["seq_len"]: r for r in rows if r["setting"] == "eval+grad"}
        est[label] = [{"seq_len": p["seq_len"], "batch": full_b, "grad_total_bytes": p["baseline_total_bytes"],
                       "no_grad_total_bytes": p["case_total_bytes"],
                       "saved_for_backward_bytes": grad[p["seq_len"]]["saved_bytes"],
                       "saved_per_token_bytes": grad[p["seq_len"]]["saved_bytes"] / (full_b * p["seq_len"]),
                       "memory_saved": p["memory_saved"]} for p in _pairs(rows, "eval+grad", "eval+no_grad")]
    return {"measured": real, "estimated_full_size": est, "notes": notes}


def _cuda_label(rows) -> str:
    """The CUDA series' name, from the estimate's notes: which attention kernel it traced."""
    if torch.cuda.is_available():
        return "attention as this GPU selects it (fake tensors on cuda)"
    notes = " ".join(n for r in rows for n in r.get("notes", []))
    if "fused CUDA kernel" in notes:
        return "fused attention as the CUDA dispatcher picks it (virtual cuda)"
    return "math attention (virtual cuda)"


def _is_measured(series_name: str) -> bool:
    """A real run's series (``measured (scale, device)``), not a full-size estimate."""
    return series_name.startswith("measured")


def _deciding(m, series: dict) -> tuple:
    """(series that decide, series shown 'on your machine') of C19/C21: the full-size estimates, and a
    real run's series only when it ran at full size on a GPU."""
    real_full = m.on_gpu and m.scale == "full"
    decide = {k: v for k, v in series.items() if v and (not _is_measured(k) or real_full)}
    shown = {k: v for k, v in series.items() if v and k not in decide}
    return decide, shown


def _seq_scope(m, decide: dict) -> "dict | None":
    """C19/C21's scope when a GPU's real full-size series decides beside the estimates (else the basis's)."""
    if not any(_is_measured(k) for k in decide):
        return None
    from nogradlab.claims.verdict import estimate_validation

    return {"basis": "measured", "text": f"measured here: {m.label}, beside full-size estimates by "
                                         f"{estimate_validation(m.protocol)[0]}"}


def _grows(rows) -> bool:
    s = [r["memory_saved"] for r in sorted(rows, key=lambda r: r["seq_len"])]
    return all(b >= a for a, b in zip(s, s[1:])) and s[-1] > s[0]


C19 = declare(
    "C19", case_quantity=("rise of the share saved", "points"),
    section='5', kind='numeric', notebook=NOTEBOOK, basis="estimate",
    estimates_at="full",  # its article-sized models are estimated at full size
    tiny_cpu_threads=1,  # its check times or traces models: one thread in a tiny CPU run
    paraphrase='for transformers the saving is a little smaller when counted per token, but it builds up as sequences get longer',
    figure=None,
    rule=Rule("The fraction of memory saved by no_grad (1 - no_grad forward's peak / grad forward's, totals) is read "
              "per series of full-size "
              "estimates of transformer_base against sequence length (the allocator model on a virtual CUDA "
              "device, and fused attention on a fake CPU device; a GPU's own real series at full size too): "
              "agrees when it grows monotonically; holds when every deciding series grows, does not hold when "
              "none does, depends otherwise. Only this half of the claim is judged, and the verdict says so: "
              "the first half ('slightly smaller' than the feed-forward networks of the article's sentence "
              "before, 20-40 %) compares with C18's workloads, outside this claim's measurements, and its "
              "shortest-length saving is shown, not judged. The article's mechanism, savings that compound per "
              "token, is read from the saved-for-backward bytes per token: where they stay flat or fall the "
              "summary says so and that compounding per token is not observed (only the fraction of memory saved "
              "grows, because the fixed weights weigh less). A tiny real run is shown 'on your machine', never deciding."))


@C19.measures
def c19(ctx):
    """Memory saved vs sequence length for transformer_base (see :func:`_seq_sweep`); the saving
    per token is the saved-for-backward bytes per token. Knobs: ``seq_lens`` (two or more)."""
    if ctx.params.get("seq_lens") and len(ctx.params["seq_lens"]) < 2:
        raise ValueError(f"C19 needs two or more sequence lengths, got seq_lens={ctx.params['seq_lens']!r}")
    sw = _seq_sweep(ctx, C19.estimates_at)
    series = {k: v for k, v in {f"measured ({ctx.scale}, {ctx.device})": sw["measured"],
                                **sw["estimated_full_size"]}.items() if v}
    per_token = {k: [round(r["saved_per_token_bytes"] / 1024, 1) for r in v] for k, v in series.items()}
    return {"series": series, "saved_per_token_kib": per_token,
            "estimated_series": [k for k in sw["estimated_full_size"] if sw["estimated_full_size"][k]],
            "baseline": "eval+grad forward", "case": "eval+no_grad forward",
            "notes": sw["notes"] + ["memory measured with nn.TransformerEncoder's fused fast path off (its "
                                    "temporaries are invisible to the tracker)"]}


def _series_text(k, v) -> str:
    return (f"{k}: {_pct(v[0]['memory_saved'])} at {v[0]['seq_len']} -> {_pct(v[-1]['memory_saved'])} at "
            f"{v[-1]['seq_len']} tokens")


@C19.judges
def judge_c19(m, rule):
    series = {k: sorted(v, key=lambda r: r["seq_len"]) for k, v in m["series"].items()}
    decide, shown = _deciding(m, series)
    decide = {k: v for k, v in decide.items() if len(v) > 1}
    if not decide:
        raise NeedsRemeasuring("no full-size series of two or more sequence lengths")
    # the figure is a rise in the share saved between two lengths: its name says so, in points
    conds = [{"condition": f"{k}: share saved {round(100 * (v[-1]['memory_saved'] - v[0]['memory_saved'])):+d} points, "
                           f"{v[0]['seq_len']}->{v[-1]['seq_len']} tokens",
              "value": v[-1]["memory_saved"] - v[0]["memory_saved"], "ci": None,
              "reading": "agrees" if _grows(v) else "disagrees", "side": None if _grows(v) else "below",
              "rounds": None, "rounds_to_decide": None, "estimated": not _is_measured(k)} for k, v in decide.items()]
    verdict = verdict_of(c["reading"] for c in conds)
    flat = [c["condition"].split(": share saved")[0] for c in conds if c["reading"] == "disagrees"]
    per_token = {k: [round(r["saved_per_token_bytes"] / 1024, 1) for r in v] for k, v in series.items()}
    tok_grows = {k: v[-1] > 1.05 * v[0] for k, v in per_token.items() if k in decide}

    def way(v):  # bytes per token from the shortest to the longest length
        return "grows" if v[-1] > 1.05 * v[0] else "falls" if v[-1] < v[0] else "flat (within 5 %)"

    tok = "; ".join(f"{k}: {per_token[k][0]} -> {per_token[k][-1]} KiB ({way(per_token[k])})" for k in tok_grows)
    first = [v[0]["memory_saved"] for v in decide.values()]
    shortest = min(v[0]["seq_len"] for v in decide.values())
    first_text = (f"{min(first):.0%}" if f"{min(first):.0%}" == f"{max(first):.0%}" else
                  f"{min(first):.0%}-{max(first):.0%}")
    side = (", more than the 20-40 % the article gives the feed-forward networks, not less" if min(first) > 0.40
            else ", less than the feed-forward networks' 20-40 %" if max(first) < 0.20 else "")
    if not any(tok_grows.values()):
        fall = all(way(per_token[k]) == "falls" for k in tok_grows)
        compound = ("Compounding per token is not observed: the bytes saved per token "
                    + ("fall" if fall else "stay flat or fall") + " with length, so only the fraction of memory "
                    "saved grows, because the fixed weights weigh less at longer sequences.")
    elif all(tok_grows.values()):
        compound = ("The bytes saved per token grow too (kept L x L attention probabilities add a quadratic "
                    "term): the saving compounds per token.")
    else:
        compound = ("The bytes saved per token grow in " + ", ".join(k for k, g in tok_grows.items() if g)
                    + " (kept L x L attention probabilities add a quadratic term) and stay flat or fall in the "
                    "others, where compounding per token is not observed.")
    summary = (f"Judged on its second half only (the fraction of memory saved grows with sequence length): it grows in "
               f"{len(conds) - len(flat)} of {len(conds)} full-size series. {compound} "
               f"Fraction of memory saved by no_grad (grad vs no_grad forward, eval mode, totals incl. weights) vs sequence "
               f"length, full-size series: {'; '.join(_series_text(k, v) for k, v in decide.items())}; it grows "
               f"in {len(conds) - len(flat)} of {len(conds)} series"
               + (f" (not monotone: {', '.join(flat)}" if flat else "")
               + ("; a no_grad forward with math attention also materialises the L x L scores, so at the longest "
                  "lengths its own peak grows as fast as the grad one" if any("math" in k for k in flat) else "")
               + (")" if flat else "")
               + f". Saved-for-backward bytes per token: {tok}. "
               f"The first half, a saving slightly smaller than the feed-forward networks' of the article's "
               f"sentence before (20-40 %), is not judged here (C18 judges those workloads); shown, not deciding: "
               f"at {shortest} tokens the transformer saves {first_text}{side}.")
    if shown:
        summary += " On your machine (real runs, not deciding): " + "; ".join(
            _series_text(k, v) + (" (grows)" if len(v) > 1 and _grows(v) else " (not monotone)" if len(v) > 1 else "")
            for k, v in shown.items()) + "."
    reading = (f"Second half only: the fraction of memory saved grows with sequence length in {len(conds) - len(flat)} "
               f"of {len(conds)} full-size series" + ("; the bytes saved per token do not grow (compounding per token is "
                                                      "not observed)" if not any(tok_grows.values()) else "")
               + "; 'slightly smaller than the feed-forward networks' is not judged.")
    # the first line is read alone: it names the half the verdict rests on (display.headline)
    return Judgement(verdict, summary, reading, conds, _seq_scope(m, decide), qualifier="second half only")


C21 = declare(
    "C21", section='5', kind='numeric', notebook=NOTEBOOK, basis="estimate",
    estimates_at="full",  # its article-sized models are estimated at full size
    tiny_cpu_threads=1,  # its check times or traces models: one thread in a tiny CPU run
    chart_rank=3,
    key_chart=("C19/C21: memory saved against sequence length",
               "Transformer-base: share of peak memory that no_grad saves, per sequence length."),
    paraphrase='at long sequences the memory saving can exceed 40 %',
    figure='>40 %',
    rule=Rule("The memory saved by no_grad at the longest sequence of each series of full-size estimates (the "
              "allocator model on a virtual CUDA device, fused attention on a fake CPU device; a GPU's own real "
              "series at full size too) is read, unrounded, against 'more than 40 %': holds when every deciding "
              "series agrees, does not hold when none does, depends otherwise. A tiny real run is shown 'on your "
              "machine', never deciding.",
              band=Band("more than", 0.40)))


@C21.measures
def c21(ctx):
    """From the C19 sweep: does the saving exceed 40 % at long sequences, and from which length?"""
    sw = _seq_sweep(ctx, C21.estimates_at)
    series = {k: v for k, v in {f"measured ({ctx.scale}, {ctx.device})": sw["measured"],
                                **sw["estimated_full_size"]}.items() if v}
    longest = {k: max(v, key=lambda r: r["seq_len"]) for k, v in series.items()}
    return {"longest": longest, "series": series,
            "estimated_series": [k for k in sw["estimated_full_size"] if sw["estimated_full_size"][k]],
            "baseline": "eval+grad forward", "case": "eval+no_grad forward"}


@C21.judges
def judge_c21(m, rule):
    series = {k: sorted(v, key=lambda r: r["seq_len"]) for k, v in m["series"].items()}
    decide, shown = _deciding(m, series)
    if not decide:
        raise NeedsRemeasuring("no full-size series")
    band = rule.band

    def first(v):
        return next((r["seq_len"] for r in v if band.read(r["memory_saved"]) == "agrees"), None)

    verdict, conds = read_conditions([(k, v[-1]["memory_saved"], None, None, None) for k, v in decide.items()], band,
                                     estimated=[not _is_measured(k) for k in decide])

    def part(k, v):
        since = first(v)
        return (f"{_pct(v[-1]['memory_saved'])} at {v[-1]['seq_len']} tokens for {k}; "
                + (f"over 40 % from {since} tokens on" if since else "never over 40 %"))

    lead = direction_text(conds, "more", "the saving stays under 40 % at the longest sequence", group=False)
    summary = ((f"{lead[0].upper()}{lead[1:]}. " if lead else "")
               + f"At the longest sequence of each full-size series the saving was "
               f"{'; '.join(part(k, v) for k, v in decide.items())}. Article: over 40 %.")
    if shown:
        summary += " On your machine (real runs, not deciding): " + "; ".join(part(k, v) for k, v in shown.items()) + "."
    n = sum(c["reading"] == "agrees" for c in conds)
    reading = f"The saving exceeds 40 % at long sequences in {n} of {len(conds)} full-size series."
    if shown:  # the local series as rows too, so a picture draws them, marked as not deciding
        _, local = read_conditions([(k, v[-1]["memory_saved"], None, None, None) for k, v in shown.items()], band,
                                   estimated=[not _is_measured(k) for k in shown])
        conds = conds + [dict(c, deciding=False) for c in local]
    return Judgement(verdict, summary, reading, conds, _seq_scope(m, decide))


def _train_step_timing(ctx, name, batch) -> "timing.Timing":
    """A training step (forward, loss, backward, SGD step) of (workload, scale, batch, device): its
    own quantity, measured once per run like the forward conditions."""
    knobs = _knobs(ctx)
    key = ("train_step", name, ctx.scale, int(batch), str(ctx.device), ctx.seed,
           tuple(sorted(knobs.items(), key=lambda kv: kv[0])))

    def make():
        wl, model, x, y = _build(name, ctx.scale, ctx.device, batch, ctx.seed)
        fn = _train_fn(wl, model.train(), x, y)
        with _torch_threads(knobs["num_threads"]), timing.timing_state(ctx.device, warm_fn=fn):
            t = timing.measure(fn, ctx.device, min_run_time=knobs["min_run_time"],
                               warmup=knobs["warmup"], num_threads=knobs["num_threads"],
                               label=f"{name} training step")
        del model, x, y
        return t

    return _runcache.shared(key, make)


def _signed_ci(v, lo, hi) -> str:
    return _format.percent_ci(v, lo, hi, signed=True)


def _fmt_band(band, kind) -> str:
    return (f"{_format.percent(band[0], 0)}-{_format.percent(band[1], 0)}" if kind == "pct"
            else f"{band[0]:.1f}-{_format.ratio(band[1], 1)}")


def _c20_speedup_edges(workload) -> list:
    """The speedups over grad at which the article's band of throughput gain for ``workload`` changes
    C20's reading (none for a workload outside the article's table)."""
    if workload not in ARTICLE_TABLE:
        return []
    a, b = ARTICLE_TABLE[workload]["speed"]
    return [1.0 + a, 1.0 + b]


def _c20_readings(v, protocol=None):
    """C20's readings of no_grad's time saving per workload at its speed batch (:func:`evidence.readings`)."""
    for r in _ev.rows(v):
        if "speed_case" in r:  # protocol 2: forward against forward, with its interval
            g = _ev.num(r.get("speed_gain"))
            ci = _ev.ci(r.get("speed_gain_ci"))
            yield (_ev.key_saving(r.get("workload"), r.get("speed_batch"), r.get("speed_case")),
                   _ev.saving(1 + g) if g is not None else None,
                   _ev.saving_ci([1 + x for x in ci]) if ci else None)
        elif protocol == 1 and "speed_gain_forward_only" in r:
            # protocol 1 timed the forward with grad against the forward without at speed_batch too, and
            # stored the gain without an interval: read like any interval-less reading (C13's cost), with the
            # column's own spread for it (at least POINT_TOLERANCE); its speed_gain is a training step's, not read
            g = _ev.num(r.get("speed_gain_forward_only"))
            yield (_ev.key_saving(r.get("workload"), r.get("speed_batch"), "no_grad"),
                   _ev.saving(1 + g) if g is not None else None, None)


C20 = declare(
    "C20", section='5', kind='numeric', notebook=NOTEBOOK, basis="mixed",
    estimates_at="full",  # its article-sized models are estimated at full size
    tiny_cpu_threads=1,  # its check times or traces models: one thread in a tiny CPU run
    speedup_edges=_c20_speedup_edges, stop_edges=_c20_speedup_edges, shared_readings=_c20_readings,
    chart_rank=0,  # leads the report, above the columns
    key_chart=("C20: the article's table, measured",
               "Grey: the article's band (16 GB GPU); blue: training step vs eval + no_grad forward."),
    paraphrase='the table: memory saved / speed gained / batch factor per model class, training vs eval+no_grad on a 16 GB GPU',
    figure='ResNet-50 30-35 % / 25-30 % / 1.8-2.2x; Transformer-base 25-30 % / 20-25 % / 1.6-1.9x; U-Net 35-40 % / 30-35 % / 2.0-2.3x; two-layer MLP 15-20 % / 10-15 % / 1.2-1.4x',
    rule=Rule("Each cell of the article's table is read against its band (unrounded; inside agrees, outside "
              "disagrees, a CI across an edge is unresolved): memory saved and batch factor compare eval+no_grad "
              "inference with a training step, as the article's table does (gradients and optimizer state "
              "included, not only what no_grad removes: the forward-against-forward memory saving is shown "
              "beside each memory cell), from the full-size estimates on a virtual 16 GiB CUDA device; speed = throughput gain of the forward "
              "without grad over the forward with grad (forward against forward; shared timing, 95 % CI, at least 10 rounds), "
              "measured on a GPU: off a GPU the reference GPU's; a speed gain the column stored without an interval "
              "(an older protocol's) is read as every interval-less timing is: with the widest spread the column "
              "measured for that timing, never less than 2 points of time saved. Judged with and without the transformer's "
              "fused fast path; where the two differ, 'depends' on the fused path. Over the cells: " + AGGREGATE
              + "; the training-step comparison is shown, not counted." + SELF_CONTRADICTION,
              tie=TIE, min_samples=MIN_BOOTSTRAP_ROUNDS))


@C20.measures
def c20(ctx):
    """Every cell of the article's table, per workload:

    * memory saved: ``1 - total_peak(eval+no_grad forward) / total_peak(training step)`` at the
      workload's full-size default batch, estimated on a virtual CUDA device, compared with the
      band as printed (whole percent);
    * speed gain: forward with grad against forward without grad (eval mode), the throughput gain
      ``t_grad / t_no_grad - 1`` with its 95 % CI, from the shared timing of the condition
      (:func:`forward_condition`; the transformer without its fused fast path, as in C03); the
      cell agrees when the CI overlaps the band. The training step against the no_grad forward
      (the article's "training versus evaluation" taken literally) is its own labelled row, with
      an unpaired CI, and does not decide a cell;
    * batch factor: largest eval+no_grad batch / largest training batch in 16 GiB
      (:func:`nogradlab.batch.largest_batch`, estimates on a virtual CUDA device, full size),
      compared with the band as printed (one decimal).

    Knobs: ``workloads``, ``batch_factor`` (False skips the largest-batch searches).
    """
    names = _names(ctx)
    do_batch = ctx.params.get("batch_factor", True)
    at = C20.estimates_at
    rows = []
    for name in names:
        art = ARTICLE_TABLE[name]
        full_b = workloads.get(name, at).default_batch
        tr = estimate_row(name, full_b, "train", scale=at)
        ev = estimate_row(name, full_b, "eval+no_grad", scale=at)
        gr = estimate_row(name, full_b, "eval+grad", scale=at)
        mem = memory_saved(tr["total_peak_bytes"], ev["total_peak_bytes"])
        mem_fwd = memory_saved(gr["total_peak_bytes"], ev["total_peak_bytes"])

        wl = workloads.get(name, ctx.scale)
        b = _speed_batch(ctx, wl)
        c = forward_condition(ctx, wl, b)
        case = "no_grad (fast path off)" if "no_grad (fast path off)" in c.settings else "no_grad"
        speed = c.triple(case, "gain")
        speed_fast = c.triple("no_grad", "gain")
        train, train_row = _c20_train_step(ctx, name, b, c)
        factor, batches = _c20_batch_factor(name, at) if do_batch else (None, {})
        row = {"workload": name, "article_label": art["label"],
               "memory_saved": mem, "memory_band": art["memory"],
               "speed_gain": speed[0], "speed_gain_ci": list(speed[1:]), "speed_band": art["speed"],
               "speed_case": case, "speed_batch": b, "speed_scale": ctx.scale,
               "speed_rounds": c.comparison.rounds,
               "speed_gain_with_fast_path": speed_fast[0], "speed_gain_with_fast_path_ci": list(speed_fast[1:]),
               "batch_factor": factor, "batch_band": art["batch"],
               "training_step_vs_no_grad_forward": train_row[0],
               "training_step_vs_no_grad_forward_ci": list(train_row[1:]) if train is not None else None,
               "memory_saved_forward_only": mem_fwd,
               "parameter_bytes": param_bytes(name, at), "grad_forward_total_bytes": gr["total_peak_bytes"],
               "time_saved": c.triple(case)[0],
               "train_total_bytes": tr["total_peak_bytes"], "eval_no_grad_total_bytes": ev["total_peak_bytes"],
               "memory_batch": full_b, "largest_batch": batches, "estimate_notes": sorted(set(tr["notes"] + ev["notes"])),
               "timing": {"grad_forward": c.comparison.timings["grad"].median,
                          "no_grad_forward": c.comparison.timings[case].median,
                          "train_step": train.median if train is not None else None}}
        rows.append(row)
    return {"rows": rows,
            "provisional": _samples_note(ctx, "C20", [forward_condition(ctx, r["workload"], r["speed_batch"])
                                                      for r in rows]).strip(),
            "train_step_note": "" if any(r["training_step_vs_no_grad_forward"] is not None for r in rows)
            else _TRAIN_QUICK_NOTE,
            "definitions": dict(_C20_DEFINITIONS), "notes": list(_C20_NOTES)}


def _c20_train_step(ctx, name: str, batch: int, c) -> tuple:
    """C20's separate training-step row: ``(timing, (ratio - 1, low - 1, high - 1))`` of a training step
    against condition ``c``'s no_grad forward (unpaired bootstrap), or ``(None, (None, None, None))`` when
    the check does not time it (``train_step_timing``; off on a quick run)."""
    if not ctx.params.get("train_step_timing", not _quick(ctx)):
        return None, (None, None, None)
    train = _train_step_timing(ctx, name, batch)
    tr_ratio, (tr_lo, tr_hi) = timing.bootstrap_ratio(train.times, c.comparison.timings["no_grad"].times,
                                                      seed=ctx.seed)
    return train, (tr_ratio - 1, tr_lo - 1, tr_hi - 1)


def _c20_batch_factor(name: str, at: str) -> tuple:
    """C20's batch factor: ``(largest eval+no_grad batch / largest training batch, the two searches)``
    under 16 GiB, estimated on a virtual CUDA device (None when the training batch is 0)."""
    batches = {}
    with frozen_gc():  # CUDA estimates model the fused paths: no fast path off here
        for mode in ("train", "eval+no_grad"):
            # the search C04 makes for the same workload under 16 GiB (shared in one run)
            r = shared_largest_batch(name, mode, ARTICLE_GPU_BYTES, "cuda", scale=at,
                                     method="estimate", max_batch=2 ** 22)
            batches[mode] = {"batch": r.batch, "trials": len(r.trials), "seconds": r.seconds,
                             "notes": r.notes, "capped": bool(getattr(r, "capped", False))}
    factor = None
    if batches["train"]["batch"] > 0:
        factor = batches["eval+no_grad"]["batch"] / batches["train"]["batch"]
    return factor, batches


#: what each of C20's stored quantities is (its measurements' ``definitions``)
_C20_DEFINITIONS = {
    "memory_saved": "1 - total_peak(eval+no_grad forward) / total_peak(training step: "
                    "forward, loss, backward, SGD step), weights included; "
                    "memory.estimate at full size and default batch, virtual CUDA",
    "speed_gain": "throughput gain t(eval+grad forward)/t(eval+no_grad forward) - 1, the shared "
                  "forward timing, 95 % paired signed-rank CI",
    "training_step_vs_no_grad_forward": "t(training step)/t(eval+no_grad forward) - 1, the "
                  "training step measured on its own, unpaired bootstrap CI; shown, not counted",
    "memory_saved_forward_only": "1 - total_peak(eval+no_grad forward) / total_peak(eval+grad "
                                 "forward), same estimate; the training step also holds "
                                 "gradients (parameter_bytes)",
    "batch_factor": "largest batch eval+no_grad / largest batch training step under "
                    "16 GiB (batch.largest_batch, estimate, virtual CUDA, full size)"}

#: notes every C20 measurement carries
_C20_NOTES = ("the article's 'recurrent CNN (U-Net-style)' row is a U-Net: a convolutional "
              "encoder-decoder with skips, nothing recurrent",
              "each estimate's notes (estimate_notes) say what it modelled on the virtual CUDA device")


def _c20_speed(row, fused: bool) -> tuple:
    if fused and row.get("speed_gain_with_fast_path") is not None:
        return row["speed_gain_with_fast_path"], *row["speed_gain_with_fast_path_ci"]
    return row["speed_gain"], *row["speed_gain_ci"]


def _c20_cells(rows, speed_rows, fused: bool, err: float = 0.0, column: "dict | None" = None) -> list:
    """(name, value, lo, hi, rounds, band) per cell; a speed cell without a GPU timing is unresolved.
    Memory and batch cells are estimates whose two peaks (largest batches) are each within ``err`` of the
    real ones (:func:`nogradlab.claims.estimate_validation`): their interval carries that error."""
    speed_by = {r["workload"]: r for r in (speed_rows or [])}
    items = []
    for r in rows:
        w = r["workload"]
        mlo, mhi = saving_interval(r["memory_saved"], err) if err else (None, None)
        items.append((f"{w} memory", r["memory_saved"], mlo, mhi, None, Band("range", *r["memory_band"])))
        if r.get("batch_factor") is not None:
            capped = any(v.get("capped") for v in (r.get("largest_batch") or {}).values())
            if not capped:
                f = r["batch_factor"]  # a ratio of two largest batches, each within err
                blo, bhi = (f * (1 - err) / (1 + err), f * (1 + err) / (1 - err)) if err else (None, None)
                items.append((f"{w} batch", f, blo, bhi, None, Band("range", *r["batch_band"], unit="x")))
        sr = speed_by.get(w)
        band = Band("range", *r["speed_band"])
        if sr is None:
            items.append((f"{w} speed (no GPU timing)", r["speed_band"][0] - 1.0, -math.inf, math.inf, None, band))
        else:
            if "speed_case" not in sr:  # protocol 1: its speed_gain is a training step's; its forward-vs-forward
                fwd = sr.get("speed_gain_forward_only")  # gain was stored without an interval: read with the
                if fwd is None:  # tolerance every interval-less reading gets (evidence.POINT_TOLERANCE)
                    items.append((f"{w} speed (forward gain stored without an interval)",
                                  r["speed_band"][0] - 1.0, -math.inf, math.inf, None, band))
                    continue
                lo, hi = _tolerated_gain(fwd, column, w, sr.get("speed_batch"))
                lent, beside = _c20_same_column(column, w, sr.get("speed_batch"))
                items.append((f"{w} speed ({lent + '; ' if lent else ''}forward gain stored without an interval"
                              + (f"; same column: {beside}" if beside else "") + ")", fwd, lo, hi, None, band))
                continue
            v, lo, hi = _c20_speed(sr, fused)
            items.append((f"{w} speed", v, lo, hi, sr.get("speed_rounds"), band))
    return items


def _tolerated_gain(gain: float, column: "dict | None" = None, workload: str = "", batch=None) -> tuple:
    """A throughput gain stored without an interval, read as every interval-less time reading is
    (:func:`nogradlab.claims.evidence.readings`): with the widest spread the column measured for the same timing
    (another claim's interval of that workload and batch), never less than
    :data:`~nogradlab.claims.evidence.POINT_TOLERANCE`, 2 points of time saved; as a gain."""
    saved = 1.0 - 1.0 / (1.0 + gain)
    kind, width = _ev.POINT_TOLERANCE["time saving"]
    lo_s, hi_s = saved - width, saved + width
    key = _ev.key_saving(workload, batch, "no_grad") if column else None
    mine = next((r for r in (column or {}).get(key, ()) if r.get("claim") == "C20" and not r.get("stored_interval")),
                None)
    if mine is not None and abs(mine.get("value", saved) - saved) < 1e-9:
        lo_s, hi_s = min(lo_s, mine["interval"][0]), max(hi_s, mine["interval"][1])
    hi_s = min(hi_s, 0.999)
    return 1.0 / (1.0 - lo_s) - 1.0, 1.0 / (1.0 - hi_s) - 1.0


def _c20_lenders(column: "dict | None", workload: str, batch) -> list:
    """The claims whose stored interval lends its spread to C20's interval-less gain of ``workload`` at
    ``batch`` (:func:`_tolerated_gain`); [] when the 2-point minimum is wider than every stored spread."""
    key = _ev.key_saving(workload, batch, "no_grad") if column else None
    rs = (column or {}).get(key, ())
    mine = next((r for r in rs if r.get("claim") == "C20" and not r.get("stored_interval")), None)
    if mine is None:
        return []
    width = _ev.POINT_TOLERANCE["time saving"][1]
    out = []
    stored = [r for r in rs if r.get("stored_interval")]
    for far in (lambda r: r["value"] - r["interval"][0], lambda r: r["interval"][1] - r["value"]):  # below, above
        if stored and far(mine) > width + 1e-12:  # the borrowed side: the widest stored spread on that side
            widest = max(far(r) for r in stored)
            out += [r["claim"] for r in stored if abs(far(r) - widest) < 1e-12 and r["claim"] not in out]
    return out


def _c20_same_column(column: "dict | None", workload: str, batch) -> tuple:
    """``(lent, beside)`` for C20's interval-less speed gain of ``workload`` at ``batch``: whose spread it
    borrows (``"X05's spread"``, '' when only the 2-point minimum) and the column's other timings of that
    workload as gains, the same batch first and the lender's with its interval (``"X05 +15% [+5%, +22%] at
    batch 32, C03 +10% at 16"``), read from the column, so that the borrowed spread is seen beside them."""
    lenders = _c20_lenders(column, workload, batch)
    others = sorted(((k[2], r) for k, rs in (column or {}).items()
                     if k[0] == "time saving" and k[1] == workload and k[3] == "no_grad"
                     for r in rs if r.get("claim") != "C20"),
                    key=lambda kr: (kr[0] != batch, kr[1]["claim"], kr[0]))

    def gain(s):
        return 1.0 / (1.0 - s) - 1.0

    parts, last = [], None
    for b, r in others:
        lo, hi = r["interval"] if r.get("stored_interval") else (None, None)
        text = (_format.percent_ci(gain(r["value"]), gain(lo), gain(hi), signed=True, noisy=False)
                if lo is not None and r["claim"] in lenders and b == batch  # the spread lent: shown in full
                else _format.percent(gain(r["value"]), 0, True) + ("" if lo is not None else " (no interval stored)"))
        at = f"at batch {b}" if b == batch else f"at {b}"
        parts.append(f"{text} {at}" if r["claim"] == last else f"{r['claim']} {text} {at}")
        last = r["claim"]
    lent = " and ".join(f"{c}'s" for c in lenders) + " spread" if lenders else ""
    return lent, ", ".join(parts)


def _c20_read(items) -> tuple:
    rows = []
    for name, v, lo, hi, n, band in items:
        # memory and batch cells are the allocator model's estimates on a virtual CUDA device; speed is timed
        _, (row,) = read_conditions([(name, v, lo, hi, n)], band, estimated=" speed" not in name)
        row["band"] = band.to_dict()
        rows.append(row)
    return verdict_of(r["reading"] for r in rows), rows


@C20.judges
def judge_c20(m, rule, ref=None):
    rows = m["rows"]
    speed_rows = rows if m.on_gpu else (ref["rows"] if ref is not None else None)
    err = estimate_validation(m.protocol)[1]
    column = m.column if m.on_gpu else (ref.column if ref is not None else None)  # the speed rows' column
    without, cells = _c20_read(_c20_cells(rows, speed_rows, False, err, column))
    with_, cells_on = _c20_read(_c20_cells(rows, speed_rows, True, err, column))
    verdict = without if with_ == without else "depends"
    desc = _c20_description(rows, cells, speed_rows)
    n_ok = sum(c["reading"] == "agrees" for c in cells)
    where = _c20_speed_source(m, ref, cells, speed_rows)
    lead = _c20_disagreements(rows, cells)
    n_open = sum(c["reading"] == "unresolved" for c in cells)
    if lead and n_open:
        lead += f"; {n_open} cell{'s' if n_open > 1 else ''} unresolved"
    summary = ((f"{lead[0].upper()}{lead[1:]}. " if lead else "")
               + f"{n_ok} of {len(cells)} cells lie in the article's band (memory and batch factor: full-size "
               f"estimates on a virtual 16 GiB CUDA device; {where}): {desc}.")
    summary += _c20_notes(m, rows, speed_rows, with_, without)
    return Judgement(verdict, summary, f"{n_ok} of {len(cells)} cells of the article's table are reproduced.", cells)


def _c20_cell_text(cells, speed_rows, name: str) -> str:
    """One cell of C20's table in words: its value with its interval and its reading, or why it has none."""
    c = next((c for c in cells if c["condition"].startswith(name)), None)
    if c is None:
        return "n/a"
    if "no GPU timing" in c["condition"]:
        return "needs a GPU timing"
    if "without an interval" in c["condition"]:
        sr = next((x for x in speed_rows or [] if x.get("workload") == name.split(" ")[0]), {})
        fwd = sr.get("speed_gain_forward_only")
        if fwd is None:
            return "no forward gain stored: unresolved, not counted"
        # the interval is assigned (the column's spread, at least 2 points), not measured: no "noisy" label;
        # whose spread, and the column's other timings of the workload beside it (from the condition's name)
        lent = c["condition"].split(" (", 1)[1].split(";")[0] if "spread;" in c["condition"] else ""
        beside = c["condition"].rsplit("same column: ", 1)[1][:-1] if "same column: " in c["condition"] else ""
        return (f"{fwd:+.0%} forward against forward, stored without an interval, read as "
                f"{_format.percent_ci(fwd, *c['ci'], signed=True, noisy=False)} ({c['reading']}"
                + (f"; spread borrowed from {lent[:-len(' spread')]} timing" if lent else "")
                + (f"; same column: {beside}" if beside else "") + ")")
    unit_x = c["band"]["unit"] == "x"
    val = (_format.ratio_ci(c["value"], *(c["ci"] or (None, None)), noisy=False) if unit_x else
           _signed_ci(c["value"], *c["ci"]) if c["ci"] else _format.percent(c["value"], 0))
    return f"{val} ({c['reading']})"


def _c20_description(rows, cells, speed_rows) -> str:
    """Each workload's row of C20's table in words: memory, speed and batch factor against the article's bands."""
    def cell(name):
        return _c20_cell_text(cells, speed_rows, name)

    def fwd_mem(r):
        x = r.get("memory_saved_forward_only")
        return "" if x is None else f", forward against forward: {_format.percent(x, 0)}"

    return "; ".join(
        f"{r['workload']}: memory against a training step {cell(r['workload'] + ' memory')} "
        f"(article {_fmt_band(r['memory_band'], 'pct')}{fwd_mem(r)}), "
        f"speed {cell(r['workload'] + ' speed')} (article +{_fmt_band(r['speed_band'], 'pct')}), batch "
        + (cell(r['workload'] + ' batch') if r.get("batch_factor") is not None and not any(
            v.get("capped") for v in (r.get("largest_batch") or {}).values())
           else "n/a" if r.get("batch_factor") is None else
           f">= {_format.ratio(r['batch_factor'])} or so (search limit: a capped search is a bound, not an answer)")
        + f" (article {_fmt_band(r['batch_band'], 'x')})" for r in rows)


def _c20_speed_source(m, ref, cells, speed_rows) -> str:
    """Where C20's speed cells come from: this GPU, the reference GPU column (an older protocol's gains
    stored without an interval named with how they are read), or nowhere yet."""
    older = [c for c in cells if "without an interval" in c["condition"]]
    timer = "this column" if m.on_gpu else f"the reference GPU column ({ref.label})" if ref is not None else ""
    gains = ", ".join(f"{r['workload']}" + (f"@{r['speed_batch']}" if r.get("speed_batch") else "")
                      + f" {r['speed_gain_forward_only']:+.0%}" for r in (speed_rows or [])
                      if r.get("speed_gain_forward_only") is not None)
    return (f"speed: {timer} (an older protocol) stored this claim's forward-vs-forward gain without an "
            f"interval ({gains}), each read with the spread the column measured for that timing, at least 2 "
            "points of time saved, as every interval-less timing is"
            if older else
            "speed on this GPU" if m.on_gpu else f"speed on the reference GPU ({ref.label})" if ref is not None
            else "speed needs a GPU timing (no reference GPU column usable by today's rule)")


#: C20's disagreeing cells in words, by kind and side. The memory and batch cells compare eval+no_grad
#: inference with a training step (gradients and optimizer state included), the speed cells a forward
#: with a forward: each kind says so in its own words
_C20_DISAGREES = {
    ("memory", "above"): "against a training step, eval+no_grad inference saves more memory than the "
                         "article's table says",
    ("memory", "below"): "against a training step, eval+no_grad inference saves less memory than the "
                         "article's table says",
    ("batch", "above"): "fits a larger batch than a training step by more than it says",
    ("batch", "below"): "fits a larger batch than a training step by less than it says",
    ("speed", "above"): "no_grad's forward gains more speed over a forward with grad than it says",
    ("speed", "below"): "no_grad's forward gains less speed over a forward with grad than it says"}


def _c20_disagreements(rows, cells) -> str:
    """C20's summary's lead: the cells outside the article's band, by kind (memory, batch, speed) and side;
    a memory cell adds what no_grad alone removes where its row measured that. '' when none disagrees."""
    def val(c):
        return _format.ratio(c["value"]) if c["band"]["unit"] == "x" else _format.percent(c["value"], 0)

    fwd_only = {r["workload"]: r.get("memory_saved_forward_only") for r in rows}

    def kind(c):
        return c["condition"].split(" ")[1] if " " in c["condition"] else ""

    parts = []
    for k in ("memory", "batch", "speed"):
        for side in ("above", "below"):
            cs = [c for c in cells if c["reading"] == "disagrees" and c.get("side") == side and kind(c) == k]
            if not cs:
                continue
            part = (f"{_C20_DISAGREES[(k, side)]} for {', '.join(c['condition'].split(' (')[0] for c in cs)} "
                    f"({', '.join(val(c) for c in cs)})")
            if k == "memory":
                fo = [fwd_only.get(c["condition"].split(" ")[0]) for c in cs]
                if all(x is not None for x in fo):
                    part += ("; of that, what no_grad alone removes (its forward against a forward with grad): "
                             + ", ".join(_format.percent(x, 0) for x in fo))
            parts.append(part)
    return "; ".join(parts)


def _c20_notes(m, rows, speed_rows, with_, without) -> str:
    """What follows C20's table in its summary, none of it counted: a fused fast path left out, a verdict
    that depends on it, this machine's own speed, the training-step row, a provisional column's note."""
    summary = ""
    fast = [r for r in (speed_rows or []) if r.get("speed_case", "no_grad") != "no_grad"
            and r.get("speed_gain_with_fast_path") is not None]
    summary += "".join(f" {r['workload']}'s speed above excludes its fused fast path (with it: "
                       f"{r['speed_gain_with_fast_path']:+.0%})." for r in fast)
    if with_ != without:
        summary += f" Depends on the fused path: {with_} with it, {without} without."
    if not m.on_gpu:
        local = "; ".join(f"{r['workload']} {_signed_ci(r['speed_gain'], *r['speed_gain_ci'])}" for r in rows)
        summary += f" On your machine ({m.label}), not counted: speed {local}."
    summary += _c20_training_step_note(m, rows, speed_rows)
    if m.get("provisional") and m.on_gpu:
        summary += " " + m["provisional"]
    return summary


def _c20_training_step_note(m, rows, speed_rows) -> str:
    """The separate, uncounted row: a training step against a no_grad forward (timed, noted, or an older
    protocol's speed timing), which is not a no_grad effect."""
    timed_train = [r for r in rows if r.get("training_step_vs_no_grad_forward") is not None]
    if timed_train:
        return (" Separate row, not counted: a training step vs a no_grad forward takes "
                + ", ".join(f"{r['workload']} {_signed_ci(r['training_step_vs_no_grad_forward'], *r['training_step_vs_no_grad_forward_ci'])}"
                            for r in timed_train)
                + " longer (not a no_grad effect: backward and the optimizer step are extra work).")
    if m.get("train_step_note"):
        return f" Separate row, not counted: a training step vs a no_grad forward, {m['train_step_note']}."
    # an older protocol timed the training step against the no_grad forward as its speed cells
    old_train = [r for r in (speed_rows or []) if "speed_case" not in r and r.get("speed_gain") is not None
                 and len(r.get("speed_gain_ci") or ()) == 2]
    if old_train:
        return (" Separate row, not counted: a training step vs a no_grad forward (the older protocol's "
                "speed timing) takes "
                + ", ".join(f"{r['workload']} {_signed_ci(r['speed_gain'], *r['speed_gain_ci'])}"
                            for r in old_train)
                + " longer (not a no_grad effect: backward and the optimizer step are extra work).")
    return ""


# --------------------------------------------------------------------------------------------
# figures: each claim's measurements drawn with nogradlab.plots


@C18.draws
def _figure_c18(ev, device, scale):
    rows = [{"workload": r["workload"], "mode": mode, "batch": r["batch"], "total_bytes": r[f"{mode}_total_bytes"]}
            for r in ev["measured"] for mode in ("grad", "no_grad")]
    return plots.memory_vs_batch(rows, device=device, scale=scale, title="Peak memory of one forward pass, "
                           "weights and input included (measured)")


@C21.draws
@C19.draws
def _figure_c21(ev, device, scale):
    return plots.saving_vs_length(ev["series"], device=device, scale=scale, threshold=0.40,
                            threshold_label="the article's mark (40 %)")


@C20.draws
def _figure_c20(ev, device, scale):
    # what each panel's dots are: memory and batch estimated at full size on a virtual GPU; speed timed on this
    # device, which decides only on a GPU (off one, the reference GPU's timings decide: the verdict's picture)
    on_gpu = str(device).startswith("cuda")
    mem, spd, bat = ("memory saved (%)\nestimated, full size", "speed gained (%)\n" + (
        "timed here" if on_gpu else "timed here: shown, not counted (the reference GPU decides)"),
        "batch factor (x)\nestimated, full size")
    rows = []
    for r in ev["rows"]:
        ci = r.get("speed_gain_ci") or (None, None)
        rows += [dict(workload=r["workload"], quantity=mem, measured=100 * r["memory_saved"],
                      low=100 * r["memory_band"][0], high=100 * r["memory_band"][1]),
                 dict(workload=r["workload"], quantity=spd, measured=100 * r["speed_gain"],
                      ci_low=None if ci[0] is None else 100 * ci[0], ci_high=None if ci[1] is None else 100 * ci[1],
                      low=100 * r["speed_band"][0], high=100 * r["speed_band"][1]),
                 dict(workload=r["workload"], quantity=bat, measured=r["batch_factor"],
                      low=r["batch_band"][0], high=r["batch_band"][1])]
    return plots.article_table(rows, device=device, scale=scale)
