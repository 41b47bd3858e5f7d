"""How long notebook 02's budget slider takes to answer, move by move (issue 27): ResNet-50 at full size on
a virtual CUDA device, the four modes, as the widget computes them (``widgets.largest_batches``, which
keeps every search of the session). The slider opens at 12 GiB, moves to budgets not seen before, then
back to one seen before. The targets (issue 38): a budget seen before within a second, a new one within
2 s on the 2-core CPU, ResNet-50's training step included. The run starts from an empty cache folder of its
own, so the first move makes the steps' allocation programs, as a learner's first run does. Printed, never asserted: times scale with the machine and its load.

Beside each move: the fake-tensor traces it took (each 0.1-0.5 s here; a new budget replays the programs
and takes none) and,
with ``--check``, whether its answers equal a fresh search's at that budget (every cache emptied first:
where fitting is not monotone in the batch a search from another start may stop at another verified
boundary; see ``largest_batch``).

    python benchmarks/budget_slider.py [--budgets 12,13.5,20,7,30,3,12] [--workload resnet50]
        [--scale full] [--check] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budgets", default="12,13.5,20,7,30,3,12", help="GiB, in the order the slider moves")
    p.add_argument("--workload", default="resnet50")
    p.add_argument("--scale", default="full")
    p.add_argument("--check", action="store_true", help="compare each answer with a fresh search's")
    p.add_argument("--json", help="write the moves here")
    a = p.parse_args()
    try:
        budgets = [float(x) for x in a.budgets.split(",") if x.strip()]
    except ValueError:
        p.error(f"--budgets: GiB numbers separated by commas, got {a.budgets!r}")
    if not budgets or any(b <= 0 for b in budgets):
        p.error(f"--budgets: positive GiB numbers, got {a.budgets!r}")

    import tempfile

    # programs kept between runs (nogradlab.estimate.programs) would make the first move free: a folder of
    # this run's own, empty, so the first move pays for the programs as a learner's first run does
    os.environ["NOGRADLAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="budget-slider-")
    from nogradlab.estimate import batch as _batch
    from nogradlab.lab import widgets

    traced = []
    real = _batch._estimate

    def counted(*args, **kw):
        traced.append((args[2], args[3]))
        return real(*args, **kw)

    widgets.SEARCHES.clear()
    _batch._forget_estimates()
    moves = []
    print(f"budget slider: {a.workload} ({a.scale}) on a virtual CUDA device, modes {', '.join(widgets.BUDGET_MODES)}; "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    for i, gib in enumerate(budgets):
        seen = any(k[3] == int(gib * 2**30) and k[:3] == (a.workload, a.scale, "cuda") for k in widgets.SEARCHES)
        traced.clear()
        _batch._estimate = counted
        try:
            arrived = {}
            t0 = time.perf_counter()
            res = widgets.largest_batches(a.workload, a.scale, "cuda", gib,
                                          on_result=lambda m, r: arrived.setdefault(m, time.perf_counter() - t0))
            dt = time.perf_counter() - t0
        finally:
            _batch._estimate = real
        move = {"gib": gib, "kind": "first" if i == 0 else ("seen before" if seen else "new"),
                "seconds": round(dt, 2), "traces": len(traced), "batches": res.batches,
                "exact_after_s": {m: round(t, 2) for m, t in arrived.items()}}
        if a.check and move["kind"] == "new":
            kept_searches, kept_traces = dict(widgets.SEARCHES), dict(_batch._TRACES)
            kept_programs, kept_dir = dict(_batch._PROGRAMS), os.environ["NOGRADLAB_CACHE_DIR"]
            widgets.SEARCHES.clear()
            _batch._forget_estimates()
            os.environ["NOGRADLAB_CACHE_DIR"] = "off"  # fresh: every program traced again
            fresh = widgets.largest_batches(a.workload, a.scale, "cuda", gib).batches
            os.environ["NOGRADLAB_CACHE_DIR"] = kept_dir
            widgets.SEARCHES.clear()
            widgets.SEARCHES.update(kept_searches)
            _batch._forget_estimates()
            _batch._TRACES.update(kept_traces)
            _batch._PROGRAMS.update(kept_programs)
            move["fresh_equal"] = fresh == res.batches
            if fresh != res.batches:
                move["fresh"] = fresh
        moves.append(move)
        extra = "" if "fresh_equal" not in move else ("  = a fresh search" if move["fresh_equal"]
                                                      else f"  fresh search: {move['fresh']}")
        inference = max((t for m, t in arrived.items() if m in ("eval+no_grad", "inference_mode")), default=None)
        first = "" if inference is None else f" (inference modes exact after {inference:.2f} s)"
        print(f"{gib:6.3g} GiB  {move['kind']:<11} {dt:6.2f} s{first}  {len(traced):2d} traces  "
              f"{' '.join(f'{m}={b}' for m, b in res.batches.items())}{extra}", flush=True)
    new = [m["seconds"] for m in moves if m["kind"] == "new"]
    again = [m["seconds"] for m in moves if m["kind"] == "seen before"]
    if new:
        inf = [max(t for m, t in mv["exact_after_s"].items() if m in ("eval+no_grad", "inference_mode"))
               for mv in moves if mv["kind"] == "new" and any(m in ("eval+no_grad", "inference_mode")
                                                              for m in mv["exact_after_s"])]
        print(f"new budgets: {min(new):.1f}-{max(new):.1f} s for every mode (target: at most 2 s)"
              + (f"; the inference modes' exact answers after {min(inf):.1f}-{max(inf):.1f} s" if inf else ""))
    if again:
        print(f"budgets seen before: at most {max(again):.3f} s (target: within a second)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"workload": a.workload, "scale": a.scale, "torch": torch.__version__,
                       "cpus": os.cpu_count(), "moves": moves}, f, indent=1)


if __name__ == "__main__":
    main()
