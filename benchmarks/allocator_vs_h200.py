"""Estimates against an NVIDIA H200 (run by hand): the largest batch and the allocated peak.

    PYTHONPATH=. python benchmarks/allocator_vs_h200.py [--quick] [--with-held]

1. The largest batch: ``batch.largest_batch(method="estimate")`` on a virtual CUDA device (no GPU
   used), full scale, against the H200's real OOM searches of 2026-11-30 (24 native cases, 4
   workloads x 3 modes x 12 and 16 GiB, and two with ``expandable_segments:True``;
   ``results/h200-alloc-probe/h200-2026-11-30-largest_batch.json``) and against the same searches
   repeated in fresh processes (``results/h200-alloc-probe/searches.json``, from
   ``benchmarks/gpu_alloc_probe.py``; the MLP searches there stopped at max_batch 65536 and are
   left out). Columns: the real batch, the estimate of 2026-11-30 (tensor bytes against the budget),
   the new estimate (the allocator's model under the cap), the error of each. The reference run's
   process held other memory before its searches (``allocated_before`` minus the model's weights
   and the library workspaces); ``--with-held`` estimates once more with that memory held.
2. The allocated peak at the default batches against ``max_memory_allocated`` on the H200
   (``h200-2026-11-30-estimate_vs_real.json``).
3. How long the estimate of ResNet-50 at batch 256 takes on this machine, per mode (target: under
   10 s for the three).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nogradlab import batch, memory  # noqa: E402

GiB, MiB = 2 ** 30, 2 ** 20
REF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "h200-alloc-probe")
SETTING = {"grad": "eval+grad", "eval+no_grad": "eval+no_grad"}


def _load(name):
    with open(os.path.join(REF, name)) as f:
        return json.load(f)


def _persistent(workload, mode):
    """Bytes the model's weights and the library workspaces take before a search (the events up
    to the first empty_cache of the estimate's trace, at batch 1)."""
    if mode == "train":
        r = memory.estimate(workload, 1, "cuda", step="train", scale="full")
    else:
        r = memory.estimate(workload, 1, "cuda", SETTING[mode], scale="full")
    total = 0
    for e in r.events:
        if e[0] == "empty_cache":
            break
        if e[0] == "alloc":
            total += -(-e[2] // 512) * 512
    return total


def largest_batches(quick=False, with_held=False):
    d = _load("h200-2026-11-30-largest_batch.json")
    fresh = {}
    for job in _load("searches.json"):
        for r in job.get("result") or []:
            if r["batch"] < 65536:  # the MLP searches stopped at the default max_batch
                fresh[(r["workload"], r["mode"], r["budget_bytes"], r["allocator"])] = r["batch"]
    cases = d["searches"] + [s for s in d["more_searches"] if s["allocator"] == "expandable_segments"]
    if quick:
        cases = [s for s in cases if s["budget_bytes"] == 12 * GiB]
    print("\n== 1. largest batch: estimate on a virtual CUDA device vs the H200's real search (full scale)")
    head = (f"{'workload':17s} {'mode':13s} {'GiB':>3s} {'allocator':9s} {'H200':>7s} {'fresh':>7s} "
            f"{'old est':>7s} {'err':>7s} {'new est':>7s} {'err':>7s} {'vs fresh':>8s}")
    if with_held:
        head += f" {'held MiB':>8s} {'w/ held':>7s} {'err':>7s}"
    print(head + "  trials  seconds")
    err_new, err_old, err_fresh, err_held = [], [], [], []
    held_cache = {}
    for s in cases:
        t0 = time.perf_counter()
        r = batch.largest_batch(s["workload"], s["mode"], s["budget_bytes"], "cuda", method="estimate",
                                scale="full", max_batch=2 ** 22, allocator=s["allocator"])
        secs = time.perf_counter() - t0
        real = s["real_batch"]
        e_new = 100 * (r.batch - real) / real
        err_new.append(abs(e_new))
        old = s.get("estimate_batch_then")
        e_old = 100 * (old - real) / real if old else None
        if e_old is not None:
            err_old.append(abs(e_old))
        f = fresh.get((s["workload"], s["mode"], s["budget_bytes"], s["allocator"]))
        e_f = 100 * (r.batch - f) / f if f else None
        if e_f is not None:
            err_fresh.append(abs(e_f))
        line = (f"{s['workload']:17s} {s['mode']:13s} {s['budget_bytes'] / GiB:3.0f} {s['allocator'][:9]:9s} "
                f"{real:7d} {f if f else '-':>7} {old if old else '-':>7} "
                f"{f'{e_old:+.1f}%' if e_old is not None else '-':>7} {r.batch:7d} {e_new:+6.2f}% "
                f"{f'{e_f:+.2f}%' if e_f is not None else '-':>8}")
        if with_held and s.get("allocated_before") is None:
            line += f" {'-':>8s} {'-':>7s} {'-':>7s}"  # a separate run: what it held is not known
        elif with_held:
            before = s["allocated_before"]
            key = (s["workload"], s["mode"])
            if key not in held_cache:
                held_cache[key] = _persistent(*key)
            held = max(0, (before or 0) - held_cache[key])
            rh = batch.largest_batch(s["workload"], s["mode"], s["budget_bytes"], "cuda", method="estimate",
                                     scale="full", max_batch=2 ** 22, allocator=s["allocator"],
                                     held_bytes=int(held))
            e_h = 100 * (rh.batch - real) / real
            err_held.append(abs(e_h))
            line += f" {held / MiB:8.1f} {rh.batch:7d} {e_h:+6.2f}%"
        print(line + f"  {len(r.trials):6d}  {secs:7.1f}", flush=True)
    print(f"   new estimate vs the H200 reference run: max {max(err_new):.2f} %, median "
          f"{statistics.median(err_new):.2f} % over {len(err_new)} cases")
    if err_old:
        print(f"   old estimate (tensor bytes):            max {max(err_old):.2f} %, median "
              f"{statistics.median(err_old):.2f} % over {len(err_old)} cases")
    if err_fresh:
        print(f"   new estimate vs fresh-process searches: max {max(err_fresh):.2f} %, median "
              f"{statistics.median(err_fresh):.2f} % over {len(err_fresh)} cases")
    if err_held:
        print(f"   with the reference process's held memory: max {max(err_held):.2f} %, median "
              f"{statistics.median(err_held):.2f} %")


def allocated_peaks():
    print("\n== 2. allocated peak at the default batches: estimate vs the H200's max_memory_allocated")
    print(f"{'workload':17s} {'mode':13s} {'batch':>5s} {'H200 MiB':>10s} {'old':>10s} {'ratio':>6s} "
          f"{'new':>10s} {'ratio':>7s}")
    worst = 0.0
    for row in _load("h200-2026-11-30-estimate_vs_real.json")["rows"]:
        if row["mode"] == "train":
            r = memory.estimate(row["workload"], row["batch"], "cuda", step="train", scale="full")
        else:
            r = memory.estimate(row["workload"], row["batch"], "cuda", SETTING[row["mode"]], scale="full")
        ratio = r.total_peak_bytes / row["real_bytes"]
        worst = max(worst, abs(ratio - 1))
        print(f"{row['workload']:17s} {row['mode']:13s} {row['batch']:5d} {row['real_bytes'] / MiB:10.2f} "
              f"{row['estimate_bytes'] / MiB:10.2f} {row['ratio']:6.3f} {r.total_peak_bytes / MiB:10.2f} "
              f"{ratio:7.4f}")
    print(f"   largest deviation: {100 * worst:.2f} %")


def speed():
    print("\n== 3. memory.estimate, ResNet-50 batch 256, virtual CUDA device, this machine")
    total = 0.0
    for mode in ("eval+grad", "eval+no_grad", "train"):
        t0 = time.perf_counter()
        if mode == "train":
            r = memory.estimate("resnet50", 256, "cuda", step="train", scale="full")
        else:
            r = memory.estimate("resnet50", 256, "cuda", mode, scale="full")
        dt = time.perf_counter() - t0
        total += dt
        print(f"   {mode:13s} {dt:6.2f} s  allocated {r.allocated_bytes / GiB:6.2f} GiB, reserved "
              f"{r.reserved_bytes / GiB:6.2f} GiB (native)")
    print(f"   three modes: {total:.2f} s (target: under 10 s on a 2-core CPU)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the 12 GiB cases only")
    ap.add_argument("--with-held", action="store_true",
                    help="also estimate with the memory the reference process held before its searches")
    a = ap.parse_args(argv)
    speed()
    allocated_peaks()
    largest_batches(a.quick, a.with_held)
    return 0


if __name__ == "__main__":
    sys.exit(main())
