"""A learner's GPU run, planned without a GPU. tools/plan.py computes each notebook's cost on
an H200-class GPU from the checks' own knobs (rounds, samples, time budgets, batches, cases), exact trial
counts of the estimate searches and per-call times measured on an H200; these tests hold the plan to a
learner's budgets and check that the plan follows the protocol (a change of knobs changes the plan)."""
from __future__ import annotations

import pytest
import torch

from nogradlab import claims
from tools import plan
from nogradlab.claims import measure as N


@pytest.fixture(scope="module")
def learner():
    return plan.cuda_plan()


def test_every_notebook_fits_a_learners_minute_on_an_h200(learner):
    print("\nplanned seconds per notebook on an NVIDIA H200 at scale='auto' (full):\n" + plan.table(learner))
    over = {nb: round(p["planned_s"], 1) for nb, p in learner.items() if p["planned_s"] > plan.NOTEBOOK_BUDGET_S}
    assert not over, f"planned over {plan.NOTEBOOK_BUDGET_S:.0f} s: {over}"
    total = sum(p["planned_s"] for p in learner.values())
    assert total <= plan.TOTAL_BUDGET_S, f"the collection is planned at {total:.0f} s"


def test_the_plan_covers_every_notebook_and_every_claim(learner):
    assert list(learner) == list(claims.NOTEBOOKS)
    text = " ".join(w for p in learner.values() for w, _ in p["items"])
    for cid in claims.ids():
        assert cid in text, f"{cid} has no item in the plan"


def test_the_reference_run_is_planned_longer_and_says_what_it_adds():
    ref = plan.cuda_plan(params={"reference": True})
    learner = plan.cuda_plan()
    print("\nplanned reference run (benchmarks/gpu_reference.py):\n" + plan.table(ref))
    assert sum(p["planned_s"] for p in ref.values()) > sum(p["planned_s"] for p in learner.values())
    words = " ".join(w for p in ref.values() for w, _ in p["items"])
    assert "every search real" in words and "torch.compile" in words and "@128" in words


def test_a_condition_is_planned_from_the_protocols_knobs():
    k = dict(rounds=10, min_run_time=0.1, warmup=3, max_rounds=400, time_budget=1.5)
    # a fast call: the rounds run until the time budget (as if undecided), plus one block
    fast = plan.planned_condition(k, cases=2, t_call=1e-4, build_s=0.0)
    per_round = 2 * (0.01 + 1e-4)  # a sample, and the untimed call before it
    warm = 2 * (3e-4 + 2 * 0.01)
    assert fast == pytest.approx(warm + 1.5 + 5 * per_round)
    # ... or until their most rounds, whichever comes first
    assert plan.planned_condition({**k, "max_rounds": 40}, 2, 1e-4, 0.0) == pytest.approx(warm + 40 * per_round)
    # a slow call (longer than a sample): timed alone, no untimed call before it; the minimum
    # rounds reach the budget
    slow = plan.planned_condition(k, cases=3, t_call=0.1, build_s=1.0)
    assert slow == pytest.approx(1.0 + 3 * (0.3 + 0.2) + 10 * 3 * 0.1)
    # more rounds or cases cost more; a larger budget never costs less
    assert plan.planned_condition({**k, "rounds": 20}, 3, 0.1, 1.0) > slow
    assert plan.planned_condition(k, 4, 0.1, 1.0) > slow
    assert plan.planned_condition({**k, "time_budget": 3.0}, 2, 1e-4, 0.0) > fast


def test_the_learners_gpu_protocol_is_what_the_plan_assumes():
    ctx = claims.Context(torch.device("cuda"), "full")
    k = N._knobs(ctx)
    assert k["rounds"] >= 10 and k["time_budget"] and k["max_rounds"] > k["rounds"]
    assert N._compile_reason(ctx) is not None  # no torch.compile in a learner's notebook
    assert N._compile_reason(claims.Context(torch.device("cuda"), "full", 0, {"reference": True})) is None


def test_forward_times_follow_the_reference_measurements():
    ref = plan.reference()
    (b0, t0), (b1, t1) = ref["forward_s"]["resnet50"]
    assert plan.forward_time(ref, "resnet50", b0) == pytest.approx(t0)
    assert plan.forward_time(ref, "resnet50", b1) == pytest.approx(t1)
    assert plan.forward_time(ref, "resnet50", 1) == pytest.approx(t0)  # launch-bound below
    assert plan.forward_time(ref, "resnet50", 4 * b1) > t1
