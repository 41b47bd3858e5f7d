"""Benchmark of the measurement core (run by hand: `make bench` or `python benchmarks/probes.py`).

Prints, on this machine:
1. the probes' overhead: one forward pass timed bare and inside each memory probe;
2. the timer's agreement with a plain torch.utils.benchmark.Timer (benchmarks/timer_agreement.py);
3. each workload's forward time at a scale (default tiny) under each gradient mode, interleaved;
4. how long memory.estimate takes for ResNet-50 at batch 256 on a virtual CUDA device, per mode
   (the target: at most 10 s each on a 2-core CPU), with the estimated peaks.

Speed and memory targets live here, not in the unit tests.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nogradlab import device as D  # noqa: E402
from nogradlab import memory, modes, timing, workloads  # noqa: E402


def probe_overhead(dev, scale, min_run_time):
    print("\n== 1. probe overhead (forward pass, grad on; median per call)")
    for name in workloads.names():
        wl = workloads.get(name, scale)
        model, x = wl.build(dev), wl.make_input(wl.default_batch, dev)

        def bare():
            return model(x)

        cases = {"bare": bare,
                 "memory.measure(storage)": lambda: memory.measure(bare, method="storage"),
                 "memory.measure(timeline)": lambda: memory.measure(bare, method="storage", timeline=True)}
        if dev.type == "cuda":
            cases["memory.measure(allocator)"] = lambda: memory.measure(bare, device=dev)
        cmp = timing.compare(cases, baseline="bare", device=dev, rounds=6, min_run_time=min_run_time, warmup=1)
        base = cmp.timings["bare"].median
        parts = ", ".join(f"{k} {t.median / base:.2f}x" for k, t in cmp.timings.items() if k != "bare")
        print(f"  {name:17s} bare {timing.format_seconds(base)}; {parts}")


def timer_agreement(dev, min_run_time):
    print("\n== 2. timer agreement with a plain torch.utils.benchmark.Timer")
    import timer_agreement as ta

    ta.main(["--device", str(dev), "--min-run-time", str(min_run_time), "--repeats", "3"])


def forward_times(dev, scale, min_run_time):
    print(f"\n== 3. forward time per workload at scale {scale!r}, each gradient mode (interleaved rounds)")
    for name in workloads.names():
        wl = workloads.get(name, scale)
        model, x = wl.build(dev), wl.make_input(wl.default_batch, dev)
        model.eval()

        def run(m):
            def f():
                with modes.get(m)():
                    return model(x)
            return f

        cmp = timing.compare({m: run(m) for m in modes.names()}, baseline="grad", device=dev, rounds=10,
                             min_run_time=min_run_time)
        print(f"  {name} ({wl.description}), batch {wl.default_batch}, model in eval()")
        print("    " + str(cmp).replace("\n", "\n    "))


def estimate_speed(batch):
    print(f"\n== 4. memory.estimate: ResNet-50 (224x224), batch {batch}, virtual cuda device (FakeTensorMode)")
    for mode in modes.names():
        t0 = time.perf_counter()
        r = memory.estimate("resnet50", batch, "cuda", mode, scale="full")
        dt = time.perf_counter() - t0
        flag = "ok" if dt <= 10 else "OVER the 10 s target"
        print(f"  {mode:15s} {dt:6.2f} s ({flag}); peak {memory.format_bytes(r.peak_bytes)}, "
              f"with weights and input {memory.format_bytes(r.total_peak_bytes)}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--scale", default="tiny", choices=workloads.SCALES)
    p.add_argument("--min-run-time", type=float, default=0.3)
    p.add_argument("--batch", type=int, default=256)
    a = p.parse_args(argv)
    dev = D.resolve(a.device)
    workloads.check_batch(a.batch)
    print(D.label(D.describe(dev)), "| load average", ", ".join(f"{v:.2f}" for v in os.getloadavg()))
    torch.manual_seed(0)
    probe_overhead(dev, a.scale, a.min_run_time)
    timer_agreement(dev, a.min_run_time)
    forward_times(dev, a.scale, a.min_run_time)
    estimate_speed(a.batch)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    raise SystemExit(main())
