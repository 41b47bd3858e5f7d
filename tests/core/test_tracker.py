"""Issue 42: one dispatch tracker, in core (nogradlab.core.tracker), counted with by memory.measure and
recorded with by the estimator: the walk over an operator's outputs is written once."""
import torch

from nogradlab.core import memory, tracker
from nogradlab.estimate import cudamodel


def test_the_estimators_recorder_and_the_live_tracker_are_the_one_core_tracker():
    for cls in (memory._LiveTracker, cudamodel.AllocationRecorder):
        assert issubclass(cls, tracker.StorageTracker)
        assert "__torch_dispatch__" not in vars(cls), cls  # the walk is the core tracker's


def test_the_recorder_records_a_new_storage_and_its_death_never_an_alias():
    rec = cudamodel.AllocationRecorder("cpu")
    x = torch.ones(4, 4)
    with rec:
        y = x * 2  # new: 64 bytes
        v = y.view(16)  # an alias of y: nothing new
        del y, v
    assert rec.events == [("alloc", 1, 64), ("free", 1)]


def test_the_live_tracker_counts_the_same_walk():
    x = torch.ones(256)

    def fn():
        y = x * 2
        return y.view(16, 16).sum()

    r = memory.measure(fn, "cpu", method="storage")
    assert r.peak_bytes == 1024 + 4  # y (1 KiB) once, its view no new storage, and the sum's float
