"""Judges of the capacity and mechanism claims (C04 C08 C09 C13 C23 C25; C19's and C21's are in
test_nb05.py) on hand-made measurements: cheap and exact. Each decisive value is flipped and the verdict
must follow; capped searches read as bounds; every stored column in results/ is judged again by today's
rules (C19 and C21 too)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nogradlab import claims
from nogradlab.claims import Measurements, VERDICTS
from nogradlab.claims.rules import Band, read_conditions

GiB = 2 ** 30
MINE = ("C04", "C08", "C09", "C13", "C19", "C21", "C23", "C25")
CPU = {"type": "cpu", "device": "cpu", "name": "test cpu", "threads": 2, "torch": "2.x"}
GPU = {"type": "cuda", "device": "cuda:0", "name": "test gpu", "torch": "2.x"}
RESULTS = Path(__file__).resolve().parents[2] / "results"


def judge(cid, values, device=CPU, scale="tiny"):
    c = claims.get(cid)
    return c.judge(Measurements(values, device, scale), c.rule)


# ------------------------------------------------------------------------------------- bands


def test_a_ci_just_below_a_band_edge_is_not_agreement():
    """0.19996 prints as 20 %, but is below a 20-40 % band: read on unrounded values it never agrees.
    A CI wholly below the edge disagrees; one that straddles it is unresolved."""
    band = Band("range", 0.20, 0.40)
    assert band.read(0.195, 0.19, 0.19996) == "disagrees"
    assert band.read(0.199, 0.19, 0.20004) == "unresolved"
    verdict, rows = read_conditions([("a", 0.30, 0.25, 0.35, 20), ("b", 0.199, 0.19, 0.20004, 20)], band,
                                    estimated=False)
    assert [r["reading"] for r in rows] == ["agrees", "unresolved"] and verdict == "inconclusive"
    # the C03 band is the same range
    assert claims.get("C03").rule.band.read(0.199, 0.19, 0.20004) == "unresolved"


# ------------------------------------------------------------------------------------- C04


def _c04_cond(workload, grad, no_grad, train=1, capped=None, **where):
    return {"workload": workload, "budget_bytes": 12 * GiB, "budget_gib": 12.0, "method": "estimate",
            "scale": "full", "train": train, "grad": grad, "eval+no_grad": no_grad,
            "capped": capped or {"train": False, "grad": False, "eval+no_grad": False},
            "no_grad_over_grad": no_grad / grad, "no_grad_over_train": no_grad / train,
            "larger_than_grad": no_grad > grad, "larger_than_train": no_grad > train, **where}


def _c04(mlp_no_grad, tiny_no_grad=652, capped=None):
    return {"conditions": [_c04_cond("mlp", 1000, mlp_no_grad, 500, capped),
                           _c04_cond("unet", 48, 218, 44),
                           _c04_cond("mlp", 652, tiny_no_grad, 542, device="cpu", scale="tiny")],
            "searches": [], "cpu_check": {}, "modes": ["train", "grad", "eval+no_grad"]}


def test_c04_verdict_follows_the_gpu_sized_conditions_only():
    assert judge("C04", _c04(1000)).verdict == "depends"
    assert judge("C04", _c04(2000)).verdict == "holds"
    # the tiny CPU condition never decides: flipping it changes nothing
    assert judge("C04", _c04(2000, tiny_no_grad=600)).verdict == "holds"
    assert "On your machine" in judge("C04", _c04(2000)).summary


def test_c04_a_capped_search_is_a_lower_bound():
    both = {"train": False, "grad": True, "eval+no_grad": True}
    j = judge("C04", _c04(1000, capped=both))  # grad >= 1000 and no_grad >= 1000: undecided
    assert j.verdict == "inconclusive" and "\u2265 1000 (search limit)" in j.summary
    only_ng = {"train": False, "grad": False, "eval+no_grad": True}
    assert judge("C04", _c04(2000, capped=only_ng)).verdict == "holds"  # >= 2000 > 1000: the bound decides


def test_c04_capped_read_from_older_columns_searches():
    m = _c04(1000)
    for c in m["conditions"]:
        del c["capped"]
    m["searches"] = [{"workload": "mlp", "mode": mode, "budget_bytes": 12 * GiB, "method": "estimate",
                      "scale": "full", "at_limit": mode != "train"} for mode in ("train", "grad", "eval+no_grad")]
    assert judge("C04", m).verdict == "inconclusive"


# ------------------------------------------------------------------------------------- C08


def test_c08_flips_with_the_activation_bytes():
    def m(big):
        rows = [{"workload": "resnet50", "batch": b, "activation_bytes": a, "params_grads_optimizer_bytes": 300}
                for b, a in ((1, 10), (32, big))]
        return {"rows": rows, "crossover": {"resnet50": {"crossover_batch_sgd": 4}}}

    assert judge("C08", m(1000)).verdict == "depends"
    assert judge("C08", m(200)).verdict == "does not hold"


# ------------------------------------------------------------------------------------- C09


def _c09(train, no_grad, capped=None):
    return {"budget_bytes": 12 * GiB, "workload": "resnet50",
            "batches": {"train": train, "grad": train + 1, "eval+no_grad": no_grad},
            "capped": capped or {}, "no_grad_over_train": no_grad / train, "no_grad_over_grad": no_grad / (train + 1),
            "method": "estimate", "searches": []}


def test_c09_about_two_and_a_half_unrounded():
    assert judge("C09", _c09(100, 250)).verdict == "holds"
    assert judge("C09", _c09(100, 400)).verdict == "does not hold"
    assert judge("C09", _c09(1000, 3004)).verdict == "does not hold"  # 3.004x prints 3.00x, lies outside


def test_c09_a_capped_side_makes_the_factor_a_bound():
    ng = {"eval+no_grad": True}
    j = judge("C09", _c09(100, 250, ng))  # >= 2.5x: inside or above the band
    assert j.verdict == "inconclusive" and "lower bound" in j.summary and "search limit" in j.summary
    assert judge("C09", _c09(100, 400, ng)).verdict == "does not hold"  # >= 4x: above whatever the truth
    tr = {"train": True}
    assert judge("C09", _c09(100, 150, tr)).verdict == "does not hold"  # <= 1.5x: below
    assert judge("C09", _c09(100, 250, tr)).verdict == "inconclusive"


# ------------------------------------------------------------------------------------- C13


def _c13(gain, ci, predicted=0.01, rounds=20):
    return {"workload": "mlp", "n_batches": 8, "predicted_gain_from_context_cost": predicted,
            "enter_exit_s": 1e-6, "throughput_gain_whole_vs_per_batch": gain, "ci": list(ci),
            "whole_loop_s": 7e-6 / predicted, "rounds": rounds}


def test_c13_the_direct_timing_and_the_context_cost_decide_together():
    assert judge("C13", _c13(0.30, (0.27, 0.33), predicted=0.29)).verdict == "holds"
    j = judge("C13", _c13(0.02, (0.015, 0.025), predicted=0.0107))  # this CPU's reference column
    assert j.verdict == "does not hold" and [c["side"] for c in j.conditions] == ["below", "below"]
    assert j.summary.startswith("The wider scope gains far less than the article says")
    # a busy machine: the direct timing far above what the context's cost explains decides nothing
    busy = judge("C13", _c13(17.98, (14.99, 19.06), predicted=0.164))
    assert busy.verdict == "inconclusive" and "rerun on a quiet machine" in busy.summary
    assert judge("C13", _c13(0.30, (0.27, 0.33), predicted=0.01)).verdict == "inconclusive"  # they conflict
    assert judge("C13", _c13(0.25, (0.20, 0.30), predicted=0.30)).verdict == "inconclusive"  # across 24 %
    assert judge("C13", _c13(0.30, (0.27, 0.33), predicted=0.30, rounds=5)).verdict == "inconclusive"
    assert claims.get("C13").basis == "here"


# ------------------------------------------------------------------------------------- C23 / C25


def test_c23_and_c25_are_not_testable_whatever_they_measured():
    prof = {"ops": 10, "autograd_share": 0.0}
    m = {"profiles": {"transformer_base": {"grad": prof, "no_grad": prof}, "mlp": {"grad": prof, "no_grad": prof}},
         "forward_autograd_shares": [0.0] * 4, "train_step_autograd_share": {"mlp": 0.1},
         "forward": [{"workload": "mlp", "batch": 8, "case": "no_grad", "time_saved": 0.28,
                      "time_saved_ci": [0.27, 0.29], "rounds": 20}]}
    j = judge("C23", m)
    assert j.verdict == "not testable" and "shared forward timing" in j.summary
    s = {v: {"saved_bytes_per_request": 0, "held_growth_per_request": 10} for v in
         ("grad", "no_grad", "keep_outputs", "keep_outputs_no_grad")}
    assert judge("C25", {"summaries": s, "workload": "mlp"}).verdict == "not testable"


# ------------------------------------------------------------------------------------- stored columns


@pytest.mark.parametrize("column", ["cuda-nvidia-h200", "cpu-amd-epyc-2-threads"])
def test_stored_columns_are_judged_again(column):
    doc = json.loads((RESULTS / column / "claims.json").read_text())
    entries = {e["id"]: e for e in doc["claims"] if e["id"] in MINE}
    assert set(entries) == set(MINE)
    for cid, e in entries.items():
        j = claims.judge_entry(e, doc.get("meta"))
        assert j["verdict"] in VERDICTS, cid
        assert j["rule"] == claims.rule(cid) and j.get("scope"), cid
