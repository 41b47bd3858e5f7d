"""Estimates copy a built-in model's structure after its first build (memory._Templates): the trace,
and every number from it, must be the one a fresh build gives."""
from __future__ import annotations

import dataclasses

import pytest

from nogradlab import memory, workloads

pytestmark = pytest.mark.unit

FIELDS = ("peak_bytes", "total_peak_bytes", "saved_bytes", "baseline_bytes", "allocated_bytes",
          "reserved_bytes")


def _numbers(r):
    return {f: getattr(r, f, None) for f in FIELDS}, list(getattr(r, "events", None) or [])


@pytest.mark.integration
@pytest.mark.parametrize("name, scale, batch, kw", [
    ("resnet50", "full", 3, dict(step="train")),
    ("resnet50", "full", 5, dict(mode="eval+no_grad")),
    ("transformer_base", "full", 2, dict(step="train")),
    ("transformer_base", "full", 4, dict(mode="eval+grad")),
    ("unet", "tiny", 2, dict(mode="no_grad")),
])
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_a_copied_model_gives_the_trace_of_a_fresh_build(name, scale, batch, kw, device, monkeypatch):
    def est():
        return memory.estimate(name, batch, device, scale=scale, **kw)

    learn = memory._Templates.learn
    memory._TEMPLATES.clear()
    monkeypatch.setattr(memory._Templates, "learn", lambda *a, **k: None)
    est()  # a process's first step allocates a few things once (lazy initialisation)
    fresh = est()  # built for real
    assert not memory._TEMPLATES._store
    monkeypatch.setattr(memory._Templates, "learn", learn)
    assert _numbers(est()) == _numbers(fresh)  # built for real, and learned
    assert memory._TEMPLATES._store
    copied = est()  # from the template
    assert _numbers(copied) == _numbers(fresh)


def test_replaced_sizes_are_another_model():
    """A workload whose params are replaced under the same name gets its own template."""
    memory._TEMPLATES.clear()
    wl = workloads.get("transformer_base", "tiny")
    small = dataclasses.replace(wl, params={**wl.params, "d_model": 32, "nhead": 2, "dim_feedforward": 64},
                                input_shape=(wl.input_shape[0], 32))
    a = memory.estimate(wl, 2, "cuda", mode="grad")
    b = memory.estimate(small, 2, "cuda", mode="grad")
    assert b.baseline_bytes < a.baseline_bytes
    assert memory.estimate(small, 2, "cuda", mode="grad").baseline_bytes == b.baseline_bytes
    assert memory.estimate(wl, 2, "cuda", mode="grad").baseline_bytes == a.baseline_bytes


def test_your_own_model_is_built_once_on_meta_and_let_go_with_it():
    import gc

    import torch.nn as nn

    from nogradlab import ownmodel

    memory._TEMPLATES.clear()
    calls = []

    def build():
        calls.append(1)
        return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))

    own = ownmodel.Model(build, (8,))
    first = memory.estimate(own, 2, "cuda", mode="grad")
    again = memory.estimate(own, 2, "cuda", mode="grad")
    assert _numbers(again) == _numbers(first) and len(calls) == 1  # built once, on meta
    assert not memory._TEMPLATES._store and len(memory._TEMPLATES._own) == 1
    del own
    gc.collect()
    assert len(memory._TEMPLATES._own) == 0
