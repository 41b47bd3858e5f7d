"""The verdicts the lessons teach, on this torch (CPU, tiny scale).

The notebooks show each check's result and never assert it: a learner on another PyTorch release
must see the verdict that release gives, not a bare AssertionError. What the notebooks used to
assert lives here instead, so a change in the package (or in torch) that turns a lesson's teaching
upside down still fails a test. ``EXPECTED`` lists, for each claim whose notebook tells the learner
what to expect, the verdicts that notebook's prose is written for; claims whose notebooks take any
verdict (timings, estimates) are not listed. tests/claims/test_claims_semantics.py tests the evidence
behind these checks in detail; this file is the lessons' contract.
"""
from __future__ import annotations

import pytest
import torch

from nogradlab import claims, memory, workloads

# claim checks run end to end (seconds per test): not in the quick unit pass
pytestmark = pytest.mark.integration

# claim id -> (verdicts the lesson is written for, extra keyword arguments of the check)
EXPECTED = {
    # 06: the decorator covers the whole call (C22); autocast with no_grad, both spellings (C24);
    # the autocast weight cache does not leak a no_grad copy into a training forward (C28)
    "C22": ({"holds"}, {}),
    "C24": ({"holds", "depends"}, {}),
    # (C28: "holds" with the fix of pytorch/pytorch#165068, "depends" on a release before it; 06 shows
    # either, and test_c28_verdict_follows_this_release below ties the verdict to the release's behaviour)
    "C28": ({"holds", "depends"}, {}),
    # 07: the survey figures cannot be tested (C25); "highest level" depends on where the model runs
    # (C26); grad mode belongs to a thread (X02)
    "C25": ({"not testable"}, {"requests": 3}),
    "C26": ({"holds", "depends"}, {}),
    "X02": ({"holds"}, {}),
    # 08: the FAQ's three statements
    "C27": ({"holds"}, {}),
    "C29": ({"holds"}, {}),
    "C30": ({"holds"}, {}),
    # 09: inference_mode skips version counters and view tracking, and its tensors cannot be saved
    "X01": ({"holds"}, {}),
}


def test_expected_claims_are_registered_in_their_notebooks():
    for cid in EXPECTED:
        assert claims.get(cid).notebook in claims.NOTEBOOKS, cid


@pytest.mark.parametrize("cid", list(EXPECTED))
def test_lesson_verdict(cid):
    verdicts, kwargs = EXPECTED[cid]
    r = claims.check(cid, device="cpu", scale="tiny", **kwargs)
    assert r.verdict in verdicts, f"{cid}: {r.verdict} ({r.summary}); notebook " \
        f"{claims.get(cid).notebook} is written for {sorted(verdicts)}"


def test_decorated_function_saves_nothing_for_backward_in_any_mode():
    """06's %%modes cell: a function under @torch.no_grad() saves nothing for backward, whether its
    caller runs with grad on or under no_grad."""
    wl = workloads.get("mlp", "tiny")
    model = wl.build("cpu").eval()
    x = wl.make_input(wl.default_batch, "cpu")

    @torch.no_grad()
    def predict_labels(batch):
        return model(batch).argmax(dim=1)

    reports = memory.measure_modes(lambda: predict_labels(x), ("grad", "no_grad"), "cpu")
    assert {m: r.saved_bytes for m, r in reports.items()} == {"grad": 0, "no_grad": 0}
    # the probe itself does see what an undecorated call saves
    saved = memory.measure_modes(lambda: model(x), ("grad",), "cpu")["grad"].saved_bytes
    assert saved > 0


def _autocast_cache_leaks_a_no_grad_copy() -> bool:
    """pytorch/pytorch#112583 on this release: a no_grad forward inside an autocast region caches a
    weight copy without history, and the next forward with grad in the same region gets no graph."""
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(2, 8)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            lin(x)
        out = lin(x)
    return not out.requires_grad


def test_c28_verdict_follows_this_release():
    """06's C28 lesson: "holds" on a release with the fix (torch 2.14.1), "depends" on one without it
    (torch 2.9.1), where its "see it" cell shows backward() raising instead of crashing."""
    r = claims.check("C28", device="cpu", scale="tiny")
    assert r.verdict == ("depends" if _autocast_cache_leaks_a_no_grad_copy() else "holds"), r.summary
