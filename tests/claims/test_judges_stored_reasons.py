"""The stored columns' summaries give the reasons their own numbers support (ties are ties, a
protocol's reading is described as that protocol took it)."""
import json
from pathlib import Path

from nogradlab import claims, report
from nogradlab.claims.measure import _tier_line

ROOT = Path(__file__).resolve().parents[2]


def _judged(folder, cid):
    doc = dict(report.load_references(ROOT / "results"))[folder]
    return next(e for e in doc["claims"] if e["id"] == cid)


def test_tiers_join_overlapping_intervals_with_equals_and_rank_only_disjoint_ones():
    sp = {"a": 1.5, "b": 1.14, "c": 1.0, "d": 0.5}
    ci = {"a": [1.22, 2.0], "b": [0.78, 1.3], "c": [0.78, 1.21], "d": [0.4, 0.6]}
    line = _tier_line(sp, ci, [["a", "b"], ["c"], ["d"]])
    # a and c do not overlap: the tiers [a, b] and [c] overlap only in part, so no '=' joins them (issue 37's
    # second audit: "no_grad 1.15x = ... = grad 1.00x" read as a tie of no_grad with grad)
    assert line == "a 1.50\u00d7 = b 1.14\u00d7 \u2265 c 1.00\u00d7 > d 0.50\u00d7", line


def test_inference_mode_reaching_far_below_no_grad_is_a_disturbed_timing_and_the_open_lever_is_named():
    # X05's own reasons (the column's resnet50 conflict with C20, which makes it "needs re-measuring" in the
    # report, left out: tests/claims/test_audit_verdicts.py holds that). Overlapping intervals are no "clearly
    # slower"; but inference_mode's [0.78, 1.21] reaching more than 5 % below no_grad's [1.05, 1.22] is a failed
    # cross-check (issue 37's audit): a disturbed timing, said as such
    stored = json.loads((ROOT / "results" / "cuda-nvidia-h200" / "claims.json").read_text())
    e = claims.judge_entry(next(e for e in stored["claims"] if e["id"] == "X05"), stored["meta"])
    s = e["summary"]
    assert "reads clearly slower" not in s and "resnet50@32 is read unresolved, a disturbed timing" in s, s
    assert "cannot rule out 5% slower" in s, s
    assert "no_grad+channels_last 1.14\u00d7 > inference_mode" not in s, s
    assert "no_grad+compile 1.51\u00d7 [1.2238\u00d7, 2.0118\u00d7] reaches down to no_grad's 1.15\u00d7 [1.0496\u00d7, 1.2244\u00d7]" in s, s
    assert e["verdict"] == "inconclusive"
    row = next(c for c in e["evidence"]["conditions"] if c["condition"] == "resnet50@32") if "conditions" in e.get("evidence", {}) else None
    if row is not None:
        assert row["reading"] == "unresolved"


def test_a_column_without_per_step_timing_or_stored_labels_is_described_as_it_was_measured():
    s = _judged("cuda-nvidia-h200", "C17")["summary"]  # protocol 1: the whole 20-batch loop timed at once
    assert "cut the whole loop's time by" in s and "each step's forward" not in s, s
    assert "drawn independently of the model" not in s and "chance" not in s, s
    s = _judged("cpu-amd-epyc-2-threads", "C17")["summary"]  # stores timing and how its labels were made
    assert "cut each step's forward by" in s and "drawn independently of the model" in s, s


def test_a_modelled_gain_outside_the_direct_timings_interval_is_not_said_to_explain_it():
    e = _judged("cpu-amd-epyc-2-threads", "C13")  # timed 2 % [2 %, 3 %], modelled 1.07 %
    s = e["summary"]
    assert e["verdict"] == "does not hold"
    assert "explains it" not in s, s
    assert "disagree in size, but both lie far below the article's figure" in s, s
