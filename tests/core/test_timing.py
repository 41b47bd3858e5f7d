"""Tests for nogradlab.timing. Fast (a few seconds); no assertions on absolute speed."""
from __future__ import annotations

import itertools
import math
import time

import numpy as np

import pytest
import torch

from nogradlab import timing
from nogradlab.timing import Comparison, Timing, bootstrap_speedup, compare, measure, paired_speedup

FAST = dict(min_run_time=0.02, warmup=1)


class Boom(RuntimeError):
    pass


def _noop():
    return None


@pytest.fixture(autouse=True)
def _restore_torch_state():
    """Belt and braces: a failing test must not leak grad mode or thread count into the next."""
    grad, threads = torch.is_grad_enabled(), torch.get_num_threads()
    yield
    torch.set_grad_enabled(grad)
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------- measure

def test_measure_basic():
    a = torch.randn(64, 64)
    t = measure(lambda: a @ a, label="mm", **FAST)
    assert isinstance(t, Timing)
    assert t.median > 0 and t.iqr >= 0
    assert len(t.times) >= 1 and all(x > 0 for x in t.times)
    assert t.number_per_sample >= 1
    assert t.threads == timing.threads_here()[0] and t.clock in timing.CLOCKS
    assert t.device == "cpu"
    assert t.label == "mm"
    assert t.mean > 0
    assert t.relative_iqr == t.iqr / t.median
    d = t.to_dict()
    assert d["median"] == t.median and d["times"] == t.times and "relative_iqr" in d
    assert "noisy" not in d and Timing.from_dict(d) == t
    s = str(t)
    assert "IQR" in s and f"n={len(t.times)} samples x {t.number_per_sample} calls" in s


def test_timing_str_format():
    t = Timing(label="", median=0.0123, iqr=0.0004, times=[0.0123] * 20, number_per_sample=5,
               threads=2, device="cpu")
    assert str(t) == "12.3 ms \u00b1 0.40 ms IQR (n=20 samples x 5 calls, 2 threads, wall time)"
    assert t.relative_iqr == pytest.approx(0.0004 / 0.0123)


def test_timing_from_samples_describes_the_spread():
    quiet = Timing.from_samples([1.0, 1.01, 1.02, 0.99], 1, threads=1, device="cpu")
    spread = Timing.from_samples([1.0, 2.0, 3.0, 4.0], 1, threads=1, device="cpu")
    assert quiet.relative_iqr < 0.05 and spread.relative_iqr == pytest.approx(0.6)
    assert spread.median == 2.5 and spread.iqr == pytest.approx(1.5)


def test_a_stored_timing_with_a_noisy_flag_still_loads():
    stored = {"label": "grad", "median": 2.5, "iqr": 1.5, "times": [1.0, 2.0, 3.0, 4.0], "number_per_sample": 3,
              "noisy": True, "threads": 2, "device": "cpu", "mean": 2.5, "relative_iqr": 0.6, "speedup": 1.0}
    t = Timing.from_dict(stored)
    assert t.times == stored["times"] and t.median == 2.5 and t.number_per_sample == 3 and not hasattr(t, "noisy")


def test_measure_threads_restored_and_recorded():
    before = torch.get_num_threads()
    seen = []
    t = measure(lambda: seen.append(torch.get_num_threads()), num_threads=1, **FAST)
    assert t.threads == 1
    assert set(seen) == {1}  # warm-up and timed calls all ran with the requested threads
    assert torch.get_num_threads() == before
    measure(_noop, **FAST)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("grad", [False, True])
def test_measure_runs_under_caller_grad_mode(grad):
    seen = set()
    with torch.set_grad_enabled(grad):
        measure(lambda: seen.add(torch.is_grad_enabled()), **FAST)
        assert torch.is_grad_enabled() is grad
    assert seen == {grad}


def test_measure_exception_propagates_and_state_restored():
    before = torch.get_num_threads()

    def bad():
        torch.set_grad_enabled(True)  # fn messes with state, then fails
        torch.set_num_threads(1)
        raise Boom("from fn")

    with torch.no_grad():
        with pytest.raises(Boom, match="from fn"):
            measure(bad, **FAST)
        assert torch.is_grad_enabled() is False
    assert torch.get_num_threads() == before

    # Failing inside the Timer (after warm-up succeeded) also propagates unwrapped.
    calls = itertools.count()

    def fails_later():
        if next(calls) >= 2:
            raise Boom("later")

    with torch.enable_grad():
        with pytest.raises(Boom, match="later"):
            measure(fails_later, warmup=2, min_run_time=0.02)
        assert torch.is_grad_enabled() is True
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("kwargs, match", [
    (dict(fn=42), "callable"),
    (dict(fn=_noop, min_run_time=0), "min_run_time"),
    (dict(fn=_noop, min_run_time=-1.0), "min_run_time"),
    (dict(fn=_noop, min_run_time="1"), "min_run_time"),
    (dict(fn=_noop, warmup=-1), "warmup"),
    (dict(fn=_noop, num_threads=0), "num_threads"),
])
def test_measure_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        measure(**kwargs)


def test_measure_unknown_device():
    with pytest.raises(ValueError, match="allowed"):
        measure(_noop, device="tpu", **FAST)


# ---------------------------------------------------------------------------------- compare

def test_compare_more_work_is_slower():
    c = compare({"slow": lambda: time.sleep(0.004), "fast": lambda: time.sleep(0.002)},
                rounds=8, min_run_time=0.08, warmup=1)
    assert isinstance(c, Comparison)
    assert c.baseline == "slow" and c.rounds == 8 and c.device == "cpu"
    assert c.threads == timing.threads_here()[0]
    assert c.timings["fast"].median < c.timings["slow"].median
    assert c.speedup["slow"] == 1.0 and c.ci["slow"] == (1.0, 1.0)
    assert c.speedup["fast"] > 1.0
    for name in c.timings:
        low, high = c.ci[name]
        assert low <= c.speedup[name] <= high
        assert len(c.timings[name].times) == 8
        assert c.timings[name].median > 0
    # the speedup is the typical paired ratio of the rounds: with sleeps of 4 and 2 ms, near 2
    assert c.speedup["fast"] == paired_speedup({n: c.timings[n].times for n in c.timings}, "slow")[0]["fast"]
    assert c.time_saved("fast") == pytest.approx(1 - 1 / c.speedup["fast"])
    assert 0 < c.time_saved("fast") < 1
    lo, hi = c.time_saved_ci("fast")
    assert lo <= c.time_saved("fast") <= hi

    frame = c.to_frame()
    assert list(frame.columns) == ["case", "median_ms", "iqr_ms", "speedup", "ci_low", "ci_high"]
    assert list(frame["case"]) == ["slow", "fast"]
    assert frame.loc[1, "median_ms"] == pytest.approx(c.timings["fast"].median * 1e3)
    d = c.to_dict()
    assert d["baseline"] == "slow" and set(d["cases"]) == {"slow", "fast"}
    text = str(c)
    assert text.splitlines()[0].startswith("2 cases on cpu, ")
    assert f"{c.threads} thread" in text.splitlines()[0]
    # cases that sleep are timed by wall time (a CPU-time clock would read them as free), and say so
    assert c.clock == "wall" and "timed by wall time" in text
    assert all(len(t.wall_times) == 8 for t in c.timings.values())
    assert "slow" in text and "fast" in text


def test_compare_interleaves_in_a_random_order_per_round():
    log = []
    names = ["a", "b", "c"]
    cases = {n: (lambda n=n: log.append(n)) for n in names}
    rounds = 8
    c = compare(cases, rounds=rounds, min_run_time=0.01, warmup=1, seed=3)

    # every round times every case once, in an order drawn for that round: not all alike, and the
    # same orders again for the same seed (another seed draws others)
    assert len(c.orders) == rounds and all(sorted(o) == names for o in c.orders)
    assert len(set(c.orders)) > 1

    # The call log ends with the measured samples, in those orders; each sample is one untimed
    # call, then number timed (timing._sample).
    expected = [n for order in c.orders for n in order for _ in range(c.timings[n].number_per_sample + 1)]
    assert all(c.timings[n].number_per_sample > 1 for n in names)
    assert log[-len(expected):] == expected

    assert compare(cases, rounds=rounds, min_run_time=0.01, warmup=1, seed=3).orders == c.orders
    assert compare(cases, rounds=rounds, min_run_time=0.01, warmup=1, seed=4).orders != c.orders


def test_a_sample_of_one_call_has_no_untimed_call():
    """A call at least a sample long (number 1) is timed alone: two ResNet-50 forwards in three
    were spent untimed before. Each measured run of the log is then exactly one call."""
    import time as _time

    log = []
    # three cases: neighbouring rounds never start with the case that ended the previous one
    cases = {n: (lambda n=n: (log.append(n), _time.sleep(0.004))) for n in ("a", "b", "c")}
    c = compare(cases, rounds=4, min_run_time=0.008, warmup=1)  # a sample: 2 ms < one call
    assert all(t.number_per_sample == 1 for t in c.timings.values())
    assert log[-12:] == [n for order in c.orders for n in order]


def test_bootstrap_deterministic_for_seed():
    samples = {"base": [1.0, 1.2, 0.9, 1.1, 1.05, 1.3, 0.95, 1.0],
               "x": [0.5, 0.7, 0.45, 0.6, 0.52, 0.8, 0.5, 0.49]}
    s1, ci1 = bootstrap_speedup(samples, "base", seed=123)
    s2, ci2 = bootstrap_speedup(samples, "base", seed=123)
    assert s1 == s2 and ci1 == ci2
    _, ci3 = bootstrap_speedup(samples, "base", seed=124)
    assert ci3 != ci1  # another seed gives another (close) interval
    low, high = ci1["x"]
    assert low <= s1["x"] <= high
    assert s1["x"] == pytest.approx(1.025 / 0.51)
    assert ci1["base"] == (1.0, 1.0)


def test_compare_ci_reproducible_from_its_samples():
    c = compare({"a": _noop, "b": lambda: sum(range(50))}, rounds=6, min_run_time=0.01,
                warmup=1, seed=7)
    samples = {n: t.times for n, t in c.timings.items()}
    speedup, ci = paired_speedup(samples, "a")
    assert speedup == c.speedup and ci == c.ci
    assert c.look_confidence == timing.CONFIDENCE and c.looks == (6,)
    d = c.to_dict()
    assert d["confidence"] == 0.95 and d["looks"] == [6] and d["interval"] == timing.INTERVAL_METHOD
    assert c.ratio("a", "b") == (speedup["b"], *ci["b"])


def test_paired_interval_cancels_shared_drift():
    base = [1.0 + 0.1 * r for r in range(10)]
    speedup, ci = paired_speedup({"base": base, "half": [x / 2 for x in base]}, "base")
    assert speedup["half"] == pytest.approx(2.0) and ci["half"] == pytest.approx((2.0, 2.0))


def test_compare_paired_bootstrap_cancels_shared_drift():
    # Both cases drift together over rounds (a machine slowing down); the ratio is constant, so a
    # paired bootstrap gives a zero-width interval, where unpaired resampling would not.
    base = [1.0 + 0.1 * r for r in range(10)]
    half = [x / 2 for x in base]
    speedup, ci = bootstrap_speedup({"base": base, "half": half}, "base", seed=0)
    assert speedup["half"] == pytest.approx(2.0)
    assert ci["half"][0] == pytest.approx(2.0) and ci["half"][1] == pytest.approx(2.0)


def test_compare_baseline_choice():
    c = compare({"a": _noop, "b": _noop}, baseline="b", rounds=2, min_run_time=0.005, warmup=0)
    assert c.baseline == "b" and c.speedup["b"] == 1.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(cases={}), "non-empty"),
    (dict(cases=[_noop]), "dict"),
    (dict(cases={"a": 1}), "callable"),
    (dict(cases={1: _noop}), "strings"),
    (dict(cases={"a": _noop, "b": _noop}, baseline="c"), "allowed: 'a', 'b'"),
    (dict(cases={"a": _noop}, rounds=1), "rounds"),
    (dict(cases={"a": _noop}, min_run_time=0), "min_run_time"),
    (dict(cases={"a": _noop}, warmup=-1), "warmup"),
    (dict(cases={"a": _noop}, seed="x"), "seed"),
])
def test_compare_validation(kwargs, match):
    calls = []
    if isinstance(kwargs.get("cases"), dict):
        kwargs["cases"] = {k: (lambda v=v: calls.append(1) or v()) if callable(v) else v
                           for k, v in kwargs["cases"].items()}
    with pytest.raises(ValueError, match=match):
        compare(**kwargs)
    assert calls == []  # validated before any work


@pytest.mark.parametrize("grad", [False, True])
def test_compare_exception_propagates_and_state_restored(grad):
    before = torch.get_num_threads()

    def bad():
        torch.set_grad_enabled(not grad)
        raise Boom("case failed")

    with torch.set_grad_enabled(grad):
        with pytest.raises(Boom, match="case failed"):
            compare({"ok": _noop, "bad": bad}, rounds=2, min_run_time=0.005, warmup=1,
                    num_threads=1)
        assert torch.is_grad_enabled() is grad
    assert torch.get_num_threads() == before


def test_compare_failure_after_warmup_propagates():
    calls = itertools.count()
    limit = 200

    def flaky():
        if next(calls) > limit:
            raise Boom("mid-run")

    before = torch.get_num_threads()
    with torch.no_grad():
        with pytest.raises(Boom, match="mid-run"):
            compare({"a": _noop, "flaky": flaky}, rounds=50, min_run_time=0.05, warmup=0)
        assert torch.is_grad_enabled() is False
    assert torch.get_num_threads() == before


def test_compare_threads_and_progress():
    before = torch.get_num_threads()
    seen = set()
    c = compare({"a": lambda: seen.add(torch.get_num_threads()), "b": _noop}, rounds=3,
                min_run_time=0.005, warmup=1, num_threads=1, progress=True)
    assert c.threads == 1 and all(t.threads == 1 for t in c.timings.values())
    assert seen == {1}
    assert torch.get_num_threads() == before


# -- stopping when it knows enough --------------------------------------------------------

def _two():
    return {"a": lambda: sum(range(50)), "b": lambda: sum(range(60))}


def test_compare_fixed_rounds_say_so():
    c = compare(_two(), rounds=4, **FAST)
    assert c.rounds == 4 and c.stopped == "rounds" and c.decided and len(c.orders) == 4
    assert c.to_dict()["stopped"] == "rounds"


def test_compare_stops_as_soon_as_until_decides():
    seen = []
    c = compare(_two(), rounds=6, until=lambda cmp: seen.append(cmp.rounds) or True, **FAST)
    assert c.stopped == "decided" and c.decided and c.rounds == 6 and seen == [6]


def test_compare_goes_on_in_blocks_until_its_most_rounds():
    seen = []
    c = compare(_two(), rounds=6, max_rounds=14, until=lambda cmp: seen.append(cmp.rounds) or False, **FAST)
    # asked at the pre-set looks: the minimum, 1.5x, 2x it, ... and the most rounds last
    assert seen == [6, 9, 12, 14] and c.rounds == 14 and c.stopped == "max rounds" and not c.decided
    assert c.looks == (6, 9, 12, 14) and c.look_confidence == pytest.approx(1 - 0.05 / 4)
    assert len(c.timings["a"].times) == 14 and "undecided" in str(c)


def test_compare_time_budget_ends_the_rounds_and_says_so():
    # a budget that the minimum rounds alone exceed: no block is added, and the result says why
    c = compare(_two(), rounds=4, max_rounds=10 ** 6, time_budget=1e-9, until=lambda cmp: False, **FAST)
    assert c.rounds == 4 and c.stopped == "time budget" and not c.decided


@pytest.mark.parametrize("kwargs, match", [
    (dict(until=3), "until must be a function"),
    (dict(until=lambda c: True, max_rounds=2), "max_rounds must be"),
    (dict(until=lambda c: True, time_budget=0), "time_budget must be a positive"),
])
def test_compare_adaptive_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compare(_two(), rounds=4, **FAST, **kwargs)


def _cmp_with(ci: dict) -> Comparison:
    t = Timing.from_samples([1.0, 1.0], 1, label="x", threads=1, device="cpu")
    return Comparison(timings={k: t for k in ci}, baseline="grad", speedup={k: 1.0 for k in ci}, ci=ci,
                      rounds=2, device="cpu", threads=1)


def test_resolves_waits_while_an_interval_straddles_an_edge():
    until = timing.resolves([1.0, 1.25])
    assert not until(_cmp_with({"grad": (1.0, 1.0), "no_grad": (1.2, 1.3)}))   # straddles 1.25
    assert not until(_cmp_with({"grad": (1.0, 1.0), "no_grad": (0.9, 1.1)}))   # straddles 1 (a tie so far)
    assert until(_cmp_with({"grad": (1.0, 1.0), "no_grad": (1.26, 1.4)}))      # above both
    assert until(_cmp_with({"grad": (1.0, 1.0), "no_grad": (1.02, 1.2)}))      # between them
    # an interval narrower than min_width around an edge would not leave it soon: decided as it is
    assert timing.resolves([1.25], min_width=0.05)(_cmp_with({"grad": (1, 1), "no_grad": (1.24, 1.27)}))
    # per case: only the named cases' edges count
    per = timing.resolves({"no_grad": [1.25]})
    assert per(_cmp_with({"grad": (1, 1), "no_grad": (1.3, 1.4), "other": (1.2, 1.3)}))


# -- the interval and its looks --------------------------------------------------------------------

def test_looks_grow_by_half_and_a_third_up_to_the_most_rounds():
    assert timing.looks(10, 40) == (10, 15, 20, 30, 40)
    assert timing.looks(10, 30) == (10, 15, 20, 30)
    assert timing.looks(20, 80) == (20, 30, 40, 60, 80)
    assert timing.looks(6, 14) == (6, 9, 12, 14)
    assert timing.looks(10, 1000)[-3:] == (640, 960, 1000)
    assert timing.looks(10, 10) == (10,) and timing.looks(10) == (10,)
    assert timing.look_confidence(1) == 0.95 and timing.look_confidence(4) == pytest.approx(0.9875)
    with pytest.raises(ValueError, match="max_rounds must be an integer >= 10"):
        timing.looks(10, 5)


@pytest.mark.parametrize("n", [6, 7, 10])
def test_signed_rank_interval_covers_at_least_its_confidence_exactly(n):
    """Whatever the magnitudes, when each value's sign about the centre is a fair coin (what a random
    order per round gives a paired log-ratio), the interval holds the centre in at least 95 % of the
    2**n sign patterns: counted, not sampled."""
    rng = np.random.default_rng(n)
    for magnitudes in (rng.lognormal(0, 1, n), rng.pareto(1.1, n) + 1e-3, np.arange(1.0, n + 1)):
        covered = 0
        for signs in itertools.product((-1.0, 1.0), repeat=n):
            _, lo, hi = timing.signed_rank_interval(np.asarray(signs) * magnitudes + 0.3)
            covered += lo <= 0.3 <= hi
        assert covered / 2 ** n >= 0.95
        # and not wastefully: at most 1 - alpha + the largest atom of the signed-rank distribution
        assert covered / 2 ** n <= 0.95 + 0.05


def test_signed_rank_interval_needs_enough_values_for_its_confidence():
    assert timing.signed_rank_interval([0.1, 0.2, 0.3, 0.4, 0.5])[1:] == (-math.inf, math.inf)
    point, lo, hi = timing.signed_rank_interval([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])  # 2 / 64 < 5 %
    assert (lo, hi) == (0.1, 0.6) and point == pytest.approx(0.35)
    with pytest.raises(ValueError, match="finite"):
        timing.signed_rank_interval([0.1, math.nan])
    with pytest.raises(ValueError, match="confidence"):
        timing.signed_rank_interval([0.1, 0.2], confidence=1.0)


def test_signed_rank_interval_large_n_uses_its_normal_approximation_continuously():
    # the normal approximation beyond the exact table picks the same order statistic (within 1 of
    # 80,200 Walsh averages) as the exact distribution at the switch
    exact = timing._signed_rank_k(400, 0.05)
    import statistics

    n = 400
    z = statistics.NormalDist().inv_cdf(0.025)
    approx = int(math.floor(n * (n + 1) / 4 + z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24) - 0.5)) + 1
    assert abs(exact - approx) <= 2
    assert timing._signed_rank_k(401, 0.05) > exact


def test_adaptive_intervals_are_read_at_each_looks_share_and_until_sees_them():
    seen = []

    def until(cmp):
        seen.append((cmp.rounds, cmp.look_confidence, cmp.ci["b"]))
        return False

    rng = np.random.default_rng(0)
    c = timing.run_rounds(lambda n: float(rng.lognormal(0, 0.1)), ["a", "b"], rounds=10, until=until,
                          max_rounds=40, seed=1)
    assert [s[0] for s in seen] == [10, 15, 20, 30, 40] and c.stopped == "max rounds"
    assert all(s[1] == pytest.approx(1 - 0.05 / 5) for s in seen)
    t = c.timings
    assert c.ci["b"] == paired_speedup({"a": t["a"].times, "b": t["b"].times}, "a", confidence=1 - 0.05 / 5)[1]["b"]
    # a fixed comparison reads its one look at 95 %: narrower than the same rounds read at a look's share
    fixed = paired_speedup({"a": t["a"].times, "b": t["b"].times}, "a")[1]["b"]
    assert fixed[0] >= c.ci["b"][0] and fixed[1] <= c.ci["b"][1] and fixed != c.ci["b"]


def test_time_budget_starts_no_look_it_would_end_past():
    """A clock injected: each sample takes 1 s, so a round of two cases 2 s. Looks at 4, 6, 8, 12, 16."""
    t = [0.0]

    def sample(name):
        t[0] += 1.0
        return 1.0

    def run(budget):
        t[0] = 0.0
        return timing.run_rounds(sample, ["a", "b"], rounds=4, max_rounds=16, until=lambda c: False,
                                 time_budget=budget, clock=lambda: t[0])

    c = run(10.0)  # 8 s after 4 rounds; the look at 6 would end at 12 s
    assert c.rounds == 4 and c.stopped == "time budget" and c.seconds == 8.0
    c = run(20.0)  # to 6 and 8 rounds (16 s); the look at 12 would end at 24 s
    assert c.rounds == 8 and c.stopped == "time budget"
    c = run(32.0)
    assert c.rounds == 16 and c.stopped == "max rounds" and c.seconds == 32.0


def test_random_order_makes_a_slow_first_slot_cancel():
    """Identical cases on a machine whose first slot of every round is twice as slow: the rotated
    order of two cases also balances that, but a random order needs no luck of the case count, and
    the paired interval holds 1."""
    calls, rng = itertools.count(), np.random.default_rng(0)
    c = timing.run_rounds(lambda n: (2.0 if next(calls) % 2 == 0 else 1.0) * rng.lognormal(0, 0.05), ["a", "b"],
                          rounds=30, seed=5)
    lo, hi = c.ci["b"]
    assert lo < 1.0 < hi
    firsts = [o[0] for o in c.orders]
    assert 5 <= firsts.count("a") <= 25


# ------------------------------------------------------------------ a busy, shared machine (issue 37)

class _StretchedTimer:
    """A Timer stand-in whose calls cost ``cost`` seconds each, every timing stretched by a factor drawn
    from a heavy tail (a neighbour holding the core for a while): what the calibration saw beside other
    work on a 2-core machine."""

    def __init__(self, cost, rng):
        self.cost, self.rng = cost, rng

    def timeit(self, number):
        import types
        stretch = 1.0 + (self.rng.pareto(1.0) if self.rng.random() < 0.5 else 0.0)
        return types.SimpleNamespace(raw_times=[number * self.cost * stretch])


@pytest.mark.parametrize("seed", range(20))
def test_identical_cases_get_the_same_calls_per_sample_however_the_calibration_scatters(seed):
    rng = np.random.default_rng(seed)
    number = timing._calibrate_all({"a": _StretchedTimer(15e-6, rng), "b": _StretchedTimer(15e-6, rng)}, 0.01)
    assert number["a"] == number["b"]


def test_cases_of_different_cost_get_samples_of_about_equal_length():
    rng = np.random.default_rng(0)
    cost = {"grad": 30e-6, "no_grad": 20e-6, "same": 29e-6, "slow": 3e-3}
    number = timing._calibrate_all({k: _StretchedTimer(v, np.random.default_rng(i)) for i, (k, v) in
                                    enumerate(cost.items())}, 0.01, repeats=8)
    del rng
    assert number["grad"] == number["same"]  # within EQUAL_CALLS_WITHIN: one count
    assert number["no_grad"] > number["grad"]  # 1.5x cheaper: more calls, a sample as long
    lengths = {k: number[k] * cost[k] for k in cost}
    assert max(lengths.values()) / min(lengths.values()) < 1.3


def test_equal_calls_groups_neighbours_in_cost_only_within_the_factor():
    out = timing._equal_calls({"a": 1e-5, "b": 1.1e-5, "c": 2e-5, "d": 2.1e-5}, 0.01)
    assert out["a"] == out["b"] and out["c"] == out["d"] and out["a"] > out["c"]
    assert timing._equal_calls({"a": 1.0, "b": 0.5}, 0.01) == {"a": 1, "b": 1}  # at least one call


def test_unequal_samples_are_named_and_said():
    t = lambda med, n: Timing.from_samples([med] * 10, n, threads=1, device="cpu", clock="thread")  # noqa: E731
    c = Comparison(timings={"grad": t(0.02, 1), "no_grad": t(0.012, 1), "cast": t(0.001, 20)}, baseline="grad",
                   speedup={"grad": 1.0, "no_grad": 1.6, "cast": 20.0},
                   ci={"grad": (1.0, 1.0), "no_grad": (1.5, 1.7), "cast": (19, 21)}, rounds=10, device="cpu",
                   threads=1)
    assert set(c.unequal_samples()) == {"no_grad"}
    assert c.unequal_samples()["no_grad"] == pytest.approx(0.6)
    assert "samples of unequal length" in str(c) and "no_grad" in str(c).splitlines()[-1]
    assert c.to_dict()["unequal_samples"] == pytest.approx({"no_grad": 0.6})


@pytest.mark.parametrize("budget, load, pool, want", [
    (2, 0.1, 2, 1), (1, 0.1, 1, 1), (2, 0.1, 1, 1), (8, 0.5, 8, 8), (8, 9.5, 8, 1), (8, 0.5, 16, 8), (4, 2.0, 4, 4)])
def test_threads_here_uses_one_where_cpus_are_few_or_busy(budget, load, pool, want):
    n, why = timing.threads_here(budget=budget, load=load, torch_threads=pool)
    assert n == want
    assert why.startswith(f"{n} thread")
    if pool > 1 and want == 1:
        assert ("load" in why) == (budget > 2) and "num_threads=" in why


def test_clock_is_the_threads_cpu_time_on_a_cpu_and_synchronised_wall_time_elsewhere():
    assert timing.clock("cpu", 1) is time.thread_time
    assert timing.clock("cpu", 2) is time.process_time
    assert timing.clock("cpu", 1, "wall") is timeit_default()
    with pytest.raises(ValueError, match="'auto', 'cpu', 'wall'"):
        timing.clock("cpu", 1, "cycles")


def timeit_default():
    import timeit
    return timeit.default_timer


def test_compute_is_timed_by_the_threads_cpu_time_with_wall_time_beside_it():
    a = torch.randn(64, 64)
    c = compare({"x": lambda: a @ a, "y": lambda: a @ a}, rounds=4, min_run_time=0.02, warmup=1, num_threads=1)
    assert c.clock == "thread" and c.threads_reason == "1 thread, as asked"
    assert c.timings["x"].number_per_sample == c.timings["y"].number_per_sample
    for t in c.timings.values():
        assert t.clock == "thread" and len(t.wall_times) == 4 and all(w > 0 for w in t.wall_times)
    assert "thread CPU time" in str(c).splitlines()[0]
    back = Timing.from_dict(c.timings["x"].to_dict())
    assert back.clock == "thread" and back.wall_times == c.timings["x"].wall_times
    assert measure(lambda: a @ a, num_threads=1, **FAST).clock == "thread"


def test_a_case_that_sleeps_is_timed_by_wall_time_not_read_as_free():
    assert timing._waits(lambda: time.sleep(0.003))
    a = torch.randn(128, 128)
    assert not timing._waits(lambda: [a @ a for _ in range(20)])
    t = measure(lambda: time.sleep(0.002), num_threads=1, **FAST)
    assert t.clock == "wall" and t.median > 0.0015


def test_a_stored_timing_without_a_clock_reads_as_wall_time():
    d = Timing.from_samples([0.01] * 3, 2, threads=1, device="cpu").to_dict()
    d.pop("clock")
    assert Timing.from_dict(d).clock == "wall" and Timing.from_dict(d).wall_times is None


class _OverheadTimer:
    """Calls of ``cost`` seconds, each timing ``overhead`` seconds more (the timer's own cost, a cold cache),
    the first timing stretched ``first`` times (a neighbour held the core): what stopped an A/A case's
    calibration at one call a sample on a busy 2-core machine, beside an identical case at hundreds."""

    def __init__(self, cost, overhead=10e-6, first=300.0):
        self.cost, self.overhead, self.first = cost, overhead, first

    def timeit(self, number):
        import types
        t = number * self.cost + self.overhead
        if self.first:
            t, self.first = t * self.first, 0.0
        return types.SimpleNamespace(raw_times=[t])


def test_a_stretched_first_timing_does_not_leave_an_identical_case_fewer_calls():
    number = timing._calibrate_all({"a": _OverheadTimer(15e-6), "b": _OverheadTimer(15e-6, first=0.0)}, 0.01)
    assert number["a"] == number["b"] > 100


@pytest.mark.integration
def test_a_case_preempted_by_busy_neighbours_is_not_read_as_waiting():
    """Beside busy neighbours a compute-bound case is preempted (involuntary switches) and waits runnable;
    it never gives up its CPU by itself, so it keeps the CPU-time clock (two misfires of 4 loaded X05 runs
    switched a condition to wall time before)."""
    import subprocess
    import sys

    busy = [subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()+4\nwhile time.time()<t: pass"])
            for _ in range(3)]
    try:
        a = torch.randn(256, 256)
        assert not any(timing._waits(lambda: [a @ a for _ in range(40)], 1) for _ in range(10))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert timing._waits(lambda: time.sleep(0.003))


def test_a_sleeping_case_on_a_very_busy_machine_is_still_read_as_waiting(monkeypatch):
    """On a loaded machine (CI beside papermill and a reader) each wake-up waits runnable: a sleeping case's
    blocked time was under a quarter of its wall time, and it was read as computing (CPU time)."""
    calls = iter([(0, 0), None])

    def schedstat():
        v = next(calls)
        if v is None:  # after the calls: 0.1 ms run, and all but ~1.3 ms of the rest spent waiting runnable
            wall_ns = int((time.perf_counter() - start[0]) * 1e9)
            return (100_000, max(wall_ns - 100_000 - 1_300_000, 0))
        return v

    start = [time.perf_counter()]
    monkeypatch.setattr(timing, "_schedstat", schedstat)
    assert timing._waits(lambda: time.sleep(0.003))
