"""The numeric claim checks (nogradlab/claims/numbers.py) at device="cpu", scale="tiny".

Each check runs once per session (with short timing knobs: the timing values themselves are never
asserted, only their structure); memory figures are exact and deterministic, so they are asserted.
"""
from __future__ import annotations

import gc
import json

import pytest
import torch

from nogradlab import claims, workloads
from nogradlab.claims import VERDICTS
from nogradlab.claims import measure as N

# claim checks run end to end (seconds per test): not in the quick unit pass
pytestmark = pytest.mark.integration

FAST = {"rounds": 3, "min_run_time": 0.03}
IDS = ["C03", "C08", "C13", "C16", "C17", "C18", "C19", "C20", "C21", "C23", "X05"]
_CACHE: dict = {}


def result(cid):
    if cid not in _CACHE:
        _CACHE[cid] = claims.check(cid, device="cpu", scale="tiny", **FAST)
    return _CACHE[cid]


@pytest.mark.parametrize("cid", IDS)
def test_check_runs_and_is_well_formed(cid):
    r = result(cid)
    assert r.verdict in VERDICTS
    assert r.summary and isinstance(r.evidence, dict)
    json.dumps(r.to_dict())  # JSON-able all the way down
    assert r.scale == "tiny" and r.device["type"] == "cpu"


def test_c03_covers_every_workload_at_two_batches():
    rows = result("C03").evidence["rows"]
    assert {r["workload"] for r in rows} == set(workloads.names())
    for name in workloads.names():
        assert len({r["batch"] for r in rows if r["workload"] == name}) == 2
    for r in rows:
        lo, hi = r["time_saved_ci"]
        assert lo <= r["time_saved"] <= hi
        assert r["time_saved"] == pytest.approx(1 - 1 / r["speedup"])
    # the transformer's fused fast path is reported apart, not credited to no_grad
    tr = [r for r in rows if r["workload"] == "transformer_base"]
    assert all(r["case"] == "no_grad (fast path off)" and "with_fast_path" in r for r in tr)
    assert all(r["case"] == "no_grad" for r in rows if r["workload"] != "transformer_base")
    assert "fast path" in result("C03").summary


def test_c08_accounting_is_exact():
    ev = result("C08").evidence
    p = (4096 * 8192 + 8192 + 8192 * 1000 + 1000) * 4  # the full-size MLP's fp32 parameters
    assert N.param_bytes("mlp", "full") == p
    for name in workloads.names():
        rows = sorted((r for r in ev["rows"] if r["workload"] == name), key=lambda r: r["batch"])
        assert len(rows) == 2 and rows[0]["activation_bytes"] < rows[1]["activation_bytes"]
        for r in rows:
            assert r["params_grads_optimizer_bytes"] == 3 * r["parameters_bytes"]
            assert r["activations_exceed_the_rest"] == (r["activation_bytes"] > r["params_grads_optimizer_bytes"])
    # activations are cheap per sample in the MLP: its crossover is far above the CNNs'
    assert ev["crossover"]["mlp"]["crossover_batch_sgd"] > 100 * ev["crossover"]["resnet50"]["crossover_batch_sgd"]
    flags = [r["activations_exceed_the_rest"] for r in ev["rows"]]
    assert result("C08").verdict == ("holds" if all(flags) else "does not hold" if not any(flags) else "depends")


def test_c13_scopes_agree_and_context_cost_is_small():
    ev = result("C13").evidence
    assert ev["same_accuracy"]
    assert 0 < ev["enter_exit_s"] < float("inf")  # a time: its size depends on the machine
    assert ev["predicted_gain_from_context_cost"] >= 0


def test_c16_eval_removes_dropout_spread_entirely():
    r = result("C16")
    assert r.verdict == "not testable"
    assert r.evidence["std"]["eval"] == 0.0 and r.evidence["std"]["train"] > 0
    assert r.evidence["spread_reduction"] == 1.0
    assert r.evidence["train_no_grad_identical_to_train"]


def test_c17_same_accuracy_and_predictions():
    ev = result("C17").evidence
    assert ev["same_predictions"] and ev["max_logit_diff"] == 0
    assert ev["accuracy"]["eval"] == ev["accuracy"]["eval+no_grad"]
    assert ev["n_batches"] * ev["batch"] >= 8  # not two images
    assert "independent of the model" in ev["labels"]


def band_lo_hi(value, band, digits):
    return round(band[0], digits) <= round(value, digits) <= round(band[1], digits)


def test_c23_not_testable_with_the_mechanism_measured():
    ev = result("C23").evidence
    assert ev["forward_autograd_shares"] == [0.0] * 4
    assert ev["train_step_autograd_share"]["mlp"] > 0
    mlp = ev["profiles"]["mlp"]
    assert mlp["grad"]["ops"] == mlp["no_grad"]["ops"]  # same operators, grad on or off
    # a statistic no profiler reports is not testable; never "does not hold" by construction
    assert result("C23").verdict == "not testable"
    # the forward time comes from the shared forward condition C03 reads, fused path on and off
    tr = ev["profiles"]["transformer_base"]
    assert tr["grad"]["ops"] == tr["no_grad (fast path off)"]["ops"]
    cases = {(r["workload"], r["case"]) for r in ev["forward"]}
    assert {("transformer_base", "no_grad"), ("transformer_base", "no_grad (fast path off)"), ("mlp", "no_grad")} <= cases
    for r in ev["forward"]:
        lo, hi = r["time_saved_ci"]
        assert lo <= r["time_saved"] <= hi


def test_x05_cases_per_workload():
    ev = result("X05").evidence
    assert {r["workload"] for r in ev["rows"]} == set(workloads.names())
    for row in ev["rows"]:
        name = row["workload"]
        assert {"grad", "no_grad", "inference_mode", "no_grad+bf16"} <= set(row["speedup"])
        # channels_last: not in a tiny CPU run (its model copy costs a small kernel too much), with the reason
        assert "no_grad+channels_last" not in row["speedup"]
        assert "channels_last" in row["skipped"]
        if name in N.CNNS:
            assert "tiny CPU run" in row["skipped"]["channels_last"]
        assert row["speedup"]["grad"] == 1.0
        assert "compile" in row["skipped"]  # skipped at tiny scale, with the reason
        # cases in one tier have pairwise overlapping CIs (a tie)
        for tier in row["tiers"]:
            for a in tier:
                assert all(row["ci"][a][0] <= row["ci"][b][1] and row["ci"][b][0] <= row["ci"][a][1]
                           for b in tier)
        for won in row["beats_no_grad"]:
            assert row["ci"][won][0] > row["ci"]["no_grad"][1]
    assert ev["compile_skipped"]
    # why bf16 is slow on this CPU, said for the CPU it ran on (native bf16 or not: oneDNN's own check)
    native = ev["cpu_native_bf16"]
    assert native in (True, False, None)
    summary = result("X05").summary
    assert "oneDNN has no bf16 kernels" in summary and "converting the model once" in summary
    if native is not None:
        assert ("oneDNN has none for this CPU" if native is False else "oneDNN has them for this CPU") in summary


# ---------------------------------------------------------------------------------------------
# helpers


def test_accounting_restores_state():
    fast = torch.backends.mha.get_fastpath_enabled()
    frozen = gc.get_freeze_count()
    with N.accounting():
        assert not torch.backends.mha.get_fastpath_enabled()
    assert torch.backends.mha.get_fastpath_enabled() == fast
    assert gc.get_freeze_count() == frozen
    with pytest.raises(RuntimeError):
        with N.accounting():
            raise RuntimeError("boom")
    assert torch.backends.mha.get_fastpath_enabled() == fast


def test_bad_input_is_refused_with_allowed_values():
    with pytest.raises(ValueError, match="allowed"):
        N.estimate_sweep("mlp", [1], settings=("bogus",))
    with pytest.raises(ValueError, match="allowed"):
        N.estimate_sweep("nope", [1])
    with pytest.raises(ValueError, match="positive integer"):
        N.estimate_sweep("mlp", [0])
    with pytest.raises(ValueError, match="sequence length"):
        N.with_seq_len(workloads.get("mlp"), 64)
    with pytest.raises(ValueError, match="allowed"):
        claims.check("C13", device="cpu", scale="tiny", workload="unet")
    with pytest.raises(ValueError, match="allowed"):
        claims.check("X05", device="cpu", scale="tiny", workloads=["mlp", "vgg"])
    with pytest.raises(ValueError, match="two or more"):
        claims.check("C19", device="cpu", scale="tiny", seq_lens=[64])
    with pytest.raises(ValueError, match="positive integer"):
        claims.check("C18", device="cpu", scale="tiny", batches=[0])
    with pytest.raises(ValueError, match="positive integer"):  # refused before the real runs
        claims.check("C18", device="cpu", scale="tiny", full_batches=[-1])


def test_estimate_sweep_and_memory_saved():
    rows = N.estimate_sweep("mlp", [1, 4], scale="tiny", device="cpu")
    assert [(r["batch"], r["setting"]) for r in rows] == [(1, "eval+grad"), (1, "eval+no_grad"),
                                                         (4, "eval+grad"), (4, "eval+no_grad")]
    assert all(r["total_peak_bytes"] == r["resident_bytes"] + r["peak_bytes"] for r in rows)
    assert N.memory_saved(200, 50) == 0.75
    wl = N.with_seq_len(workloads.get("transformer_base"), 64)
    assert wl.input_shape == (64, wl.params["d_model"]) and wl.params["seq_len"] == 64
