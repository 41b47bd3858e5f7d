"""Claims as data: one declaration per claim, measurements apart from verdicts, every
column judged by today's rules, one reading of a band, and each verdict naming its evidence."""
from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path

import pytest

from nogradlab import claims, report
from nogradlab.claims import rules
from nogradlab.claims.rules import Band, read_conditions, rounds_to_decide, verdict_of

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "nogradlab"
RESULTS = sorted((ROOT / "results").glob("*/claims.json"))
CPU = {"type": "cpu", "device": "cpu", "name": "test cpu", "torch": "t"}


def _column(path):
    doc = json.loads(path.read_text())
    return doc["meta"], {c["id"]: c for c in doc["claims"]}


# ------------------------------------------------------------------------------ one declaration


@pytest.mark.parametrize("cid", claims.ids())
def test_a_claim_is_declared_and_checked_in_one_module(cid):
    """Grepping a claim id in nogradlab/ finds its declaration, its check and its judge in one module."""
    declared = [p for p in PKG.rglob("*.py") if re.search(rf'^{cid} = declare\(\s*"{cid}"', p.read_text(), re.M)]
    assert len(declared) == 1, declared
    text = declared[0].read_text()
    assert re.search(rf'^@({cid}\.measures|_check\("{cid}"\))$', text, re.M), "its check is not in that module"
    assert re.search(rf"^@{cid}\.judges$", text, re.M), "its judge is not in that module"
    c = claims.get(cid)
    assert c.measure is not None and c.judge is not None and c.notebook == declared[0].stem[2:]


def test_the_tables_are_built_from_the_declarations():
    nb = dict(claims.NOTEBOOKS)
    assert sorted(i for ids in nb.values() for i in ids) == sorted(claims.ids())
    assert all(rules.RULES[c].text == claims.rule(c) for c in claims.ids())
    assert set(claims.claim_figures()) == {"C04", "C09", "C14", "C18", "C19", "C20", "C21"}
    assert all(c.id in claims.claim_figures() for c in claims.all_claims() if c.key_chart)
    assert sorted(c for c, *_ in report.key_charts()) == sorted(c.id for c in claims.all_claims() if c.key_chart)


# ------------------------------------------------------------------------------ one reading of a band


def test_a_ci_just_below_a_band_edge_is_never_agreement():
    band = Band("range", 0.20, 0.40)
    # the H200 case: an interval ending at 19.996 % printed as "20 %" once counted as agreement
    assert band.read(0.15, 0.10, 0.19996) == "disagrees"
    assert round(0.19996 * 100) / 100 >= 0.20  # as printed it reads 20 %: the old rule, deciding on that, agreed
    # an interval across the edge, however little, is unresolved
    assert band.read(0.25, 0.19996, 0.30) == "unresolved"
    assert band.read(0.19, 0.18, 0.20004) == "unresolved"
    assert band.read(0.30, 0.25, 0.35) == "agrees"


def test_the_three_band_words_have_one_meaning_each():
    assert Band("range", 0.2, 0.4).read(0.45) == "disagrees"  # above a range disagrees too
    assert Band("at least", 0.4).read(0.9) == "agrees" and Band("at least", 0.4).read(0.39) == "disagrees"
    about = Band("about", 0.30)
    assert about.edges == pytest.approx((0.24, 0.36))
    assert Band("about", 2.5, unit="x").edges == pytest.approx((2.0, 3.0))
    assert about.read(0.25) == "agrees" and about.read(0.37) == "disagrees"
    with pytest.raises(ValueError, match="allowed: range, at least, more than, about"):
        Band("roughly", 1.0)


def test_verdicts_from_readings_and_rounds_to_decide():
    assert verdict_of(["agrees", "agrees"]) == "holds"
    assert verdict_of(["disagrees"]) == "does not hold"
    assert verdict_of(["agrees", "disagrees", "unresolved"]) == "depends"
    assert verdict_of(["agrees", "unresolved"]) == "inconclusive"
    assert verdict_of(["unresolved"]) == "inconclusive"
    # half-width 0.05 around 0.22, edge 0.20 at 0.02: (0.05 / 0.02)^2 = 6.25 times the rounds
    assert rounds_to_decide(0.22, 0.17, 0.27, (0.20, 0.40), 10) == 63
    assert rounds_to_decide(0.20, 0.15, 0.25, (0.20, 0.40), 10) is None  # on the edge: never decided


def test_a_bootstrap_over_few_rounds_never_decides():
    verdict, rows = read_conditions([("mlp@1", 0.30, 0.30, 0.30, 5)], Band("range", 0.2, 0.4), estimated=False)
    assert verdict == "inconclusive" and rows[0]["reading"] == "unresolved"
    verdict, _ = read_conditions([("mlp@1", 0.30, 0.30, 0.30, 10)], Band("range", 0.2, 0.4), estimated=False)
    assert verdict == "holds"


# ------------------------------------------------------------------------------ columns judged by today's rules


@pytest.mark.integration
def test_a_band_change_changes_every_columns_verdict(monkeypatch):
    """C18's band widened to everything: this run's column and every stored column now hold; with
    the band moved out of reach none does. Nothing stored decides."""
    c = claims.get("C18")
    fresh = claims.check("C18", device="cpu", scale="tiny").to_dict()
    columns = [(None, fresh)] + [(_column(p)[0], _column(p)[1]["C18"]) for p in RESULTS]
    assert len(columns) >= 3
    for band, want in ((Band("range", -1.0, 2.0), "holds"), (Band("range", 1.5, 2.0), "does not hold")):
        monkeypatch.setattr(c, "rule", dataclasses.replace(c.rule, band=band))
        got = [claims.judge_entry(copy.deepcopy(e), meta)["verdict"] for meta, e in columns]
        assert got == [want] * len(columns), got


def test_references_are_judged_again_and_keep_their_stored_verdict():
    refs = report.load_references(ROOT / "results")
    assert len(refs) == len(RESULTS)
    for _name, doc in refs:
        assert doc["meta"]["judged_by"] == rules.digest()
        for e in doc["claims"]:
            assert e["verdict"] in claims.VERDICTS and e["rule"] == claims.rule(e["id"])
            assert "stored_verdict" in e and e.get("scope", {}).get("text")


def test_a_column_lacking_what_the_rule_reads_needs_re_measuring():
    meta, col = _column(ROOT / "results" / "cuda-nvidia-h200" / "claims.json")
    e = copy.deepcopy(col["C17"])
    e["evidence"].pop("time_saved")
    assert claims.judge_entry(e, meta)["verdict"] == "needs re-measuring"


# ------------------------------------------------------------------------------ every verdict names its evidence


@pytest.mark.integration
def test_a_gpu_speed_claim_off_a_gpu_stands_on_the_reference_gpu():
    r = claims.check("C17", device="cpu", scale="tiny")
    assert r.scope["basis"] == "reference" and "H200" in r.scope["text"]
    assert r.local is not None and r.local["where"].startswith(r.device.get("name", ""))
    assert "On your machine" in r.summary and r.scope["text"] in r.summary


@pytest.mark.integration
def test_numeric_summaries_name_their_evidence():
    for cid in ("C18", "C06"):
        r = claims.check(cid, device="cpu", scale="tiny")
        assert r.scope.get("text")
        if claims.get(cid).kind != "semantic":
            assert r.scope["text"] in r.summary
    assert claims.check("C18", device="cpu", scale="tiny").scope["basis"] == "estimated"


def test_the_cpu_reference_comes_from_todays_code():
    for p in ROOT.glob("results/cpu-*/claims.json"):
        doc = report.load_doc(p)
        assert doc["meta"]["schema_version"] == 3 and doc["meta"].get("nogradlab_commit")
        assert all(c.get("rule") and "measurements" in c and c.get("scope") for c in doc["claims"])


def test_claims_shows_the_reference_columns_by_default(capsys):
    from nogradlab.__main__ import main

    assert main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C06", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "ref 1 = " in out and "judged by today's rules" in out
    assert main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C06", "--no-progress",
                 "--no-results"]) == 0
    assert "ref 1 = " not in capsys.readouterr().out


def test_a_capped_search_says_so():
    from nogradlab import batch

    r = batch.largest_batch("mlp", "grad", 12 * 2 ** 30, "cuda", method="estimate", max_batch=65536)
    assert r.at_limit and ">= 65536 (search limit)" in str(r) and r.answer.startswith(">=")
    r = batch.largest_batch("mlp", "grad", 12 * 2 ** 30, "cuda", method="estimate")  # cheap: no cap hit
    assert not r.at_limit and r.batch > 65536 and str(r.batch) in str(r)
