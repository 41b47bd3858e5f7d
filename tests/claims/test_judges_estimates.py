"""Judges read estimates with their validation error, say which half of a two-part claim they
judged, and say what the measurements show about the article's mechanism."""
import json
from pathlib import Path


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
