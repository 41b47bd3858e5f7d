"""Golden texts of nogradlab.core.format: the one place every size, time, ratio, percentage and interval
the package shows is written (as torch.utils.benchmark's tests hold its printed output). A change here
changes what every terminal table, HTML report, notebook and widget prints."""
from __future__ import annotations

import math

import pytest

from nogradlab.core import format as F

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (1, "1 B"), (512, "512 B"), (1023, "1023 B"), (-512, "-512 B"),
    (1023.4, "1023 B"), (1023.6, "1.00 KiB"),              # rounds up into the next unit, never "1024 B"
    (1024, "1.00 KiB"), (1536, "1.50 KiB"), (-1536, "-1.50 KiB"),
    (1023.9 * 1024, "1023.90 KiB"), (1023.999 * 1024, "1.00 MiB"),  # never "1024.00 KiB"
    (2 ** 20, "1.00 MiB"), (66560, "65.00 KiB"), (3 * 2 ** 30 + 2 ** 29, "3.50 GiB"),
    (2 ** 40, "1.00 TiB"), (5000 * 2 ** 40, "5000.00 TiB"),  # no unit above TiB
    (None, "n/a"), (NAN, "n/a"), (INF, "inf B"), (-INF, "-inf B"),
])
def test_bytes_in_binary_units_with_two_decimals(n, text):
    assert F.bytes_(n) == text
    assert F.size(n) == text


@pytest.mark.parametrize("n, unit", [(0, ("B", 1)), (1023, ("B", 1)), (1024, ("KiB", 1024)),
                                     (3 << 20, ("MiB", 2 ** 20)), (-(3 << 30), ("GiB", 2 ** 30)),
                                     (2 ** 41, ("TiB", 2 ** 40))])
def test_byte_unit_for_an_axis(n, unit):
    assert F.byte_unit(n) == unit


@pytest.mark.parametrize("t, text", [
    (0, "0 ns"), (0.0123, "12.3 ms"), (-0.0123, "-12.3 ms"), (2.3e-6, "2.30 µs"), (1e-9, "1.00 ns"),
    (1e-12, "0.00100 ns"), (12.0, "12.0 s"), (1234.5, "1230 s"),
    (999.4e-6, "999 µs"), (999.5e-6, "1.00 ms"), (-999.6e-6, "-1.00 ms"),  # rounded 1000 µs reads 1.00 ms
    (9.9996e-6, "10.0 µs"), (0.09996, "100 ms"), (0.9996, "1.00 s"), (999.96, "1000 s"),
    (None, "n/a"), (NAN, "n/a"), (INF, "inf s"), (-INF, "-inf s"),
])
def test_seconds_three_significant_figures_and_micro_sign(t, text):
    assert F.seconds(t) == text
    assert F.duration(t) == text
    assert " us" not in F.seconds(t)


def test_seconds_in_a_shared_unit_and_fewer_digits():
    ms = F.time_unit(0.0123)
    assert ms == ("ms", 1e-3)
    assert F.seconds(0.0005, ms) == "0.500 ms"          # a column keeps its unit: no move to µs
    assert F.seconds(2.5, ms) == "2500 ms"              # nor up to s
    assert F.seconds(0.0, ms) == "0 ms"
    assert F.seconds(0.00123, ms, 2) == "1.2 ms"
    assert F.seconds(2e-5, ("us", 1e-6)) == "20.0 µs"  # an older caller's ("us", 1e-6) reads µs too
    assert F.time_unit(2e-5) == ("µs", 1e-6) and F.time_unit(0) == ("ns", 1e-9) and F.time_unit(5) == ("s", 1.0)


def test_the_earlier_names_are_the_formatters():
    from nogradlab import show
    from nogradlab.core import memory, timing

    assert memory.format_bytes is F.bytes_ and timing.format_seconds is F.seconds
    assert show is F and (show.size, show.duration, show.times, show.percent) == (F.bytes_, F.seconds,
                                                                                    F.ratio, F.percent)
    assert show.size(66560) + " " + show.duration(2.3e-6) + " " + show.times(2.5) == "65.00 KiB 2.30 µs 2.50×"


@pytest.mark.parametrize("x, digits, text", [
    (2.5, 2, "2.50×"), (1, 2, "1.00×"), (0, 2, "0.00×"), (-1.234, 2, "-1.23×"), (1.2345, 3, "1.234×"),
    (1.0005, 3, "1.000×"), (12.345, 1, "12.3×"),
    (None, 2, "n/a"), (NAN, 2, "n/a"), (INF, 2, "inf×"),
])
def test_ratio_sign_after_the_number(x, digits, text):
    assert F.ratio(x, digits) == text
    assert F.times(x, digits) == text


@pytest.mark.parametrize("f, digits, signed, text", [
    (0.123, 1, False, "12.3%"), (0.123, 0, False, "12%"), (0.123, 1, True, "+12.3%"),
    (-0.05, 0, True, "-5%"), (1.5, 0, False, "150%"), (0, 1, False, "0.0%"), (0, 0, True, "+0%"),
    (-0.001, 0, False, "0%"), (-0.0004, 1, True, "+0.0%"),  # rounds to zero: no minus sign
    (0.995, 0, False, "100%"), (0.12345, 2, False, "12.35%"),
    (None, 1, False, "n/a"), (NAN, 0, True, "n/a"), (INF, 0, False, "inf%"), (INF, 0, True, "+inf%"),
])
def test_percent_without_a_space(f, digits, signed, text):
    assert F.percent(f, digits, signed) == text


@pytest.mark.parametrize("v, text", [(0.5, "0.5"), (1234.5, "1.23e+03"), (3, "3"), (True, "True"),
                                     ("x", "x"), (None, ""), (NAN, "n/a"), (-INF, "n/a")])
def test_number_three_significant_figures(v, text):
    assert F.number(v) == text


def test_interval_both_ends_in_the_points_unit():
    assert F.interval(0.1234, 2.0) == "[0.123, 2]"
    assert F.interval(0.18, 0.27, F.percent) == "[18.0%, 27.0%]"
    assert F.interval(1.05, 1.22, F.ratio) == "[1.05×, 1.22×]"
    assert F.interval(None, NAN, F.seconds) == "[n/a, n/a]"


def test_spans_is_strict_on_both_sides():
    assert F.spans(0.95, 1.08, 1.0) and F.spans(-0.05, 0.08, 0.0)
    assert not F.spans(1.0, 1.2, 1.0) and not F.spans(0.8, 1.0, 1.0)  # an end on the line decides
    assert not F.spans(1.05, 1.22, 1.0) and not F.spans(NAN, 2.0, 1.0)


def test_no_clear_difference_is_one_phrase():
    assert F.NO_CLEAR_DIFFERENCE == "no clear difference (noisy)"
    assert F.unclear("2% [-5%, 8%]") == "no clear difference (noisy): 2% [-5%, 8%]"


@pytest.mark.parametrize("args, kw, text", [
    ((1.15, 1.05, 1.22), {}, "1.15× [1.05×, 1.22×]"),
    ((1.02, 0.95, 1.08), {}, "no clear difference (noisy): 1.02× [0.95×, 1.08×]"),
    ((1.02, 0.95, 1.08), {"noisy": False}, "1.02× [0.95×, 1.08×]"),
    ((1.02, 1.0, 1.08), {}, "1.02× [1.00×, 1.08×]"),
    ((1.1234, 1.05, 1.22, 3), {}, "1.123× [1.050×, 1.220×]"),
    ((1.15,), {}, "1.15×"), ((1.15, None, 1.2), {}, "1.15×"),
])
def test_ratio_with_its_interval(args, kw, text):
    assert F.ratio_ci(*args, **kw) == text


@pytest.mark.parametrize("args, kw, text", [
    ((0.23, 0.18, 0.27), {}, "23% [18%, 27%]"),
    ((0.02, -0.05, 0.08), {}, "no clear difference (noisy): 2% [-5%, 8%]"),
    ((0.23, 0.18, 0.27), {"signed": True}, "+23% [+18%, +27%]"),
    ((0.02, -0.05, 0.08), {"signed": True}, "no clear difference (noisy): +2% [-5%, +8%]"),
    ((0.1234, 0.1, 0.15, 1), {"signed": True, "noisy": False}, "+12.3% [+10.0%, +15.0%]"),
    ((0.1234, 0.1, 0.15, 2), {}, "12.34% [10.00%, 15.00%]"),
    ((0.02, 0.0, 0.08), {}, "2% [0%, 8%]"), ((0.23,), {}, "23%"),
])
def test_percent_with_its_interval(args, kw, text):
    assert F.percent_ci(*args, **kw) == text


def test_no_formatter_hides_a_nan_as_a_number():
    for fn in (F.bytes_, F.seconds, F.ratio, F.percent, F.number):
        assert fn(NAN) == "n/a", fn
        assert fn(None) in ("n/a", ""), fn
    assert F.NA == "n/a" and math.isnan(NAN)
