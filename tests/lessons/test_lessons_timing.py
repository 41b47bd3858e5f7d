"""Timing demos in the lessons can show what they claim: a %%modes call takes enough rounds for its
95 % interval to exclude x1.00 at all, and a hand-timed ratio is printed with its spread and a warning
when that spread is too wide to read it."""
import json
import re
from pathlib import Path

import pytest

from nogradlab import timing

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))


def _code_cells(path):
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def _modes_rounds(line: str) -> int:
    m = re.search(r"(?:--rounds|-r)\s+(\d+)", line)
    return int(m.group(1)) if m else 10  # the magic's default


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_modes_magic_takes_enough_rounds_for_a_finite_interval(path):
    for src in _code_cells(path):
        if src.startswith("%%modes"):
            rounds = _modes_rounds(src.splitlines()[0])
            low, high = timing.signed_rank_interval([0.01 * i for i in range(rounds)])[1:]
            assert low > -float("inf") and high < float("inf"), \
                f"{path.stem}: {src.splitlines()[0]!r}: {rounds} rounds give an interval of [x0, inf]"


def test_too_few_rounds_give_an_unbounded_interval():
    """The rule the test above relies on: five paired rounds cannot give a 95 % signed-rank interval."""
    assert timing.signed_rank_interval([0.1, 0.2, 0.3, 0.4, 0.5])[1] == -float("inf")
    assert timing.signed_rank_interval([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])[1] > -float("inf")


def test_hand_timed_ratios_print_their_spread():
    """A hand cell that prints a speed ratio from benchmark.Timer also prints the spread behind it, and
    says when that spread is wide, with the figure beside it: never "too noisy to read", which left the
    learner on a shared machine with no number at all."""
    offenders = []
    for path in NOTEBOOKS:
        for src in _code_cells(path):
            if "benchmark.Timer" in src and re.search(r"grad / no_grad", src):
                if "IQR" not in src or "spread from" not in src or "too noisy" in src or "too wide" in src:
                    offenders.append(path.stem)
    assert not offenders, f"ratio printed without its spread or a warning: {offenders}"


def test_hand_timings_on_a_cpu_read_a_cpu_time_clock_and_say_which():
    """Every hand timing with benchmark.Timer on a CPU reads a clock a busy neighbour cannot stretch (the
    thread's or the process's CPU time), and what it prints names its clock; notebooks 01 and 05 choose
    one thread where the CPUs are few or busy."""
    offenders = []
    for path in NOTEBOOKS:
        for src in _code_cells(path):
            if "benchmark.Timer(" not in src:
                continue
            if "timer_kw" not in src and "timer=" not in src:
                offenders.append((path.stem, "no clock"))
            if "print(" in src and "median" in src and "clock" not in src and "CPU time" not in src:
                offenders.append((path.stem, "clock not printed"))
            if ("01_" in path.stem or "05_" in path.stem) and "torch.get_num_threads()" in src \
                    and "getloadavg" not in src and "num_threads=threads" in src and "threads = " in src:
                offenders.append((path.stem, "threads not chosen for a shared machine"))
    assert not offenders, offenders
