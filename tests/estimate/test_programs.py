"""The allocation program (issue 38): one trace serves every batch, programs kept between processes.

* the program's trace at a batch is the trace recorded there, event for event;
* every largest batch equals the search before programs (tests/data/largest_batches_reference.json: the 26
  H200 cases, the four workloads in four modes under the slider's budgets, two torchvision models);
* the cache folder: a second process reads the program instead of tracing; a corrupt, tampered, foreign or
  other-release entry is ignored and rebuilt; a file that is not ours is never overwritten.
"""
from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from nogradlab.estimate import batch, cudamodel, programs
from test_estimate_robust import _new_traces as _traces

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")
FAST = None  # the fast path's switch as largest_batch keys it


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(programs.ENV, str(tmp_path))
    batch._forget_estimates()
    yield tmp_path / "programs"
    monkeypatch.undo()  # the counting _estimate first
    batch._forget_estimates()


@pytest.mark.parametrize("workload", ["resnet50", "unet", "transformer_base", "mlp"])
@pytest.mark.parametrize("mode", ["train", "grad", "eval+no_grad", "inference_mode"])
def test_the_programs_trace_is_the_recorded_trace(workload, mode, cache):
    fast = batch._fastpath_enabled()
    prog = batch._program(workload, "tiny", mode, "cuda:0", fast)
    assert isinstance(prog, batch.Program), prog
    for n in (*prog.own, prog.lowest, 3, 50, 333):
        if not prog.serves(n):
            continue
        traced = batch._trace(workload, "tiny", mode, n, "cuda:0", "native", 0, fast)
        assert prog.recorded(n) == traced[4]
        assert prog.events(n) == traced[0] == cudamodel.expand_workspaces(traced[4])
        assert prog.events(n, held=12345)[0] == ("alloc", ("held",), 12345)


def test_a_step_that_is_no_line_in_the_batch_has_no_program(cache):
    from test_estimate_robust import _MoreOps

    from nogradlab.core import ownmodel

    why = batch._program(ownmodel.Model(_MoreOps, (64,)), "", "eval+no_grad", "cuda:0", None)
    assert isinstance(why, str) and "not the same operations" in why


def test_a_key_with_the_batch_inside_is_affine_in_it():
    key = batch._affine_key("('sum', ('T', (16, 2304), 'float32'), (0, 1), True)", 16,
                            "('sum', ('T', (64, 2304), 'float32'), (0, 1), True)", 64)
    assert key(32) == "('sum', ('T', (32, 2304), 'float32'), (0, 1), True)"
    assert batch._affine_key("('a', (16, 3))", 16, "('a', (64, 4))", 64) is None  # 3 -> 4: no whole slope
    assert batch._affine_key("('a', (16,))", 16, "('b', (64,))", 64) is None


@pytest.mark.integration
def test_every_largest_batch_equals_the_search_before_programs(cache):
    """130 searches, against the answers of the commit before programs (tests/data/make_largest_batches.py)."""
    sys.path.insert(0, DATA)
    from make_largest_batches import model_of

    with open(os.path.join(DATA, "largest_batches_reference.json")) as f:
        ref = json.load(f)
    assert len(ref["cases"]) == 130
    wrong, by_program = [], 0
    for c in ref["cases"]:
        wl = model_of(c["workload"])
        kw = dict(inputs=(3, 224, 224)) if not isinstance(wl, str) else dict(scale="full")
        r = batch.largest_batch(wl, c["mode"], c["budget_bytes"], "cuda", method="estimate",
                                allocator=c["allocator"], **kw)
        by_program += any("allocation program" in n for n in r.notes)
        if r.batch != c["batch"]:
            wrong.append((c, r.batch))
    assert wrong == []
    assert by_program == len(ref["cases"])  # every one of them by replays


@pytest.mark.integration
def test_a_second_process_reads_the_program_instead_of_tracing(cache, monkeypatch):
    first = batch.largest_batch("resnet50", "train", 2 << 30, "cuda", scale="tiny")
    files = sorted(p.name for p in cache.iterdir())
    assert len(files) == 1 and files[0].startswith("resnet50-train-")
    batch._forget_estimates()  # a new process: nothing in memory
    seen = _traces(monkeypatch)
    again = batch.largest_batch("resnet50", "train", 2 << 30, "cuda", scale="tiny")
    assert again.batch == first.batch and again.trials == first.trials
    assert seen == []  # batch 1 too: off the line, its own trace is kept with the program
    assert any("kept from an earlier run" in n for n in again.notes)


def _entry(cache):
    (path,) = list(cache.iterdir())
    return path


@pytest.mark.integration
@pytest.mark.parametrize("damage", ["cut short", "not json", "a number changed", "another format",
                                    "another key", "a line no more"])
def test_a_damaged_entry_is_ignored_and_made_again(cache, monkeypatch, damage):
    fast = batch._fastpath_enabled()
    prog = batch._program("unet", "tiny", "eval+no_grad", "cuda:0", fast)
    path = _entry(cache)
    text = path.read_text()
    entry = json.loads(text)
    if damage == "cut short":
        path.write_text(text[: len(text) // 2])
    elif damage == "not json":
        path.write_bytes(b"\x00\xff" * 10)
    elif damage == "a number changed":  # the checksum no longer holds
        ev = entry["payload"]["ev_b"]
        i = next(i for i, e in enumerate(ev) if e[0] == "alloc")
        ev[i][2] += 512
        path.write_text(json.dumps(entry))
    elif damage == "another format":
        entry["format"] = 0
        path.write_text(json.dumps(entry))
    elif damage == "another key":
        entry["key"]["torch"] = "1.0.0"
        path.write_text(json.dumps(entry))
    else:  # a payload whose checksum holds but whose traces are not one line: not a program
        entry["payload"]["ev_b"] = entry["payload"]["ev_b"][:-1]
        entry["sha256"] = programs._checksum(entry["payload"])
        path.write_text(json.dumps(entry))
    kept = programs.load("unet", "tiny", "eval+no_grad", "cuda:0", fast)
    if damage == "a line no more":
        with pytest.raises(ValueError, match="not one line"):
            batch.Program(**kept)
    else:
        assert kept is None
    batch._forget_estimates()
    seen = _traces(monkeypatch)
    again = batch._program("unet", "tiny", "eval+no_grad", "cuda:0", fast)
    assert isinstance(again, batch.Program) and again.source == "traced" and len(seen) >= 3
    assert again.events(77) == prog.events(77)
    if damage == "not json":  # nothing says it is ours: left as it is, and not read
        assert path.read_bytes() == b"\x00\xff" * 10
        assert programs.load("unet", "tiny", "eval+no_grad", "cuda:0", fast) is None
    else:
        assert batch.Program(**programs.load("unet", "tiny", "eval+no_grad", "cuda:0", fast))  # written again, whole


def test_a_torch_upgrade_makes_a_new_entry_and_leaves_the_old(cache, monkeypatch):
    fast = batch._fastpath_enabled()
    batch._program("mlp", "tiny", "grad", "cuda:0", fast)
    old = _entry(cache)
    monkeypatch.setattr(torch, "__version__", "99.0.0")
    assert programs.load("mlp", "tiny", "grad", "cuda:0", fast) is None
    batch._forget_estimates()
    seen = _traces(monkeypatch)
    batch._program("mlp", "tiny", "grad", "cuda:0", fast)
    assert seen  # traced again under the new release
    assert old.exists() and len(list(cache.iterdir())) == 2


def test_a_file_that_is_not_ours_is_never_overwritten(cache):
    fast = batch._fastpath_enabled()
    key = programs._key("mlp", "tiny", "grad", "cuda:0", fast)
    path = programs._path(key)
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write("somebody's notes")
    prog = batch._program("mlp", "tiny", "grad", "cuda:0", fast)
    assert isinstance(prog, batch.Program)
    with open(path) as f:
        assert f.read() == "somebody's notes"
    assert [p.name for p in cache.iterdir()] == [os.path.basename(path)]  # no temporary file left


def test_caching_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(programs.ENV, "off")
    batch._forget_estimates()
    assert programs.folder() is None
    prog = batch._program("mlp", "tiny", "grad", "cuda:0", batch._fastpath_enabled())
    assert isinstance(prog, batch.Program)
    assert list(tmp_path.iterdir()) == []
    batch._forget_estimates()


def test_your_own_model_is_not_kept(cache):
    from nogradlab.core import ownmodel

    own = ownmodel.Model(lambda: torch.nn.Linear(8, 8), (8,))
    assert isinstance(batch._program(own, "", "grad", "cuda:0", None), batch.Program)
    assert not cache.exists()


def test_a_memory_row_is_kept_and_a_damaged_one_made_again(cache):
    calls = []

    def compute():
        calls.append(1)
        return (1, 2, 3, 4, ("a note",))

    fields = {"workload": "mlp", "mode": "train", "batch": 8}
    assert programs.remembered("row", fields, compute) == (1, 2, 3, 4, ("a note",))
    assert programs.remembered("row", fields, compute) == (1, 2, 3, 4, ("a note",)) and len(calls) == 1
    (path,) = list(cache.iterdir())
    entry = json.loads(path.read_text())
    entry["payload"]["value"][0] = 999  # the checksum no longer holds
    path.write_text(json.dumps(entry))
    assert programs.remembered("row", fields, compute) == (1, 2, 3, 4, ("a note",)) and len(calls) == 2
    assert programs.remembered("row", {**fields, "batch": 9}, compute) and len(calls) == 3  # another key


def test_the_rows_of_a_check_are_read_back_equal(cache):
    from nogradlab.estimate import sweep

    sweep._estimate_cached.cache_clear()
    first = sweep.estimate_row("mlp", 4, "eval+no_grad", device="cuda", scale="tiny")
    sweep._estimate_cached.cache_clear()  # a new process
    again = sweep.estimate_row("mlp", 4, "eval+no_grad", device="cuda", scale="tiny")
    assert first == again and any(p.name.startswith("row-mlp-") for p in cache.iterdir())
    sweep._estimate_cached.cache_clear()
