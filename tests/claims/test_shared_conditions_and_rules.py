"""One timing per condition shared by every check, verdict rules as data (in every result,
in claims.json and in the report), ties from confidence intervals, rounding as printed, the result's
notebook display, and the merged GPU reference column."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nogradlab import claims, report, timing
from nogradlab.claims import runcache
from nogradlab.claims import measure as N
from nogradlab.claims import rules

# claim checks run end to end (seconds per test): not in the quick unit pass
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FAST = {"rounds": 3, "min_run_time": 0.03}


# ---------------------------------------------------------------------------------- shared timings


@pytest.fixture(scope="module")
def shared_run():
    """C03, X05, C17 and C20 of one run, the mlp only: they all ask for (mlp, tiny, batch 8, cpu)."""
    claims.new_run()
    out = {"C03": claims.check("C03", device="cpu", scale="tiny", workloads=["mlp"], **FAST)}
    misses = runcache.RUN.misses
    out["X05"] = claims.check("X05", device="cpu", scale="tiny", workloads=["mlp"], **FAST)
    out["misses_after_x05"] = runcache.RUN.misses - misses
    out["C17"] = claims.check("C17", device="cpu", scale="tiny", workload="mlp", n_batches=2, **FAST)
    out["C20"] = claims.check("C20", device="cpu", scale="tiny", workloads=["mlp"], batch_factor=False, **FAST)
    return out


def test_two_checks_asking_for_one_condition_get_the_same_numbers(shared_run):
    c03 = {r["batch"]: r for r in shared_run["C03"].evidence["rows"]}
    x05 = {r["batch"]: r for r in shared_run["X05"].evidence["rows"]}
    assert set(c03) == {1, 8} and set(x05) == {8}  # a tiny CPU run times the levers at the main batch
    for b in x05:
        assert c03[b]["grad_ms"] == x05[b]["median_ms"]["grad"]
        assert c03[b]["no_grad_ms"] == x05[b]["median_ms"]["no_grad"]
        assert c03[b]["speedup"] == x05[b]["speedup"]["no_grad"]
        assert list(c03[b]["speedup_ci"]) == x05[b]["ci"]["no_grad"]
    assert shared_run["misses_after_x05"] == 0  # X05 measured nothing new


def test_c17_and_c20_read_the_same_condition(shared_run):
    cmp17 = shared_run["C17"].evidence["comparison"]["cases"]
    row8 = next(r for r in shared_run["C03"].evidence["rows"] if r["batch"] == 8)
    assert shared_run["C17"].evidence["batch"] == 8
    assert cmp17["grad"]["median"] * 1e3 == row8["grad_ms"]
    c20 = shared_run["C20"].evidence["rows"][0]
    assert c20["speed_batch"] == 8
    assert c20["speed_gain"] == pytest.approx(row8["speedup"] - 1)
    assert c20["speed_gain_ci"] == pytest.approx([row8["speedup_ci"][0] - 1, row8["speedup_ci"][1] - 1])


def test_a_new_run_measures_again():
    calls = []
    runcache.shared(("test-key",), lambda: calls.append(1) or 1)
    runcache.shared(("test-key",), lambda: calls.append(1) or 1)
    assert calls == [1]
    claims.new_run()
    assert ("test-key",) not in runcache.RUN
    runcache.shared(("test-key",), lambda: calls.append(1) or 1)
    assert calls == [1, 1]


def test_bootstrap_ratio_of_independent_samples():
    r, (lo, hi) = timing.bootstrap_ratio([2.0, 2.1, 1.9, 2.0], [1.0, 1.05, 0.95, 1.0], seed=0)
    assert r == pytest.approx(2.0) and lo <= r <= hi
    assert timing.bootstrap_ratio([2.0, 2.1], [1.0, 1.1], seed=3) == timing.bootstrap_ratio([2.0, 2.1], [1.0, 1.1], seed=3)
    with pytest.raises(ValueError):
        timing.bootstrap_ratio([], [1.0])


# ---------------------------------------------------------------------------------- rules


def test_every_claim_has_a_rule_sentence():
    assert set(rules.RULES) == set(claims.ids())
    for cid, rule in rules.RULES.items():
        assert len(rule.text) > 30 and rule.text[0].isupper(), cid
    # numbers the checks use come from the rules
    assert __import__('nogradlab.claims.nb02_inside_the_engine', fromlist=['x']).C09_TOLERANCE == rules.RULES['C09'].band
    assert rules.RULES["C12"].threshold == 0.05 and "5 %" in rules.RULES["C12"].text
    assert "tie" in rules.RULES["X05"].tie and rules.RULES["X05"].threshold == 0.05


def test_results_carry_their_rule(shared_run):
    for cid in ("C03", "X05", "C20"):
        assert shared_run[cid].rule == rules.RULES[cid].text == claims.rule(cid)
    assert shared_run["C03"].to_dict()["rule"] == rules.RULES["C03"].text
    # off a GPU the GPU speed claims stand on the reference GPU; this machine's judgement is kept beside
    for cid in ("C03", "X05", "C17"):
        assert shared_run[cid].local is not None and shared_run[cid].scope["basis"] == "reference", cid
    c03 = claims.get("C03").judge(claims.Measurements(shared_run["C03"].measurements, shared_run["C03"].device,
                                                      "tiny"), claims.get("C03").rule)
    assert all(r["reading"] == "unresolved" for r in c03.conditions if r["rounds"] < 10)


def test_claims_json_entries_carry_a_non_empty_rule(tmp_path):
    r = claims.check("C06", device="cpu", scale="tiny")
    doc = report.build_doc([r], source="claims", device="cpu", scale="tiny")
    assert doc["meta"]["schema_version"] == 3 and doc["meta"]["rules_digest"] == rules.digest()
    assert all(c["rule"] for c in doc["claims"])  # also the claims no check reached
    path = report.write_json(doc, tmp_path / "claims.json")
    assert json.loads(path.read_text())["claims"][5]["rule"] == rules.RULES["C06"].text
    bad = json.loads(path.read_text())
    bad["claims"][0]["rule"] = ""
    with pytest.raises(ValueError, match="schema"):
        report.validate(bad)
    del bad["claims"][0]["rule"]
    with pytest.raises(ValueError, match="schema"):
        report.validate(bad)


# ---------------------------------------------------------------------------------- ties


def test_overlapping_cis_are_a_tie_never_a_ranking():
    sp = {"grad": 1.0, "no_grad": 1.2, "inference_mode": 1.2006, "no_grad+bf16": 1.5}
    ci = {"grad": (1.0, 1.0), "no_grad": (1.1, 1.3), "inference_mode": (1.15, 1.25), "no_grad+bf16": (1.4, 1.6)}
    assert N._tiers(sp, ci) == [["no_grad+bf16"], ["inference_mode", "no_grad"], ["grad"]]
    assert N._beats(sp, ci, "no_grad+bf16", "no_grad", 0.05)
    assert not N._beats(sp, ci, "inference_mode", "no_grad", 0.05)  # a 0.0006 margin decides nothing
    # wholly above but by less than the margin: not a win either
    sp2 = {"grad": 1.0, "no_grad": 1.20, "no_grad+bf16": 1.22}
    ci2 = {"grad": (1.0, 1.0), "no_grad": (1.199, 1.201), "no_grad+bf16": (1.219, 1.221)}
    assert not N._beats(sp2, ci2, "no_grad+bf16", "no_grad", 0.05)


# ---------------------------------------------------------------------------------- display


def test_ratio_and_saving_text():
    assert claims.format_ratio(1.15, 1.05, 1.22) == "1.15\u00d7 [1.05\u00d7, 1.22\u00d7]"
    assert claims.format_ratio(1.02, 0.95, 1.08).startswith("no clear difference (noisy)")
    assert claims.format_saved(0.23, 0.18, 0.27) == "23% [18%, 27%]"
    assert claims.format_saved(0.02, -0.05, 0.08).startswith("no clear difference (noisy)")


def test_notebook_display_shows_reading_rule_and_collapsed_evidence():
    r = claims.Result(id="C03", verdict="depends", summary="measured <things>",
                      measurements={"rows": [{"workload": "mlp", "grad_ms": 0.25, "peak_bytes": 3 * 2 ** 20,
                                              "time_saved": 0.2345, "note": "x" * 300}],
                                    "enter_exit_s": 1.2e-6}, reading_text="It depends on the batch.",
                      figure="20-40 %", paraphrase="p", rule=rules.RULES["C03"].text, scale="tiny")
    h = r._repr_html_()
    assert "It depends on the batch." in h and "<b>Rule.</b>" in h and rules.RULES["C03"].text[:40] in h
    assert h.index("<details class='fold'>") < h.index("<b>Rule.</b>")  # the rule is one click away, not in front
    assert str(r) == "C03 depends: article 20-40 %; It depends on the batch."  # no conditions: the judge's line
    assert "<details><summary>measurements</summary>" in h
    assert "3.00 MiB" in h and "250 \u00b5s" in h and "23.4%" in h and "1.20 \u00b5s" in h
    assert "x" * 300 in h and "\u2026" not in h  # no cell cut
    assert "&lt;things&gt;" in h
    text = repr(r)
    assert "rule: " in text and "reading: It depends on the batch." in text


# ---------------------------------------------------------------------------------- references


def test_merge_keeps_verdicts_and_refuses_other_machines(tmp_path):
    a = report.build_doc([claims.check("C06", device="cpu", scale="tiny")], source="claims", device="cpu",
                         scale="tiny", only=["C06", "C30"])
    b = report.build_doc([claims.check("C30", device="cpu", scale="tiny")], source="claims", device="cpu",
                         scale="tiny", only=["C06", "C30"])
    m = report.merge_docs([a, b], names=["a.json", "b.json"], note="two halves")
    by = {c["id"]: c["verdict"] for c in m["claims"]}
    assert by == {"C06": "holds", "C30": "holds"}  # a missing verdict never replaces one
    assert m["meta"]["merged_from"] == ["a.json", "b.json"] and m["meta"]["note"] == "two halves"
    other = json.loads(json.dumps(b))
    other["meta"]["machine"] = "cuda-other"
    with pytest.raises(ValueError, match="different machines"):
        report.merge_docs([a, other])


def test_gpu_column_is_committed_and_judged_by_todays_rules():
    path = ROOT / "results" / "cuda-nvidia-h200" / "claims.json"
    doc = report.load_doc(path)
    m = doc["meta"]
    assert m["device"]["name"] == "NVIDIA H200" and m["scale"] == "full" and m["complete"]
    assert m["merged_from"] == ["claims-C01-C17.json", "claims-C18-X05.json"]
    assert [c["id"] for c in doc["claims"]] == claims.ids()
    judged = report.rejudged(doc)
    for c in judged["claims"]:  # every entry judged by today's rule, or marked as lacking what it reads
        assert c["rule"] == claims.rule(c["id"]) and c["verdict"] in claims.VERDICTS
    this = report.build_doc([claims.check("C06", device="cpu", scale="tiny")], source="claims",
                            device="cpu", scale="tiny")
    page = report.render_html(this, refs=[("cuda-nvidia-h200", judged)], chart_list=[])
    assert "judged by today&#39;s rules" in page and "<p class='rule'><b>Rule.</b>" in page


def test_real_search_knob_is_checked_before_work():
    with pytest.raises(ValueError, match="real_search must be one of none, one, all"):
        claims.check("C09", device="cpu", scale="tiny", real_search="some")
    with pytest.raises(ValueError, match="real_search"):
        claims.check("C04", device="cpu", scale="tiny", real_search=2)


def test_notebooks_of_one_run_share_timings_through_the_ledger_folder(tmp_path, monkeypatch):
    """`python -m nogradlab run` gives every notebook kernel the same NOGRADLAB_LEDGER: a value
    measured in one kernel is read back, not measured again, in the next."""
    monkeypatch.setenv("NOGRADLAB_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.setattr(runcache, "RUN", runcache.RunCache())
    calls = []
    key = ("forward-test", "mlp", 8)
    runcache.attach_run_cache()  # what claims.check does in each kernel
    first = runcache.RUN.get(key, lambda: calls.append(1) or {"median": 0.25})
    monkeypatch.setattr(runcache, "RUN", runcache.RunCache())  # another kernel
    runcache.attach_run_cache()
    second = runcache.RUN.get(key, lambda: calls.append(1) or {"median": 9.0})
    assert first == second == {"median": 0.25} and calls == [1]
    assert len(list((tmp_path / "ledger.jsonl.timings").iterdir())) == 1
    monkeypatch.delenv("NOGRADLAB_LEDGER")
    monkeypatch.setattr(runcache, "RUN", runcache.RunCache())
    runcache.attach_run_cache()
    assert runcache.RUN.get(key, lambda: {"median": 9.0}) == {"median": 9.0}  # no run: no sharing


def test_gpu_conditions_are_set_up_as_a_practitioner_would():
    """Without a GPU, the CUDA plan itself: what a condition times, at which batches, how long."""
    import torch

    ctx = claims.Context(torch.device("cuda"), "full")
    rn = N._lever_settings(claims.Context(torch.device("cuda"), "full", 0, {"reference": True}), "resnet50", 32)
    assert {"no_grad+fp16", "no_grad+bf16", "no_grad+channels_last", "no_grad+fp16+channels_last",
            "no_grad+bf16+channels_last", "inference_mode"} <= set(rn)
    # a learner's GPU notebook: fp16, and channels_last stacked with it
    assert N._lever_settings(ctx, "resnet50", 32) == ["grad", "no_grad", "inference_mode", "no_grad+fp16",
                                                      "no_grad+fp16+channels_last"]
    assert "no_grad (fast path off)" in N._lever_settings(ctx, "transformer_base", 16)
    assert not any("channels_last" in s for s in N._lever_settings(ctx, "mlp", 256))
    # a learner's run: the default batch (overhead-bound on a large GPU); the reference run adds 4x it
    # (compute-bound), levers at both
    rn50 = N.workloads.get("resnet50", "full")
    assert N._speed_batches(ctx, rn50) == (32,) == N._lever_batches(ctx, rn50)
    ref = claims.Context(torch.device("cuda"), "full", 0, {"reference": True})
    assert N._speed_batches(ref, rn50) == (32, 128) == N._lever_batches(ref, rn50)
    assert N._knobs(ctx)["rounds"] == 10
    # on the CPU the protocol reports no CUDA state and changes nothing
    with timing.timing_state("cpu") as state:
        assert state == {}
    assert timing.gpu_state("cpu") == {}


def test_a_condition_stopped_before_it_decided_makes_the_verdict_provisional():
    """A timed condition whose rounds ran out (time budget, most rounds) before its intervals
    decided the rule says so in the summary; decided ones add nothing."""
    import torch

    from nogradlab.timing import Comparison, Timing

    def cond(stopped):
        t = Timing.from_samples([1.0, 1.0], 1, label="x", threads=1, device="cpu")
        cmp = Comparison(timings={"grad": t, "no_grad": t}, baseline="grad", speedup={"grad": 1.0, "no_grad": 1.0},
                         ci={"grad": (1.0, 1.0), "no_grad": (0.9, 1.3)}, rounds=10, device="cpu", threads=1,
                         stopped=stopped)
        return N.Condition("resnet50", "tiny", 1, "cpu", cmp, ["grad", "no_grad"], {}, {}, ())

    ctx = claims.Context(torch.device("cpu"), "tiny")
    assert N._samples_note(ctx, "C03", [cond("decided"), cond("rounds")]) == ""
    note = N._samples_note(ctx, "C03", [cond("decided"), cond("time budget")])
    assert "1 of 2 timed conditions stopped (time budget)" in note and "provisional" in note
    assert N._knobs(ctx)["rounds"] >= 10 >= N.RULES["C03"].min_samples  # no bootstrap over 5 rounds


def test_a_condition_another_claims_edge_kept_open_is_not_provisional_for_a_claim_it_decides():
    """The shared rounds stop when every rule reading a condition is decided; a claim whose own intervals
    are clear of its own band is not called provisional because another claim's edge kept them open."""
    import torch

    from nogradlab.timing import Comparison, Timing

    t = Timing.from_samples([1.0, 1.0], 1, label="x", threads=1, device="cpu")
    # no_grad 1.0x [0.98, 1.02]: clear of C03's band (speedups 1.25-1.67), straddling C17's edge 1
    cmp = Comparison(timings={"grad": t, "no_grad": t}, baseline="grad", speedup={"grad": 1.0, "no_grad": 1.0},
                     ci={"grad": (1.0, 1.0), "no_grad": (0.98, 1.02)}, rounds=40, device="cpu", threads=1,
                     stopped="time budget")
    cond = N.Condition("mlp", "tiny", 1, "cpu", cmp, ["grad", "no_grad"], {}, {}, ())
    ctx = claims.Context(torch.device("cpu"), "tiny")
    assert N._samples_note(ctx, "C03", [cond]) == ""
    assert "provisional" in N._samples_note(ctx, "X05", [cond])  # a claim without its own edges: as before


def test_every_condition_rule_edge_is_a_speedup():
    """The edges a forward condition's rounds must decide: 1 (faster or not), C03's band as speedups,
    and the workload's speed band of C20."""
    e = N._condition_edges("resnet50")
    assert 1.0 in e and pytest.approx(1.25) in e and pytest.approx(1 / 0.6) in e and pytest.approx(1.30) in e


def test_a_stored_c03_is_not_called_provisional_where_its_own_intervals_are_clear_of_its_band():
    """The CPU column's mlp@1 stopped at its most rounds (another claim's edge kept it open), but C03's
    interval there, 8-10 %, lies clear of 20-40 %: C03's summary calls nothing provisional."""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parents[2] / "results" / "cpu-amd-epyc-2-threads" /
                      "claims.json").read_text())
    values = next(e for e in doc["claims"] if e["id"] == "C03")["measurements"]
    assert "mlp@1" in values["provisional"]
    m = claims.Measurements(values, doc["meta"]["device"], "tiny", "t")
    j = claims._judge(claims.get("C03"), m)
    assert "provisional" not in j.summary, j.summary
    # a row that stopped early with its interval across an edge still says so
    values = dict(values, rows=[dict(r) for r in values["rows"]])
    values["rows"][0].update(time_saved=0.2, time_saved_ci=[0.18, 0.22], stopped="max rounds")
    j = claims._judge(claims.get("C03"), claims.Measurements(values, doc["meta"]["device"], "tiny", "t"))
    assert "1 of 6 timed conditions stopped (max rounds) before their intervals decided (resnet50@1): provisional" \
        in j.summary, j.summary  # of the 6 counted (the mlp's 2 are shown, not counted)
