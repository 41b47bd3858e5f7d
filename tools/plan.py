"""The planned cost of a run on a GPU, computed without one: what each notebook's checks time and
search there, and about how long that takes, from the protocol's own knobs (rounds, samples, time
budgets, batches, cases) and per-call times measured on a reference GPU.

    from tools import plan
    p = plan.cuda_plan()            # {notebook: {"planned_s": ..., "items": [(what, seconds), ...]}}
    print(plan.table(p))

A plan is an upper estimate, not a measurement: a timed condition is planned as if its intervals
never decided before its time budget, each search as many trials as it took on the virtual CUDA
device (the trial counts are exact: an estimate's search runs the same trials on a GPU), and every
other check as long as it took on the reference GPU. The reference data (``tools/plan_h200.json``)
says where each figure comes from. ``tests/tools/test_gpu_plan.py`` checks the plan against a learner's
budgets: every notebook within a minute on an H200-class GPU, the whole collection within 8 minutes.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

__all__ = ["reference", "forward_time", "planned_condition", "cuda_plan", "table", "NOTEBOOK_BUDGET_S",
           "TOTAL_BUDGET_S"]

NOTEBOOK_BUDGET_S = 60.0  # a learner's notebook on an H200-class GPU
TOTAL_BUDGET_S = 480.0  # the whole collection


def reference(name: str = "h200") -> dict:
    """The reference figures a plan is computed from (``tools/plan_<name>.json``)."""
    path = Path(__file__).with_name(f"plan_{name}.json")
    return json.loads(path.read_text())


def forward_time(ref: dict, workload: str, batch: int) -> float:
    """One grad-enabled forward of ``workload`` at full scale and ``batch`` on the reference GPU: the
    line through its two measured batches (time grows about linearly with the batch once the GPU is
    busy; below the smaller batch the smaller batch's time is used: a launch-bound forward does not
    get faster with fewer samples)."""
    (b0, t0), (b1, t1) = ref["forward_s"][workload]
    if batch <= b0:
        return float(t0)
    return float(t0 + (t1 - t0) * (batch - b0) / (b1 - b0))


def planned_condition(knobs: dict, cases: int, t_call: float, build_s: float) -> float:
    """One shared forward condition (:func:`nogradlab.claims.measure.forward_condition`), planned: the
    model built and the clocks warmed (``build_s``), ``warmup`` calls and the calibration per case,
    the minimum ``rounds``, then rounds until the ``time_budget`` (one block past it at most) or
    ``max_rounds``, as if the intervals never decided. A sample takes ``min_run_time / rounds`` or one
    call, whichever is longer, plus the untimed call before a sample of several calls
    (:func:`nogradlab.timing._sample`)."""
    target = knobs["min_run_time"] / knobs["rounds"]
    sample = max(target, t_call) + (t_call if t_call < target else 0.0)
    per_round = cases * sample
    warm = cases * (knobs["warmup"] * t_call + 2 * max(target, t_call))
    block = max(2, knobs["rounds"] // 2)
    rounds_s = knobs["rounds"] * per_round
    if knobs.get("time_budget"):  # the budget counts from the first round: the minimum, or the budget and a block
        rounds_s = max(rounds_s, knobs["time_budget"] + block * per_round)
    rounds_s = min(rounds_s, max(knobs.get("max_rounds") or knobs["rounds"], knobs["rounds"]) * per_round)
    return build_s + warm + rounds_s


def _ctx(params=None):
    from nogradlab import claims

    return claims.Context(torch.device("cuda"), "full", 0, dict(params or {}))


def cuda_plan(ref: "dict | None" = None, params: "dict | None" = None) -> dict:
    """``{notebook: {"planned_s": s, "items": [(what, seconds)]}}`` for a run of every notebook at
    ``scale="auto"`` (full) on a CUDA GPU like the reference one, with the checks' default knobs
    (``params`` as a notebook would pass them to every check)."""
    from nogradlab.core import workloads
    from nogradlab.claims import NOTEBOOKS
    from nogradlab.claims import searches as capacity
    from nogradlab.claims import measure as N

    ref = ref or reference()
    ctx = _ctx(params)
    knobs = N._knobs(ctx)
    names = N._names(ctx)
    plan = {}
    for nb, ids in NOTEBOOKS.items():
        items = [("kernel start, imports and the notebook's own cells", ref["notebook_rest_s"].get(nb, 10.0))]
        conditions = {}  # (workload, batch) -> the checks reading it; each timed once per kernel
        for cid in ids:
            if cid == "C03":
                for n in names:
                    for b in N._speed_batches(ctx, workloads.get(n, "full")):
                        conditions.setdefault((n, b), []).append(cid)
            elif cid == "C17":
                wl = workloads.get(ctx.params.get("workload", "resnet50"), "full")
                b = N._speed_batch(ctx, wl)
                conditions.setdefault((wl.name, b), []).append(cid)
                n = int(ctx.params.get("n_batches", 20))
                items.append(("C17 validation loop, both ways", 2 * n * forward_time(ref, wl.name, b)))
            elif cid == "C20":
                for n in names:
                    wl = workloads.get(n, "full")
                    b = N._speed_batch(ctx, wl)
                    conditions.setdefault((n, b), []).append(cid)
                    t_train = ref["train_over_forward"] * forward_time(ref, n, b)
                    items.append((f"C20 {n} training step timed", knobs["min_run_time"] + knobs["warmup"] * t_train))
                    items.append((f"C20 {n} estimates at the default batch (train, grad, no_grad)",
                                  sum(ref["trial_s"][f"{n} {m}"] for m in ("train", "grad", "eval+no_grad"))))
                    items += _searches(ref, "C20", n)
            elif cid == "X05":
                for n in names:
                    for b in N._lever_batches(ctx, workloads.get(n, "full")):
                        conditions.setdefault((n, b), []).append(cid)
                if N._compile_reason(ctx) is None:
                    items += [(f"X05 torch.compile {n}", ref["compile_s"]) for n in names]
            elif cid in ("C04", "C09"):
                real = capacity._real_search(ctx)
                if cid == "C04":
                    budgets = ctx.params.get("budgets_gib", capacity.default_budgets(ctx))
                    for n in list(ctx.params.get("workloads", workloads.names())):
                        for gib in budgets:
                            items += _searches(ref, f"C04@{gib:g}", n)
                    items.append(("C04 the CPU's own answer (tiny, real runs)", ref["check_s"]["C04 cpu part"]))
                else:
                    items += _searches(ref, "C09@12", "resnet50")
                if real == "one":
                    items.append((f"{cid} one real OOM search", ref["real_search_s"]))
                elif real == "all":
                    items.append((f"{cid} every search real", ref["real_search_s"] * (24 if cid == "C04" else 3)))
            elif cid == "C18":
                for n in N.FEED_FORWARD:
                    wl = workloads.get(n, "full")
                    d = wl.default_batch
                    real = ref["build_s"] + sum(2 * (forward_time(ref, n, b) + ref["probe_s"]) for b in (1, d, 2 * d))
                    fb = ctx.params.get("full_batches") or ((d,) if not ctx.reference else (1, d // 4, d, 4 * d))
                    items.append((f"C18 {n}: 3 real batches, {len(fb)} estimated", real + 2 * len(fb) * ref["trial_s"][f"{n} grad"]))
            elif cid == "C19":
                lens = (128, 512, 2048) if not ctx.reference else (128, 256, 512, 1024, 2048, 4096)
                t16 = forward_time(ref, "transformer_base", 16)
                real = ref["build_s"] + sum(2 * (t16 * L / 512 + ref["probe_s"]) for L in lens)
                n_est = 5 if not ctx.reference else 10
                items.append((f"C19 {len(lens)} real sequence lengths, {n_est} estimated",
                              real + 2 * n_est * ref["trial_s"]["transformer_base grad"]))
            else:
                items.append((f"{cid} (as long as on the reference GPU)", ref["check_s"][cid]))
        for (n, b), readers in conditions.items():
            cases = len(N._lever_settings(ctx, n, b))
            items.append((f"forward condition {n}@{b} ({cases} cases; {', '.join(readers)})",
                          planned_condition(knobs, cases, forward_time(ref, n, b), ref["build_s"])))
        plan[nb] = {"planned_s": sum(s for _, s in items), "items": items}
    return plan


def _searches(ref: dict, where: str, workload: str) -> list:
    """The estimate searches of one check for one workload: trials (exact, from the virtual device) x
    the seconds one trial's fake-tensor trace and allocator replay take."""
    out = []
    for mode, trials in ref["search_trials"][where][workload].items():
        out.append((f"{where.split('@')[0]} {workload} {mode} search ({trials} trials)",
                    trials * ref["trial_s"][f"{workload} {mode}"]))
    return out


def table(plan: dict) -> str:
    """The plan as lines: seconds per notebook with its three largest items, and the total."""
    lines = []
    for nb, p in plan.items():
        top = sorted(p["items"], key=lambda kv: -kv[1])[:3]
        lines.append(f"{nb:<40} {p['planned_s']:6.1f} s   " + "; ".join(f"{w} {s:.1f} s" for w, s in top))
    total = sum(p["planned_s"] for p in plan.values())
    lines.append(f"{'total':<40} {total:6.1f} s   ({math.ceil(total / 60)} min)")
    return "\n".join(lines)
