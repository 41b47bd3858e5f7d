"""Does nogradlab.timing.measure agree with a plain torch.utils.benchmark.Timer?

Run by hand:  python benchmarks/timer_agreement.py [--min-run-time 0.5] [--device cpu]

For each workload (a 256x256 matmul, a small MLP forward under torch.no_grad) it times the same
function with ``nogradlab.timing.measure`` and with
``torch.utils.benchmark.Timer(..., num_threads=torch.get_num_threads()).blocked_autorange()``,
alternating which goes first over a few repeats, and prints both medians, their ratio, and the
overhead of ``measure`` itself (wall time of the call minus the timed seconds it collected, next to
the same figure for the plain Timer).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit
from pathlib import Path

import torch
from torch.utils.benchmark import Timer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nogradlab import device as nd  # noqa: E402
from nogradlab.timing import format_seconds, measure  # noqa: E402


def workloads(dev: torch.device) -> dict:
    torch.manual_seed(0)
    a = torch.randn(256, 256, device=dev)
    b = torch.randn(256, 256, device=dev)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).to(dev).eval()
    x = torch.randn(32, 128, device=dev)

    def matmul():
        return a @ b

    def mlp_forward():
        with torch.no_grad():
            return mlp(x)

    return {"matmul 256x256": matmul, "MLP forward (32x128 -> 10)": mlp_forward}


def plain_timer(fn, dev: torch.device, min_run_time: float):
    clock = timeit.default_timer
    if dev.type in ("cuda", "mps"):
        def clock():
            nd.synchronize(dev)
            return timeit.default_timer()
    t0 = timeit.default_timer()
    m = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads(),
              timer=clock).blocked_autorange(min_run_time=min_run_time)
    wall = timeit.default_timer() - t0
    return m.median, wall - sum(m.raw_times), sum(m.raw_times)


def ours(fn, dev: torch.device, min_run_time: float):
    t0 = timeit.default_timer()
    t = measure(fn, device=dev, min_run_time=min_run_time, warmup=WARMUP)
    wall = timeit.default_timer() - t0
    timed = sum(t.times) * t.number_per_sample
    return t.median, wall - timed, timed, t


WARMUP = 3  # measure()'s default number of warm-up calls


def load() -> str:
    try:
        return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-run-time", type=float, default=0.5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    dev = nd.resolve(args.device)
    threads_before = torch.get_num_threads()
    print(nd.label(dev), "|", load())
    print(f"min_run_time={args.min_run_time}s, repeats={args.repeats} (order alternates)\n")

    for name, fn in workloads(dev).items():
        print(f"== {name}")
        meds_ours, meds_plain, ovh_ours, ovh_plain = [], [], [], []
        for rep in range(args.repeats):
            runs = [("ours", ours), ("plain", plain_timer)]
            if rep % 2:
                runs.reverse()
            for who, f in runs:
                med, overhead, timed, *rest = f(fn, dev, args.min_run_time)
                (meds_ours if who == "ours" else meds_plain).append(med)
                (ovh_ours if who == "ours" else ovh_plain).append(overhead)
                if who == "ours":
                    print(f"   measure(): {rest[0]}")
        mo, mp = statistics.median(meds_ours), statistics.median(meds_plain)
        # Each repeat runs the two back to back, so per-repeat ratios compare like with like even
        # when the machine's state changes between repeats.
        ratios = [o / q for o, q in zip(meds_ours, meds_plain)]
        bookkeeping = [ov - WARMUP * m for ov, m in zip(ovh_ours, meds_ours)]
        ms = lambda xs: ", ".join(f"{x * 1e3:.1f}" for x in xs)  # noqa: E731
        print(f"   median  measure()      : {format_seconds(mo)}  "
              f"(repeats: {', '.join(format_seconds(m) for m in meds_ours)})")
        print(f"   median  plain Timer    : {format_seconds(mp)}  "
              f"(repeats: {', '.join(format_seconds(m) for m in meds_plain)})")
        print(f"   ratio measure/plain    : {mo / mp:.3f} of medians; per repeat "
              f"[{', '.join(f'{r:.3f}' for r in ratios)}], median {statistics.median(ratios):.3f}")
        print(f"   untimed wall time/call : measure() {statistics.median(ovh_ours) * 1e3:.1f} ms "
              f"[{ms(ovh_ours)}], plain Timer {statistics.median(ovh_plain) * 1e3:.1f} ms "
              f"[{ms(ovh_plain)}]")
        print("     (wall time of one call minus the seconds it timed: block-size estimation,"
              f" and for measure() {WARMUP} warm-up calls and bookkeeping)")
        print(f"   measure() minus its warm-up calls: {statistics.median(bookkeeping) * 1e3:.1f} ms "
              f"[{ms(bookkeeping)}] vs plain Timer {statistics.median(ovh_plain) * 1e3:.1f} ms\n")

    assert torch.get_num_threads() == threads_before, "thread count changed"
    print(f"torch.get_num_threads() unchanged: {torch.get_num_threads()} | {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
