"""Notebook 09, beyond no grad: the declarations and checks of X01, X05.

Each claim is declared once here (``declare``) beside its check (``@C.measures``) and its judge
(``@C.judges``); see ``nogradlab/claims/README.md``.
"""
from __future__ import annotations

import torch


from nogradlab.core import format as _format
from nogradlab.core import timing
from nogradlab.core import workloads
from nogradlab.claims.ledger import declare
from nogradlab.claims.result import Judgement
from nogradlab.claims import evidence as _ev
from nogradlab.claims.measure import _beats, _build, _compile_reason, _forward_fn, _knobs, _lever_batches, _names, _samples_note, _speed_batch, _tier_line, _tiers, _torch_threads, forward_condition
from nogradlab.claims.probes import _error_text
from nogradlab.claims.rules import AGGREGATE, MIN_BOOTSTRAP_ROUNDS, Rule, SELF_CONTRADICTION, TIE, verdict_of
from nogradlab.claims import runcache as _runcache

NOTEBOOK = "09_beyond_no_grad"


X01 = declare(
    "X01", section='beyond', kind='semantic+numeric', notebook=NOTEBOOK,
    paraphrase='torch.inference_mode skips more than no_grad (version counters, view tracking), and the tensors it makes are not for computations autograd records later (the documented contract)',
    figure=None,
    rule=Rule("Holds when inference_mode tensors skip version counting and view tracking (no_grad's keep "
                "both) and cannot be saved for a later backward, as documented; otherwise does not hold. Its "
                "forward speed against no_grad (the shared forward timing) is shown, not judged."))


@X01.measures
def x01(ctx):
    """inference_mode: no version counter, no view tracking, and inference tensors cannot be saved
    for backward; its forward speed against no_grad comes from the shared forward timing
    (:func:`_x01_timing`), shown beside the verdict and never part of it."""
    dev = ctx.device
    with torch.no_grad():
        a = torch.ones(4, 4, device=dev)
        v = a[0]
        a.add_(1)
    ng = {"is_inference": a.is_inference(), "version_after_one_inplace": a._version,
          "view_is_tracked": v._is_view() and v._base is a}
    with torch.inference_mode():
        b = torch.ones(4, 4, device=dev)
        vb = b[0]
        b.add_(1)
    inf = {"is_inference": b.is_inference(), "version_counter": _error_text(lambda: b._version),
           "view_is_tracked": vb._is_view()}
    w = torch.randn(4, 4, device=dev, requires_grad=True)
    restriction = {"saved_for_backward (w * inference_tensor)": _error_text(lambda: (w * b).sum()),
                   "inplace_outside_inference_mode": _error_text(lambda: b.add_(1)),
                   "clone_is_a_normal_tensor": not b.clone().is_inference()}
    return {"no_grad_tensor": ng, "inference_tensor": inf, "restriction": restriction,
            "timing": _x01_timing(ctx)}


def _x01_timing(ctx) -> dict:
    """inference_mode against no_grad, read from the shared forward timing of the MLP at its lever
    batch (:func:`forward_condition`: the same rounds C03 and X05 read; inference_mode is one of
    its settings there, :func:`nogradlab.claims.measure._lever_settings`). Shown, never judged."""
    name = "mlp"
    wl = workloads.get(name, ctx.scale)
    b = _lever_batches(ctx, wl)[0]
    c = forward_condition(ctx, wl, b)
    out = {"workload": name, "batch": b, "source": "shared forward condition (forward_condition)",
           "settings": list(c.settings), "skipped": dict(c.skipped)}
    if c.comparison is None or "inference_mode" not in c.settings:
        return out
    sp, lo, hi = c.ratio("no_grad", "inference_mode")
    cmp = c.comparison
    out.update(inference_mode_vs_no_grad=[sp, lo, hi], rounds=cmp.rounds, stopped=cmp.stopped,
               device=cmp.device, threads=cmp.threads,
               cases={k: cmp.timings[k].to_dict() for k in ("no_grad", "inference_mode")})
    return out


def _x01_gain(t: dict) -> "tuple | None":
    """(speedup of inference_mode over no_grad, CI low, CI high, noisy) from X01's timing: the shared
    condition's ratio, or (columns made before) X01's own two-case comparison with no_grad as baseline."""
    if "inference_mode_vs_no_grad" in t:
        sp, lo, hi = t["inference_mode_vs_no_grad"]
    elif t.get("baseline") == "no_grad" and "inference_mode" in t.get("cases", {}):
        case = t["cases"]["inference_mode"]
        if "speedup" not in case:
            return None
        sp, (lo, hi) = case["speedup"], case["ci"]
    else:
        return None
    noisy = any(c.get("noisy") for c in t.get("cases", {}).values())
    return sp, lo, hi, noisy


@X01.judges
def judge_x01(m, rule):
    ng, inf, restriction = m["no_grad_tensor"], m["inference_tensor"], m["restriction"]
    saved_err = restriction["saved_for_backward (w * inference_tensor)"]
    ok = (inf["is_inference"] and inf["version_counter"] is not None and not inf["view_is_tracked"]
          and ng["view_is_tracked"] and saved_err is not None)
    summary = (f"Under inference_mode tensors are inference tensors with no version counter "
               f"({inf['version_counter']}) and untracked views, where no_grad keeps both (version "
               f"{ng['version_after_one_inplace']} after one in-place op). Saving one for backward raised: "
               f"{(saved_err or 'nothing').split('. ')[0]}.")
    t = m.get("timing") or {}
    gain = _x01_gain(t)
    if gain is not None:  # shown beside the verdict, which rests on the semantics alone
        sp, lo, hi, noisy = gain
        own = "inference_mode_vs_no_grad" not in t
        summary += (f" Forward speed over no_grad on {t.get('workload')} {m.scale} batch {t.get('batch')} "
                    + ("(X01's own timing, an older column)" if own else "(the shared forward timing)")
                    + f", not part of the verdict: {_format.ratio(sp, 3)} (95 % CI {lo:.3f}-{hi:.3f})"
                    + (": no difference resolved" if lo <= 1 <= hi else "")
                    + (" (noisy timings: IQR over 10 % of the median; rerun on a quiet machine)" if noisy else "")
                    + ".")
    return Judgement("holds" if ok else "does not hold", summary)


def _cpu_native_bf16() -> "bool | None":
    """Whether oneDNN has bf16 kernels for this CPU (``torch.ops.mkldnn._is_mkldnn_bf16_supported``, the check
    PyTorch's own oneDNN paths use: ideep's ISA test, which some CPUs without native bf16 instructions pass,
    where oneDNN emulates bf16); None where this torch cannot say."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return None


def _cast(ctx) -> str:
    return "fp16" if ctx.device.type == "cuda" else "bf16"


def _compiled_timing(ctx, name, batch) -> tuple:
    """``(Timing or None, why not)``: the torch.compile'd forward under no_grad of (workload,
    scale, batch, device), compiled before timing (compile time is not in the figure), measured
    once per run with the shared protocol. X05's own quantity."""
    knobs = _knobs(ctx)
    key = ("compiled forward", name, ctx.scale, int(batch), str(ctx.device), ctx.seed,
           tuple(sorted(knobs.items(), key=lambda kv: kv[0])))

    def make():
        wl, model, x, _ = _build(name, ctx.scale, ctx.device, batch, ctx.seed)
        try:
            compiled = torch.compile(model)
            fn = _forward_fn(compiled, x, torch.no_grad)
            fn()
            with _torch_threads(knobs["num_threads"]), timing.timing_state(ctx.device, warm_fn=fn):
                return timing.measure(fn, ctx.device, min_run_time=knobs["min_run_time"], warmup=knobs["warmup"],
                                      num_threads=knobs["num_threads"], label=f"{name} compiled"), None
        except Exception as e:  # noqa: BLE001 - compile failing is a finding, not a crash
            return None, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        finally:
            del model, x

    return _runcache.shared(key, make)


def _x05_readings(v, protocol=None):
    """X05's readings of no_grad's time saving (its speedups of the no_grad cases) per workload and
    batch (:func:`evidence.readings`)."""
    for r in _ev.rows(v):
        sp, ci = r.get("speedup"), r.get("ci")
        if not isinstance(sp, dict):
            continue
        for case in ("no_grad", "no_grad (fast path off)"):
            if case in sp:
                yield (_ev.key_saving(r.get("workload"), r.get("batch"), case), _ev.saving(sp[case]),
                       _ev.saving_ci(ci.get(case) if isinstance(ci, dict) else None))


X05 = declare(
    "X05", section='beyond', kind='numeric', notebook=NOTEBOOK, basis="gpu speed",
    tiny_cpu_threads=1,  # its check times or traces models: one thread in a tiny CPU run
    shared_readings=_x05_readings,
    paraphrase='the bigger inference levers beside no_grad: autocast, channels_last, torch.compile',
    figure=None,
    rule=Rule("Per workload and batch, forward speedups over grad (shared timing, eval mode, 95 % CIs, at "
              "least 10 rounds). A condition agrees when some lever's CI lies wholly above plain no_grad's "
              "and it is at least 5 % faster; disagrees when no lever can be 5 % faster than no_grad: each "
              "lever's paired interval over no_grad (the same rounds) ends below 1.05x, or, where a column "
              "stored no paired interval (older columns; torch.compile, timed on its own), its interval over "
              "grad ends below 1.05x the lower end of no_grad's (interval against interval); unresolved "
              "otherwise. A row whose cross-check fails is a disturbed timing and unresolved: inference_mode "
              "does no_grad's work with less bookkeeping, so its interval against no_grad (paired where "
              "stored, else its interval's lower end against no_grad's) must not reach 5 % slower; " + AGGREGATE + ". The "
              "levers are GPU levers: off a GPU the reference GPU's measurements decide." + SELF_CONTRADICTION,
              threshold=0.05, min_samples=MIN_BOOTSTRAP_ROUNDS, tie=TIE))


@X05.measures
def x05(ctx):
    """Per workload and batch, the shared forward timing (:func:`forward_condition`): grad (the
    baseline), no_grad, inference_mode, and levers on top of no_grad: autocast (bf16 on CPU;
    fp16 and bf16 on CUDA), channels_last for the CNNs (stacked with the autocast dtypes on CUDA),
    torch.compile where it runs (compiled before timing). On CUDA ``cudnn.benchmark`` is on and
    the TF32 state is reported; the batches cover the overhead-bound regime (the default batch)
    and the compute-bound one (4x); torch.compile at the default batch, timed on its own with an
    unpaired CI (:func:`_compiled_timing`); a tiny CPU run times the main speed batch only
    (:func:`_lever_batches`). Cases whose CIs overlap are ranked as ties. Knobs:
    ``workloads``, ``batches``, ``compile`` (True/False forces it on/off; off on tiny CPU runs)."""
    margin = X05.rule.threshold
    names = _names(ctx)
    compile_reason = _compile_reason(ctx)
    rows, beats = [], {}
    state = {}
    for name in names:
        wl = workloads.get(name, ctx.scale)  # resolved once, passed down
        for b in _lever_batches(ctx, wl):
            c = forward_condition(ctx, wl, b)
            if c.comparison is None:
                rows.append({"workload": name, "batch": b, "skipped": c.skipped})
                continue
            cmp = c.comparison
            state = c.state
            speedup = dict(cmp.speedup)
            ci = {k: list(v) for k, v in cmp.ci.items()}
            skipped = dict(c.skipped)
            unpaired = []
            if b == _speed_batch(ctx, wl):
                if compile_reason is None:
                    t_comp, why = _compiled_timing(ctx, name, b)
                    if t_comp is None:
                        skipped["compile"] = why
                    else:  # timed on its own: an unpaired CI against the shared grad timing
                        sp, (lo, hi) = timing.bootstrap_ratio(cmp.timings["grad"].times, t_comp.times, seed=ctx.seed)
                        speedup["no_grad+compile"], ci["no_grad+compile"] = sp, [lo, hi]
                        unpaired.append("no_grad+compile")
                else:
                    skipped["compile"] = compile_reason
            tiers = _tiers(speedup, ci)
            order = [k for t in tiers for k in t]
            levers = [k for k in speedup if k.startswith("no_grad+")]
            won = [k for k in levers if _beats(speedup, ci, k, "no_grad", margin)]
            beats[f"{name}@{b}"] = won
            im = c.ratio("no_grad", "inference_mode")
            # each lever timed in the shared rounds against no_grad, paired (compile is timed on its own)
            vs_no_grad = {k: list(c.ratio("no_grad", k)) for k in speedup
                          if k.startswith("no_grad+") and k not in unpaired}
            rows.append({"workload": name, "batch": b, "speedup": speedup, "ci": ci, "rounds": cmp.rounds,
                         "median_ms": {k: t.median * 1e3 for k, t in cmp.timings.items()},
                         "ranking": order, "tiers": tiers,
                         "no_grad_rank": order.index("no_grad") + 1,
                         "no_grad_tier": next(i for i, t in enumerate(tiers, 1) if "no_grad" in t),
                         "inference_mode_vs_no_grad": [im[0], im[1], im[2]], "vs_no_grad": vs_no_grad,
                         "beats_no_grad": won, "skipped": skipped, "state": c.state,
                         "unpaired_ci": unpaired})

    return {"rows": rows, "autocast": _cast(ctx), "compile_skipped": compile_reason, "margin": margin,
            "state": state, "device_type": ctx.device.type,
            "cpu_native_bf16": _cpu_native_bf16() if ctx.device.type == "cpu" else None,
            "metric": "speedup = t(grad forward) / t(case), eval mode, 95 % paired signed-rank CI; levers "
                      "are applied on top of no_grad, the way inference code stacks them",
            "timing": "shared per condition (forward_condition): the same numbers as C03/C17/C20",
            "provisional": _samples_note(ctx, "X05", [forward_condition(ctx, r["workload"], r["batch"])
                                                      for r in rows]).strip()}


def _triple(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) == 3 and all(isinstance(x, (int, float)) for x in v)


def _implausible(r, margin: float = 0.05) -> bool:
    """The row's cross-check fails: inference_mode reads clearly slower than no_grad, or could be ``margin``
    (the rule's 5 %) slower. inference_mode skips everything no_grad skips and more (version counters, view
    tracking), so it cannot be slower; a row whose timing cannot rule that out cannot resolve a 5 % difference
    between levers either: a disturbed timing, not a measurement of either. Read from the paired ratio of
    inference_mode over no_grad where the row stores it (its upper end below 1, or its lower end below
    1 - margin), else (older columns) from inference_mode's interval over grad against no_grad's (wholly below
    it, or its lower end below (1 - margin) x no_grad's lower end: interval against interval)."""
    paired = r.get("inference_mode_vs_no_grad")
    if _triple(paired):
        return paired[2] < 1 or paired[1] < 1 - margin
    ci = r.get("ci") or {}
    im, ng = ci.get("inference_mode"), ci.get("no_grad")
    if not isinstance(im, (list, tuple)) or not isinstance(ng, (list, tuple)):
        return False
    return im[1] < ng[0] or im[0] < (1 - margin) * ng[0]


def _paired_lever(r, k) -> "list | None":
    """A lever's paired speedup over no_grad (point, CI low, CI high) from the same rounds, None where the row
    stores none (older columns; torch.compile, timed on its own)."""
    v = (r.get("vs_no_grad") or {}).get(k)
    return list(v) if _triple(v) else None


def _ruled_out(r, k, margin) -> bool:
    """Lever ``k`` cannot be ``margin`` faster than no_grad: its paired interval over no_grad ends below
    1 + margin, or (no paired interval) its interval over grad ends below (1 + margin) x no_grad's lower end,
    an interval against an interval."""
    p = _paired_lever(r, k)
    if p is not None:
        return p[2] < 1 + margin
    return r["ci"][k][1] < (1 + margin) * r["ci"]["no_grad"][0]


def _clearly_slower(r) -> bool:
    """inference_mode's paired ratio over no_grad wholly below 1, else its interval wholly below no_grad's."""
    paired = r.get("inference_mode_vs_no_grad")
    if _triple(paired):
        return paired[2] < 1
    return r["ci"]["inference_mode"][1] < r["ci"]["no_grad"][0]


def _x4(point, lo, hi) -> str:
    """``1.51× [1.2238×, 2.0118×]``: the ends to 4 decimals, where two intervals nearly touch."""
    return f"{_format.ratio(point)} {_format.interval(lo, hi, lambda v: _format.ratio(v, 4))}"


def _paired(r) -> str:
    p = r.get("inference_mode_vs_no_grad")
    if isinstance(p, (list, tuple)) and len(p) == 3 and all(isinstance(v, (int, float)) for v in p):
        return _format.ratio_ci(*p, noisy=False)
    return ""


def _x05_unresolved_why(r, margin, min_rounds) -> str:
    """Why a row reads unresolved, in its own numbers (see :func:`_x05_reading`)."""
    sp, ci = r["speedup"], r["ci"]
    rounds = r.get("rounds")
    if rounds is not None and rounds < min_rounds:
        return f"{r['workload']}@{r['batch']} is read unresolved: {rounds} timing rounds, under the {min_rounds} the rule asks"
    lo_ng, hi_ng = ci["no_grad"]
    open_ = [k for k in sp if k.startswith("no_grad+") and not _ruled_out(r, k, margin)
             and not _beats(sp, ci, k, "no_grad", margin)]
    why = []
    for k in open_:
        lo, hi = ci[k]
        p = _paired_lever(r, k)
        if p is not None:
            why.append(f"{k} over no_grad, paired, {_x4(*p)} reaches {1 + margin:.2f}\u00d7")
        elif lo <= hi_ng:
            why.append(f"{k} {_x4(sp[k], lo, hi)} reaches down to no_grad's {_x4(sp['no_grad'], lo_ng, hi_ng)} "
                       "(its lower end at or below no_grad's upper end)")
        else:
            why.append(f"{k} {_format.ratio_ci(sp[k], lo, hi, noisy=False)} lies above no_grad's {_format.ratio(sp['no_grad'])} but "
                       f"less than {margin:.0%} faster at its point")
    if not why:
        return ""
    return (f"{r['workload']}@{r['batch']} " + ("also reads unresolved by its levers" if _implausible(r, margin)
                                                else "is read unresolved") + ": " + " and ".join(why)
            + ", so it is neither clearly faster than no_grad nor ruled out")


def _ruled_out_text(r, k, margin) -> str:
    """How lever ``k`` was ruled out, in its own numbers (:func:`_ruled_out`)."""
    p = _paired_lever(r, k)
    if p is not None:
        return f"{k} over no_grad, paired: {_x4(*p)}, below {1 + margin:.2f}\u00d7"
    lo, hi = r["ci"][k]
    return (f"{k} {_x4(r['speedup'][k], lo, hi)} over grad: its upper end lies below {1 + margin:.2f} \u00d7 no_grad's "
            f"lower end ({_format.ratio(r['ci']['no_grad'][0], 4)}), interval against interval, no paired interval stored")


def _x05_reading(r, margin, min_rounds) -> str:
    sp, ci = r["speedup"], r["ci"]
    if _implausible(r, margin):
        return "unresolved"
    levers = [k for k in sp if k.startswith("no_grad+")]
    if not levers:
        return "disagrees"
    rounds = r.get("rounds")
    if rounds is not None and rounds < min_rounds:
        return "unresolved"
    if any(_beats(sp, ci, k, "no_grad", margin) for k in levers):
        return "agrees"
    if all(_ruled_out(r, k, margin) for k in levers):
        return "disagrees"
    return "unresolved"


@X05.judges
def judge_x05(m, rule):
    margin = rule.threshold
    timed = [dict(r, tiers=r.get("tiers") or _tiers(r["speedup"], r["ci"])) for r in m["rows"] if "speedup" in r]
    if not timed:
        return Judgement("not testable", "No condition could be timed (out of memory everywhere).")
    conds = []
    for r in timed:
        won = [k for k in r["speedup"] if k.startswith("no_grad+") and _beats(r["speedup"], r["ci"], k, "no_grad", margin)]
        reading = _x05_reading(r, margin, rule.min_samples)
        conds.append({"condition": f"{r['workload']}@{r['batch']}", "reading": reading,
                      "side": "below" if reading == "disagrees" else None, "beats_no_grad": won, "levers": [k for k in r["speedup"] if k.startswith("no_grad+")],
                      "estimated": False})
        if _implausible(r, margin):
            conds[-1]["disturbed"] = True
    verdict = verdict_of(c["reading"] for c in conds)

    def fmt_tiers(r):
        return _tier_line(r["speedup"], r["ci"], r["tiers"])

    parts = "; ".join(f"{r['workload']}@{r['batch']}: {fmt_tiers(r)}" for r in timed)
    state = m.get("state") or {}
    gpu = ""
    if m.on_gpu and state:
        gpu = (f" CUDA settings: cudnn.benchmark {state.get('cudnn_benchmark')}, TF32 matmul "
               f"{state.get('tf32_matmul')}, TF32 cuDNN {state.get('tf32_cudnn')} (float32 matmul precision "
               f"{state.get('float32_matmul_precision')}); the default batch is the overhead-bound regime, "
               "4x it the compute-bound one.")
    cpu_note = ""
    if not m.on_gpu:
        native = m.get("cpu_native_bf16")
        cpu_note = (" On a CPU for which oneDNN has no bf16 kernels (torch.ops.mkldnn._is_mkldnn_bf16_supported() "
                    "False), bf16 convolutions and matrix products run PyTorch's slower fallback kernels, so bf16 is "
                    "slower by autocast and by a model converted once alike"
                    + ("; oneDNN has none for this CPU" if native is False else
                       "; oneDNN has them for this CPU" if native else "")
                    + ". Where it has them, autocast casts the fp32 weights to bf16 again in every autocast block "
                    "(its cast cache lives only inside one block), which converting the model once "
                    "(model.to(torch.bfloat16)) avoids.")
        few = sorted({len(c["levers"]) for c in conds})
        if few and max(few) <= 1:
            cpu_note += " This run timed one lever per condition at most (channels_last and compile are left out of tiny CPU runs)."
    summary = (f"Forward speedups over grad ({m.label}, eval mode, 95 % CIs; '=' joins cases whose CIs all overlap "
               "(a tie, not a ranking), '>' parts groups whose CIs lie wholly apart, '≥' groups some of whose "
               f"CIs overlap (no ranking)): {parts}. A lever beats plain no_grad when its CI lies wholly above "
               f"no_grad's and it is at least {margin:.0%} faster: "
               + ", ".join(f"{c['condition']}: {', '.join(c['beats_no_grad']) or 'none'} ({c['reading']})" for c in conds)
               + f". torch.compile: {m.get('compile_skipped') or 'included where it compiled'}." + gpu + cpu_note)
    odd = [r for r in timed if _implausible(r, margin)]
    if odd:
        summary += " " + "; ".join(
            f"{r['workload']}@{r['batch']} is read unresolved, a disturbed timing: inference_mode times "
            f"{_format.ratio_ci(r['speedup']['inference_mode'], *r['ci']['inference_mode'], noisy=False)} against no_grad's "
            f"{_format.ratio_ci(r['speedup']['no_grad'], *r['ci']['no_grad'], noisy=False)}"
            + (f" (paired, inference_mode over no_grad {_paired(r)})" if _paired(r) else " (unpaired: this column "
               "stored no paired interval)")
            + f", which {'reads clearly slower' if _clearly_slower(r) else f'cannot rule out {margin:.0%} slower'}; "
              "inference_mode skips all that no_grad skips and more, so it cannot be slower, and rounds this "
              f"disturbed cannot resolve a {margin:.0%} difference between levers"
            for r in odd) + "."
    gone = [(r, c) for r, c in zip(timed, conds) if c["reading"] == "disagrees" and c["levers"]]
    if gone:
        summary += (f" No lever can be {margin:.0%} faster than no_grad in "
                    + "; ".join(f"{c['condition']} ("
                                + ", ".join(_ruled_out_text(r, k, margin) for k in c["levers"]) + ")"
                                for r, c in gone) + ".")
    why = [w for r, c in zip(timed, conds) if c["reading"] == "unresolved"
           for w in [_x05_unresolved_why(r, margin, rule.min_samples)] if w]
    if why:
        summary += " " + "; ".join(why) + "."
    if m.get("provisional"):
        summary += " " + m["provisional"]
    return Judgement(verdict, summary, _x05_reading_text(conds, margin), conds)


def _x05_reading_text(conds, margin: float) -> str:
    """One line from the conditions' own readings: where a lever clearly beats no_grad, where every lever is
    ruled out, and which conditions are unresolved (a disturbed timing said as such)."""
    won = [c["condition"] for c in conds if c["reading"] == "agrees"]
    out = [c["condition"] for c in conds if c["reading"] == "disagrees"]
    open_ = [c["condition"] + (" (a disturbed timing: measure it again)" if c.get("disturbed") else "")
             for c in conds if c["reading"] == "unresolved"]
    parts = [f"a lever clearly beats plain no_grad (by {margin:.0%} or more) in {len(won)} of {len(conds)} conditions"
             + (f" ({', '.join(won)})" if won and len(won) < len(conds) else "")]
    if out:
        parts.append(f"no lever can be {margin:.0%} faster in {', '.join(out)}")
    if open_:
        parts.append(f"unresolved: {', '.join(open_)}")
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]
