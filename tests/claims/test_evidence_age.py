"""Evidence says how old it is (the measuring protocol a column was made by, its date, commit and torch)
and a stored column that contradicts itself on one physical quantity decides nothing that reads it."""
import copy
import json
from pathlib import Path

import pytest

from nogradlab import claims, report
from nogradlab.claims import evidence

ROOT = Path(__file__).resolve().parents[2]
H200 = json.loads((ROOT / "results" / "cuda-nvidia-h200" / "claims.json").read_text())
CPU = json.loads((ROOT / "results" / "cpu-amd-epyc-2-threads" / "claims.json").read_text())


def _entry(doc, cid):
    return next(c for c in doc["claims"] if c["id"] == cid)


def _m(doc, cid):  # a schema 1 column stores its measurements as "evidence"
    e = _entry(doc, cid)
    return e["measurements"] if "measurements" in e else e["evidence"]


def _as_protocol_2(doc):
    """A column whose C17 is read as a forward's time saving (protocol 2's shared timing): the H200's
    C17 (0.15 % [-0.01 %, 3.91 %]) and X05 (13.4 % [4.7 %, 18.3 %]) then contradict each other."""
    doc = copy.deepcopy(doc)
    doc["meta"]["protocol"] = 2
    return doc


H200_AS_2 = _as_protocol_2(H200)


def test_the_h200_column_contradicts_itself_on_the_enter_exit_cost_only():
    # resnet50@32: C20's interval-less 23.8 % read with X05's own spread overlaps X05's 13.4 % [4.7, 18.3]
    found = {c["quantity"]: c for c in evidence.column_conflicts(H200)}
    assert set(found) == {"the cost of enter+exit no_grad"}
    cost = {r["claim"]: r["value"] for r in found["the cost of enter+exit no_grad"]["readings"]}
    assert cost["C12"] == pytest.approx(1.48e-6, rel=0.01) and cost["C13"] == pytest.approx(3.04e-6, rel=0.01)


def test_a_protocol_1_validation_loop_is_not_a_forward_time_saving():
    # protocol 1's C17 timed a 20-batch loop without a sync per batch (its own quantity); its C20
    # forward-vs-forward gain, stored without an interval, is read with the column's own spread
    read = evidence.readings(H200["claims"], 1)
    by = {r["claim"] for k, rs in read.items() if k[0] == "time saving" for r in rs}
    assert by == {"C03", "X05", "C20"}, by
    assert evidence.POINT_TOLERANCE["time saving"]  # still there for a reading that needs it
    # the same loop in a column of a later protocol is the shared forward timing: read
    by2 = {r["claim"] for k, rs in evidence.readings(H200["claims"], 2).items() if k[0] == "time saving" for r in rs}
    assert "C17" in by2 and "C20" not in by2
    saving = {c["quantity"]: c for c in evidence.column_conflicts(H200_AS_2)}[
        "no_grad's time saving for resnet50 at batch 32"]
    assert saving["measured_by"] == ["C17", "X05"] and saving["workload"] == "resnet50"
    assert saving["claims"] == ["C03", "C17", "X05"]  # C03 reads resnet50 at other batches


@pytest.mark.parametrize("folder", ["cpu-amd-epyc-2-threads", "cpu-amd-epyc-2-threads-torch2.9.1",
                                    "cpu-amd-epyc-2-threads-torch2.11.0"])
def test_columns_made_with_one_timing_per_condition_agree_with_themselves(folder):
    doc = json.loads((ROOT / "results" / folder / "claims.json").read_text())
    assert evidence.column_conflicts(doc) == []
    # and several claims do read the same quantities there: the detector is not idle
    shared = [k for k, rs in evidence.readings(doc["claims"]).items() if len({r["claim"] for r in rs}) > 1]
    assert len(shared) >= 2


def test_one_value_for_one_quantity_is_no_conflict():
    doc = copy.deepcopy(H200_AS_2)
    _m(doc, "C13")["enter_exit_s"] = _m(doc, "C12")["enter_exit"]["median"]
    assert [c["quantity"] for c in evidence.column_conflicts(doc)] == [
        "no_grad's time saving for resnet50 at batch 32"]


def test_malformed_readings_are_not_read_as_a_conflict():
    doc = copy.deepcopy(H200_AS_2)
    _m(doc, "C13")["enter_exit_s"] = float("nan")
    _m(doc, "C17")["ci"] = "x"
    _m(doc, "X05")["rows"] = [{"speedup": 10 ** 400}]
    for c in evidence.column_conflicts(doc):
        assert "enter+exit" not in c["quantity"]


def test_column_age_names_protocol_date_commit_and_torch():
    age = claims.column_age(H200["meta"])
    assert age["protocol"] == 1 and age["stale"] is True and age["current_protocol"] == claims.PROTOCOL
    assert (age["measured_on"], age["commit"], age["torch"]) == ("2026-11-30", "182a8d6", "2.11.0+cu130")
    assert age["label"].startswith("older protocol 1") and "2026-11-30" in age["label"]
    # a protocol bump makes today's CPU column older evidence too, as it should
    assert claims.column_age(CPU["meta"])["stale"] is (CPU["meta"]["protocol"] != claims.PROTOCOL)
    unrecorded = dict(CPU["meta"])
    unrecorded.pop("protocol")
    a = claims.column_age(unrecorded)
    assert a["protocol"] is None and a["stale"] is True and "not recorded" in a["label"]


def test_a_gpu_speed_verdict_from_an_older_column_says_so(monkeypatch):
    older = copy.deepcopy(H200)  # the H200 column without its contradicting readings (still protocol 1)
    older["claims"] = [e for e in older["claims"] if e["id"] not in ("C17", "X05", "C20", "C13")]
    monkeypatch.setitem(claims._REFS, "docs", [("cuda-nvidia-h200", older)])
    e = claims.judge_entry(_entry(CPU, "C03"), CPU["meta"])  # this CPU's C03: decided by the H200 column
    assert e["scope"]["basis"] == "reference" and e["scope"]["machine"] == "cuda-nvidia-h200"
    assert e["scope"]["stale"] is True
    age = e["scope"]["age"]
    assert (age["measured_on"], age["commit"], age["torch"], age["protocol"]) == (
        "2026-11-30", "182a8d6", "2.11.0+cu130", 1)
    assert "Older evidence: measured on 2026-11-30 (nogradlab 182a8d6, torch 2.11.0+cu130)" in e["summary"]
    report.validate({"meta": CPU["meta"], "claims": [e]})


@pytest.mark.parametrize("cid", ["C17", "X05"])
def test_a_self_contradicting_reference_does_not_decide_what_the_conflict_can_change(cid, monkeypatch):
    # C17 reads resnet50 only; X05's other rows agree, so resnet50@32 agreeing or not decides holds/depends
    monkeypatch.setitem(claims._REFS, "docs", [("cuda-nvidia-h200", H200_AS_2)])
    e = claims.judge_entry(_entry(CPU, cid), CPU["meta"])
    assert e["verdict"] == "needs re-measuring"
    assert e["scope"]["conflicts"] and e["scope"]["stale"] is True
    assert "contradicts itself" in e["summary"] and "0.15%" in e["summary"] and "13.40%" in e["summary"]
    assert "the verdict turns on them" in e["summary"] and "resnet50@" in e["summary"]
    assert "On your machine" in e["summary"]


def _reference_docs():
    return dict(report.load_references(ROOT / "results"))


@pytest.mark.parametrize("cid", ["C12", "C13"])
def test_a_cost_read_with_either_of_its_values_decides_when_both_give_one_verdict(cid):
    h = _reference_docs()["cuda-nvidia-h200"]
    assert h["meta"]["age"]["stale"] is True and len(h["meta"]["conflicts"]) == 1  # the cost
    e = _entry(h, cid)
    assert e["verdict"] == "does not hold" and e["scope"]["conflicts"], e["summary"]
    assert "contradicts itself" in e["summary"] and "1.48 µs, 3.04 µs" in e["summary"]
    assert "cannot change the verdict" in e["summary"]


def test_a_cost_whose_values_give_different_verdicts_needs_re_measuring():
    doc = copy.deepcopy(H200)
    m = _m(doc, "C12")  # 1.55 µs nested at 3 % of a forward: 5 % or more with the other reading's 3.04 µs
    m["cost_ratio_nested_vs_forward"] = 0.03
    m["forward"]["median"] = m["nested_enter_exit"]["median"] / 0.03
    e = claims.judge_entry(_entry(doc, "C12"), doc["meta"], conflicts=evidence.column_conflicts(doc))
    assert e["verdict"] == "needs re-measuring", e["summary"]
    assert "the verdict changes (depends, does not hold)" in e["summary"]


@pytest.mark.parametrize("cid", ["C03", "C12", "C13", "C17", "C20"])
def test_the_h200_column_decides_what_its_conflict_cannot_change(cid):
    refs = _reference_docs()
    assert _entry(refs["cuda-nvidia-h200"], cid)["verdict"] == "does not hold"
    assert refs["cpu-amd-epyc-2-threads"]["meta"]["conflicts"] == []
    for folder in ("cpu-amd-epyc-2-threads", "cpu-amd-epyc-2-threads-torch2.9.1",
                   "cpu-amd-epyc-2-threads-torch2.11.0"):
        if cid in ("C03", "C17"):  # decided by the H200 column for every CPU column
            e = _entry(refs[folder], cid)
            assert e["verdict"] == "does not hold" and e["scope"]["machine"] == "cuda-nvidia-h200", e["summary"]


def test_a_consistent_column_of_todays_protocol_is_preferred(monkeypatch):
    newer = copy.deepcopy(H200)
    newer["meta"].update(protocol=claims.PROTOCOL, generated="2026-12-02T00:00:00+00:00", nogradlab_commit="abc1234")
    for c in ("C17", "X05", "C20", "C13"):  # drop the contradicting readings
        newer["claims"] = [e for e in newer["claims"] if e["id"] != c]
    monkeypatch.setitem(claims._REFS, "docs", [("cuda-nvidia-h200", H200), ("cuda-newer", newer)])
    e = claims.judge_entry(_entry(CPU, "C03"), CPU["meta"])
    assert e["scope"]["machine"] == "cuda-newer" and "stale" not in e["scope"]
    assert "Older evidence" not in e["summary"]


def test_new_documents_record_todays_protocol_and_merges_of_two_keep_none():
    doc = report.build_doc([], source="claims", device="cpu", scale="tiny", only=["C06"])
    assert doc["meta"]["protocol"] == claims.PROTOCOL
    report.validate(doc)
    old = copy.deepcopy(doc)
    old["meta"]["protocol"] = 1
    assert "protocol" not in report.merge_docs([old, doc])["meta"]
    assert report.merge_docs([doc, copy.deepcopy(doc)])["meta"]["protocol"] == claims.PROTOCOL


def test_the_reference_line_never_shows_an_empty_machine():
    r = claims.Result(id="C03", verdict="needs re-measuring", summary="s", measurements={"x": 1},
                      scope={"basis": "reference", "text": "no reference GPU measurement usable by today's rule"})
    page = r._repr_html_()
    assert "reference GPU ()" not in page and "no reference GPU measurement" in page
    r.scope = {"basis": "reference", "machine": "cuda-nvidia-h200", "stale": True,
               "age": {"measured_on": "2026-11-30"}}
    assert "on the reference GPU (cuda-nvidia-h200, older evidence: 2026-11-30)" in r._repr_html_()


def _fake_gpu_column(saving_c03):
    """The CPU column dressed as a GPU's of today's protocol, with C03's resnet50@1 saving set to ``saving_c03``."""
    doc = copy.deepcopy(CPU)
    gpu = dict(doc["meta"]["device"], type="cuda", device="cuda:0", name="Fake GPU")
    doc["meta"].update(device=gpu, machine="cuda-fake-gpu", protocol=claims.PROTOCOL)
    for e in doc["claims"]:
        e["device"] = gpu
    row = next(r for r in _m(doc, "C03")["rows"] if (r["workload"], r["batch"]) == ("resnet50", 1))
    row.update(time_saved=saving_c03, time_saved_ci=[saving_c03 - 0.01, saving_c03 + 0.01])
    return doc


def test_a_column_of_a_newer_protocol_is_not_called_older():
    meta = dict(CPU["meta"], protocol=claims.PROTOCOL + 1)
    age = claims.column_age(meta)
    assert age["stale"] is True and age["label"].startswith("newer protocol")
    e = claims.judge_entry(_entry(CPU, "C06"), meta)
    assert "newer than this nogradlab's" in e["summary"] and "Older evidence" not in e["summary"]


# ------------------------------------------------------------- a workload's timings, all in doubt together

def test_a_column_contradicting_itself_on_a_workloads_timing_decides_none_of_that_workloads_conditions(monkeypatch):
    found = {c["quantity"]: c for c in evidence.column_conflicts(H200_AS_2)}
    assert "C03" in found["no_grad's time saving for resnet50 at batch 32"]["claims"]  # resnet50@16, @64: in doubt
    monkeypatch.setitem(claims._REFS, "docs", [("cuda-nvidia-h200", H200_AS_2)])
    e = claims.judge_entry(_entry(CPU, "C03"), CPU["meta"])  # this CPU's C03 takes its verdict from the H200's
    # transformer_base, unet and mlp disagree: resnet50 read unresolved cannot make the claim hold
    assert e["verdict"] == "does not hold" and e["scope"]["conflicts"], e["summary"]
    assert "it cannot decide resnet50@16, resnet50@64" in e["summary"] and "contradicts itself" in e["summary"]
    rows = {r["condition"]: r for r in e["conditions"]}
    assert rows["resnet50@16"]["reading"] == "unresolved" and rows["transformer_base@8"]["reading"] == "disagrees"
    # the same column as judged by itself, in the report
    h = claims.judge_entry(_entry(H200_AS_2, "C03"), H200_AS_2["meta"],
                           conflicts=evidence.column_conflicts(H200_AS_2))
    assert h["verdict"] == "does not hold" and "it cannot decide resnet50@16" in h["summary"], h["summary"]


def test_a_workload_conflict_that_could_change_the_verdict_needs_re_measuring():
    doc = copy.deepcopy(H200_AS_2)
    for r in _m(doc, "C03")["rows"]:  # every other workload agrees: resnet50 decides holds or depends
        if r["workload"] != "resnet50":
            r.update(time_saved=0.30, time_saved_ci=[0.28, 0.32])
    e = claims.judge_entry(_entry(doc, "C03"), doc["meta"], conflicts=evidence.column_conflicts(doc))
    assert e["verdict"] == "needs re-measuring", e["summary"]
    assert "holds if they agreed, depends if they disagreed" in e["summary"]


@pytest.mark.parametrize("cid", ["C03", "C12", "C13", "C17", "C20", "X05"])
def test_the_rule_sentence_of_a_claim_reading_a_shared_quantity_names_the_self_contradiction_case(cid):
    text = claims.rule(cid)
    assert "contradicts itself" in text and "needs re-measuring" in text, text
    assert "unless it cannot change the verdict" in text, text


def test_the_readme_verdict_table_has_the_self_contradiction_row():
    readme = (ROOT / "nogradlab" / "claims" / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("|") and "needs re-measuring" in line]
    assert any("contradicts itself" in r and "unless it cannot change the verdict" in r for r in rows), rows


# ------------------------------------------------------------- estimates say which model made them

def test_estimates_of_an_older_protocol_are_not_called_validated_to_todays_error():
    refs = dict(report.load_references(ROOT / "results"))
    for cid in ("C08", "C18", "C19", "C21"):
        e = _entry(refs["cuda-nvidia-h200"], cid)
        assert "validated within 2.6 %" not in e["summary"], (cid, e["summary"])
        assert "30.6 %" in e["summary"] and "5.3 %" in e["summary"], (cid, e["summary"])
    e = _entry(refs["cpu-amd-epyc-2-threads"], "C08")
    assert "validated within 2.6 %" in e["summary"] and "30.6 %" not in e["summary"]
    assert claims.estimate_validation(1)[1] == pytest.approx(0.306)
    assert claims.estimate_validation(claims.PROTOCOL)[1] == pytest.approx(0.026)
    assert claims.estimate_validation(None)[1] == pytest.approx(0.306)  # unrecorded: the largest known error
