"""Notebook 06, decorators contexts and autocast: the declarations and checks of C22, C23, C24, C28.

Each claim is declared once here (``declare``) beside its check (``@C.measures``) and its judge
(``@C.judges``); see ``nogradlab/claims/README.md``.
"""
from __future__ import annotations

import warnings


import torch
import torch.nn as nn

from nogradlab.core import modes

from nogradlab.claims.ledger import declare
from nogradlab.claims.result import Judgement
from nogradlab.claims.measure import _build, _forward_fn, _train_fn
from nogradlab.claims.probes import _OpRecorder, _error_text, _max_abs_diff, _tracking
from nogradlab.claims.rules import OLD_PROTOCOL_WIDENING, Band, Rule, TIE, proxy_text, widened_text, widening

NOTEBOOK = "06_decorators_contexts_and_autocast"


#: The autocast weight-cast cache and no_grad. pytorch/pytorch#112583 (2023: a no_grad forward inside autocast
#: left the next grad forward without part of its graph) was fixed by #113685 (2023: a cached cast lacking
#: gradient history is redone). The reverse-nesting failure the torch 2.9.1 column shows is a later one,
#: pytorch/pytorch#158232 (2025: "Incompatibility between torch.no_grad, torch.autocast, and FSDP2"; the
#: cache kept a cast made under no_grad), fixed by PR #165068 (cached casts always made with grad enabled;
#: merged December 2025; the torch 2.11.0 column reads the gradient intact).
AUTOCAST_CACHE_ISSUES = {
    "112583": "https://github.com/pytorch/pytorch/issues/112583",
    "158232": "https://github.com/pytorch/pytorch/issues/158232",
    "113685 (fix: redo a cached cast that lacks gradient history)":
        "https://github.com/pytorch/pytorch/pull/113685",
    "165068 (fix of 158232: cached casts always made with grad enabled)":
        "https://github.com/pytorch/pytorch/pull/165068",
}


def _low_precision(device: torch.device) -> torch.dtype:
    """The autocast dtype this check uses on ``device``: float16 on CUDA, bfloat16 elsewhere."""
    return torch.float16 if device.type == "cuda" else torch.bfloat16


C22 = declare(
    "C22", section='6', kind='semantic', notebook=NOTEBOOK,
    paraphrase='@torch.no_grad() as a decorator covers the whole function',
    figure=None,
    rule=Rule("Holds when @torch.no_grad() covers the whole function, helpers, generator resumes and "
                "the bare decorator form; depends when only plain functions are covered; does not hold when "
                "grad is on somewhere inside a decorated plain function or is not restored after it."))


@C22.measures
def c22(ctx):
    """``@torch.no_grad()`` covers the whole function (also helpers it calls, and restores on
    error); generators get the mode re-applied on each resume; bare ``@torch.no_grad`` works."""
    x = torch.randn(3, device=ctx.device, requires_grad=True)

    def helper(t):
        return torch.is_grad_enabled(), (t * 2).requires_grad

    @torch.no_grad()
    def predict(t):
        first = torch.is_grad_enabled()
        y = t * 2
        in_helper = helper(t)
        last = torch.is_grad_enabled()
        return {"grad_at_start": first, "grad_in_called_helper": in_helper[0],
                "helper_result_requires_grad": in_helper[1], "grad_at_end": last,
                "result_requires_grad": bool(y.requires_grad)}

    @torch.no_grad()
    def failing():
        raise ValueError("boom")

    @torch.no_grad()
    def gen():
        for _ in range(2):
            yield torch.is_grad_enabled()

    decorated = predict(x)
    after_call = torch.is_grad_enabled()
    _error_text(failing)
    after_error = torch.is_grad_enabled()
    g = gen()
    resumes, caller_between = [], []
    for mode_inside in g:
        resumes.append(mode_inside)
        caller_between.append(torch.is_grad_enabled())
    try:
        @torch.no_grad
        def bare(t):
            return torch.is_grad_enabled(), bool((t * 2).requires_grad)
        bare_result = {"works": True, "grad_inside": bare(x)[0], "result_requires_grad": bare(x)[1]}
    except Exception as e:  # noqa: BLE001 - an older torch refuses the bare form
        bare_result = {"works": False, "error": f"{type(e).__name__}: {e}"}
    return {"function": decorated, "grad_after_call": after_call, "grad_after_exception": after_error,
            "generator": {"grad_inside_at_each_resume": resumes, "caller_grad_between_resumes": caller_between},
            "bare_decorator": bare_result}


@C22.judges
def judge_c22(m, rule):
    decorated, after_call, after_error = m["function"], m["grad_after_call"], m["grad_after_exception"]
    resumes = m["generator"]["grad_inside_at_each_resume"]
    caller_between = m["generator"]["caller_grad_between_resumes"]
    bare = m["bare_decorator"]
    whole = (not any(decorated.values())) and after_call and after_error
    gen_ok = resumes == [False, False] and all(caller_between)
    bare_ok = bare["works"] and not bare["grad_inside"] and not bare["result_requires_grad"]
    inside = ("grad was off from first to last line and in the helper it called" if not any(decorated.values())
              else f"grad was NOT off throughout ({decorated})")
    summary = (f"Inside @torch.no_grad() {inside}; "
               f"restored after return ({after_call}) and after an exception ({after_error}). A decorated "
               f"generator had grad off at each resume {resumes} while its caller had it on between them "
               f"{caller_between}. Bare @torch.no_grad: "
               + ("works the same." if bare_ok else f"{bare}."))
    if whole and gen_ok and bare_ok:
        return Judgement("holds", summary)
    if whole:
        return Judgement("depends", summary)
    return Judgement("does not hold", summary)


C24 = declare(
    "C24", section='6', kind='semantic', notebook=NOTEBOOK,
    paraphrase='the torch.cuda.amp.autocast() pattern nested inside no_grad',
    figure=None,
    rule=Rule("Holds when autocast inside no_grad gives low-precision, untracked outputs with "
                "torch.autocast(device_type=...); a deprecation warning on the article's spelling is "
                "reported, not counted; depends only when the article's spelling fails or does nothing "
                "on a device where it should work; does not hold when the stacking itself fails."))


@C24.measures
def c24(ctx):
    """The article's ``torch.cuda.amp.autocast()`` inside no_grad: that spelling is deprecated;
    ``torch.autocast(device_type=...)`` gives low-precision outputs and no graph."""
    dev = ctx.device
    lin = nn.Linear(16, 16, device=dev)
    lin_cpu = lin if dev.type == "cpu" else nn.Linear(16, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            old_cm = torch.cuda.amp.autocast()
            err = None
        except Exception as e:  # noqa: BLE001 - recorded
            old_cm, err = None, f"{type(e).__name__}: {e}"
        old_run = None
        if old_cm is not None:
            with torch.no_grad(), old_cm:
                y = lin(torch.randn(4, 16, device=dev))
            old_run = {"device": str(dev), "dtype": str(y.dtype), **_tracking(y)}
    old_warnings = [{"category": w.category.__name__, "message": str(w.message)} for w in caught]
    deprecated = any(issubclass(w.category, (FutureWarning, DeprecationWarning)) and "deprecat" in
                     str(w.message).lower() for w in caught)

    def modern(device_type, model, dtype):
        x = torch.randn(4, 16, device=next(model.parameters()).device)
        with torch.no_grad(), torch.autocast(device_type=device_type, dtype=dtype):
            y = model(x)
        return {"device_type": device_type, "autocast_dtype": str(dtype), "output_dtype": str(y.dtype),
                **_tracking(y), "ok": y.dtype == dtype and not y.requires_grad and y.grad_fn is None}

    runs = [modern("cpu", lin_cpu, torch.bfloat16)]
    if ctx.on_gpu:
        runs.append(modern("cuda", lin, torch.float16))
    return {"torch.cuda.amp.autocast()": {"constructed": old_cm is not None, "error": err,
                                          "warnings": old_warnings, "deprecated": deprecated,
                                          "run_inside_no_grad": old_run},
            "torch.autocast": runs, "cuda_tested": ctx.on_gpu, "cuda_available": torch.cuda.is_available()}


@C24.judges
def judge_c24(m, rule):
    old = m["torch.cuda.amp.autocast()"]
    runs, on_gpu = m["torch.autocast"], m["cuda_tested"]
    old_run, err, deprecated = old["run_inside_no_grad"], old["error"], old["deprecated"]
    cuda_available = m.get("cuda_available", on_gpu)  # older columns: a CUDA run had CUDA
    where = (old_run or {}).get("device", "cuda" if on_gpu else "cpu").split(":")[0]
    summary = ("torch.autocast inside no_grad: " + "; ".join(
        f"{r['device_type']} -> {r['output_dtype']} outputs, requires_grad {r['requires_grad']}" for r in runs)
        + ("" if on_gpu else " (CUDA not tested: no GPU here)") + ". The article's "
        f"torch.cuda.amp.autocast() spelling {'is deprecated (FutureWarning)' if deprecated else 'did not warn'}"
        + (f"; on this {where} device it gave {old_run['dtype']} outputs" if old_run else "")
        + (" because autocast disabled itself without CUDA" if old_run and not cuda_available else "") + ".")
    # the article's spelling is judged only where it can work: on a CUDA device it must give fp16
    old_works = old_run is not None and (not on_gpu or old_run["dtype"] == "torch.float16")
    if not all(r["ok"] for r in runs):
        return Judgement("does not hold", summary)
    if on_gpu and (err or not old_works):
        return Judgement("depends", summary + (" The article's spelling failed here; the stacking works with "
                                               "torch.autocast(device_type=...)."))
    note = (" The stacking holds; the deprecation only asks for torch.autocast('cuda') instead."
            if deprecated else " The stacking holds.")
    if not on_gpu:
        note += " The article's CUDA spelling itself needs a GPU to be tested."
    return Judgement("holds", summary + note)


def _weight_casts(rec: _OpRecorder, shape) -> int:
    return sum(1 for n, s in rec.ops if n.startswith("_to_copy") and s == tuple(shape))


C28 = declare(
    "C28", section='FAQ', kind='semantic', notebook=NOTEBOOK,
    paraphrase='no_grad and autocast stack without interfering',
    figure=None,
    rule=Rule("Holds when no_grad outside autocast gives low-precision untracked outputs and the "
                "reverse nesting leaves later gradients intact; depends when only the outer form is safe; does "
                "not hold when the outer form gives tracked or full-precision outputs."))


@C28.measures
def c28(ctx):
    """Outer no_grad + inner autocast is safe for inference. Reverse nesting (autocast outside, a
    no_grad forward then a grad forward in the same region, where the autocast weight-cast cache
    could hand the grad forward a cast made without history: pytorch/pytorch#112583): does the
    gradient still reach the weights, equal to a clean run?"""
    dev = ctx.device
    dtype = _low_precision(dev)
    lin = nn.Linear(8, 8, device=dev)
    x = torch.randn(4, 8, device=dev)
    with torch.no_grad(), torch.autocast(dev.type, dtype=dtype):
        inf = lin(x)
    outer = {"output_dtype": str(inf.dtype), **_tracking(inf)}

    def grad_run(first_mode):
        """In one autocast region: an optional forward under ``first_mode``, then one with grad."""
        lin.zero_grad(set_to_none=True)
        with _OpRecorder() as rec, torch.autocast(dev.type, dtype=dtype):
            cache_on = torch.is_autocast_cache_enabled()
            if first_mode is not None:
                with modes.get(first_mode)():
                    lin(x)
            out = lin(x)
        if out.requires_grad:
            out.float().sum().backward()
        grad = None if lin.weight.grad is None else lin.weight.grad.detach().clone()
        return {"cache_enabled": cache_on, "weight_casts": _weight_casts(rec, lin.weight.shape),
                "output_requires_grad": bool(out.requires_grad)}, grad

    clean, ref = grad_run(None)
    reverse = {}
    for first in ("no_grad", "inference_mode"):
        info, grad = grad_run(first)
        info["weight_grad_is_none"] = grad is None
        info["weight_grad_max_abs_diff_vs_clean"] = None if grad is None else _max_abs_diff(grad, ref)
        info["gradient_intact"] = grad is not None and torch.allclose(grad, ref, rtol=1e-3, atol=1e-6)
        reverse[f"autocast{{ {first} forward; grad forward }}"] = info
    return {"device": str(dev), "autocast_dtype": str(dtype), "torch": torch.__version__,
            "outer_no_grad_inner_autocast": outer, "clean_grad_run": clean, "reverse_nesting": reverse,
            "references": AUTOCAST_CACHE_ISSUES}


@C28.judges
def judge_c28(m, rule):
    outer, reverse = m["outer_no_grad_inner_autocast"], m["reverse_nesting"]
    outer_ok = outer["output_dtype"] == m["autocast_dtype"] and not outer["requires_grad"]
    reverse_ok = all(r["gradient_intact"] for r in reverse.values())
    ng = reverse["autocast{ no_grad forward; grad forward }"]
    im = reverse["autocast{ inference_mode forward; grad forward }"]
    summary = (f"no_grad outside autocast: {outer['output_dtype']} output, "
               f"{'no graph' if not outer['requires_grad'] else 'TRACKED'}. Reverse nesting in torch "
               f"{m['torch']} on {m['device'].split(':')[0]} (autocast cache {'on' if ng['cache_enabled'] else 'off'}; "
               f"weight cast {ng['weight_casts']} time(s) for two forwards): the grad forward after a no_grad "
               f"forward gave a weight gradient {'equal to' if ng['gradient_intact'] else 'MISSING or unlike'} "
               f"that of a clean run; after an inference_mode forward: {'equal' if im['gradient_intact'] else 'BROKEN'}.")
    if outer_ok and reverse_ok:
        return Judgement("holds", summary)
    if outer_ok:
        return Judgement("depends", summary + " Safe as outer no_grad; the reverse nesting breaks training here: "
                                              "the autocast cache's bug pytorch/pytorch#158232 (a cast cached under "
                                              "no_grad reused by the grad forward), fixed by PR #165068 (merged "
                                              "December 2025), not pytorch/pytorch#112583 (fixed in 2023 by "
                                              "#113685).")
    return Judgement("does not hold", summary)


def _is_autograd_event(key: str) -> bool:
    return "autograd" in key.lower() or "Backward" in key or key.startswith("torch::autograd")


def _profile(fn, repeats: int) -> dict:
    """Self CPU time and op counts of ``fn`` run ``repeats`` times under the legacy autograd profiler:
    the same operator events torch.profiler records, without kineto. Kineto (even with
    ``use_kineto=False``) starts its activity profiler, which on a CUDA build of torch without a GPU
    writes ``gpuGetDeviceCount failed`` and USDT lines to the process's stderr, and takes seconds."""
    fn()
    try:
        from torch.autograd import profiler_legacy

        prof_ctx = profiler_legacy.profile()
        kind = "torch.autograd.profiler_legacy.profile()"
    except (ImportError, AttributeError, TypeError, RuntimeError):
        prof_ctx = torch.autograd.profiler.profile(use_kineto=False)
        kind = "torch.autograd.profiler.profile(use_kineto=False)"
    with prof_ctx as prof:
        for _ in range(repeats):
            fn()
    ev = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    auto = [e for e in ev if _is_autograd_event(e.key)]
    auto_us = sum(e.self_cpu_time_total for e in auto)
    return {"profiler": kind, "self_cpu_us": total, "ops": int(sum(e.count for e in ev)),
            "distinct_ops": len(ev), "autograd_self_cpu_us": auto_us,
            "autograd_share": auto_us / total if total else 0.0,
            "autograd_events": sorted({e.key for e in auto})[:20],
            "top_ops": [(e.key, int(e.count), float(e.self_cpu_time_total))
                        for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:8]]}


C23 = declare(
    "C23", section='6', kind='numeric', notebook=NOTEBOOK,
    tiny_cpu_threads=1,  # its check times or traces models: one thread in a tiny CPU run
    paraphrase='profiling shows about 28 % less time in autograd-related operators, plus about 10 % from larger batches',
    figure='28 % / 10 %',
    rule=Rule("Not testable for the 28 % / 10 % figures: no profiler reports 'autograd-related operator time' in "
              "a forward (events named after autograd appear only with backward), and the verdict rests on that, "
              "not on a timing. The proxies are read against 'about 28 %' and shown first, never deciding: the "
              "forward time no_grad saves from the shared forward timing of C03 (95 % CI), with the transformer's "
              "fused fast path and without it, then the fall of each workload's profiled host-side self CPU time "
              "under no_grad (on a GPU the CPU issuing the operators, not device time; single profiled runs without an "
              "interval: shown with no side). An older protocol's interval, which under-covers, is "
              + widened_text(OLD_PROTOCOL_WIDENING) + ", and gets no side either if it then crosses an edge. "
              "The mechanism is shown: "
              "the profile's autograd share and op counts.",
              band=Band("about", 0.28), tie=TIE))


@C23.measures
def c23(ctx):
    """The article's 28 % is a share of "autograd-related operators" in a profile; no profiler
    reports such a quantity for a forward pass (the graph is recorded inside each ordinary
    operator; events named after autograd appear only when backward runs), so the statistic is
    not testable. The mechanism is shown: the profile (autograd profiler, self CPU time and op
    counts) of a transformer and an mlp forward at ``ctx.scale`` with grad, without, and for the
    transformer without and with its fused fast path off; a training step for where autograd events
    do appear; and the forward time saved, read from the shared forward condition
    (:func:`~nogradlab.claims.measure.forward_condition`, the timing C03 reads: not timed twice).
    Knobs: ``repeats`` (calls per profile)."""
    from nogradlab.core import memory
    from nogradlab.core import workloads
    from nogradlab.claims.measure import _speed_batches, forward_condition

    reps = int(ctx.params.get("repeats", 3))
    if reps < 1:
        raise ValueError(f"repeats must be >= 1, got {reps}")
    out, forward = {}, []
    for name in ("transformer_base", "mlp"):
        wl = workloads.get(name, ctx.scale)
        b = _speed_batches(ctx, wl)[-1]
        c = forward_condition(ctx, wl, b)
        if c.comparison is not None:
            for case in ("no_grad", "no_grad (fast path off)"):
                if case in c.settings:
                    t = c.triple(case)
                    forward.append({"workload": name, "batch": b, "case": case, "time_saved": t[0],
                                    "time_saved_ci": [t[1], t[2]], "grad_ms": c.ms("grad"),
                                    "no_grad_ms": c.ms(case), "rounds": c.comparison.rounds})
        wl, model, x, y = _build(wl, wl.scale, ctx.device, b, ctx.seed)
        r = reps if name != "mlp" else 10 * reps  # the mlp's ops take microseconds
        fns = {"grad": _forward_fn(model, x, torch.enable_grad), "no_grad": _forward_fn(model, x, torch.no_grad)}
        profs = {mode: _profile(fn, r) for mode, fn in fns.items()}
        if name == "transformer_base":
            def fast_off(fn=fns["no_grad"]):
                with memory.fused_paths_off():
                    return fn()
            profs["no_grad (fast path off)"] = _profile(fast_off, r)
        if name == "mlp":
            profs["train_step"] = _profile(_train_fn(wl, model.train(), x, y), r)
        out[name] = dict(profs, batch=b)
        del model, x, y
    fwd_shares = [out[n][m]["autograd_share"] for n in out for m in ("grad", "no_grad")]
    train_share = {n: out[n]["train_step"]["autograd_share"] for n in out if "train_step" in out[n]}
    return {"profiles": out, "forward_autograd_shares": fwd_shares, "train_step_autograd_share": train_share,
            "forward": forward, "repeats": reps, "scale": ctx.scale,
            "timing": "shared per condition (nogradlab.claims.measure.forward_condition), as C03 reads it",
            "statistic": {"figures": "28 % / 10 %", "testable": False,
                          "why": "no profiler event class 'autograd-related operators' exists in a forward pass"},
            "autograd_event_rule": "name contains 'autograd' or 'Backward' (engine evaluate_function, "
                                   "backward nodes, AccumulateGrad)"}


@C23.judges
def judge_c23(m, rule):
    prof, shares = m["profiles"], m["forward_autograd_shares"]
    train_share = m.get("train_step_autograd_share") or {}
    tr, mlp = prof.get("transformer_base", {}), prof.get("mlp", {})
    ops = (f"transformer {tr['grad']['ops']} with grad, {tr['no_grad']['ops']} without"
           + (f" ({tr['no_grad (fast path off)']['ops']} with the fused fast path off: the fast path is a "
              "different kernel)" if "no_grad (fast path off)" in tr else " (the fused fast path: a different kernel)")
           + f"; mlp {mlp['grad']['ops']} with grad, {mlp['no_grad']['ops']} without") if tr and mlp else ""
    fwd = m.get("forward")
    if fwd:
        timed = "; ".join(f"{r['workload']}@{r['batch']} {r['case']} {r['time_saved']:.0%} "
                          f"[{r['time_saved_ci'][0]:.0%}, {r['time_saved_ci'][1]:.0%}] ({r['rounds']} rounds)"
                          for r in fwd)
        timed = (f"The forward time no_grad saves, from the shared forward timing C03 reads ({m.label}): "
                 f"{timed}.")
    else:  # older columns: one profiled run each
        drop = m.get("total_op_time_drop") or {}
        timed = ("Total operator self CPU time fell by " + ", ".join(f"{n} {v:.0%}" for n, v in drop.items())
                 + " (profiled runs, no shared timing: re-measure for the forward time with its CI)." if drop else "")
    drops = []  # the proxy the profiles give: the fall of the operators' self time under no_grad
    for w, p in prof.items():
        base = (p.get("grad") or {}).get("self_cpu_us") if isinstance(p, dict) else None
        for case in ("no_grad", "no_grad (fast path off)"):
            t = (p.get(case) or {}).get("self_cpu_us") if base else None
            if t is not None:
                drops.append((f"{w} {case}", 1 - t / base))
    if not drops:  # older columns stored the fall itself
        drops = [(f"{w} no_grad", v) for w, v in (m.get("total_op_time_drop") or {}).items()]
    def side(text):  # "inside", "above", "below", "across an edge", "across an edge once widened 2.5x ... (no side)"
        return text.split(" of the article's")[0].split(" the article's")[0]

    # a profiled fall is one run without an interval (it varies by several points between runs and releases):
    # shown without a side; a timed forward is read by its interval, with its protocol's edge margin
    proxies = [f"{name} {v:.0%}" for name, v in drops]
    proxies += [f"{r['workload']}@{r['batch']} {r['case']} {r['time_saved']:.0%} [{r['time_saved_ci'][0]:.0%}, "
                f"{r['time_saved_ci'][1]:.0%}] ({side(proxy_text(rule.band, r['time_saved'], *r['time_saved_ci'], widen=widening(m.protocol)))})"
                for r in (fwd or [])]
    # the profiler's self time is the host's: on a GPU it is the CPU issuing the operators (kernel launches
    # included), not the device's time, and the profiles were taken at the column's profiling scale
    scale = m.get("scale") or m.scale
    host = (f"host-side self CPU time of the {scale} models" + (" (the CPU issuing the operators, not device time)"
                                                                if m.on_gpu else "")
            + f" fell by {'; '.join(proxies[:len(drops)])} (single profiled runs, no interval: no side of the "
              f"band)") if drops else ""
    timed_proxy = ("the timed forward saved " + "; ".join(proxies[len(drops):])) if fwd else ""
    if m.on_gpu and not fwd and drops:
        timed_proxy = ("this column stored no timed forward for C23 (an older protocol: C03 reads the forward's "
                       "timed saving)")
    parts = [p for p in (timed_proxy, host) if p]  # the timed forward first: it is the quantity a learner feels
    proxy = (f"Proxies, not deciding, against the article's {rule.band.text()}: " + "; ".join(parts)) if parts else ""
    summary = ((proxy + ". " if proxy else "")
               + f"Not testable as stated: with grad on or off, a forward's profile has {max(shares):.0%} of its self "
               "time in events named after autograd (the graph is recorded inside each ordinary operator), so no "
               "profiler shows the article's 'autograd-related operator time'. "
               + (f"Op counts (profiled at scale {m.get('scale') or m.scale}): {ops}. " if ops else "")
               + (f"Autograd events appear only with backward: "
                  f"{', '.join(f'{n} {v:.1%}' for n, v in train_share.items())} of a training step's self time. "
                  if train_share else "")
               + timed + " The '10 % from larger batches' is no profiler quantity.")
    return Judgement("not testable", summary, "No profiler reports the quantity the 28 % is a share of; its "
                                              "proxies are shown against it, not counted.")

