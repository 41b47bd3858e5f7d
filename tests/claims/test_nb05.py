"""Notebook 05's claims, C18-C21 (nogradlab/claims/nb05_memory_and_speed_by_workload.py): every test of
their checks and judges, in one file.

* The checks, run end to end at device="cpu", scale="tiny" (``integration``, tests/conftest.py): C18's
  memory saved per feed-forward workload, C19's saving against sequence length, C20's table of memory,
  speed and batch cells, C21's longest sequences from C19's sweep. Each check runs once per session,
  shared with tests/claims/test_claims_numbers.py (``result``).
* The judges, fed hand-made or stored measurements (``unit``): the full-size estimates decide, read with
  their validation error (wider for an older allocator model); C20's speed cells of a column that timed a
  training step, or of a reference column that contradicts itself, decide nothing.

Tests that hold one rule for every claim, C18-C21 among them, stay with that rule: the rule-sentence
table (test_verdict_rules.py), every check well formed and knobs checked before work
(test_claims_numbers.py), self-contradicting and older columns (test_evidence_age.py), declarations and
bands (test_claim_declarations_and_bands.py), one timing shared by C17 and C20
(test_shared_conditions_and_rules.py).
"""
from __future__ import annotations

import pytest

import test_evidence_age as age
import test_judges_capacity as capacity
import test_judges_estimates as estimates
import test_judges_stored_reasons as stored
import test_verdict_rules as rules_table
from nogradlab import claims, workloads
from nogradlab.claims import measure as N
from test_claims_numbers import FAST, result



# --------------------------------------------- the checks, end to end (from test_claims_numbers.py)

@pytest.mark.integration
def test_c18_above_the_band_is_not_agreement_and_estimates_decide():
    r = result("C18")
    ev = r.evidence
    est = ev["estimated_full_size"]
    assert [c["value"] for c in r.conditions] == [row["memory_saved"] for row in est]  # tiny runs do not decide
    for c in r.conditions:  # unrounded, read with the estimate's validation error: above the band disagrees
        lo, hi = c["ci"]     # as below it does, and a value within its error of an edge is unresolved
        assert lo <= c["value"] <= hi
        assert c["reading"] == ("agrees" if 0.20 <= lo and hi <= 0.40 else
                                "disagrees" if hi < 0.20 or lo > 0.40 else "unresolved")
    n_in = sum(c["reading"] == "agrees" for c in r.conditions)
    n_out = sum(c["reading"] == "disagrees" for c in r.conditions)
    assert r.verdict == ("holds" if n_in == len(est) else "depends" if n_in and n_out else
                         "does not hold" if n_out else "inconclusive")
    assert r.scope["basis"] == "estimated" and "On your machine" in r.summary


@pytest.mark.integration
def test_c18_no_grad_never_raises_the_peak_and_cuts_it_for_cnns():
    ev = result("C18").evidence
    assert {r["workload"] for r in ev["measured"]} == set(N.FEED_FORWARD)
    for r in ev["measured"] + ev["estimated_full_size"]:
        assert r["no_grad_total_bytes"] <= r["grad_total_bytes"]
    for r in ev["measured"]:
        if r["workload"] in N.CNNS:
            assert r["no_grad_total_bytes"] < r["grad_total_bytes"]
    for name in N.CNNS:  # a larger batch saves a larger fraction
        rows = sorted((r for r in ev["measured"] if r["workload"] == name), key=lambda r: r["batch"])
        assert rows[0]["memory_saved"] < rows[-1]["memory_saved"]


@pytest.mark.integration
def test_c19_saving_grows_with_sequence_length():
    ev = result("C19").evidence
    measured = next(v for k, v in ev["series"].items() if k.startswith("measured"))
    saved = [r["memory_saved"] for r in sorted(measured, key=lambda r: r["seq_len"])]
    assert all(b > a for a, b in zip(saved, saved[1:]))
    flash = ev["series"]["fused flash attention (fake cpu)"]
    assert flash[0]["memory_saved"] < flash[-1]["memory_saved"]
    # the tiny real run is shown, never deciding: the full-size estimates are the evidence
    assert set(ev["estimated_series"]) < set(ev["series"])
    assert result("C19").scope["basis"] == "estimated" and "On your machine" in result("C19").summary


@pytest.mark.integration
def test_c20_rows_cover_the_table_with_the_article_bands():
    r = result("C20")
    rows = {row["workload"]: row for row in r.evidence["rows"]}
    assert set(rows) == set(workloads.names())
    for name, row in rows.items():
        art = N.ARTICLE_TABLE[name]
        assert tuple(row["memory_band"]) == art["memory"]
        assert tuple(row["speed_band"]) == art["speed"]
        assert tuple(row["batch_band"]) == art["batch"]
        assert 0 < row["memory_saved"] < 1
        assert row["eval_no_grad_total_bytes"] < row["train_total_bytes"]
        lb = row["largest_batch"]
        assert 0 < lb["train"]["batch"] < lb["eval+no_grad"]["batch"]
        assert row["batch_factor"] == pytest.approx(lb["eval+no_grad"]["batch"] / lb["train"]["batch"])
    assert "recurrent" in " ".join(r.evidence["notes"])
    assert len(r.conditions) == 12  # memory, speed, batch per workload
    for row in rows.values():
        # the speed cell is forward with grad vs forward without, with its CI
        lo, hi = row["speed_gain_ci"]
        assert lo <= row["speed_gain"] <= hi
        t = row["timing"]  # the gain is the typical paired per-round ratio: beside the ratio of medians
        assert (row["speed_gain"] > 0) == (t["grad_forward"] / t["no_grad_forward"] - 1 > 0) or lo <= 0 <= hi
        # the training step is its own row, beside it: not timed in a tiny CPU run (a learner's kernel)
        assert row["training_step_vs_no_grad_forward"] is None
    for c in r.conditions:  # memory and batch cells: full-size estimates, read unrounded against the band
        w, what = c["condition"].split(" ", 1)
        if what == "memory":  # read with the estimate's validation error, as C18 reads it
            assert c["value"] == rows[w]["memory_saved"]
            (lo, hi), (b_lo, b_hi) = c["ci"], rows[w]["memory_band"]
            assert lo <= c["value"] <= hi
            assert c["reading"] == ("agrees" if b_lo <= lo and hi <= b_hi else
                                    "disagrees" if hi < b_lo or lo > b_hi else "unresolved")
        elif what.startswith("speed"):  # off a GPU: the reference GPU's timing, never this machine's
            assert c["value"] != rows[w]["speed_gain"] or "no GPU timing" in c["condition"]
    assert "memory and batch: estimated" in r.scope["text"] and "On your machine" in r.summary
    assert "Separate row, not counted: a training step" in r.summary and "not timed in a tiny CPU run" in r.summary


@pytest.mark.integration
def test_c20_times_the_training_step_row_when_asked():
    """The training-step row (shown, never deciding a cell) is timed at small and full scale and on a GPU;
    in a tiny CPU run on request (train_step_timing=True)."""
    r = claims.check("C20", device="cpu", scale="tiny", workloads=["mlp"], batch_factor=False,
                     train_step_timing=True, **FAST)
    row = r.evidence["rows"][0]
    assert row["training_step_vs_no_grad_forward"] > row["speed_gain"]
    assert row["timing"]["train_step"] > 0
    assert "Separate row, not counted: a training step vs a no_grad forward takes mlp" in r.summary


@pytest.mark.integration
def test_c21_uses_the_c19_sweep():
    ev = result("C21").evidence
    assert set(ev["series"]) == set(result("C19").evidence["series"])
    flash = ev["longest"]["fused flash attention (fake cpu)"]
    assert flash["seq_len"] == 4096 and flash["memory_saved"] > 0.40


# ---------------------------- judges: the full-size estimates decide (from test_judges_capacity.py)

def _series(saved, lens=(128, 1024, 4096)):
    return [{"seq_len": L, "batch": 16, "memory_saved": s, "saved_per_token_bytes": 1024.0}
            for L, s in zip(lens, saved)]


def _seq(est, measured):
    series = {"measured (tiny, cpu)": _series(measured, (32, 64, 128)),
              "fused attention (virtual cuda)": _series(est)}
    return {"series": series, "longest": {k: v[-1] for k, v in series.items()}}


def test_c19_the_full_size_estimates_decide():
    assert capacity.judge("C19", _seq((0.7, 0.8, 0.9), (0.5, 0.4, 0.3))).verdict == "holds"
    assert capacity.judge("C19", _seq((0.7, 0.9, 0.8), (0.2, 0.3, 0.4))).verdict == "does not hold"
    # on a GPU at full size the real series decides too
    gpu = capacity.judge("C19", _seq((0.7, 0.8, 0.9), (0.5, 0.4, 0.3)), device=capacity.GPU, scale="full")
    assert gpu.verdict == "depends" and gpu.scope["basis"] == "measured"


def test_c21_at_least_40_percent_on_the_full_size_estimates():
    assert capacity.judge("C21", _seq((0.3, 0.4, 0.5), (0.1, 0.1, 0.1))).verdict == "holds"
    assert capacity.judge("C21", _seq((0.3, 0.35, 0.399), (0.5, 0.6, 0.7))).verdict == "does not hold"


# --------------- judges: estimates read with their validation error (from test_judges_estimates.py)

def _c18(saved, measured=()):
    return {"measured": list(measured), "estimated_full_size": [
        {"workload": f"w{i}", "batch": 8, "memory_saved": s} for i, s in enumerate(saved)]}


def test_an_estimate_within_its_validation_error_of_an_edge_is_unresolved():
    j = estimates._judge("C18", _c18([0.30, 0.395]), estimates.CPU)
    rows = {r["condition"].split("@")[0]: r for r in j.conditions}
    assert rows["w1"]["reading"] == "unresolved" and rows["w1"]["ci"][0] < 0.40 < rows["w1"]["ci"][1]
    assert rows["w0"]["reading"] == "agrees"
    assert j.verdict == "inconclusive"
    # 2.6 % on each peak: the interval of a 30 % saving is about [26 %, 34 %]
    assert rows["w0"]["ci"] == pytest.approx([1 - 0.7 * 1.026 / 0.974, 1 - 0.7 * 0.974 / 1.026])


def test_an_older_allocator_model_gives_its_estimates_its_own_wider_error():
    j = estimates._judge("C18", _c18([0.30]), estimates.CPU, protocol=1)
    assert j.conditions[0]["reading"] == "unresolved"  # 30.6 % on each peak reaches past both edges


def test_on_a_gpu_the_real_full_size_runs_are_counted_and_the_summary_says_so():
    real = [{"workload": "w9", "batch": 8, "memory_saved": 0.3, "scale": "full"}]
    j = estimates._judge("C18", _c18([0.30], real), estimates.GPU)
    assert "not counted" not in j.summary, j.summary
    assert any(r["condition"].startswith("w9") for r in j.conditions)
    j = estimates._judge("C18", _c18([0.30], [dict(real[0], scale="tiny")]), estimates.CPU, scale="tiny")
    assert "not counted" in j.summary


def test_c19_says_the_saving_per_token_does_not_compound_when_it_stays_flat():
    j = estimates._judge("C19", estimates._stored(estimates.CPUDOC, "C19"), estimates.CPU, scale="tiny")
    assert j.verdict == "holds"
    s = j.summary
    assert "names no reference" not in s and "no unit" not in s, s
    assert "feed-forward" in s, s  # the first half compares with the sentence before's feed-forward networks
    assert "not observed" in s and "per token" in s, s
    rule = claims.rule("C19")
    assert "names no unit" not in rule and "feed-forward" in rule, rule


# --------------------- judges: C20's speed cells (from test_verdict_rules.py, test_evidence_age.py)

def test_c20_reads_a_protocol_1_forward_gain_with_the_tolerance_of_an_interval_less_timing():
    """Protocol 1 stored the forward-vs-forward gain without an interval: read, like every interval-less timing,
    with the spread its column measured for that timing, at least 2 points of time saved (here no other reading:
    the 2 points, evidence.POINT_TOLERANCE): on the band's edge it is
    unresolved, well outside it disagrees (issue 37's third audit: it was unresolved whatever its value)."""
    m = rules_table._c20(["disagrees", "disagrees"], [None, None])
    for r in m["rows"]:  # protocol 1: a training step timed, no speed_case
        r["speed_gain_forward_only"] = 0.3  # on the edge of the 20-30 % band
    j = rules_table._judge("C20", m, rules_table.GPU)
    assert j.verdict == "does not hold", j.summary
    speed = [c for c in j.conditions if "speed" in c["condition"]]
    assert len(speed) == 2 and all(c["reading"] == "unresolved" for c in speed)
    assert "stored this claim's forward-vs-forward gain without an interval" in j.summary
    assert "read with the spread the column measured for that timing, at least 2" in j.summary
    m = rules_table._c20(["agrees", "agrees"], [None, None])  # memory agrees: the unresolved speed leaves it open
    assert rules_table._judge("C20", m, rules_table.GPU).verdict == "inconclusive"
    for r in m["rows"]:
        r["speed_gain_forward_only"] = 0.05  # far below the band: decided, a disagreement
    j = rules_table._judge("C20", m, rules_table.GPU)
    assert all(c["reading"] == "disagrees" for c in j.conditions if "speed" in c["condition"]), j.conditions
    assert j.verdict == "depends"


def test_c20_takes_no_speed_from_a_gpu_column_that_contradicts_itself(monkeypatch):
    monkeypatch.setitem(claims._REFS, "docs", [("cuda-fake-gpu", age._fake_gpu_column(0.5))])
    e = claims.judge_entry(age._entry(age.CPU, "C20"), age.CPU["meta"])
    assert e["scope"]["basis"] == "estimated + reference" and e["scope"]["conflicts"]
    # read for the workloads the conflict does not touch; those it touches read unresolved
    assert "contradicts itself" in e["summary"] and "contradicts itself" in e["scope"]["text"]
    assert e["scope"]["machine"] == "cuda-fake-gpu"
    # the same column without the contradiction decides C20's speed cells, labelled with its age
    monkeypatch.setitem(claims._REFS, "docs", [("cuda-fake-gpu", age._fake_gpu_column(
        age._m(age.CPU, "C03")["rows"][0]["time_saved"]))])
    e = claims.judge_entry(age._entry(age.CPU, "C20"), age.CPU["meta"])
    assert "conflicts" not in e["scope"] and e["scope"]["machine"] == "cuda-fake-gpu"
    assert e["scope"]["speed_age"]["protocol"] == claims.PROTOCOL and "Speed cells:" not in e["summary"]
    assert e["scope"]["age"]["protocol"] == 2 and e["scope"]["stale"] is True  # this CPU's own estimates


# --------------------------------- judges: a stored GPU column (from test_judges_stored_reasons.py)

def test_estimated_memory_and_batch_cells_of_a_gpu_column_carry_their_allocator_models_error():
    from nogradlab.claims import estimate_validation

    e = stored._judged("cuda-nvidia-h200", "C20")  # protocol 1: the old allocator model, off by up to 30.6 %
    words, err = estimate_validation(1)
    assert err > 0.3
    assert e["verdict"] == "does not hold", e["summary"]
    cells = {c["condition"]: c for c in e["evidence"]["conditions"]} if "conditions" in e.get("evidence", {}) else None
    s = e["summary"]
    assert "memory against a training step +84% [+70%, +92%] (disagrees)" in s, s  # 1 - 0.16 * 1.306 / 0.694 = 70 %
    assert "batch 1.40\u00d7 [0.75\u00d7, 2.64\u00d7] (unresolved)" in s, s  # mlp: 1.40 * 0.694 / 1.306 .. 1.40 * 1.306 / 0.694
    assert words in e["scope"]["text"] and "(speed)" in e["scope"]["text"], e["scope"]
    assert cells is None or all(c["ci"] for n, c in cells.items() if "memory" in n)


def test_c20_sets_a_borrowed_speed_spread_beside_the_columns_own_timings_of_that_workload():
    """A protocol-1 gain (resnet50@32 +31 %) is read with the spread X05 measured at the same batch: the cell says
    so where it is drawn, and sets the column's other timings of resnet50 beside it, read from the column (X05's
    own +15 % at 32, C03's +10 % at 16 and +0 % at 64), not only the spread (report 3: the band picture centred
    resnet50 on the article's band with none of them in sight)."""
    e = stored._judged("cuda-nvidia-h200", "C20")
    speed = {c["condition"].split(" (")[0]: c["condition"] for c in e["conditions"] if " speed" in c["condition"]}
    name = speed["resnet50 speed"]
    assert name.startswith("resnet50 speed (X05's spread"), name  # what the chart's 30 characters show
    for text in ("stored without an interval", "X05 +15% [+5%, +22%] at batch 32", "C03 +10% at 16, +0% at 64"):
        assert text in name, (text, name)
    s = e["summary"]
    assert "same column: X05 +15% [+5%, +22%] at batch 32" in s, s
    assert "spread borrowed from X05's timing" in s, s


def test_c19s_first_line_says_it_is_judged_on_its_second_half_only_and_its_figures_carry_their_unit():
    """C19 holds on its second half only (the fraction saved grows), not on 'compounding per token': the first
    line, which a learner reads alone, says so (report 3: 'C19 holds ... 2 agree' taught the refuted mechanism);
    each condition's figure is a rise in the share saved, in points between two lengths (it read '0.229')."""
    from nogradlab.claims import display

    values = estimates._stored(estimates.CPUDOC, "C19")
    j = estimates._judge("C19", values, estimates.CPU, scale="tiny")
    assert j.verdict == "holds" and j.qualifier == "second half only"
    line = display.headline({"id": "C19", "verdict": j.verdict, "qualifier": j.qualifier,
                             "conditions": j.conditions, "reading": j.reading})
    assert line.startswith("holds (second half only): "), line
    assert display.headline({"verdict": "holds"}) == "holds:"  # no qualifier, no brackets
    # beside the verdict's chip (notebook) or cell (report) the words keep the qualifier, not the verdict twice
    glance = display.glance_html({"id": "C19", "verdict": j.verdict, "qualifier": j.qualifier,
                                  "conditions": j.conditions})
    assert "(second half only) estimated over 2 conditions" in glance and "holds (second" not in glance, glance
    from nogradlab.run import report
    assert report.glance_line({"verdict": "holds", "qualifier": "second half only", "conditions": j.conditions}
                              ).startswith("(second half only) Estimated over 2 conditions"), j.conditions
    for c in j.conditions:
        rows = sorted(values["series"][c["condition"].split(": ")[0]], key=lambda r: r["seq_len"])
        pts = round(100 * (rows[-1]["memory_saved"] - rows[0]["memory_saved"]))
        assert c["condition"].endswith(f": share saved {pts:+d} points, {rows[0]['seq_len']}->{rows[-1]['seq_len']} "
                                       "tokens"), c["condition"]
    e = claims.judge_entry({"id": "C19", "verdict": "holds", "measurements": values}, estimates.CPUDOC["meta"])
    assert e["qualifier"] == "second half only", e.get("qualifier")


def test_c20s_figure_says_how_each_panels_dots_were_had():
    """Its memory and batch dots are full-size estimates; off a GPU its speed dots are this machine's timings,
    which decide nothing (a reader took them for the deciding values: report-4)."""
    from nogradlab.claims import nb05_memory_and_speed_by_workload as nb05

    ev = {"rows": [dict(workload="mlp", memory_saved=0.5, memory_band=(0.2, 0.3), speed_gain=0.05,
                        speed_gain_ci=(0.01, 0.09), speed_band=(0.1, 0.2), batch_factor=2.0, batch_band=(2.0, 2.5))]}
    fig = nb05._figure_c20(ev, "cpu", "tiny")
    titles = [ax.get_title() for ax in fig.axes]
    assert any("estimated, full size" in t and "memory" in t for t in titles)
    assert any("shown, not counted" in t and "speed" in t for t in titles)
    assert not any("not counted" in t for t in (ax.get_title() for ax in nb05._figure_c20(ev, "cuda", "full").axes))
