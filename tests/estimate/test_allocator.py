"""The caching allocator's model against its rules (hand-made traces, the expected numbers worked
out here from c10/cuda/CUDACachingAllocator.cpp) and against real allocator traces from an NVIDIA
H200 (tests/data/h200_allocator_traces.json.gz, recorded by benchmarks/gpu_alloc_probe.py), plus a
replay of a trace recorded on this machine's GPU when there is one."""
from __future__ import annotations

import gzip
import json
import os

import pytest
import torch

from nogradlab import allocator as A

KiB, MiB = 1024, 1024 * 1024
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(TESTS, "data", "h200_allocator_traces.json.gz")


def allocs(*sizes):
    """alloc events with keys 0, 1, 2... for ``sizes``."""
    return [("alloc", i, s) for i, s in enumerate(sizes)]


# ----------------------------------------------------------------------------------------------
# sizes


def test_round_size_and_segment_size():
    assert A.round_size(1) == 512 and A.round_size(512) == 512 and A.round_size(513) == 1024
    assert A.round_size(3 * MiB + 1) == 3 * MiB + 512
    # small pool: up to 1 MiB, in 2 MiB segments
    assert A.allocation_size(A.round_size(1)) == 2 * MiB
    assert A.allocation_size(1 * MiB) == 2 * MiB
    # large pool: under 10 MiB -> a 20 MiB segment; from 10 MiB: rounded up to 2 MiB
    assert A.allocation_size(1 * MiB + 512) == 20 * MiB
    assert A.allocation_size(10 * MiB - 512) == 20 * MiB
    assert A.allocation_size(10 * MiB) == 10 * MiB
    assert A.allocation_size(10 * MiB + 512) == 12 * MiB


def test_zero_bytes_take_no_block():
    r = A.simulate([("alloc", "a", 0), ("free", "a")])
    assert r.reserved_peak_bytes == 0 and r.allocated_peak_bytes == 0 and not r.oom


def test_allocated_bytes_are_block_sizes():
    # 1 byte is a 512-byte block in a 2 MiB small segment
    r = A.simulate([("alloc", "a", 1)])
    assert r.allocated_peak_bytes == 512 and r.reserved_peak_bytes == 2 * MiB
    assert [(s.pool, s.size, s.blocks) for s in r.segments] == [("small", 2 * MiB, [(512, True), (2 * MiB - 512, False)])]


# ----------------------------------------------------------------------------------------------
# pools, segments, splitting


def test_small_pool_packs_2mib_segments():
    # four 512 KiB blocks fill one 2 MiB segment exactly; the fifth needs another
    r4 = A.simulate(allocs(*[512 * KiB] * 4))
    r5 = A.simulate(allocs(*[512 * KiB] * 5))
    assert r4.reserved_peak_bytes == 2 * MiB and len(r4.segments) == 1
    assert r5.reserved_peak_bytes == 4 * MiB and len(r5.segments) == 2


def test_requests_under_10mib_share_a_20mib_segment():
    # 5 MiB each: the first gets a 20 MiB segment and splits it (15 MiB left > 1 MiB); the next
    # three are carved from what is left, the last one exactly
    r = A.simulate(allocs(*[5 * MiB] * 4))
    assert r.reserved_peak_bytes == 20 * MiB and r.allocated_peak_bytes == 20 * MiB
    assert [b for b in r.segments[0].blocks] == [(5 * MiB, True)] * 4
    r = A.simulate(allocs(*[5 * MiB] * 5))
    assert r.reserved_peak_bytes == 40 * MiB


def test_large_blocks_split_only_when_more_than_1mib_is_left():
    # a 12 MiB segment, freed; 11.5 MiB leaves 0.5 MiB: the whole block is handed out (12 MiB
    # allocated); 10.5 MiB leaves 1.5 MiB: split (10.5 MiB allocated)
    no_split = A.simulate([("alloc", "a", 12 * MiB), ("free", "a"), ("alloc", "b", 11 * MiB + 512 * KiB)])
    split = A.simulate([("alloc", "a", 12 * MiB), ("free", "a"), ("alloc", "b", 10 * MiB + 512 * KiB)])
    assert no_split.reserved_peak_bytes == split.reserved_peak_bytes == 12 * MiB
    assert no_split.allocated_bytes == 12 * MiB
    assert split.allocated_bytes == 10 * MiB + 512 * KiB
    # small pool: split whenever 512 bytes or more are left
    r = A.simulate([("alloc", "a", 1024), ("free", "a"), ("alloc", "b", 512)])
    assert r.allocated_bytes == 512 and r.reserved_bytes == 2 * MiB


def test_best_fit_takes_the_smallest_block_that_fits():
    # free cached segments of 12, 14 and 16 MiB; a 12.5 MiB request takes the 14 MiB one (split:
    # 1.5 MiB left), no new segment
    ev = allocs(12 * MiB, 14 * MiB, 16 * MiB) + [("free", 0), ("free", 1), ("free", 2),
                                                ("alloc", "x", 12 * MiB + 512 * KiB)]
    alloc = A.Allocator()
    live = {}
    for e in ev:
        if e[0] == "alloc":
            live[e[1]] = alloc.malloc(e[2])
        else:
            alloc.free(live.pop(e[1]))
    segs = {s.size: s.blocks for s in alloc.snapshot()}
    assert alloc.reserved == 42 * MiB
    assert segs[14 * MiB] == [(12 * MiB + 512 * KiB, True), (1536 * KiB, False)]
    assert segs[12 * MiB] == [(12 * MiB, False)] and segs[16 * MiB] == [(16 * MiB, False)]


def test_best_fit_breaks_ties_by_address():
    # two free 14 MiB segments: the request goes to the lower address (the later segment: new
    # segments are placed below older ones)
    alloc = A.Allocator()
    a, b = alloc.malloc(14 * MiB), alloc.malloc(14 * MiB)
    assert b.ptr < a.ptr
    alloc.free(a)
    alloc.free(b)
    c = alloc.malloc(13 * MiB)
    assert c.ptr == b.ptr


def test_freed_blocks_merge_with_free_neighbours():
    # two 5 MiB blocks of one 20 MiB segment, both freed: one 20 MiB free block again, which serves
    # an 18 MiB request without a new segment
    ev = allocs(5 * MiB, 5 * MiB) + [("free", 0), ("free", 1), ("alloc", "x", 18 * MiB)]
    r = A.simulate(ev)
    assert r.reserved_peak_bytes == 20 * MiB and r.num_device_alloc == 1


# ----------------------------------------------------------------------------------------------
# the cap: release the cache and retry before an out-of-memory error


def test_cached_segments_are_released_and_the_request_retried():
    # 20 MiB cached (free) and a 24 MiB request under a 30 MiB cap: 20 + 24 > 30, so the cache is
    # released (the free segment goes back to CUDA) and the retry fits: 24 MiB reserved
    ev = [("alloc", "a", 20 * MiB), ("free", "a"), ("alloc", "b", 24 * MiB)]
    r = A.simulate(ev, limit_bytes=30 * MiB)
    assert not r.oom and r.num_alloc_retries == 1 and r.num_device_free == 1
    assert r.reserved_bytes == 24 * MiB and r.reserved_peak_bytes == 24 * MiB
    # without a cap the cached segment stays
    assert A.simulate(ev).reserved_bytes == 44 * MiB


def test_out_of_memory_under_the_cap():
    r = A.simulate(allocs(12 * MiB, 12 * MiB, 12 * MiB), limit_bytes=30 * MiB)
    assert r.oom and r.oom_event == 2 and r.oom_request_bytes == 12 * MiB
    assert r.allocated_bytes == 24 * MiB and r.events == 2


def test_fragmentation_runs_out_of_memory_with_free_bytes_left():
    # four 5 MiB blocks in one 20 MiB segment; the 1st and 3rd freed: 10 MiB free, in two 5 MiB
    # holes that no 8 MiB request fits, and the segment cannot be released (two blocks are in
    # use). The 8 MiB request needs a new 20 MiB segment: 40 MiB. A 40 MiB cap holds it, 39 MiB not,
    # though only 18 MiB would be allocated.
    ev = allocs(*[5 * MiB] * 4) + [("free", 0), ("free", 2), ("alloc", "x", 8 * MiB)]
    assert not A.simulate(ev, limit_bytes=40 * MiB).oom
    r = A.simulate(ev, limit_bytes=39 * MiB)
    assert r.oom and r.allocated_bytes == 10 * MiB and r.reserved_bytes == 20 * MiB


def test_try_alloc_falls_back_to_smaller_sizes():
    # 20 MiB in use under a 42 MiB cap: a 24 MiB workspace cannot be had (44 MiB), its 10 MiB
    # fallback can (30 MiB); a failed try is not an out-of-memory error
    ev = [("alloc", "a", 20 * MiB), ("try_alloc", "w", (24 * MiB, 10 * MiB)), ("free", "w"),
          ("try_alloc", "v", (40 * MiB,)), ("free", "v"), ("alloc", "b", 512)]
    r = A.simulate(ev, limit_bytes=42 * MiB)
    assert not r.oom and r.failed_tries == 2 and r.reserved_peak_bytes == 30 * MiB


def test_max_split_size_keeps_oversize_blocks_whole():
    ms = 20 * MiB
    # a cached 60 MiB block is oversize: a 30 MiB request may only take it if it is less than
    # 20 MiB larger (60 >= 30 + 20: no), a 5 MiB request never: both get new segments
    ev = [("alloc", "a", 60 * MiB), ("free", "a"), ("alloc", "b", 30 * MiB), ("alloc", "c", 5 * MiB)]
    r = A.simulate(ev, max_split_size=ms)
    assert r.reserved_bytes == (60 + 30 + 20) * MiB
    # a 45 MiB request may take it, whole (oversize blocks are not split)
    r = A.simulate([("alloc", "a", 60 * MiB), ("free", "a"), ("alloc", "b", 45 * MiB)], max_split_size=ms)
    assert r.reserved_bytes == 60 * MiB and r.allocated_bytes == 60 * MiB
    # under a cap, cached oversize blocks are released first, one large enough if there is one
    r = A.simulate([("alloc", "a", 60 * MiB), ("free", "a"), ("alloc", "b", 30 * MiB)],
                   limit_bytes=80 * MiB, max_split_size=ms)
    assert not r.oom and r.reserved_bytes == 30 * MiB and r.num_alloc_retries == 0


# ----------------------------------------------------------------------------------------------
# expandable segments


def test_expandable_segments_grow_in_pages():
    # A and B, 12 MiB each, then both freed and C, 20 MiB. Natively A and B get a 12 MiB segment
    # each; their free blocks are too small for C, which gets a third: 44 MiB. Expandable: A maps a
    # 20 MiB page, B the free 8 MiB after A plus a second page; freed, A and B merge into one free
    # 40 MiB block that holds C: 40 MiB, one segment.
    ev = allocs(12 * MiB, 12 * MiB) + [("free", 0), ("free", 1), ("alloc", "c", 20 * MiB)]
    es = A.simulate(ev, "expandable_segments")
    nat = A.simulate(ev)
    assert nat.reserved_peak_bytes == 44 * MiB and nat.num_device_alloc == 3
    assert es.reserved_peak_bytes == 40 * MiB and es.num_device_alloc == 2
    assert len(es.segments) == 1 and es.segments[0].expandable and es.segments[0].size == 40 * MiB
    # small requests map 2 MiB pages of their own segment
    r = A.simulate(allocs(*[512 * KiB] * 5), "expandable_segments")
    assert r.reserved_peak_bytes == 4 * MiB and len(r.segments) == 1
    # empty_cache unmaps every free page
    r = A.simulate(ev + [("free", "c"), ("empty_cache",)], "expandable_segments")
    assert r.reserved_bytes == 0


def test_expandable_segments_check_the_cap_with_the_segment_size():
    # A, 12 MiB, maps a 20 MiB page. B, 12 MiB more, needs a second page (8 MiB are free after A),
    # but the cap is checked with B's segment size, 12 MiB: 20 + 12 > 30, and no whole page is
    # free to unmap, so a 30 MiB cap refuses B though 24 MiB are asked for. Natively: two 12 MiB
    # segments, 24 MiB.
    ev = allocs(12 * MiB, 12 * MiB)
    assert A.simulate(ev, "expandable_segments", limit_bytes=30 * MiB).oom
    assert not A.simulate(ev, limit_bytes=30 * MiB).oom


def test_expandable_segments_unmap_free_pages_before_giving_up():
    # A 30 MiB and B 5 MiB map two 20 MiB pages (A at 0-30, B at 30-35). A freed: page 0 is
    # wholly free, page 1 holds B. C, 45 MiB, under a 70 MiB cap: the cap is checked with C's
    # segment size (46 MiB): 40 + 46 > 70, so free pages are unmapped (page 0: 20 MiB left mapped)
    # and the retry passes (20 + 46 <= 70). C goes where 45 MiB of free and unmapped address space
    # lie together: from B's end (35 MiB) on, mapping two more pages: 60 MiB reserved.
    ev = [("alloc", "a", 30 * MiB), ("alloc", "b", 5 * MiB), ("free", "a"), ("alloc", "c", 45 * MiB)]
    r = A.simulate(ev, "expandable_segments", limit_bytes=70 * MiB)
    assert not r.oom and r.num_alloc_retries == 1
    assert r.reserved_bytes == 60 * MiB and r.allocated_bytes == 50 * MiB
    # a 65 MiB cap refuses it (20 + 46 > 65) though 20 + 40 MiB of pages would do
    assert A.simulate(ev, "expandable_segments", limit_bytes=65 * MiB).oom


# ----------------------------------------------------------------------------------------------
# bad input


def test_bad_events_and_arguments():
    with pytest.raises(ValueError, match="allowed: native, expandable_segments"):
        A.simulate([], mode="pooled")
    with pytest.raises(ValueError, match="unknown event"):
        A.simulate([("malloc", 1, 2)])
    with pytest.raises(ValueError, match="twice"):
        A.simulate([("alloc", 1, 2), ("alloc", 1, 2)])
    with pytest.raises(ValueError, match="unknown key"):
        A.simulate([("free", 1)])
    with pytest.raises(ValueError, match="non-negative integer"):
        A.simulate([("alloc", 1, -5)])
    with pytest.raises(ValueError, match="limit_bytes"):
        A.simulate([], limit_bytes=-1)


# ----------------------------------------------------------------------------------------------
# real traces


def replay(trace, marks, mode):
    """Replay a ``torch.cuda.memory._snapshot()`` device trace (``[action, addr, size]``) through
    the model: allocations and frees by address, the script's ``empty_cache`` and cap at its marks,
    each refused request (an ``oom`` entry) asked again of the model, which must refuse it too.
    Returns the model's segment events, refusals, per-step peaks and final segments."""
    alloc = A.Allocator(mode)
    alloc.log = []
    at = {m[0]: m for m in marks}
    live, refused_by_model, served_by_model, steps = {}, 0, 0, []
    for i, (act, addr, size) in enumerate(trace):
        m = at.get(i)
        if m is not None:
            if m[1] == "empty_cache":
                alloc.empty_cache()
            elif m[1] == "cap":
                alloc.limit = m[2]
            elif m[1] == "step":
                if steps:
                    steps[-1] += [alloc.allocated_peak, alloc.reserved_peak]
                alloc.reset_peak()
                steps.append([m[2]])
        if act == "alloc":
            live[addr] = alloc.malloc(size)  # raises if the model refuses what the GPU served
        elif act == "free_completed":
            alloc.free(live.pop(addr))
        elif act == "oom":
            try:
                alloc.free(alloc.malloc(size))
                served_by_model += 1
            except A.OutOfMemory:
                refused_by_model += 1
    if steps:
        steps[-1] += [alloc.allocated_peak, alloc.reserved_peak]
    return {"segments": [e for e in alloc.log if e[0] in ("segment_alloc", "map")],
            "refused": refused_by_model, "served": served_by_model, "steps": steps,
            "final": sorted((s.size, s.pool) for s in alloc.snapshot())}


def _check_replay(rec):
    mode = "expandable_segments" if "expandable_segments:True" in rec.get("allocator_settings", "") else "native"
    out = replay(rec["trace"], rec["marks"], mode)
    real_segments = [(("map" if a == "segment_map" else "segment_alloc"), s) for a, _, s in rec["trace"]
                     if a in ("segment_alloc", "segment_map")]
    assert out["segments"] == real_segments
    assert out["served"] == 0
    assert out["refused"] == sum(1 for e in rec["trace"] if e[0] == "oom")
    for (batch, alloc_peak, res_peak), o in zip(out["steps"], rec["outcomes"]):
        assert batch == o["batch"]
        assert alloc_peak == o["max_allocated"] and res_peak == o["max_reserved"]
    assert out["final"] == sorted((s["total_size"], s["segment_type"]) for s in rec["segments_end"])


def _stored():
    with gzip.open(DATA, "rt") as f:
        return [j["result"] for j in json.load(f) if j["ok"]]


@pytest.mark.parametrize("name", ["resnet50-train-32", "resnet50-eval-cap12", "unet-eval-cap12",
                                  "mlp-train-cap12", "resnet50-eval-cap12-es", "mlp-train-cap12-es"])
def test_replays_h200_traces_event_for_event(name):
    """Six traces recorded on an NVIDIA H200 (torch 2.11): model build, warm-up, empty_cache, a
    cap of 12 GiB, steps up to and past the largest batch that fits (native and
    expandable_segments). The model must make every segment the GPU made, refuse exactly the
    requests it refused (157 cuDNN workspace requests in the U-Net trace), reach the same
    allocated and reserved peak in every step and end with the same segments."""
    rec = {r["spec"]["name"]: r for r in _stored()}[name]
    _check_replay(rec)


def test_replay_notices_a_wrong_rule():
    """The replay check can fail: with the large pool's split threshold ignored (the small pool's
    rule used everywhere), the ResNet-50 training trace no longer matches."""
    rec = {r["spec"]["name"]: r for r in _stored()}["resnet50-train-32"]
    orig = A.Allocator._should_split
    A.Allocator._should_split = lambda self, block, size: block.size - size >= A.K_MIN_BLOCK
    try:
        with pytest.raises(AssertionError):
            _check_replay(rec)
    finally:
        A.Allocator._should_split = orig


_RECORD = r"""
import json, os, sys, torch
from torch.cuda import memory as cm
from nogradlab import memory, workloads

marks, outcomes = [], []
def mark(*what):
    marks.append([len(cm._snapshot()["device_traces"][0]), *what])

cm._record_memory_history(enabled="all", context=None, stacks="python", max_entries=1_000_000)
wl = workloads.get("resnet50", "tiny")
model = wl.build("cuda")
opt = memory._OPTIMIZERS["sgd"](model.parameters())
cap = int(os.environ["NOGRADLAB_TEST_CAP"])
for b in (1, 8, 64, 4096):
    if b == 64:
        mark("cap", cap)
        torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(0).total_memory)
    torch.cuda.reset_peak_memory_stats()
    mark("step", b)
    try:
        x, y = wl.make_input(b, "cuda"), wl.make_target(b, "cuda")
        memory.train_step(model, x, y, wl.loss, opt)
        del x, y
    except torch.cuda.OutOfMemoryError:
        pass
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    outcomes.append({"batch": b, "max_allocated": torch.cuda.max_memory_allocated(),
                     "max_reserved": torch.cuda.max_memory_reserved()})
    mark("empty_cache")
    torch.cuda.empty_cache()
snap = cm._snapshot()
trace = [[e["action"], e.get("addr", 0), e.get("size", 0)] for e in snap["device_traces"][0]]
segs = [{"total_size": s["total_size"], "segment_type": s["segment_type"]} for s in snap["segments"]]
json.dump({"trace": trace, "marks": marks, "outcomes": outcomes, "segments_end": segs,
           "allocator_settings": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}, sys.stdout)
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("conf", [
    pytest.param("", marks=pytest.mark.xfail(
        strict=False, reason="measured on an H200 (torch 2.11, 2026-11-30): the native replay of a live trace "
        "diverged at segment 96 (model 14 MiB, real 12 MiB) although the six stored traces replay exactly; "
        "not yet understood")),
    "expandable_segments:True"])
def test_replays_a_trace_recorded_here(conf):
    """Record this machine's allocator trace, in a fresh process: a small ResNet-50's build and
    training steps, the last under a 1 GiB cap at a batch that runs out of memory; then replay it
    with the same checks as the stored H200 traces."""
    import subprocess
    import sys

    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf, NOGRADLAB_TEST_CAP=str(1 << 30),
               PYTHONPATH=os.pathsep.join([os.path.dirname(TESTS),
                                           os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", _RECORD], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rec = json.loads(p.stdout)
    assert any(e[0] == "oom" for e in rec["trace"])  # the capped step did run out
    _check_replay(rec)
