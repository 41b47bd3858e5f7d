"""The judges of the semantic claims, fed hand-made measurements (cheap, exact, no torch work).

Each test builds the smallest measurements its judge reads, checks the verdict, then flips the
decisive measurement and checks that the verdict flips with it. The last test re-judges the stored
reference columns (results/*/claims.json) with today's judges.
"""
import copy
import json
from pathlib import Path

import pytest

from nogradlab import claims

CPU = {"type": "cpu", "device": "cpu", "name": "x", "torch": "t"}
GPU = {"type": "cuda", "device": "cuda:0", "name": "x", "torch": "t"}
IDS = ["C01", "C02", "C05", "C07", "C10", "C11", "C12", "X03", "X04", "C14", "C15", "C16", "C22", "C24",
       "C28", "C26", "X02", "C27", "C29", "C30", "X01"]
RESULTS = Path(__file__).resolve().parents[2] / "results"


def judge(cid, values, device=CPU):
    c = claims.get(cid)
    return c.judge(claims.Measurements(values, device, "tiny", "t"), c.rule)


def verdict(cid, values, device=CPU):
    j = judge(cid, values, device)
    assert j.verdict in claims.VERDICTS and j.summary
    return j.verdict


def _t(requires_grad, grad_fn=None, is_leaf=None):
    return {"requires_grad": requires_grad, "grad_fn": grad_fn,
            "is_leaf": (grad_fn is None) if is_leaf is None else is_leaf}


def test_every_claim_here_has_a_judge_and_basis_here():
    for cid in IDS:
        c = claims.get(cid)
        assert c.judge is not None and c.measure is not None and c.basis == "here", cid


def test_c01():
    m = {"this_thread": {"grad_enabled": False, "op": _t(False), "module": _t(False), "function_call": _t(False)},
         "thread_started_inside_block": {"grad_enabled": True, "op": _t(True, "MulBackward0")}}
    assert verdict("C01", m) == "depends"
    m2 = copy.deepcopy(m)
    m2["thread_started_inside_block"] = {"grad_enabled": False, "op": _t(False)}
    assert verdict("C01", m2) == "holds"
    m3 = copy.deepcopy(m)
    m3["this_thread"]["module"] = _t(True, "AddmmBackward0")
    assert verdict("C01", m3) == "does not hold"


def test_c02():
    m = {"workload": "mlp", "runs": {"grad": {**_t(True, "AddmmBackward0"), "saved_tensor_hook_calls": 4},
                                     "no_grad": {**_t(False), "saved_tensor_hook_calls": 0}}}
    assert verdict("C02", m) == "holds"
    m["runs"]["no_grad"]["saved_tensor_hook_calls"] = 1
    assert verdict("C02", m) == "does not hold"


def test_c05():
    m = {"cases": [{"case": "a", "as_claimed": True}, {"case": "b", "as_claimed": True}]}
    assert verdict("C05", m) == "holds"
    m["cases"][1]["as_claimed"] = False
    j = judge("C05", m)
    assert j.verdict == "does not hold" and "b" in j.summary


def test_c07():
    rep = {"grad": {"saved_bytes": 1024, "saved_tensors": 2}, "no_grad": {"saved_bytes": 0, "saved_tensors": 0}}
    m = {"workload": "mlp", "batch": 16, "max_abs_output_diff": 0.0, "outputs_allclose": True, "reports": rep}
    assert verdict("C07", m) == "holds"
    assert verdict("C07", {**m, "outputs_allclose": False, "max_abs_output_diff": 1.0}) == "does not hold"
    m2 = copy.deepcopy(m)
    m2["reports"]["no_grad"]["saved_bytes"] = 8
    assert verdict("C07", m2) == "does not hold"
    old = {k: v for k, v in m.items() if k != "outputs_allclose"}  # a column made before the key
    assert verdict("C07", old) == "holds"


def test_c10_rests_on_the_cited_release_notes_not_on_todays_torch():
    from nogradlab.claims.nb02_inside_the_engine import MIGRATION_GUIDE, RELEASE_NOTES

    v = {"type": "Tensor", "volatile_attribute": None, "warnings": ["UserWarning: volatile was removed"],
         "x_requiring_grad_times_volatile_v": _t(True, "MulBackward0")}
    m = {"torch": "t", "torch.no_grad_exists": True, "no_grad_stops_tracking": True, "Variable(volatile=True)": v,
         "sources": {"guide": MIGRATION_GUIDE, "notes": RELEASE_NOTES}}
    j = judge("C10", m)
    assert j.verdict == "holds" and MIGRATION_GUIDE in j.summary and "consistent with the sources" in j.summary
    m2 = copy.deepcopy(m)
    m2["Variable(volatile=True)"]["x_requiring_grad_times_volatile_v"] = _t(False)  # a later torch changed it
    j2 = judge("C10", m2)
    assert j2.verdict == "holds" and "dates nothing" in j2.summary  # today's torch cannot date 2018
    m3 = copy.deepcopy(m)
    m3["sources"] = {"guide": MIGRATION_GUIDE}  # without the citation there is no evidence
    with pytest.raises(claims.NeedsRemeasuring):
        judge("C10", m3)


def test_c11_is_not_testable_whatever_the_scan():
    m = {"installed_source_scan": {"torch": {"files": 10, "mentioning_no_grad": 9}},
         "mechanism": {"nn.init.normal_ on a leaf with grad on": {"as_expected": True},
                       "clip_grad_norm_ rescales .grad without a graph": {"grad_requires_grad": False}}}
    j = judge("C11", m)
    assert j.verdict == "not testable" and "9 of 10" in j.summary
    assert "Proxy, not deciding" in j.summary and "inside the article's more than 60 %" in j.summary  # 90 %
    with pytest.raises(claims.NeedsRemeasuring):
        judge("C11", {"mechanism": m["mechanism"]})


def _timing(median):
    return {"median": median}


def test_c12_threshold_from_rule():
    rule = claims.get("C12").rule
    m = {"workload": "mlp", "batch": 16, "nested_result_bitwise_equal": True, "grad_off_after_inner_exit": True,
         "enter_exit": _timing(1e-6), "nested_enter_exit": _timing(1e-6), "forward": _timing(1e-4),
         "cost_ratio_nested_vs_forward": rule.threshold / 2}
    assert verdict("C12", m) == "does not hold"
    assert verdict("C12", {**m, "cost_ratio_nested_vs_forward": rule.threshold * 2}) == "depends"
    assert verdict("C12", {**m, "nested_result_bitwise_equal": False}) == "holds"  # harmful nesting
    stricter = type(rule)(rule.text, threshold=rule.threshold / 10)
    c = claims.get("C12")
    assert c.judge(claims.Measurements(m, CPU, "tiny", "t"), stricter).verdict == "depends"


def test_x03():
    m = {"workload": "mlp", "batch": 16, "series": {
        "tensor": {"iterations": [1, 2, 4], "retained_bytes": [10, 20, 40], "bytes_per_iteration": 10.0},
        "item()": {"iterations": [1, 2, 4], "retained_bytes": [0, 0, 0], "bytes_per_iteration": 0.0},
        "tensor, backward each step": {"iterations": [1, 2, 4], "retained_bytes": [5, 5, 5],
                                       "bytes_per_iteration": 0.0}}}
    assert verdict("X03", m) == "holds"
    m2 = copy.deepcopy(m)
    m2["series"]["tensor"].update(retained_bytes=[10, 10, 10], bytes_per_iteration=0.0)
    assert verdict("X03", m2) == "does not hold"


def test_x04():
    expected = [False, True, False, True, False, True]
    m = {"set_grad_enabled(flag) -> result requires_grad": {"True": True, "False": False},
         "nesting": [{"step": str(i), "grad_enabled": g, "result_requires_grad": g} for i, g in enumerate(expected)]}
    assert verdict("X04", m) == "holds"
    m2 = copy.deepcopy(m)
    m2["nesting"][3]["grad_enabled"] = False  # an exit that did not restore
    assert verdict("X04", m2) == "does not hold"


def _cell(mm, gm, diff_eval, saved, requires_grad=None):
    return {"model_mode": mm, "grad_mode": gm, "requires_grad": (gm == "grad") if requires_grad is None else requires_grad,
            "saved_bytes": saved, "max_abs_diff_vs_eval_grad": diff_eval,
            "max_abs_diff_vs_same_model_mode_grad": 0.0, "bn_running_stats_updated": mm == "train"}


def test_c14():
    grid = [_cell("train", "grad", 1.0, 100), _cell("train", "no_grad", 1.0, 0),
            _cell("eval", "grad", 0.0, 100), _cell("eval", "no_grad", 0.0, 0)]
    assert verdict("C14", {"grid": grid}) == "holds"
    g2 = copy.deepcopy(grid)
    g2[1]["max_abs_diff_vs_same_model_mode_grad"] = 0.5  # no_grad changed train-mode outputs
    assert verdict("C14", {"grid": g2}) == "does not hold"


def test_c15_tolerance_from_rule():
    rows = [{"workload": "resnet50", "bitwise_equal": True, "max_abs_diff": 0.0, "max_abs_output": 50.0,
             "same_argmax": True},
            {"workload": "transformer_base", "bitwise_equal": False, "max_abs_diff": 9.5e-7, "max_abs_output": 4.0}]
    m = {"device": "cpu", "scale": "tiny", "models": rows}
    j = judge("C15", m)
    assert j.verdict == "holds" and [c["reading"] for c in j.conditions] == ["agrees", "agrees"]
    m2 = copy.deepcopy(m)
    m2["models"][1]["max_abs_diff"] = 1e-3  # beyond 1e-5 x 4
    assert verdict("C15", m2) == "does not hold"
    m3 = copy.deepcopy(m)
    m3["models"][0]["same_argmax"] = False
    assert verdict("C15", m3) == "does not hold"


def test_c16_is_not_testable():
    m = {"runs": 20, "std": {"train": 0.01, "eval": 0.0, "train+no_grad": 0.01}, "spread_reduction": 1.0,
         "train_no_grad_identical_to_train": True}
    j = judge("C16", m)
    assert j.verdict == "not testable" and "identical" in j.summary
    assert "different" in judge("C16", {**m, "train_no_grad_identical_to_train": False}).summary


def test_c22():
    m = {"function": {"grad_at_start": False, "grad_in_called_helper": False, "helper_result_requires_grad": False,
                      "grad_at_end": False, "result_requires_grad": False},
         "grad_after_call": True, "grad_after_exception": True,
         "generator": {"grad_inside_at_each_resume": [False, False], "caller_grad_between_resumes": [True, True]},
         "bare_decorator": {"works": True, "grad_inside": False, "result_requires_grad": False}}
    assert verdict("C22", m) == "holds"
    assert verdict("C22", {**m, "bare_decorator": {"works": False, "error": "TypeError"}}) == "depends"
    assert verdict("C22", {**m, "grad_after_exception": False}) == "does not hold"


def _c24(on_gpu, old_dtype, modern_ok=True):
    runs = [{"device_type": "cpu", "output_dtype": "torch.bfloat16", "requires_grad": False, "ok": modern_ok}]
    return {"torch.cuda.amp.autocast()": {"constructed": True, "error": None, "warnings": [], "deprecated": True,
                                          "run_inside_no_grad": {"device": "cuda:0" if on_gpu else "cpu",
                                                                 "dtype": old_dtype}},
            "torch.autocast": runs, "cuda_tested": on_gpu, "cuda_available": on_gpu}


def test_c24():
    assert verdict("C24", _c24(False, "torch.float32")) == "holds"  # the CUDA spelling is untestable here
    assert verdict("C24", _c24(True, "torch.float16"), GPU) == "holds"
    assert verdict("C24", _c24(True, "torch.float32"), GPU) == "depends"  # the article's spelling did nothing
    assert verdict("C24", _c24(False, "torch.float32", modern_ok=False)) == "does not hold"


def test_c28():
    rev = {"cache_enabled": True, "weight_casts": 1, "gradient_intact": True}
    m = {"device": "cpu", "autocast_dtype": "torch.bfloat16", "torch": "t",
         "outer_no_grad_inner_autocast": {"output_dtype": "torch.bfloat16", "requires_grad": False},
         "reverse_nesting": {"autocast{ no_grad forward; grad forward }": dict(rev),
                             "autocast{ inference_mode forward; grad forward }": dict(rev)}}
    assert verdict("C28", m) == "holds"
    m2 = copy.deepcopy(m)
    m2["reverse_nesting"]["autocast{ no_grad forward; grad forward }"]["gradient_intact"] = False
    assert verdict("C28", m2) == "depends"
    m3 = copy.deepcopy(m)
    m3["outer_no_grad_inner_autocast"]["output_dtype"] = "torch.float32"
    assert verdict("C28", m3) == "does not hold"


def test_c26():
    names = ("handler wrapped in no_grad, model called inline",
             "handler wrapped in no_grad, model call submitted to a thread pool",
             "handler wrapped in no_grad, worker enters no_grad itself")
    m = {"workload": "mlp", "handlers": {n: {"requires_grad": rg} for n, rg in zip(names, (False, True, False))}}
    assert verdict("C26", m) == "depends"
    m2 = copy.deepcopy(m)
    m2["handlers"][names[1]]["requires_grad"] = False
    assert verdict("C26", m2) == "holds"
    m3 = copy.deepcopy(m)
    m3["handlers"][names[0]]["requires_grad"] = True
    assert verdict("C26", m3) == "does not hold"


def test_x02():
    m = {"main_thread_inside_no_grad": False,
         "thread_started_inside_no_grad": {"grad_enabled": True, "op": _t(True, "MulBackward0")},
         "thread_that_set_grad_off": False, "main_thread_after_that": True}
    assert verdict("X02", m) == "holds"
    assert verdict("X02", {**m, "main_thread_after_that": False}) == "does not hold"


def test_c27():
    m = {"loss_value": {"no_penalty": 1.0, "penalty_with_grad": 1.1, "penalty_under_no_grad": 1.1},
         "grad_change_vs_no_penalty": {"penalty_with_grad": 0.05, "penalty_under_no_grad": 0.0},
         "autograd.grad(penalty made under no_grad, weight)": "RuntimeError: does not require grad",
         "autograd.grad(output made under no_grad, input) (gradient penalty / adversarial)": "RuntimeError: x"}
    assert verdict("C27", m) == "holds"
    m2 = copy.deepcopy(m)
    m2["grad_change_vs_no_penalty"]["penalty_under_no_grad"] = 0.05
    assert verdict("C27", m2) == "does not hold"


def test_c29():
    row = {"parameter_bytes": 100, "optimizer_state_bytes": 100, "params_with_grad_after_forward": 0,
           "optimizer_state_unchanged": True, "parameters_unchanged": True}
    m = {"workload": "mlp", "modes": {"grad": {**row, "saved_for_backward_bytes": 64},
                                      "no_grad": {**row, "saved_for_backward_bytes": 0}},
         "estimate_saved_bytes": {"grad": 64, "no_grad": 0}}
    assert verdict("C29", m) == "holds"
    m2 = copy.deepcopy(m)
    m2["modes"]["no_grad"]["saved_for_backward_bytes"] = 64
    assert verdict("C29", m2) == "does not hold"


def test_c30():
    m = {"factory_leaf": _t(True, None, True), "op_on_it_inside_block": _t(False),
         "grad_after_backward_outside": [2.0, 2.0, 2.0]}
    assert verdict("C30", m) == "holds"
    assert verdict("C30", {**m, "grad_after_backward_outside": None}) == "does not hold"


def test_x01_timing_shown_never_judged():
    m = {"no_grad_tensor": {"is_inference": False, "version_after_one_inplace": 1, "view_is_tracked": True},
         "inference_tensor": {"is_inference": True, "version_counter": "RuntimeError: no version counter",
                              "view_is_tracked": False},
         "restriction": {"saved_for_backward (w * inference_tensor)": "RuntimeError: cannot be saved"},
         "timing": {"workload": "mlp", "batch": 8, "inference_mode_vs_no_grad": [1.5, 1.4, 1.6], "cases": {}}}
    j = judge("X01", m)
    assert j.verdict == "holds" and "1.500\u00d7" in j.summary and "not part of the verdict" in j.summary
    slower = copy.deepcopy(m)
    slower["timing"]["inference_mode_vs_no_grad"] = [0.5, 0.4, 0.6]
    assert verdict("X01", slower) == "holds"  # the timing never moves the verdict
    no_timing = {k: v for k, v in m.items() if k != "timing"}
    assert verdict("X01", no_timing) == "holds"
    m2 = copy.deepcopy(m)
    m2["restriction"]["saved_for_backward (w * inference_tensor)"] = None  # saving worked
    assert verdict("X01", m2) == "does not hold"


@pytest.mark.parametrize("column", ["cuda-nvidia-h200", "cpu-amd-epyc-2-threads"])
def test_stored_columns_rejudged(column):
    doc = json.loads((RESULTS / column / "claims.json").read_text())
    seen = set()
    for e in doc["claims"]:
        if e["id"] not in IDS:
            continue
        j = claims.judge_entry(e, doc.get("meta"))
        assert j["verdict"] in claims.VERDICTS, (e["id"], j["verdict"])
        assert j["verdict"] != "needs re-measuring", (e["id"], j["summary"])  # today's judges read them
        assert "evidence" not in j and j["measurements"]
        seen.add(e["id"])
    assert seen == set(IDS)
