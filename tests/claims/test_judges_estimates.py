"""Judges read estimates with their validation error, say which half of a two-part claim they
judged, and say what the measurements show about the article's mechanism."""
import json
from pathlib import Path

import pytest

from nogradlab import claims
from nogradlab.claims import Measurements

claims.ids()

ROOT = Path(__file__).resolve().parents[2]
CPU = {"type": "cpu", "device": "cpu", "name": "x", "threads": 2, "torch": "t"}
GPU = {"type": "cuda", "device": "cuda:0", "name": "x", "torch": "t"}
H200 = json.loads((ROOT / "results" / "cuda-nvidia-h200" / "claims.json").read_text())
CPUDOC = json.loads((ROOT / "results" / "cpu-amd-epyc-2-threads" / "claims.json").read_text())


def _stored(doc, cid):
    e = next(c for c in doc["claims"] if c["id"] == cid)
    return e.get("measurements", e.get("evidence"))


def _judge(cid, values, device, scale="full", protocol=claims.PROTOCOL):
    m = Measurements(values, device, scale, "t", protocol=protocol)
    return claims._judge(claims.get(cid), m)


def _c18(saved, measured=()):
    return {"measured": list(measured), "estimated_full_size": [
        {"workload": f"w{i}", "batch": 8, "memory_saved": s} for i, s in enumerate(saved)]}


def test_an_estimate_within_its_validation_error_of_an_edge_is_unresolved():
    j = _judge("C18", _c18([0.30, 0.395]), CPU)
    rows = {r["condition"].split("@")[0]: r for r in j.conditions}
    assert rows["w1"]["reading"] == "unresolved" and rows["w1"]["ci"][0] < 0.40 < rows["w1"]["ci"][1]
    assert rows["w0"]["reading"] == "agrees"
    assert j.verdict == "inconclusive"
    # 2.6 % on each peak: the interval of a 30 % saving is about [26 %, 34 %]
    assert rows["w0"]["ci"] == pytest.approx([1 - 0.7 * 1.026 / 0.974, 1 - 0.7 * 0.974 / 1.026])


def test_an_older_allocator_model_gives_its_estimates_its_own_wider_error():
    j = _judge("C18", _c18([0.30]), CPU, protocol=1)
    assert j.conditions[0]["reading"] == "unresolved"  # 30.6 % on each peak reaches past both edges


def test_on_a_gpu_the_real_full_size_runs_are_counted_and_the_summary_says_so():
    real = [{"workload": "w9", "batch": 8, "memory_saved": 0.3, "scale": "full"}]
    j = _judge("C18", _c18([0.30], real), GPU)
    assert "not counted" not in j.summary, j.summary
    assert any(r["condition"].startswith("w9") for r in j.conditions)
    j = _judge("C18", _c18([0.30], [dict(real[0], scale="tiny")]), CPU, scale="tiny")
    assert "not counted" in j.summary


def test_c19_says_the_saving_per_token_does_not_compound_when_it_stays_flat():
    j = _judge("C19", _stored(CPUDOC, "C19"), CPU, scale="tiny")
    assert j.verdict == "holds"
    s = j.summary
    assert "names no reference" not in s and "no unit" not in s, s
    assert "feed-forward" in s, s  # the first half compares with the sentence before's feed-forward networks
    assert "not observed" in s and "per token" in s, s
    rule = claims.rule("C19")
    assert "names no unit" not in rule and "feed-forward" in rule, rule


def test_c10_says_which_half_its_verdict_rests_on():
    j = _judge("C10", _stored(CPUDOC, "C10"), CPU, scale="tiny")
    assert j.verdict == "holds"
    assert j.summary.startswith("Holds on its first half"), j.summary
    assert "workarounds half is not supported by the sources" in j.summary, j.summary
    rule = claims.rule("C10")
    assert "first half" in rule and "workarounds" in rule, rule


def test_c28s_reverse_nesting_failure_names_the_issue_it_is():
    doc = json.loads((ROOT / "results" / "cpu-amd-epyc-2-threads-torch2.9.1" / "claims.json").read_text())
    j = _judge("C28", _stored(doc, "C28"), CPU, scale="tiny")
    assert j.verdict == "depends"
    assert "pytorch/pytorch#158232" in j.summary and "#165068" in j.summary, j.summary
    assert "not pytorch/pytorch#112583" in j.summary and "#113685" in j.summary, j.summary
