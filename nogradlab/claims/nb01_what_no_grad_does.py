"""Notebook 01, what no grad does: the declarations and checks of C01, C02, C03, C04, C05, C06.

Each claim is declared once here (``declare``) beside its check (``@C.measures``) and its judge
(``@C.judges``); see ``nogradlab/claims/README.md``.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from nogradlab.estimate import batch as _batch
from nogradlab.core import memory
from nogradlab.core import modes
from nogradlab.core import workloads
from nogradlab.claims import ledger as claims  # the ledger room (searched_where), not the face
from nogradlab.lab import plots
from nogradlab.claims.ledger import NeedsRemeasuring, declare
from nogradlab.claims.result import Judgement, number
from nogradlab.claims import evidence as _ev
from nogradlab.claims.measure import _knobs, _names, _samples_note, _speed_batches, forward_condition, provisional_note, resolve
from nogradlab.claims.probes import _in_new_thread, _tracking, _workload
from nogradlab.claims.rules import AGGREGATE, Band, MIN_BOOTSTRAP_ROUNDS, Rule, SELF_CONTRADICTION, TIE, direction_text, OLD_PROTOCOL_WIDENING, read_conditions, readings_text, verdict_of, widened_text, widening
from nogradlab.claims.searches import GiB, MiB, _MODES, _method, _one_real_search, _quick, _ratio, _real_note, _real_search, _row, _searches, default_budgets, shared_largest_batch

NOTEBOOK = "01_what_no_grad_does"


class _SavedHookCalls:
    """Counts how often autograd's pack hook fires (every tensor saved for backward)."""

    def __init__(self):
        self.calls = 0

    def _pack(self, t):
        self.calls += 1
        return t.detach()  # not t: a saved output would point back to its own node (a reference cycle)

    def __enter__(self):
        self._cm = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


C01 = declare(
    "C01", section='1', kind='semantic', notebook=NOTEBOOK,
    paraphrase='no_grad switches gradient tracking off for everything run inside the block',
    figure=None,
    rule=Rule("Holds when every tensor op, module call and function call on the thread that entered "
                "no_grad comes out untracked and a thread started inside does too; depends when only the "
                "entering thread is covered (grad mode is per thread); does not hold otherwise."))


@C01.measures
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
    return {"this_thread": here, "thread_started_inside_block": there}


@C01.judges
def judge_c01(m, rule):
    here, there = m["this_thread"], m["thread_started_inside_block"]
    off_here = not here["grad_enabled"] and not any(here[k]["requires_grad"]
                                                    for k in ("op", "module", "function_call"))
    if not off_here:
        return Judgement("does not hold", "Tracking was still on for some operation inside no_grad.")
    if there["op"]["requires_grad"]:
        return Judgement("depends", "On the thread that entered no_grad every operation (tensor op, module, "
                         "function) came out untracked; a thread started inside the block computed w*2 with "
                         f"grad on (requires_grad True, grad_fn {there['op']['grad_fn']}): grad mode is per "
                         "thread, so 'everything inside the block' means everything on this thread.")
    return Judgement("holds", "Tracking was off inside the block, also in a thread started there.")


C02 = declare(
    "C02", section='1', kind='semantic', notebook=NOTEBOOK,
    paraphrase='inside no_grad no autograd graph is built or stored',
    figure=None,
    rule=Rule("Holds when a no_grad forward has no grad_fn and fires the saved-tensor hook 0 times "
                "while the grad forward fires it; otherwise does not hold."))


@C02.measures
def c02(ctx):
    """No graph under no_grad: the output's grad_fn is None and autograd's saved-tensor pack hook
    fires zero times (it fires for every saved tensor with grad on, the control)."""
    wl, model, x = _workload(ctx)
    runs = {}
    for mode in ("grad", "no_grad"):
        with _SavedHookCalls() as hook, modes.get(mode)():
            out = model(x)
        runs[mode] = {**_tracking(out), "saved_tensor_hook_calls": hook.calls}
    return {"workload": wl.name, "runs": runs}


@C02.judges
def judge_c02(m, rule):
    ng, g = m["runs"]["no_grad"], m["runs"]["grad"]
    calls = {k: number(r["saved_tensor_hook_calls"], f"runs.{k}.saved_tensor_hook_calls") for k, r in m["runs"].items()}
    ok = ng["grad_fn"] is None and calls["no_grad"] == 0 and calls["grad"] > 0
    summary = (f"{m['workload']} forward: with grad the output has grad_fn {g['grad_fn']} and the saved-tensor "
               f"hook fired {g['saved_tensor_hook_calls']} times; under no_grad grad_fn is "
               f"{ng['grad_fn']} and the hook fired {ng['saved_tensor_hook_calls']} times.")
    return Judgement("holds" if ok else "does not hold", summary)


#: the case the article itself exempts from C05 (and C30 checks): a factory call given requires_grad=True
C05_EXEMPT = "factory call with requires_grad=True (torch.ones)"


C05 = declare(
    "C05", section='1', kind='semantic', notebook=NOTEBOOK,
    paraphrase='every tensor created or modified inside no_grad has requires_grad=False',
    figure=None,
    rule=Rule("Holds when every tensor created or modified inside no_grad has requires_grad False; "
                "does not hold when any case keeps requires_grad True (e.g. a view of a tracked tensor, or a "
                "tracked tensor modified in place). "
                "A factory call given requires_grad=True is exempt, as the article itself says (C30 checks "
                "it): shown, not counted."))


@C05.measures
def c05(ctx):
    """'Every tensor created or modified inside no_grad has requires_grad=False', case by case."""
    dev = ctx.device
    w = torch.randn(3, device=dev, requires_grad=True)  # a leaf, like a parameter
    h = w * 2  # a non-leaf built with grad on
    p = nn.Parameter(torch.randn(3, device=dev))
    opt = torch.optim.SGD([p], lr=0.1)
    p.grad = torch.ones_like(p)
    cases = []

    def case(name, t, note="", exempt=False):
        cases.append({"case": name, **_tracking(t), "as_claimed": not t.requires_grad, "note": note,
                      **({"exempt": True} if exempt else {})})

    with torch.no_grad():
        case("result of an op on a tracked tensor (w * 2)", w * 2)
        case("view of a tracked tensor (w[:2])", w[:2],
             "requires_grad True but a leaf of its own: backward through it never reaches w, and an "
             "in-place change to it later with grad on raises")
        case("factory call without requires_grad (torch.zeros)", torch.zeros(3, device=dev))
        case(C05_EXEMPT, torch.ones(3, device=dev, requires_grad=True),
             "exempt: the article says a factory call given requires_grad=True still makes a tracked leaf "
             "(C30)", exempt=True)
        w.add_(1)
        case("tracked leaf modified in place (w.add_(1))", w)
        h.mul_(3)
        case("tracked non-leaf modified in place (h.mul_(3))", h)
    opt.step()  # optimizers update parameters in place with grad off
    case("parameter after optimizer.step() (in-place update with grad off)", p,
         "optimizers rely on this: parameters stay trainable")
    return {"cases": cases}


def _c05_short(name: str) -> str:
    """``'result of an op on a tracked tensor (w * 2)'`` -> ``'w * 2'``: the expression a case names."""
    return name[name.rfind("(") + 1:-1] if name.endswith(")") and "(" in name else name


def _c05_exempt(c) -> bool:
    """The case the article exempts: marked in the measurements, or (columns made before) named so."""
    return bool(c.get("exempt", c["case"] == C05_EXEMPT))


@C05.judges
def judge_c05(m, rule):
    every = m["cases"]
    cases = [c for c in every if not _c05_exempt(c)]
    exempt = [c for c in every if _c05_exempt(c)]
    wrong = [c["case"] for c in cases if not c["as_claimed"]]
    if exempt:
        ex = exempt[0]
        note = (f" Not counted: the {ex['case']}, which the article exempts (C30 checks it): "
                + ("requires_grad True, as the article says." if ex["requires_grad"] else
                   "it came out untracked, so the exemption the article describes did not happen here."))
    else:
        note = ""
    if wrong:
        right = [_c05_short(c["case"]) for c in cases if c["as_claimed"]]
        made = (f"The cases made untracked ({', '.join(right)}: {len(right)} of {len(cases)} the claim covers) "
                if right else f"None of the {len(cases)} cases the claim covers is untracked: ")
        return Judgement("does not hold", made + f"{'are as claimed, but ' if right else ''}{len(wrong)} keep "
                         "requires_grad=True: " + "; ".join(wrong) + "." + note)
    return Judgement("holds", f"All {len(cases)} cases the claim covers have requires_grad=False." + note)


C06 = declare(
    "C06", section='1', kind='semantic', notebook=NOTEBOOK,
    paraphrase='a tracked tensor multiplied by 3 inside no_grad gives requires_grad False and grad_fn None',
    figure=None,
    rule=Rule("Holds when the article's literal example gives requires_grad False and grad_fn None; otherwise "
              "does not hold."))


@C06.measures
def c06(ctx):
    """The article's example, literally: x (requires_grad) * 3 inside no_grad."""
    x = torch.randn(3, device=ctx.device, requires_grad=True)
    with torch.no_grad():
        y = x * 3
    control = x * 3
    return {"inside_no_grad": _tracking(y), "control_with_grad": _tracking(control)}


@C06.judges
def judge_c06(m, rule):
    y, control = m["inside_no_grad"], m["control_with_grad"]
    ok = not y["requires_grad"] and y["grad_fn"] is None
    return Judgement("holds" if ok else "does not hold",
                     f"x * 3 inside no_grad: requires_grad {y['requires_grad']}, grad_fn {y['grad_fn']}; the same "
                     f"product outside has grad_fn {control['grad_fn']}.")


def _c03_speedup_edges(workload) -> list:
    """The speedups over grad at which C03's band of time saved changes its reading (any workload)."""
    lo, hi = C03.rule.band.edges
    return [1.0 / (1.0 - e) for e in (lo, hi) if e is not None and e < 1]


def _c03_stop_edges(workload) -> list:
    """A shared forward condition's rounds go on until they decide C03's band of time saved."""
    lo, hi = C03.rule.band.edges
    return [1.0 / (1.0 - lo), 1.0 / (1.0 - hi)]


def _c03_readings(v, protocol=None):
    """C03's readings of no_grad's time saving per workload, batch and case (:func:`evidence.readings`)."""
    for r in _ev.rows(v):
        k = _ev.key_saving(r.get("workload"), r.get("batch"), r.get("case"))
        yield k, _ev.num(r.get("time_saved")), _ev.ci(r.get("time_saved_ci"))


def _c03_without_timings(values: dict, workloads) -> dict:
    """C03's measurements without the rows of ``workloads`` (a column whose timings of them are in doubt)."""
    return dict(values, rows=[r for r in values.get("rows") or [] if r.get("workload") not in set(workloads)])


C03 = declare(
    "C03", section='1', kind='numeric', notebook=NOTEBOOK, basis="gpu speed",
    tiny_cpu_threads=1,  # its check times or traces models: one thread in a tiny CPU run
    speedup_edges=_c03_speedup_edges, stop_edges=_c03_stop_edges, shared_readings=_c03_readings,
    without_timings=_c03_without_timings,
    paraphrase='wrapping inference in no_grad cuts its runtime',
    figure='20-40 %',
    rule=Rule("Per workload x batch, time saved = 1 - t(no_grad forward)/t(grad forward), eval mode, one "
              "shared timing per condition, read against 20-40 % by its 95 % CI (agrees inside, disagrees "
              "outside, unresolved across an edge; at least 10 rounds; an older protocol's interval, which "
              "under-covers, is " + widened_text(OLD_PROTOCOL_WIDENING) + ", and unresolved if it then "
              "crosses an edge). The article's figure is "
              "for typical convolutional or transformer models: the MLP is shown, not counted. Over the counted "
              "conditions: " + AGGREGATE + ". Judged twice, the transformer "
              "with its fused fast path and without it; where the two verdicts differ, 'depends' on the "
              "fused path. The article speaks of GPUs: off a GPU the reference GPU's measurements decide."
              + SELF_CONTRADICTION,
              band=Band("range", 0.20, 0.40), tie=TIE, min_samples=MIN_BOOTSTRAP_ROUNDS))


@C03.measures
def c03(ctx):
    """Grad vs no_grad forward of each workload (model in eval mode in both) at two batch sizes,
    from the shared timing of each condition (:func:`forward_condition`). For the transformer the
    fused fast path (a fused kernel taken only with grad off) is timed both ways: no_grad with the
    fast path switched off is the bookkeeping saving alone. Knobs: ``workloads``, ``batches``."""
    rows, conditions = [], []
    for name in _names(ctx):
        wl = resolve(ctx, name)  # resolved once, passed down
        for b in _speed_batches(ctx, wl):
            c = forward_condition(ctx, wl, b)
            if c.comparison is None:
                continue
            conditions.append(c)
            case = "no_grad (fast path off)" if "no_grad (fast path off)" in c.settings else "no_grad"
            t = c.triple(case)
            row = {"workload": name, "batch": b, "time_saved": t[0], "time_saved_ci": list(t[1:]),
                   "speedup": c.comparison.speedup[case], "speedup_ci": list(c.comparison.ci[case]),
                   "grad_ms": c.ms("grad"), "no_grad_ms": c.ms(case), "case": case,
                   "rounds": c.comparison.rounds, "stopped": c.comparison.stopped}
            if case != "no_grad":
                f = c.triple("no_grad")
                row.update(with_fast_path={"time_saved": f[0], "time_saved_ci": list(f[1:]),
                                           "no_grad_ms": c.ms("no_grad")},
                           fused_kernel_share=(f[0] - t[0]) / f[0] if f[0] > 0 else None)
            rows.append(row)
    return {"metric": "time_saved = 1 - t_no_grad / t_grad (eval mode, same model and input; CI: 95 % signed-rank "
                      "interval of the paired rounds); for the transformer no_grad is timed with the fused fast path off (the "
                      "saving of the bookkeeping alone) and on (with_fast_path)", "rows": rows,
            "knobs": _knobs(ctx), "timing": "shared per condition (nogradlab.claims.measure.forward_condition)",
            "state": conditions[0].state if conditions else {},
            "provisional": _samples_note(ctx, "C03", conditions).strip()}


def _c03_items(rows, knob_rounds, fused: bool) -> list:
    items = []
    for r in rows:
        v = r.get("with_fast_path") if fused and r.get("with_fast_path") else r
        lo, hi = v["time_saved_ci"]
        items.append((f"{r['workload']}@{r['batch']}", v["time_saved"], lo, hi, r.get("rounds", knob_rounds)))
    return items


#: the workloads C03 shows and does not count: the article's 20-40 % is "for typical convolutional or
#: transformer models", and a two-layer MLP is neither
C03_NOT_COUNTED = ("mlp",)


@C03.judges
def judge_c03(m, rule):
    rows = m["rows"]
    if not rows:
        return Judgement("not testable", "No condition could be timed (out of memory everywhere).")
    counted = [r for r in rows if r["workload"] not in C03_NOT_COUNTED]
    if not counted:
        return Judgement("not testable", "Only the MLP was timed; the article's 20-40 % is for typical "
                         "convolutional or transformer models, so nothing here is what it speaks of.")
    knob_rounds = (m.get("knobs") or {}).get("rounds")
    widen = widening(m.protocol)
    _, all_off = read_conditions(_c03_items(rows, knob_rounds, False), rule.band, widen=widen,
                                 estimated=False)
    _, all_on = read_conditions(_c03_items(rows, knob_rounds, True), rule.band, widen=widen,
                                 estimated=False)
    for r, a, b in zip(rows, all_off, all_on):
        if r["workload"] in C03_NOT_COUNTED:
            a["deciding"] = b["deciding"] = False
    rows_off = [c for c in all_off if c.get("deciding", True)]
    rows_on = [c for c in all_on if c.get("deciding", True)]
    without = verdict_of(c["reading"] for c in rows_off)
    with_ = verdict_of(c["reading"] for c in rows_on)
    fused = any(r.get("with_fast_path") for r in rows)
    lo, hi = min(r["time_saved"] for r in counted), max(r["time_saved"] for r in counted)
    lead = direction_text(rows_off, "no_grad saves more time than the article says", "no_grad saves less time than the article says",
                          nothing="no_grad saves nothing clear", group=False)
    shown = [c for c in all_off if not c.get("deciding", True)]
    summary = ((f"{lead[0].upper()}{lead[1:]}. " if lead else "")
               + f"Forward with grad vs without grad (eval mode, same model and input, {m.label}): no_grad "
               f"cut the time by {lo:.0%} to {hi:.0%} across {len(counted)} workload x batch conditions of "
               f"convolutional and transformer models (article: 20-40 %). {readings_text(rows_off)}."
               + (" Shown, not counted (the article's figure is for convolutional or transformer models): "
                  + ", ".join(f"{c['condition']} {c['value']:.0%}".replace("-0%", "0%") for c in shown) + "."
                  if shown else ""))
    if fused:
        on = "; ".join(f"{r['condition']} {r['value']:.0%} ({r['reading']})" for r in rows_on
                       if r["condition"] in {f"{x['workload']}@{x['batch']}" for x in rows if x.get("with_fast_path")})
        summary += (f" The transformer above is timed with its fused fast path off (the bookkeeping alone); "
                    f"with the fast path: {on}.")
    elif any(r["workload"] == "transformer_base" for r in counted) and not any("fast_path" in k for r in rows for k in r):
        # an older column timed the transformer once, as torch runs it by default: in eval, its no_grad
        # forward takes nn.TransformerEncoderLayer's fused fast path (with grad on, the standard path)
        summary += (" The transformer above was timed with torch's default settings, the fused fast path on: "
                    "in eval mode its no_grad forward takes that path and its forward with grad the standard one, "
                    "so part of its gain is a different kernel, not only skipped bookkeeping; this column did not "
                    "time it with the path off.")
    verdict, conds = without, all_off
    if fused and with_ != without:
        verdict = "depends"
        summary += f" Depends on the fused path: {with_} with it, {without} without."
    n_agree = sum(r["reading"] == "agrees" for r in rows_off)
    reading = (f"no_grad's forward saving lies in the article's 20-40 % in {n_agree} of {len(rows_off)} counted "
               "conditions"
               + (" (the verdict depends on the transformer's fused fast path)" if verdict == "depends"
                  and with_ != without else "") + ".")
    # only the counted conditions can make the verdict provisional
    rows_read = [max((a, b), key=lambda c: c["reading"] == "unresolved") for a, b in zip(rows_off, rows_on)]
    note = provisional_note(m.get("provisional") or "", counted, rows_read)
    if note:
        summary += " " + note
    return Judgement(verdict, summary, reading, conds)


def _condition(workload: str, budget: int, res: dict, **where) -> dict:
    """One (workload, budget) row of C04: the batch per mode and how no_grad compares. ``capped``:
    the modes whose search stopped at its ``max_batch`` (every batch tried fitted: the real largest
    batch may be larger, so the batch is a lower bound)."""
    b = {m: r.batch for m, r in res.items()}
    return {"workload": workload, "budget_bytes": budget, "budget_gib": budget / GiB, **where, **b,
            "capped": {m: bool(r.at_limit) for m, r in res.items()},
            "no_grad_over_grad": _ratio(b["eval+no_grad"], b["grad"]),
            "no_grad_over_train": _ratio(b["eval+no_grad"], b["train"]),
            "larger_than_grad": b["eval+no_grad"] > b["grad"],
            "larger_than_train": b["eval+no_grad"] > b["train"]}


def _capped_modes(c: dict, searches: list) -> dict:
    """``{mode: capped}`` of one C04 condition: its own ``capped`` (today's checks), else the
    ``at_limit`` of its searches (older columns)."""
    if isinstance(c.get("capped"), dict):
        return {k: bool(v) for k, v in c["capped"].items()}
    out = {}
    for s in searches or []:
        if (s.get("workload") == c["workload"] and s.get("budget_bytes") == c["budget_bytes"]
                and s.get("method") == c.get("method") and s.get("scale", "full") == c.get("scale", "full")):
            out[s["mode"]] = out.get(s["mode"], False) or bool(s.get("at_limit"))
    return out


def _batch_text(n: int, capped: bool) -> str:
    """A searched batch as a reader should take it: ``≥ N (search limit)`` when the search was capped."""
    return f"\u2265 {n} (search limit)" if capped else f"{n}"


def _larger(a: int, a_capped: bool, b: int, b_capped: bool) -> "bool | None":
    """Is the true largest batch ``a`` larger than ``b``, when a capped search's answer is only a
    lower bound? None when the bounds cannot say."""
    if not a_capped and not b_capped:
        return a > b
    if a_capped and not b_capped:
        return True if a > b else None
    if b_capped and not a_capped:
        return False if a <= b else None
    return None


C04 = declare(
    "C04", case_quantity=("largest batch, no_grad / grad", "x"),
    section='1', kind='semantic+numeric', notebook=NOTEBOOK, basis="estimate",
    estimates_at="full",  # its article-sized models are estimated (and searched for real on a GPU) at full size
    paraphrase='no_grad lets larger batches fit in memory',
    figure=None,
    rule=Rule("Per workload and GPU-sized budget (12 GiB, and 16 GiB in a full run), the largest eval+no_grad "
              "batch is compared with the largest grad-enabled forward batch, at the article's model sizes: "
              "the allocator model's estimate, or on a GPU its real OOM search where one was made; a condition "
              "agrees when no_grad fits a larger batch, disagrees when it fits none larger (below the claim), "
              "and is unresolved when a search that reached its limit (a lower bound, '>= N (search limit)') "
              "cannot say; " + AGGREGATE + ". The tiny CPU search is shown, 'on your machine', never "
              "deciding."))


@C04.measures
def c04(ctx):
    """Largest batch per mode (train step, grad forward, eval+no_grad forward) under GPU-sized
    budgets, and the CPU's own answer at tiny scale checked against real runs.

    Knobs: ``workloads`` (GPU part; default all four, at every scale), ``budgets_gib`` (:func:`default_budgets`), ``cpu_workload`` ("mlp" on a
    quick CPU run, else "unet"), ``cpu_budget_mib`` (4 for the MLP, else 32),
    ``compare_estimate`` (on a GPU, also run the estimate beside each real search; default True),
    ``real_search`` ("one"; see the module docstring).
    """
    names = list(ctx.params.get("workloads", workloads.names()))  # the same estimated conditions at every scale
    budgets = [float(b) for b in ctx.params.get("budgets_gib", default_budgets(ctx))]
    cpu_name = ctx.params.get("cpu_workload", "mlp" if _quick(ctx) else "unet")
    cpu_budget = int(float(ctx.params.get("cpu_budget_mib", 4 if cpu_name == "mlp" else 32)) * MiB)
    at = C04.estimates_at
    for n in names + [cpu_name]:
        workloads.get(n, at)
    if not budgets or min(budgets) <= 0 or cpu_budget <= 0:
        raise ValueError("budgets_gib and cpu_budget_mib must be positive")
    dev, method = _method(ctx)
    also_estimate = method == "search" and ctx.params.get("compare_estimate", True)

    rows, conditions = [], []
    for name in names:
        for gib in budgets:
            res = _searches(name, int(gib * GiB), dev, method, scale=at, max_batch=2 ** 22)
            rows += [_row(r) for r in res.values()]
            if also_estimate:
                est = _searches(name, int(gib * GiB), dev, "estimate", scale=at, max_batch=2 ** 22)
                rows += [_row(r) for r in est.values()]
            conditions.append(_condition(name, int(gib * GiB), res, method=method, scale=at))

    real_check = None
    if names and ctx.on_gpu and _real_search(ctx) == "one":  # its estimate is searched above (shared)
        est = shared_largest_batch(names[0], "eval+no_grad", int(budgets[0] * GiB), dev, method="estimate",
                                   scale=at, max_batch=2 ** 22)
        real_check = _one_real_search(ctx, names[0], int(budgets[0] * GiB), est, scale=at)
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
    return {"conditions": conditions, "searches": rows, "cpu_check": cpu,
            "cpu_budget_bytes": cpu_budget, "budgets_gib": budgets, "modes": list(_MODES),
            "real_search": _real_search(ctx) if ctx.on_gpu else "none (no GPU)", "real_check": real_check,
            "definitions": {"train": "forward + loss + backward + SGD-momentum step",
                            "grad": "eval-mode forward with gradients enabled",
                            "eval+no_grad": "eval-mode forward under torch.no_grad",
                            "fits": "total peak (weights, buffers, inputs, step) <= budget",
                            "capped": "the search reached its max_batch with every batch fitting: the "
                                      "batch is a lower bound ('>= N (search limit)')"}}


def _c04_parts(c: dict, capped: dict) -> str:
    return (f"{c['workload']} {memory.format_bytes(c['budget_bytes'])}: "
            + ", ".join(f"{mode} {_batch_text(c[mode], capped.get(mode, False))}" for mode in _MODES))


@C04.judges
def judge_c04(m, rule):
    conds, searches = m["conditions"], m.get("searches") or []
    gpu = [c for c in conds if c.get("device") != "cpu"]  # GPU-sized budgets, full-size models
    local = [c for c in conds if c.get("device") == "cpu"]
    if not gpu:
        raise NeedsRemeasuring("no GPU-sized condition")
    rows = []
    for c in gpu:
        for mode in ("grad", "eval+no_grad", "train"):
            number(c[mode], f"conditions.{mode}")
        cap = _capped_modes(c, searches)
        larger = _larger(c["eval+no_grad"], cap.get("eval+no_grad", False), c["grad"], cap.get("grad", False))
        reading = "unresolved" if larger is None else "agrees" if larger else "disagrees"
        rows.append({"condition": f"{c['workload']} {c['budget_gib']:g} GiB", "value": c["no_grad_over_grad"],
                     "ci": None, "reading": reading, "side": "below" if reading == "disagrees" else None,
                     "rounds": None, "rounds_to_decide": None,
                     "capped": sorted(k for k, v in cap.items() if v),
                     # the allocator model's search at full size, or a real OOM search on a GPU
                     "estimated": c.get("method", "estimate") != "search"})
    verdict = verdict_of(r["reading"] for r in rows)
    method = gpu[0].get("method", "estimate")
    real = m.on_gpu and method == "search"
    how = (f"real OOM searches on {m.label}" if real else
           "estimates at the article's model sizes, decided as the real cap decides: the step's allocations "
           "replayed through the CUDA caching allocator's model (native)")
    parts = [_c04_parts(c, _capped_modes(c, searches)) for c in gpu]
    same = sorted({r["condition"].split()[0] for r in rows if r["reading"] == "disagrees"})
    open_ = [r["condition"] for r in rows if r["reading"] == "unresolved"]
    if verdict == "holds":
        finding = "no_grad fits a larger batch than a grad-enabled forward everywhere"
    elif same:
        finding = (f"no_grad fits no larger batch than a grad-enabled forward for {', '.join(same)} "
                   "(there the tensors autograd keeps are those alive at the forward's peak anyway)")
    else:
        finding = "no condition decides"
    if open_:
        finding += (f"; undecided where a search reached its limit ({', '.join(open_)}): a larger max_batch "
                    "would decide it")
    n_train = sum(bool(c["larger_than_train"]) for c in gpu)
    summary = (f"{finding[0].upper()}{finding[1:]}; against a training step it fits more in {n_train} of "
               f"{len(gpu)} conditions. Largest batch per mode ({how}): {'; '.join(parts)}.")
    if local:
        c = local[0]
        summary += (f" On your machine ({c['workload']} at tiny scale on the CPU, estimated and checked with "
                    f"real runs, not deciding): {_c04_parts(c, _capped_modes(c, searches)).split(': ', 1)[1]}.")
        cpu = m.get("cpu_check") or {}
        if cpu and not all(a.get("real_agrees") for a in cpu.values()):
            summary += " Real CPU runs disagree with the estimate at the CPU budget (see measurements)."
    summary += _real_note(m.get("real_check"))
    n_agree = sum(r["reading"] == "agrees" for r in rows)
    reading = f"no_grad fits a larger batch than a grad-enabled forward in {n_agree} of {len(rows)} GPU-sized conditions."
    scope = ({"basis": "measured", "text": f"measured here: {m.label}, real OOM searches under a memory cap"}
             if real else None)
    return Judgement(verdict, summary, reading, rows, scope)


# --------------------------------------------------------------------------------------------
# figures: each claim's measurements drawn with nogradlab.plots


@C04.draws
def _figure_c04(ev, device, scale):
    gpu = [c for c in ev["conditions"] if c.get("device") != "cpu"]  # GPU-sized budgets, full-size models
    return plots.largest_batch({f"{c['workload']}, {c['budget_gib']:g} GiB": {m: c[m] for m in ev["modes"]} for c in gpu},
                               device=claims.searched_where(gpu[0]["method"], device), scale=C04.estimates_at)
