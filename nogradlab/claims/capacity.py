"""Checks of the capacity claims: how large a batch fits, and what a server keeps per request.

Covered: C04 C09 C25.

* **Largest batch** comes from :func:`nogradlab.batch.largest_batch`, estimated on fake tensors
  (method ``"estimate"``: on the GPU's own device type when there is one, else on a *virtual* CUDA
  device of the article's size; the step's allocations, library workspaces included, replayed
  through the caching allocator's model under the cap, as ``nogradlab.allocator`` describes), with
  full-size models, whatever ``ctx.scale`` is: a 12 GiB budget only means something for the
  article's model sizes. On a real GPU, ``real_search`` says how many real OOM searches under a
  memory cap (method ``"search"``) check it: ``"one"`` by default (a notebook on a learner's GPU:
  C04's real searches alone took 183 s on an H200), ``"all"`` in the reference run
  (``benchmarks/gpu_reference.py``), ``"none"``.
  Modes: ``"train"`` (a training step), ``"grad"`` (a grad-enabled forward, eval mode) and
  ``"eval+no_grad"``.
* **C09's tolerance.** The article says "about 2.5x"; the check holds when the measured factor
  (largest eval+no_grad batch / largest training batch under 12 GiB) lies in [2.0, 3.0], i.e.
  2.5 +- 20 %, and does not hold outside it. The direction (more fits under no_grad) is reported
  separately.
* **Serving** (C25) uses :mod:`nogradlab.serving`: a real Tornado server on loopback, memory per
  request measured with :func:`nogradlab.memory.measure` around the model call.

At ``scale="tiny"`` on a CPU, C04 takes about 11 s, C09 about 15 s (a few more in a fresh process) and
C25 about 2 s on two busy cores: an estimate of a full-size model costs ~0.3-1 s whatever the scale,
and a search needs 5 to 20 of them, each replayed through the allocator's model. ``ctx.params`` knobs are
named in each docstring.
"""
from __future__ import annotations

import torch

from .. import batch as _batch
from .. import memory, serving, timing, workloads
from . import claim_check
from .rules import RULES

GiB = 2 ** 30
MiB = 2 ** 20
C09_TOLERANCE = RULES["C09"].band  # "about 2.5x", read as 2.5 +- 20 % (the rule lives in rules.py)
C09_FIGURE = 2.5
_MODES = ("train", "grad", "eval+no_grad")


def _quick(ctx) -> bool:
    return not ctx.on_gpu and ctx.scale == "tiny"


REAL_SEARCH = ("none", "one", "all")


def _real_search(ctx) -> str:
    """``ctx.params['real_search']``: how many real OOM searches a GPU run makes. ``"one"`` (the
    default: a notebook on a learner's GPU stays within minutes) estimates every batch and checks
    one of them with a real search; ``"all"`` searches every one for real (the reference run,
    benchmarks/gpu_reference.py); ``"none"`` estimates only. Ignored without a GPU."""
    v = ctx.params.get("real_search", "all" if ctx.reference else "one")
    if v not in REAL_SEARCH:
        raise ValueError(f"real_search must be one of {', '.join(REAL_SEARCH)}; got {v!r}")
    return v


def _method(ctx) -> tuple:
    """(device for largest_batch, method): the real GPU with real OOMs when ``real_search="all"``,
    else estimates (on the GPU's own device type when there is one, else a virtual CUDA device)."""
    if ctx.on_gpu:
        return (str(ctx.device), "search" if _real_search(ctx) == "all" else "estimate")
    _real_search(ctx)
    return ("cuda", "estimate")


def _one_real_search(ctx, name: str, budget: int, estimate: "_batch.BatchResult | None") -> "dict | None":
    """With ``real_search="one"`` on a GPU: one real OOM search (eval+no_grad) beside its estimate."""
    if not (ctx.on_gpu and _real_search(ctx) == "one"):
        return None
    # the estimate as the secant's second point: the real search starts beside it (same answer, fewer trials)
    hint = estimate.batch if estimate is not None and estimate.batch > 2 else None
    r = _batch.largest_batch(name, "eval+no_grad", budget, str(ctx.device), scale="full", method="search",
                             max_batch=2 ** 22, hint=hint)
    out = {"workload": name, "mode": "eval+no_grad", "budget_bytes": budget, "real": _row(r)}
    if estimate is not None:
        out["estimated_batch"] = estimate.batch
        out["estimate_over_real"] = estimate.batch / r.batch if r.batch else None
    return out


def _real_note(check: "dict | None") -> str:
    if check is None:
        return ""
    est = check.get("estimated_batch")
    return (f" One real OOM search checks the estimate: {check['workload']} eval+no_grad under "
            f"{memory.format_bytes(check['budget_bytes'])} fits {check['real']['batch']} for real"
            + (f" (estimate {est}, {check['estimate_over_real']:.2f}x)" if est is not None and
               check.get("estimate_over_real") else "")
            + "; real_search='all' searches every batch for real.")


def shared_largest_batch(name: str, mode: str, budget: int, dev, *, scale: str = "full",
                         method: str = "auto", **kw) -> _batch.BatchResult:
    """:func:`nogradlab.batch.largest_batch`, an estimate searched once per run and shared (C04 and
    C20 ask for the same ones): its answer is exact whatever ``start``/``hint`` say, so they are
    not part of the key. Real searches are not shared (they depend on what the device holds)."""
    if method != "estimate":
        return _batch.largest_batch(name, mode, budget, dev, scale=scale, method=method, **kw)
    mha = getattr(torch.backends, "mha", None)
    fast = mha.get_fastpath_enabled() if mha is not None and hasattr(mha, "get_fastpath_enabled") else None
    key = ("largest_batch", name, mode, int(budget), str(dev), scale, method, fast,
           tuple(sorted((k, repr(v)) for k, v in kw.items() if k not in ("start", "hint", "progress"))))
    return timing.shared(key, lambda: _batch.largest_batch(name, mode, budget, dev, scale=scale,
                                                            method=method, **kw))


def _row(r: _batch.BatchResult) -> dict:
    return {"workload": r.workload, "mode": r.mode, "budget_bytes": r.budget_bytes, "batch": r.batch,
            "method": r.method, "device": r.device, "scale": r.scale, "trials": len(r.trials),
            "bytes_at_batch": r.bytes_at(r.batch), "seconds": r.seconds, "notes": r.notes,
            "at_limit": r.at_limit, "allocated_before": r.allocated_before,
            "allocated_after": r.allocated_after, "allocator": r.allocator}


def _searches(name: str, budget: int, dev, method: str, scale: str = "full", **kw) -> dict:
    """``{mode: BatchResult}`` for ``_MODES``. The training step's search takes the grad forward's
    answer as its hint (a training step keeps about what a grad forward keeps, while its guess from
    batches 1 and 2 is poor: there it peaks at the optimizer step). The answers are exact anyway;
    the hint saves trials."""
    grad = shared_largest_batch(name, "grad", budget, dev, scale=scale, method=method, **kw)
    hint = grad.batch if grad.batch > 1 else None
    return {"train": shared_largest_batch(name, "train", budget, dev, scale=scale, method=method,
                                          hint=hint, **kw),
            "grad": grad,
            "eval+no_grad": shared_largest_batch(name, "eval+no_grad", budget, dev, scale=scale,
                                                 method=method, **kw)}


def _ratio(a: int, b: int) -> "float | None":
    return a / b if b else None


def _condition(workload: str, budget: int, res: dict, **where) -> dict:
    """One (workload, budget) row of C04: the batch per mode and how no_grad compares."""
    b = {m: r.batch for m, r in res.items()}
    return {"workload": workload, "budget_bytes": budget, "budget_gib": budget / GiB, **where, **b,
            "no_grad_over_grad": _ratio(b["eval+no_grad"], b["grad"]),
            "no_grad_over_train": _ratio(b["eval+no_grad"], b["train"]),
            "larger_than_grad": b["eval+no_grad"] > b["grad"],
            "larger_than_train": b["eval+no_grad"] > b["train"]}


# --------------------------------------------------------------------------------------------
# C04: no_grad lets larger batches fit


def default_budgets(ctx) -> tuple:
    """C04's GPU budgets in GiB: 12 alone in a learner's notebook (a quick CPU run, or any GPU run
    short of the reference: a second budget only repeats the direction at another size, and each
    costs every workload's three searches), 12 and 16 in the reference run (``real_search="all"``)
    and at small or full scale on a CPU."""
    if _quick(ctx) or (ctx.on_gpu and _real_search(ctx) != "all"):
        return (12.0,)
    return (12.0, 16.0)


@claim_check("C04")
def c04(ctx):
    """Largest batch per mode (train step, grad forward, eval+no_grad forward) under GPU-sized
    budgets, and the CPU's own answer at tiny scale checked against real runs.

    Knobs: ``workloads`` (GPU part; default ``mlp, unet`` for a quick CPU run, all four
    elsewhere), ``budgets_gib`` (:func:`default_budgets`), ``cpu_workload`` ("mlp" on a
    quick CPU run, else "unet"), ``cpu_budget_mib`` (4 for the MLP, else 32),
    ``compare_estimate`` (on a GPU, also run the estimate beside each real search; default True),
    ``real_search`` ("one"; see the module docstring).
    """
    names = list(ctx.params.get("workloads", ("mlp", "unet") if _quick(ctx) else workloads.names()))
    budgets = [float(b) for b in ctx.params.get("budgets_gib", default_budgets(ctx))]
    cpu_name = ctx.params.get("cpu_workload", "mlp" if _quick(ctx) else "unet")
    cpu_budget = int(float(ctx.params.get("cpu_budget_mib", 4 if cpu_name == "mlp" else 32)) * MiB)
    for n in names + [cpu_name]:
        workloads.get(n, "full")
    if not budgets or min(budgets) <= 0 or cpu_budget <= 0:
        raise ValueError("budgets_gib and cpu_budget_mib must be positive")
    dev, method = _method(ctx)
    also_estimate = method == "search" and ctx.params.get("compare_estimate", True)

    rows, conditions = [], []
    for name in names:
        for gib in budgets:
            res = _searches(name, int(gib * GiB), dev, method, max_batch=2 ** 22)
            rows += [_row(r) for r in res.values()]
            if also_estimate:
                est = _searches(name, int(gib * GiB), dev, "estimate", max_batch=2 ** 22)
                rows += [_row(r) for r in est.values()]
            conditions.append(_condition(name, int(gib * GiB), res, method=method, scale="full"))

    real_check = None
    if names and ctx.on_gpu and _real_search(ctx) == "one":  # its estimate is searched above (shared)
        est = shared_largest_batch(names[0], "eval+no_grad", int(budgets[0] * GiB), dev, method="estimate",
                                   max_batch=2 ** 22)
        real_check = _one_real_search(ctx, names[0], int(budgets[0] * GiB), est)
    if real_check is not None:
        est0 = next((r for r in rows if r["workload"] == names[0] and r["mode"] == "eval+no_grad"
                     and r["budget_bytes"] == int(budgets[0] * GiB)), None)
        if est0 is not None:
            real_check["estimated_batch"] = est0["batch"]
            rb = real_check["real"]["batch"]
            real_check["estimate_over_real"] = est0["batch"] / rb if rb else None
        rows.append(real_check["real"])

    # the CPU's own answer at tiny scale: estimated, then checked with real storage-tracked runs
    cpu, res = {}, _searches(cpu_name, cpu_budget, "cpu", "estimate", scale="tiny")
    for m, r in res.items():
        fit = _batch.measured_bytes(cpu_name, m, r.batch, "cpu", scale="tiny") if r.batch else None
        over = _batch.measured_bytes(cpu_name, m, r.batch + 1, "cpu", scale="tiny")
        cpu[m] = {"batch": r.batch, "real_total_at_batch": fit, "real_total_at_batch_plus_1": over,
                  "estimated_total_at_batch": r.bytes_at(r.batch),
                  "real_agrees": (fit is None or fit <= cpu_budget) and over > cpu_budget}
        rows.append(_row(r))
    conditions.append(_condition(cpu_name, cpu_budget, res, method="estimate", scale="tiny",
                                 device="cpu"))

    larger = [c["larger_than_grad"] for c in conditions]
    verdict = "holds" if all(larger) else "does not hold" if not any(larger) else "depends"
    same = sorted({c["workload"] for c in conditions if not c["larger_than_grad"]})
    how = (f"real OOM search on {dev}" if method == "search" else
           (f"estimates on fake {dev} tensors" if ctx.on_gpu else "estimates on a virtual CUDA device") +
           ", decided as the real cap decides: the step's allocations replayed through the CUDA caching "
           "allocator's model (native)")
    parts = [f"{c['workload']} {memory.format_bytes(c['budget_bytes'])}: train {c['train']}, "
             f"grad {c['grad']}, eval+no_grad {c['eval+no_grad']}" for c in conditions]
    if all(larger):
        finding = "no_grad fits a larger batch than a grad-enabled forward everywhere"
    else:
        finding = (f"no_grad fits no larger batch than a grad-enabled forward for {', '.join(same)} "
                   "(there the tensors autograd keeps are those alive at the forward's peak anyway)")
    n_train = sum(c["larger_than_train"] for c in conditions)
    summary = (f"Largest batch per mode ({how} for the GPU budgets; {cpu_name} at tiny scale on the "
               f"CPU, checked with real runs): {'; '.join(parts)}. {finding}; against a training "
               f"step it fits more in {n_train} of {len(conditions)} conditions.")
    if not all(a["real_agrees"] for a in cpu.values()):
        summary += " Real CPU runs disagree with the estimate at the CPU budget (see evidence)."
    summary += _real_note(real_check)
    evidence = {"conditions": conditions, "searches": rows, "cpu_check": cpu,
                "cpu_budget_bytes": cpu_budget, "budgets_gib": budgets, "modes": list(_MODES),
                "real_search": _real_search(ctx) if ctx.on_gpu else "none (no GPU)", "real_check": real_check,
                "definitions": {"train": "forward + loss + backward + SGD-momentum step",
                                "grad": "eval-mode forward with gradients enabled",
                                "eval+no_grad": "eval-mode forward under torch.no_grad",
                                "fits": "total peak (weights, buffers, inputs, step) <= budget"}}
    return verdict, summary, evidence


# --------------------------------------------------------------------------------------------
# C09: ResNet-50 on a 12 GB GPU: the eval+no_grad batch against the training batch


@claim_check("C09")
def c09(ctx):
    """ResNet-50 (224x224, full size) under a 12 GiB budget: largest training-step batch vs
    eval+no_grad forward (the article's comparison), and grad-enabled forward vs eval+no_grad.

    Knobs: ``budget_gib`` (12), ``workload`` ("resnet50"), ``real_search`` ("one"; see the module docstring).
    """
    gib = float(ctx.params.get("budget_gib", 12))
    name = ctx.params.get("workload", "resnet50")
    workloads.get(name, "full")
    if gib <= 0:
        raise ValueError(f"budget_gib must be positive, got {gib!r}")
    dev, method = _method(ctx)
    res = _searches(name, int(gib * GiB), dev, method)
    real_check = _one_real_search(ctx, name, int(gib * GiB), res["eval+no_grad"])
    b = {m: r.batch for m, r in res.items()}
    vs_train = _ratio(b["eval+no_grad"], b["train"])
    vs_grad = _ratio(b["eval+no_grad"], b["grad"])
    lo, hi = RULES["C09"].band
    if vs_train is None:
        verdict = "does not hold"
    else:  # the factor as printed (two decimals) against the band
        verdict = "holds" if lo <= round(vs_train, 2) <= hi else "does not hold"
    how = (f"real OOM search on {dev}" if method == "search" else
           (f"estimates on fake {dev} tensors" if ctx.on_gpu else "estimates on a virtual CUDA device") +
           ", decided as the real cap decides: the step's allocations replayed through the CUDA caching "
           "allocator's model (native)")
    summary = (f"{name} under {gib:g} GiB ({how}): largest training-step batch {b['train']}, "
               f"grad-enabled forward {b['grad']}, eval+no_grad forward {b['eval+no_grad']}; "
               f"eval+no_grad fits {vs_train:.2f}x the training batch (article ~{C09_FIGURE}x, "
               f"tolerance {lo}-{hi}x) and {vs_grad:.2f}x the grad-enabled forward's. "
               if vs_train is not None and vs_grad is not None else
               f"{name} under {gib:g} GiB ({how}): batches {b}; a ratio is undefined. ")
    if vs_train is not None:
        summary += (("The direction holds (more fits under no_grad); " if vs_train > 1 else
                     "Not even the direction holds (no more fits under no_grad); ")
                    + ("the factor matches the article's." if verdict == "holds" else
                       f"the factor is {'larger' if vs_train > hi else 'smaller'} than the article's."))
    summary += _real_note(real_check)
    evidence = {"budget_bytes": int(gib * GiB), "workload": name, "batches": b,
                "no_grad_over_train": vs_train, "no_grad_over_grad": vs_grad,
                "article_factor": C09_FIGURE, "tolerance": list(C09_TOLERANCE), "method": method,
                "searches": [_row(r) for r in res.values()], "real_check": real_check,
                "real_search": _real_search(ctx) if ctx.on_gpu else "none (no GPU)",
                "bytes_per_sample": {m: _slope(r) for m, r in res.items()}}
    return verdict, summary, evidence


def _slope(r: _batch.BatchResult) -> "float | None":
    """Bytes per extra sample between the two largest batches that fitted in the search."""
    fit = sorted((b, n) for b, ok, n in r.trials if ok and n is not None)
    if len(fit) < 2 or fit[-1][0] == fit[-2][0]:
        return None
    (b0, n0), (b1, n1) = fit[-2], fit[-1]
    return (n1 - n0) / (b1 - b0)


# --------------------------------------------------------------------------------------------
# C25: the serving statistic (not testable) and its mechanism (tested)


@claim_check("C25")
def c25(ctx):
    """The survey figures (87 % / 2.1x) have no source: not testable. The mechanism is tested on a
    real Tornado server on 127.0.0.1: memory per request without no_grad, with no_grad, when the
    handler keeps its outputs (with grad and under no_grad: the difference is the graphs' share),
    and "under load": several concurrent clients (bounded in count and time) served by as many
    worker threads, grad vs no_grad.

    Knobs: ``requests`` per variant (8 on a quick CPU run, else 25; under load as many, spread
    over the clients, at least two each), ``clients`` (4; at most ``serving.MAX_CLIENTS``),
    ``workload`` ("mlp"), ``batch``, ``deadline_s`` (60).
    """
    n = int(ctx.params.get("requests", 8 if _quick(ctx) else 25))
    k = int(ctx.params.get("clients", 4))
    deadline = float(ctx.params.get("deadline_s", 60))
    name = ctx.params.get("workload", "mlp")
    workloads.get(name, ctx.scale)
    if not 1 <= k <= serving.MAX_CLIENTS:
        raise ValueError(f"clients must be in [1, {serving.MAX_CLIENTS}], got {k}")
    variants = ("grad", "no_grad", "keep_outputs", "keep_outputs_no_grad")
    res = serving.compare(variants, n=n, workload=name, scale=ctx.scale, device=ctx.device,
                          batch=ctx.params.get("batch"))
    load = {v: serving.run(v, max(n, 2 * k), workload=name, scale=ctx.scale, device=ctx.device,
                           batch=ctx.params.get("batch"), clients=k, deadline_s=deadline)
            for v in ("grad", "no_grad")}
    s = {v: r.summary() for v, r in res.items()}
    sl = {v: r.summary() for v, r in load.items()}
    fmt = memory.format_bytes
    grow_g = s["keep_outputs"]["held_growth_per_request"]
    grow_ng = s["keep_outputs_no_grad"]["held_growth_per_request"]
    graph_share = 1 - grow_ng / grow_g if grow_g else None
    summary = (
        "Not testable: the 87 % share and the 2.1x risk come from an unnamed survey. The mechanism, "
        f"measured on a Tornado server on 127.0.0.1 ({name}, {ctx.scale}, {ctx.device}): one request at a time, "
        f"without no_grad each request saves {fmt(s['grad']['saved_bytes_per_request'])} for a backward that "
        f"never comes (freed after the response), with no_grad {fmt(s['no_grad']['saved_bytes_per_request'])}. "
        f"Under load ({k} concurrent clients, {len(load['grad'].requests)} requests, {k} worker threads): up to "
        f"{sl['grad']['max_concurrent_calls']} model calls ran at once without no_grad, each keeping "
        f"{fmt(sl['grad']['saved_bytes_per_request'])} for backward while it ran "
        f"({fmt(sl['no_grad']['saved_bytes_per_request'])} with no_grad, {sl['no_grad']['max_concurrent_calls']} at once); at most "
        f"{sl['grad']['max_alive_outputs']} outputs were alive at once, holding up to "
        f"{fmt(sl['grad']['max_in_flight_bytes'])} without no_grad, vs {sl['no_grad']['max_alive_outputs']} holding "
        f"{fmt(sl['no_grad']['max_in_flight_bytes'])} with it (each output without no_grad drags its graph). A handler that keeps its outputs grows by {fmt(grow_g)} per request with grad and "
        f"{fmt(grow_ng)} under no_grad"
        + (f": the graphs are {graph_share:.0%} of that growth, the outputs the rest" if graph_share is not None else "")
        + ". Kept outputs, not the missing no_grad alone, grow until memory runs out; no_grad shrinks what "
        "each kept output drags along.")
    series = {v: {"request": [a["index"] for a in r.requests],
                  "held_bytes": [a["held_bytes"] for a in r.requests],
                  "saved_bytes": [a["saved_bytes"] for a in r.requests],
                  "peak_bytes": [a["peak_bytes"] for a in r.requests],
                  "latency_s": [a["latency_s"] for a in r.requests]} for v, r in res.items()}
    evidence = {"statistic": {"figures": "87 % / 2.1x", "testable": False,
                              "why": "survey with no named source, sample or method"},
                "memory_method": res["grad"].memory_method + " (memory.measure around the model "
                                 "call, in the thread that runs it)",
                "summaries": s, "series": series, "workload": name, "scale": ctx.scale,
                "batch": res["grad"].batch, "requests": n,
                "under_load": {"clients": k, "deadline_s": deadline, "summaries": sl,
                               "alive_outputs": {v: [a["alive_outputs"] for a in r.requests] for v, r in load.items()},
                               "concurrent_calls": {v: [a["concurrent_calls"] for a in r.requests]
                                                    for v, r in load.items()},
                               "in_flight_bytes": {v: [a["in_flight_bytes"] for a in r.requests] for v, r in load.items()}},
                "graph_share_of_kept_growth": graph_share,
                "definitions": {"graph_share_of_kept_growth": "1 - growth per request(keep_outputs under no_grad) / "
                                                             "growth per request(keep_outputs with grad)",
                                "max_in_flight_bytes": "the largest sum, at any answer, of the bytes retained by "
                                                       "outputs alive at that moment (its own and those of "
                                                       "requests in flight beside it)"}}
    return "not testable", summary, evidence
