"""Do :func:`nogradlab.timing.compare`'s 95 % intervals cover at 95 %, stopping rule included?

Two figures, each before (the protocol up to commit e625ac3: rotated order, paired percentile
bootstrap of the ratio of medians at every look, a look every ``rounds // 2`` rounds, one timing
to calibrate a sample) and after (today's :func:`nogradlab.timing.run_rounds`: a random order per
round, the signed-rank interval of the paired log-ratios, looks at ``rounds`` x 1, 1.5, 2, 3, 4 each read at
``1 - 0.05 / looks``, the fastest of five timings per case, in turns, to calibrate):

1. **real A/A runs on this CPU**: one function (``x @ x``, 64x64, one thread) timed as two cases
   "a" and "b", so the true ratio is 1, with ``rounds=10, until=resolves([1.0]), max_rounds=40``
   as the claim checks call it; quiet, and with a noisy neighbour process (bursts of work of random
   length and random pauses, in a subprocess that this script starts, bounds and stops).
2. **simulated runs** of the same protocol with heavy-tailed, drifting times: lognormal noise,
   Pareto bursts, bursts that last several samples, slow drift, a cold first slot in each round, a
   share of additive (not multiplicative) delays; each run draws its own machine. The simulation
   feeds simulated times (and a simulated clock) to the *same* loop and interval code the package
   runs (:func:`nogradlab.timing.run_rounds`); "before" runs the old loop below with the package's
   old interval (:func:`nogradlab.timing.bootstrap_speedup`).

Each row: runs, the rate at which the final interval excludes the true ratio (for A/A: excludes 1,
a false decision), with its one-sided 95 % upper binomial bound, and the mean rounds.

Run: ``PYTHONPATH=. python benchmarks/coverage.py`` (about 5 minutes on a shared two-core machine;
``--sim-runs``/``--real-runs`` to change the counts, ``--only sim`` or ``--only real``).

The figures of the runs of 2026-12-01 (a shared 2-core AMD EPYC, load average 8-15), with the
commit and the load of each: ``benchmarks/README-coverage.md`` (kept in one place so that they cannot
drift apart). In short: real A/A, before 37-43 % (36 % with the neighbour), after 1-3 %; simulated
A/A, before 20.0 %, after 2.9 % of 2000 runs.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import time
import types

import numpy as np
import torch

from nogradlab import timing

CONFIDENCE = timing.CONFIDENCE


# --------------------------------------------------------------------------------------------
# the protocol before (a copy of nogradlab.timing.compare's round loop at e625ac3)

def old_rounds(sample, names, baseline=None, *, rounds=10, until=None, max_rounds=None, time_budget=None,
               seed=0, clock=time.perf_counter, number=None, threads=1, device="cpu",
               resamples: int = timing.BOOTSTRAP_RESAMPLES) -> timing.Comparison:
    """The old loop: the order rotated by one each round (ABC, BCA, ...), ``until`` asked after the
    minimum and after every block of ``max(2, rounds // 2)`` rounds, every look's interval the 95 %
    paired percentile bootstrap of the ratio of medians (:func:`nogradlab.timing.bootstrap_speedup`,
    ``resamples`` of them: fewer only to make a test faster)."""
    names = list(names)
    baseline = baseline or names[0]
    k = len(names)
    max_rounds = rounds * 4 if max_rounds is None else max_rounds
    number = number or {n: 1 for n in names}
    samples = {n: [] for n in names}
    orders = []

    def one_round(r):
        order = tuple(names[(r + j) % k] for j in range(k))
        orders.append(order)
        for n in order:
            samples[n].append(float(sample(n)))

    def snapshot():
        timings = {n: timing.Timing.from_samples(samples[n], number[n], label=n, threads=threads, device=device)
                   for n in names}
        speedup, ci = timing.bootstrap_speedup(samples, baseline, resamples=resamples, seed=seed)
        return timing.Comparison(timings=timings, baseline=baseline, speedup=speedup, ci=ci, rounds=len(orders),
                                 device=device, threads=threads, seed=seed, orders=list(orders))

    stopped, block = "rounds", max(2, rounds // 2)
    t0 = clock()
    for r in range(rounds):
        one_round(r)
    if until is not None:
        while True:
            if until(snapshot()):
                stopped = "decided"
                break
            if len(orders) >= max_rounds:
                stopped = "max rounds"
                break
            if time_budget is not None and clock() - t0 >= time_budget:
                stopped = "time budget"
                break
            for _ in range(min(block, max_rounds - len(orders))):
                one_round(len(orders))
    out = snapshot()
    out.stopped, out.seconds = stopped, clock() - t0
    return out


PROTOCOLS = {"before": old_rounds, "after": timing.run_rounds}
#: calls per sample of each case: the old protocol timed each case once, one after the other;
#: today's takes the fastest of five timings per case, taken in turns (timing._calibrate_all)
CALIBRATE = {"before": lambda timers, target: {n: timing._calibrate(t, target, repeats=1) for n, t in timers.items()},
             "after": timing._calibrate_all}


# --------------------------------------------------------------------------------------------
# binomial bounds (no scipy in the package's dependencies)

def binom_pmf(i: int, n: int, p: float) -> float:
    """P(X = i) for X ~ Binomial(n, p), in logs (math.comb(2000, 1000) is no float)."""
    if p <= 0.0 or p >= 1.0:
        return float(i == (0 if p <= 0.0 else n))
    return math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                    + i * math.log(p) + (n - i) * math.log1p(-p))


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - sum(binom_pmf(i, n, p) for i in range(k))))


def upper_bound(k: int, n: int, level: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate observed as ``k`` of ``n`` (bisection)."""
    if k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if 1.0 - binom_sf(k + 1, n, mid) > 1.0 - level:  # P(X <= k | mid) still above alpha
            lo = mid
        else:
            hi = mid
    return hi


# --------------------------------------------------------------------------------------------
# the simulated machine

class SimMachine:
    """Times of blocks of calls of the cases of one run, on a machine drawn at random.

    ``true[name]`` is the case's per-call time on a quiet machine (``true["a"] / true["b"]`` is the
    true speedup of "b"). A block of ``m`` calls runs for ``m * true * f`` seconds, ``f`` a product
    of: slow drift (a sine of random period and phase plus a log random walk), lognormal noise of a
    random spread (0.5-20 %), the noisy neighbour's busy spells (entered and left at random, several
    blocks long, 1.3-3x slower), rare Pareto bursts (tail index 1.3: infinite variance), a cold
    first slot in each round. On top, the scheduler: the process is descheduled at random while it
    runs (a Poisson process; each time for a quantum of 1-6 ms; contention up to 1.5x the run time,
    more in busy spells), which stretches long blocks and rarely touches short ones (what made one
    function read 5x faster than itself on this machine), and rare interrupts of a fixed length that
    do not scale with the case. The clock advances by each block's time. The protocol's own
    calibration (:func:`nogradlab.timing._calibrate`) runs on :meth:`timer`'s blocks."""

    def __init__(self, rng: np.random.Generator, true: dict):
        self.rng, self.true = rng, dict(true)
        self.k = len(true)
        self.sigma = math.exp(rng.uniform(math.log(0.005), math.log(0.2)))
        self.drift_amp = rng.uniform(0.0, 0.3)
        self.drift_period = rng.uniform(0.1, 5.0)  # seconds
        self.phase = rng.uniform(0, 2 * math.pi)
        self.walk_sd = rng.uniform(0.0, 0.03)
        self.p_busy, self.p_quiet = rng.uniform(0.0, 0.1), rng.uniform(0.1, 0.6)
        self.busy_factor = rng.uniform(1.3, 3.0)
        self.p_burst = rng.uniform(0.0, 0.05)
        self.cold_first = rng.uniform(1.0, 1.15)
        self.contention = rng.uniform(0.0, 1.5)  # seconds descheduled per second run
        self.quantum = rng.uniform(1e-3, 6e-3)
        self.p_add, self.add = rng.uniform(0.0, 0.05), rng.uniform(0.05, 0.5) * 1e-3
        self.t, self.walk, self.busy, self.calls = 0.0, 0.0, False, 0

    def block(self, name: str, m: int, first: bool = False) -> float:
        rng = self.rng
        self.walk += rng.normal(0.0, self.walk_sd)
        self.busy = (rng.random() >= self.p_quiet) if self.busy else (rng.random() < self.p_busy)
        f = math.exp(self.drift_amp * math.sin(2 * math.pi * self.t / self.drift_period + self.phase) + self.walk
                     + rng.normal(0.0, self.sigma))
        if self.busy:
            f *= self.busy_factor
        if rng.random() < self.p_burst:
            f *= 1.0 + rng.pareto(1.3)
        if first:
            f *= self.cold_first
        run = m * self.true[name] * f
        contention = self.contention * (2.0 if self.busy else 1.0)
        took = run + rng.poisson(contention / self.quantum * run) * self.quantum
        if rng.random() < self.p_add:
            took += self.add
        self.t += took
        return took

    def timer(self, name: str):
        """A stand-in for a ``torch.utils.benchmark.Timer`` of case ``name`` (its ``timeit``)."""
        machine = self

        class _Timer:
            def timeit(self, number):
                return types.SimpleNamespace(raw_times=[machine.block(name, number)])

        return _Timer()

    def sampler(self, number: dict):
        """``sample(name)`` for :func:`nogradlab.timing.run_rounds`: one block of ``number[name]``
        calls, per call."""

        def sample(name):
            first = self.calls % self.k == 0
            self.calls += 1
            return self.block(name, number[name], first) / number[name]

        return sample

    def clock(self) -> float:
        return self.t


def simulate(method: str, runs: int, seed: int = 0, ratio: float = 1.0, edges=(1.0,), rounds: int = 10,
             max_rounds: "int | None" = 40, adaptive: bool = True, per_call: float = 20e-6,
             min_run_time: float = 0.1, **protocol_kw) -> dict:
    """``runs`` simulated comparisons of "a" against "b" (``b`` ``ratio`` times faster; ``a`` takes
    ``per_call`` seconds a call), calibrated and run by the ``method`` ("before" or "after")
    protocol with the claim checks' tiny CPU settings; how often the final interval misses ``ratio``."""
    proto = PROTOCOLS[method]
    rng = np.random.default_rng(seed)
    miss = decided = 0
    n_rounds, widths = [], []
    for i in range(runs):
        machine = SimMachine(rng, {"a": per_call, "b": per_call / ratio})
        number = CALIBRATE[method]({n: machine.timer(n) for n in ("a", "b")}, min_run_time / rounds)
        until = timing.resolves(list(edges)) if adaptive else None
        c = proto(machine.sampler(number), ["a", "b"], "a", rounds=rounds, until=until,
                  max_rounds=max_rounds if adaptive else None, seed=i, clock=machine.clock, number=number,
                  **protocol_kw)
        lo, hi = c.ci["b"]
        miss += not (lo <= ratio <= hi)
        decided += c.stopped == "decided"
        n_rounds.append(c.rounds)
        widths.append(hi / lo if lo > 0 else math.inf)
    return {"method": method, "runs": runs, "ratio": ratio, "miss": miss, "rate": miss / runs,
            "upper95": upper_bound(miss, runs), "decided": decided, "mean_rounds": float(np.mean(n_rounds)),
            "median_width": float(np.median(widths))}


def widths(n: int, runs: int, seed: int = 2, per_call: float = 20e-6, min_run_time: float = 0.1) -> dict:
    """Median width (high / low) of three intervals read from the *same* simulated rounds (``n`` of
    them, random order, A/A): the old 95 % bootstrap, today's 95 % signed-rank interval (a fixed
    comparison) and today's at a look's share of the claim checks' five looks (99 %, an adaptive
    comparison stopped at that look)."""
    rng = np.random.default_rng(seed)
    out = {"bootstrap 95 %": [], "signed-rank 95 %": [], f"signed-rank {timing.look_confidence(5):.0%}": []}
    for i in range(runs):
        machine = SimMachine(rng, {"a": per_call, "b": per_call})
        number = timing._calibrate_all({k: machine.timer(k) for k in ("a", "b")}, min_run_time / n)
        c = timing.run_rounds(machine.sampler(number), ["a", "b"], "a", rounds=n, seed=i, number=number)
        t = {k: c.timings[k].times for k in ("a", "b")}
        for (name, ci) in zip(out, (timing.bootstrap_speedup(t, "a", seed=i)[1]["b"],
                                    timing.paired_speedup(t, "a")[1]["b"],
                                    timing.paired_speedup(t, "a", confidence=timing.look_confidence(5))[1]["b"])):
            out[name].append(ci[1] / ci[0])
    return {k: float(np.median(v)) for k, v in out.items()}


# --------------------------------------------------------------------------------------------
# real A/A runs

NEIGHBOUR = r"""
import random, sys, time
end = time.monotonic() + float(sys.argv[1])
random.seed()
while time.monotonic() < end:
    busy = time.monotonic() + random.uniform(0.001, 0.2)
    x = 0
    while time.monotonic() < busy:
        x += 1
    time.sleep(random.uniform(0.001, 0.2))
"""


@contextlib.contextmanager
def noisy_neighbour(seconds: float):
    """A subprocess doing bursts of busy work (1-200 ms) and pauses (1-200 ms) at random, for at
    most ``seconds``; stopped (by its own pid) when the block ends."""
    with neighbours(NEIGHBOUR, 1, seconds) as procs:
        yield procs[0]


@contextlib.contextmanager
def neighbours(source: str, count: int, seconds: float, settle: float = 0.0):
    """``count`` subprocesses running the Python ``source`` (given ``seconds`` as its one argument: it stops by
    itself then), ``settle`` seconds to start working; every one stopped, by its own pid, when the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", source, str(seconds)]) for _ in range(count)]
    try:
        time.sleep(settle)
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def real_run(method: str, seed: int, size: int = 64, min_run_time: float = 0.02, rounds: int = 10,
             max_rounds: int = 40) -> timing.Comparison:
    """One A/A comparison of ``x @ x`` with itself, by ``method``'s loop and calibration, on the CPU."""
    x = torch.randn(size, size)
    fns = {"a": lambda: x @ x, "b": lambda: x @ x}
    dev = torch.device("cpu")
    with timing._preserved_state(1):
        timers = {n: timing._timer(f, dev, 1, n) for n, f in fns.items()}
        for n, f in fns.items():
            timing._warm_up(f, dev, 1, n)
        number = CALIBRATE[method](timers, min_run_time / rounds)
        return PROTOCOLS[method](lambda n: timing._sample(timers[n], fns[n], number[n]) / number[n], list(fns), "a",
                                 rounds=rounds, until=timing.resolves([1.0]), max_rounds=max_rounds, seed=seed,
                                 number=number)


def real(method: str, runs: int, neighbour: bool) -> dict:
    miss, n_rounds, t0 = 0, [], time.perf_counter()
    with (noisy_neighbour(3600) if neighbour else contextlib.nullcontext()):
        for i in range(runs):
            c = real_run(method, seed=i)
            lo, hi = c.ci["b"]
            miss += not (lo <= 1.0 <= hi)
            n_rounds.append(c.rounds)
    return {"method": method, "runs": runs, "neighbour": neighbour, "miss": miss, "rate": miss / runs,
            "upper95": upper_bound(miss, runs), "mean_rounds": float(np.mean(n_rounds)),
            "seconds": time.perf_counter() - t0}


# --------------------------------------------------------------------------------------------
# real A/A runs at the claim checks' own settings, beside neighbours that work the way other users do

BURSTY = r"""
import random, sys, time
import torch
torch.set_num_threads(1)
end = time.monotonic() + float(sys.argv[1])
random.seed()
a, big = torch.randn(384, 384), torch.randn(4 * 2 ** 20)
while time.monotonic() < end:
    # a burst of torch work, tens of milliseconds to a second: matmuls (compute) or a pass over 16 MB
    # (memory bandwidth), as a neighbour's notebook cell or test would do; then a pause
    busy = time.monotonic() + random.uniform(0.02, 1.0)
    heavy = random.random() < 0.5
    while time.monotonic() < busy:
        if heavy:
            a @ a
        else:
            big.mul_(1.0000001)
    time.sleep(random.uniform(0.01, 0.5))
"""


@contextlib.contextmanager
def bursty_neighbours(count: int, seconds: float):
    """``count`` subprocesses, each doing single-threaded torch work in bursts of 20 ms to 1 s with pauses
    of 10-500 ms (a duty of about two thirds), for at most ``seconds``: on a 2-core machine 15 of them
    load it to about five times its cores. All are stopped when the block ends."""
    with neighbours(BURSTY, count, seconds, settle=3.0) as procs:  # 3 s: they import torch, then work
        yield procs


def checks_run(seed: int, clock: str = "auto", equal_calls: bool = True) -> timing.Comparison:
    """One A/A comparison at the claim checks' tiny CPU settings (:func:`nogradlab.claims.measure._knobs`):
    the tiny MLP forward under no_grad at batch 8 (the C03/X01 condition's workload), timed as two
    identical cases with ``compare(rounds=10, min_run_time=0.1, warmup=1, num_threads=1, max_rounds=40,
    until=resolves([1.0]))``. ``clock="wall"`` and ``equal_calls=False`` (each case its own calls per
    sample, as before) reproduce the protocol the issue measured."""
    from nogradlab.core import workloads

    wl = workloads.get("mlp", "tiny")
    torch.manual_seed(seed)
    model = wl.build("cpu").eval()
    x = wl.make_input(8, "cpu")

    def fwd():
        with torch.no_grad():
            return model(x)

    within = timing.EQUAL_CALLS_WITHIN
    try:
        if not equal_calls:
            timing.EQUAL_CALLS_WITHIN = 1.0
            timing._equal_calls.__defaults__ = (1.0,)
        return timing.compare({"a": fwd, "b": fwd}, rounds=10, min_run_time=0.1, warmup=1, num_threads=1,
                              max_rounds=40, until=timing.resolves([1.0]), seed=seed, clock=clock)
    finally:
        timing.EQUAL_CALLS_WITHIN = within
        timing._equal_calls.__defaults__ = (within,)


def checks(runs: int, neighbours: int, clock: str = "auto", equal_calls: bool = True) -> dict:
    miss, n_rounds, calls, t0 = 0, [], [], time.perf_counter()
    with (bursty_neighbours(neighbours, 3600) if neighbours else contextlib.nullcontext()):
        loads = [os.getloadavg()[0]]
        for i in range(runs):
            c = checks_run(i, clock, equal_calls)
            lo, hi = c.ci["b"]
            miss += not (lo <= 1.0 <= hi)
            n_rounds.append(c.rounds)
            na, nb = c.timings["a"].number_per_sample, c.timings["b"].number_per_sample
            calls.append(max(na, nb) / min(na, nb))
            loads.append(os.getloadavg()[0])
    return {"method": f"{clock}{'' if equal_calls else ',own'}", "runs": runs, "neighbours": neighbours,
            "miss": miss, "rate": miss / runs, "upper95": upper_bound(miss, runs),
            "mean_rounds": float(np.mean(n_rounds)), "seconds": time.perf_counter() - t0,
            "calls_ratio_median": float(np.median(calls)), "calls_ratio_max": float(np.max(calls)),
            "load": (min(loads), float(np.median(loads)), max(loads))}


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _row(r: dict, what: str) -> str:
    return (f"{what:<44} {r['method']:<7} {r['runs']:>5}  excludes truth {r['miss']:>4} "
            f"({r['rate']:6.1%}, upper 95 % bound {r['upper95']:6.1%})  mean rounds {r['mean_rounds']:5.1f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim-runs", type=int, default=2000)
    ap.add_argument("--real-runs", type=int, default=100)
    ap.add_argument("--only", choices=("sim", "real", "checks"), default=None)
    ap.add_argument("--checks-runs", type=int, default=50,
                    help="A/A runs at the checks' settings, quiet and again beside bursty neighbours")
    ap.add_argument("--neighbours", type=int, default=15,
                    help="bursty neighbour processes for the loaded half (15: a load of about 10 on 2 cores)")
    ap.add_argument("--checks-protocols", default="auto",
                    help="comma-separated, for --only checks: auto (today's), wall+own (wall clock and each "
                         "case its own calls per sample, the protocol before)")
    ap.add_argument("--methods", default="before,after", help="comma-separated: before, after")
    a = ap.parse_args(argv)
    methods = [m for m in a.methods.split(",") if m]
    for m in methods:
        if m not in PROTOCOLS:
            ap.error(f"method {m!r}; allowed: {', '.join(PROTOCOLS)}")
    torch.set_num_threads(1)
    print(f"coverage of nogradlab.timing intervals (nominal {CONFIDENCE:.0%}); torch {torch.__version__}; "
          f"{os.cpu_count()} CPUs; load average at start {_load()}")
    if a.only in (None, "sim"):
        print(f"\n(b) simulated, heavy-tailed drifting times, {a.sim_runs} runs per row "
              "(rounds=10, until=resolves(edges), max_rounds=40, unless fixed):")
        for what, kw in [("A/A, ratio 1, edges [1.0]", dict(ratio=1.0, edges=(1.0,))),
                         ("ratio 1.3, edges [1.0, 1.25, 1.4]", dict(ratio=1.3, edges=(1.0, 1.25, 1.4))),
                         ("A/A, fixed 10 rounds", dict(ratio=1.0, adaptive=False)),
                         ("A/A, fixed 40 rounds", dict(ratio=1.0, adaptive=False, rounds=40))]:
            for m in methods:
                r = simulate(m, a.sim_runs, seed=1, **kw)
                print(_row(r, what) + f"  median width hi/lo {r['median_width']:.3f}", flush=True)
        for n in (10, 40):
            w = widths(n, min(a.sim_runs, 500))
            print(f"median width (high/low) of intervals from the same {n} simulated A/A rounds, {min(a.sim_runs, 500)} "
                  "runs: " + ", ".join(f"{k} {v:.3f}" for k, v in w.items()), flush=True)
    if a.only in (None, "checks"):
        print(f"\n(c) real A/A at the claim checks' settings (tiny MLP forward under no_grad, batch 8, "
              f"min_run_time 0.1 s, 1 thread, rounds 10, looks to 40), {a.checks_runs} runs per row, quiet "
              f"and beside {a.neighbours} bursty torch neighbours:", flush=True)
        for proto in [p for p in a.checks_protocols.split(",") if p]:
            equal = "own" not in proto
            clock = "wall" if proto.startswith("wall") else "auto"
            for n in (0, a.neighbours):
                before = _load()
                r = checks(a.checks_runs, n, clock, equal)
                print(_row(r, f"{'beside ' + str(n) + ' neighbours' if n else 'quiet'}")
                      + f"  calls ratio median {r['calls_ratio_median']:.2f} max {r['calls_ratio_max']:.1f}; "
                      f"{r['seconds']:.0f} s; load {before} -> {_load()} (min/median/max during "
                      f"{r['load'][0]:.1f}/{r['load'][1]:.1f}/{r['load'][2]:.1f})", flush=True)
    if a.only in (None, "real"):
        print(f"\n(a) real A/A runs on this CPU (x @ x, 64x64, 1 thread, min_run_time 0.02 s), {a.real_runs} "
              "runs per row (rounds=10, until=resolves([1.0]), max_rounds=40):")
        for neighbour in (False, True):
            for m in methods:
                before = _load()
                r = real(m, a.real_runs, neighbour)
                print(_row(r, "with a noisy neighbour" if neighbour else "no neighbour")
                      + f"  {r['seconds']:.0f} s; load {before} -> {_load()}", flush=True)


if __name__ == "__main__":
    main()
