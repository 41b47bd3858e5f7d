"""Notebook 01, what no grad does: the declarations and checks of C01, C02, C03, C04, C05, C06.

Each claim is declared once here (``declare``) beside its check (``@C.measures``) and, where
converted, its judge (``@C.judges``); see ``nogradlab/claims/README.md``.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import batch as _batch
from .. import memory
from .. import modes
from .. import workloads
from .rules import band_verdict
from . import claim_check, declare
from .measure import (_check, _knobs, _names, _pct_ci, _samples_note, _speed_batches, _wide_note, forward_condition)
from .probes import _in_new_thread, _tracking, _workload
from .rules import RULES, Rule, TIE
from .searches import (GiB, MiB, _MODES, _method, _one_real_search, _quick, _ratio, _real_note, _real_search, _row, _searches, default_budgets, shared_largest_batch)

NOTEBOOK = "01_what_no_grad_does"

C01 = declare(
    "C01", section='1', kind='semantic', notebook=NOTEBOOK,
    paraphrase='no_grad switches gradient tracking off for everything run inside the block',
    figure=None,
    rule=Rule("Holds when every tensor op, module call and function call on the thread that entered "
                "no_grad comes out untracked and a thread started inside does too; depends when only the "
                "entering thread is covered (grad mode is per thread); does not hold otherwise."))

C02 = declare(
    "C02", section='1', kind='semantic', notebook=NOTEBOOK,
    paraphrase='inside no_grad no autograd graph is built or stored',
    figure=None,
    rule=Rule("Holds when a no_grad forward has no grad_fn and fires the saved-tensor hook 0 times "
                "while the grad forward fires it; otherwise does not hold."))

C03 = declare(
    "C03", section='1', kind='numeric', notebook=NOTEBOOK,
    paraphrase='wrapping inference in no_grad cuts its runtime',
    figure='20-40 %',
    rule=Rule("Per workload x batch, time saved = 1 - t(no_grad forward)/t(grad forward), eval mode, "
                "one shared timing per condition; a condition agrees when its 95 % CI reaches 20 % "
                "(above 40 % also agrees: 'cuts by 20-40 %'); holds if all agree, does not hold if none, "
                "depends otherwise. The transformer's fused fast path is reported separately.",
                band=(0.20, 0.40), min_samples=5, tie=TIE, rounding="pct0", lower_bound=True))

C04 = declare(
    "C04", section='1', kind='semantic+numeric', notebook=NOTEBOOK,
    paraphrase='no_grad lets larger batches fit in memory',
    figure=None,
    rule=Rule("Per workload and budget, the largest eval+no_grad batch is compared with the largest "
                "grad-enabled forward batch; holds when it is larger everywhere, depends when only in "
                "some conditions, does not hold when nowhere."))

C05 = declare(
    "C05", section='1', kind='semantic', notebook=NOTEBOOK,
    paraphrase='every tensor created or modified inside no_grad has requires_grad=False',
    figure=None,
    rule=Rule("Holds when every tensor created or modified inside no_grad has requires_grad False; "
                "does not hold when any case keeps requires_grad True (e.g. an in-place op on a leaf's view)."))

C06 = declare(
    "C06", section='1', kind='semantic', notebook=NOTEBOOK,
    paraphrase='a tracked tensor multiplied by 3 inside no_grad gives requires_grad False and grad_fn None',
    figure=None,
    rule=Rule("Holds when the article's literal example gives requires_grad False and grad_fn None."))


class _SavedHookCalls:
    """Counts how often autograd's pack hook fires (every tensor saved for backward)."""

    def __init__(self):
        self.calls = 0

    def _pack(self, t):
        self.calls += 1
        return t

    def __enter__(self):
        self._cm = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


@claim_check("C01")
def c01(ctx):
    """Grad mode off for every op in the block, on this thread; a thread started in the block
    computes with grad on (grad mode is thread-local)."""
    dev = ctx.device
    w = torch.randn(4, 4, device=dev, requires_grad=True)
    lin = nn.Linear(4, 4, device=dev)
    with torch.no_grad():
        here = {"grad_enabled": torch.is_grad_enabled(), "op": _tracking(w * 2),
                "module": _tracking(lin(torch.randn(2, 4, device=dev))),
                "function_call": _tracking(F.softmax(w, dim=0))}
        there = _in_new_thread(lambda: {"grad_enabled": torch.is_grad_enabled(), "op": _tracking(w * 2)})
    off_here = not here["grad_enabled"] and not any(here[k]["requires_grad"]
                                                    for k in ("op", "module", "function_call"))
    tracked_there = there["op"]["requires_grad"]
    evidence = {"this_thread": here, "thread_started_inside_block": there}
    if not off_here:
        return "does not hold", "Tracking was still on for some operation inside no_grad.", evidence
    if tracked_there:
        return ("depends", "On the thread that entered no_grad every operation (tensor op, module, "
                "function) came out untracked; a thread started inside the block computed w*2 with "
                f"grad on (requires_grad True, grad_fn {there['op']['grad_fn']}): grad mode is per "
                "thread, so 'everything inside the block' means everything on this thread.", evidence)
    return "holds", "Tracking was off inside the block, also in a thread started there.", evidence


@claim_check("C02")
def c02(ctx):
    """No graph under no_grad: the output's grad_fn is None and autograd's saved-tensor pack hook
    fires zero times (it fires for every saved tensor with grad on, the control)."""
    wl, model, x = _workload(ctx)
    runs = {}
    for mode in ("grad", "no_grad"):
        with _SavedHookCalls() as hook, modes.get(mode)():
            out = model(x)
        runs[mode] = {**_tracking(out), "saved_tensor_hook_calls": hook.calls}
    ng, g = runs["no_grad"], runs["grad"]
    ok = ng["grad_fn"] is None and ng["saved_tensor_hook_calls"] == 0 and g["saved_tensor_hook_calls"] > 0
    summary = (f"{wl.name} forward: with grad the output has grad_fn {g['grad_fn']} and the saved-tensor "
               f"hook fired {g['saved_tensor_hook_calls']} times; under no_grad grad_fn is "
               f"{ng['grad_fn']} and the hook fired {ng['saved_tensor_hook_calls']} times.")
    return ("holds" if ok else "does not hold"), summary, {"workload": wl.name, "runs": runs}


@claim_check("C05")
def c05(ctx):
    """'Every tensor created or modified inside no_grad has requires_grad=False', case by case."""
    dev = ctx.device
    w = torch.randn(3, device=dev, requires_grad=True)  # a leaf, like a parameter
    h = w * 2  # a non-leaf built with grad on
    p = nn.Parameter(torch.randn(3, device=dev))
    opt = torch.optim.SGD([p], lr=0.1)
    p.grad = torch.ones_like(p)
    cases = []

    def case(name, t, note=""):
        cases.append({"case": name, **_tracking(t), "as_claimed": not t.requires_grad, "note": note})

    with torch.no_grad():
        case("result of an op on a tracked tensor (w * 2)", w * 2)
        case("view of a tracked tensor (w[:2])", w[:2],
             "requires_grad True but a leaf of its own: backward through it never reaches w, and an "
             "in-place change to it later with grad on raises")
        case("factory call without requires_grad (torch.zeros)", torch.zeros(3, device=dev))
        case("factory call with requires_grad=True (torch.ones)",
             torch.ones(3, device=dev, requires_grad=True))
        w.add_(1)
        case("tracked leaf modified in place (w.add_(1))", w)
        h.mul_(3)
        case("tracked non-leaf modified in place (h.mul_(3))", h)
    opt.step()  # optimizers update parameters in place with grad off
    case("parameter after optimizer.step() (in-place update with grad off)", p,
         "optimizers rely on this: parameters stay trainable")
    wrong = [c["case"] for c in cases if not c["as_claimed"]]
    evidence = {"cases": cases}
    if wrong:
        return ("does not hold", f"New results are untracked ({len(cases) - len(wrong)} of {len(cases)} cases "
                f"as claimed), but {len(wrong)} keep requires_grad=True: " + "; ".join(wrong) + ".", evidence)
    return "holds", f"All {len(cases)} cases have requires_grad=False.", evidence


@claim_check("C06")
def c06(ctx):
    """The article's example, literally: x (requires_grad) * 3 inside no_grad."""
    x = torch.randn(3, device=ctx.device, requires_grad=True)
    with torch.no_grad():
        y = x * 3
    control = x * 3
    evidence = {"inside_no_grad": _tracking(y), "control_with_grad": _tracking(control)}
    ok = not y.requires_grad and y.grad_fn is None
    return (("holds" if ok else "does not hold"),
            f"x * 3 inside no_grad: requires_grad {y.requires_grad}, grad_fn {y.grad_fn}; the same "
            f"product outside has grad_fn {type(control.grad_fn).__name__}.", evidence)


@_check("C03")
def c03(ctx):
    """Grad vs no_grad forward of each workload (model in eval mode in both) at two batch sizes,
    from the shared timing of each condition (:func:`forward_condition`). The transformer's eval
    fast path (a fused kernel taken only with grad off) is reported apart: no_grad with the fast
    path switched off is the bookkeeping saving alone. Knobs: ``workloads``, ``batches``."""
    rule = RULES["C03"]
    names = _names(ctx)
    rows, triples, fused = [], [], []
    for name in names:
        for b in _speed_batches(ctx, workloads.get(name, ctx.scale)):
            c = forward_condition(ctx, name, b)
            if c.comparison is None:
                continue
            case = "no_grad (fast path off)" if "no_grad (fast path off)" in c.settings else "no_grad"
            t = c.triple(case)  # the verdict: the bookkeeping saving, not a different kernel
            row = {"workload": name, "batch": b, "time_saved": t[0], "time_saved_ci": list(t[1:]),
                   "speedup": c.comparison.speedup[case], "speedup_ci": list(c.comparison.ci[case]),
                   "grad_ms": c.ms("grad"), "no_grad_ms": c.ms(case), "case": case,
                   "noisy": any(c.comparison.timings[k].noisy for k in ("grad", case))}
            if case != "no_grad":
                f = c.triple("no_grad")
                row.update(with_fast_path={"time_saved": f[0], "time_saved_ci": list(f[1:]),
                                           "no_grad_ms": c.ms("no_grad")},
                           fused_kernel_share=(f[0] - t[0]) / f[0] if f[0] > 0 else None)
                fused.append(f"{name}@{b}: {_pct_ci(f)} with the fused fast path, {_pct_ci(t)} without")
            triples.append(tuple(round(v, 2) for v in t))  # as printed: whole percent
            rows.append(row)
    verdict = band_verdict(triples, *rule.band, higher_is_better=rule.lower_bound)
    inside = [f"{r['workload']}@{r['batch']}" for r, t in zip(rows, triples)
              if band_verdict([t], *rule.band, higher_is_better=rule.lower_bound) == "holds"]
    below = [f"{r['workload']}@{r['batch']}" for r in rows if f"{r['workload']}@{r['batch']}" not in inside]
    lo, hi = min(r["time_saved"] for r in rows), max(r["time_saved"] for r in rows)
    summary = (f"Forward with grad vs without grad (eval mode, same model and input, {ctx.scale} scale, "
               f"{ctx.device}): no_grad cut the time by {lo:.0%} to {hi:.0%} across {len(rows)} workload x "
               f"batch conditions; article: 20-40 %. Reaches the band (or more) by its 95 % CI: "
               f"{', '.join(inside) or 'none'}; below it: {', '.join(below) or 'none'}."
               + (" The transformer's eval fast path (a fused kernel taken only with grad off) is "
                  "counted apart, not credited to no_grad: " + "; ".join(fused) + "." if fused else "")
               + _wide_note([(t, rule.band) for t in triples]) + _samples_note(ctx, "C03", [forward_condition(ctx, r["workload"], r["batch"]) for r in rows]))
    evidence = {"article_band": rule.band, "metric": "time_saved = 1 - t_no_grad / t_grad (eval mode, "
                "same model and input; CI: 95 % paired bootstrap); for the transformer no_grad is timed "
                "with the fused fast path off (the saving of the bookkeeping alone), the fast path's "
                "figure beside it", "rows": rows,
                "agree": inside, "below_band": below, "knobs": _knobs(ctx),
                "timing": "shared per condition (nogradlab.claims.measure.forward_condition)",
                "state": next((forward_condition(ctx, r["workload"], r["batch"]).state for r in rows), {}),
                "note": "nn.TransformerEncoder in eval takes a fused fast path when grad is off: part "
                        "of its gain is a different kernel, not only skipped bookkeeping; "
                        "fused_kernel_share is that part's share of the whole saving."}
    noisy = sum(1 for t in triples if t[1] < 0 < t[2])
    evidence["reading"] = (f"no_grad's forward saving reaches the article's 20 % (by its CI) in {len(inside)} of "
                           f"{len(rows)} conditions" + (f"; {noisy} show no clear difference (noisy: the CI spans "
                                                        "both a slowdown and a speedup)" if noisy else "") + ".")
    return verdict, summary, evidence


def _condition(workload: str, budget: int, res: dict, **where) -> dict:
    """One (workload, budget) row of C04: the batch per mode and how no_grad compares."""
    b = {m: r.batch for m, r in res.items()}
    return {"workload": workload, "budget_bytes": budget, "budget_gib": budget / GiB, **where, **b,
            "no_grad_over_grad": _ratio(b["eval+no_grad"], b["grad"]),
            "no_grad_over_train": _ratio(b["eval+no_grad"], b["train"]),
            "larger_than_grad": b["eval+no_grad"] > b["grad"],
            "larger_than_train": b["eval+no_grad"] > b["train"]}


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

