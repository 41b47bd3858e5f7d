"""The 95 % intervals of nogradlab.timing cover at 95 % as the protocol runs them, stopping rule and
calibration included: benchmarks/coverage.py's simulated machine (heavy-tailed, drifting times,
busy spells, a scheduler that preempts long samples) fed to the package's own loop and interval
code, with a fixed seed, so the figures are the same on every machine. The old protocol (rotated
order, bootstrap at every look, one timing to calibrate) is run too: these tests can fail."""
from __future__ import annotations

import importlib.util
import math
import pathlib

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "coverage.py"


@pytest.fixture(scope="module")
def cov():
    spec = importlib.util.spec_from_file_location("nogradlab_coverage_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _quantile(n: int, p: float, level: float) -> int:
    """The smallest k with P(Binomial(n, p) <= k) >= level."""
    total, k = 0.0, -1
    while total < level:
        k += 1
        total += math.comb(n, k) * p ** k * (1 - p) ** (n - k)
    return k


def test_binomial_bounds_hold_at_the_benchmarks_run_counts(cov):
    assert cov.upper_bound(100, 2000) == pytest.approx(0.0588, abs=5e-4)  # 5 % of 2000 runs: 5 + 1.645 sd
    assert cov.binom_sf(_quantile(300, 0.05, 0.99) + 1, 300, 0.05) < 0.01


def test_binomial_helpers_agree(cov):
    assert _quantile(100, 0.05, 0.99) == 11
    assert cov.binom_sf(_quantile(100, 0.05, 0.99) + 1, 100, 0.05) < 0.01
    assert cov.upper_bound(0, 100) == pytest.approx(1 - 0.05 ** (1 / 100), abs=1e-6)


# at most this many misses of N runs are consistent with a true rate of 5 % (one-sided, 1 %)
def _slack(n: int) -> int:
    return _quantile(n, 0.05, 0.99)


def test_adaptive_aa_intervals_exclude_one_at_most_five_percent(cov):
    r = cov.simulate("after", 300, seed=11, ratio=1.0, edges=(1.0,))
    assert r["miss"] <= _slack(300), r
    assert r["mean_rounds"] > 10  # the rounds did go on: the stopping rule was exercised


def test_adaptive_intervals_cover_a_true_speedup_at_95_percent(cov):
    r = cov.simulate("after", 200, seed=12, ratio=1.3, edges=(1.0, 1.25, 1.4))
    assert r["miss"] <= _slack(200), r


def test_the_old_protocol_fails_the_same_check(cov):
    """The bootstrap at every look of rotated rounds with one-timing calibration: the A/A interval
    excludes 1 far more often than 5 % (the 0.1 % quantile of 5 % is passed): the check has teeth."""
    n = 80
    r = cov.simulate("before", n, seed=11, ratio=1.0, edges=(1.0,), resamples=500)
    assert r["miss"] > _quantile(n, 0.05, 0.999), r
