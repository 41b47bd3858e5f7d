"""``nogradlab estimate`` on two processes (nogradlab.estimate.split): the training step's searches in a
second process give the document one process gives; a second process that fails or is interrupted
changes nothing but the time; it is used only where it can help."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nogradlab.__main__ import main
from nogradlab.core import resources
from nogradlab.estimate import cli, split

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
MODEL, INPUT, GPU = "yourmodel_factories:explicit_attention", "10x16", "64MiB"


# --- where two processes are used ------------------------------------------------------------------

@pytest.mark.parametrize("model, modes, processes, cpus, headroom, why", [
    ("m:f", "grad,no_grad,inference_mode,train", "auto", 2, 8 << 30, None),
    ("m:f", "no_grad,train", "auto", 2, None, None),  # memory unknown (no /proc/meminfo): not refused for it
    ("m:f", "grad,no_grad,inference_mode,train", "1", 2, 8 << 30, "--processes 1"),
    ("m:f", "grad,no_grad,inference_mode,train", "auto", 1, 8 << 30, "1 CPU"),
    ("m:f", "grad,no_grad,inference_mode,train", "auto", 2, 1 << 30, "1.0 GiB of memory free"),
    ("m:f", "grad,no_grad,inference_mode,train", "2", 1, 1 << 30, None),  # asked for: used
    ("m:f", "grad,no_grad", "2", 2, 8 << 30, "train and another mode"),
    ("m:f", "train", "auto", 2, 8 << 30, "train and another mode"),
    ("m:f", "train,train", "2", 2, 8 << 30, "train and another mode"),
    (object(), "grad,train", "2", 2, 8 << 30, "not given as MODULE:FACTORY"),
])
def test_two_processes_only_where_they_can_help(model, modes, processes, cpus, headroom, why):
    got = split.plan(model, modes, processes, cpus=cpus, headroom=headroom)
    assert (got is None) if why is None else (why in got)


def test_the_second_process_never_splits_again(monkeypatch):
    monkeypatch.setenv(split.HELPER_ENV, "1")
    assert "second process" in split.plan("m:f", "grad,train", "2", cpus=8, headroom=8 << 30)


def test_a_bad_processes_value_is_refused_before_any_work_naming_the_allowed(capsys, monkeypatch):
    started = []
    monkeypatch.setattr(split, "Helper", lambda argv: started.append(argv))
    rc = main(["estimate", "torchvision.models:resnet18", "--input", "3x8x8", "--processes", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and "--processes must be one of auto, 1, 2" in err and not started


def test_memory_headroom_is_the_least_of_meminfo_and_each_limited_cgroup(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal: 24000000 kB\nMemAvailable:   8000000 kB\n")
    for rel, limit, used in [("", "max", "1"), ("user", "3000000000", "1000000000"),
                             ("user/box", "max", "500")]:
        d = tmp_path / "cg" / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "memory.max").write_text(limit + "\n")
        (d / "memory.current").write_text(used + "\n")
    (tmp_path / "cgroup").write_text("0::/user/box\n")
    kw = dict(meminfo=str(tmp_path / "meminfo"), cgroup_root=str(tmp_path / "cg"), proc_cgroup=str(tmp_path / "cgroup"))
    assert resources.memory_headroom(**kw) == 2_000_000_000  # the parent cgroup's limit, under MemAvailable
    (tmp_path / "cg" / "user" / "memory.max").write_text("max\n")
    assert resources.memory_headroom(**kw) == 8_000_000 * 1024
    assert resources.memory_headroom(meminfo=str(tmp_path / "none"), cgroup_root=str(tmp_path / "none"),
                                     proc_cgroup=str(tmp_path / "none")) is None


def test_notes_merge_in_the_order_one_process_gives_them():
    by_mode = {"grad": ["a", "b"], "train": ["b", "t"], "no_grad": ["a", "n"]}  # each mode's own, apart
    assert cli.merge_notes(["grad", "train", "no_grad"], by_mode) == ["a", "b", "t", "n"]
    assert cli.merge_notes(["train", "grad", "no_grad"], by_mode) == ["b", "t", "a", "n"]


# --- the same document ------------------------------------------------------------------------------

def _command(tmp_path, *extra, model=MODEL, name="doc"):
    """``python -m nogradlab estimate`` with its own temporary folder: (exit, stdout, stderr, document)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    out = tmp_path / f"{name}.json"
    env = dict(os.environ, TMPDIR=str(tmp),
               PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop(split.HELPER_ENV, None)
    proc = subprocess.run([sys.executable, "-m", "nogradlab", "estimate", model, "--input", INPUT, "--gpu", GPU,
                           "--json", str(out), "--no-progress", *extra], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    doc = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, proc.stdout, proc.stderr, doc


def _same(doc):
    """A document without what no two runs share: the command line and the searches' wall times."""
    doc = json.loads(json.dumps(doc))
    doc["meta"].pop("command")
    for e in doc["modes"].values():
        e.pop("seconds")
    return doc


def _ours(tmp: Path) -> list:
    """The second processes' folders left in ``tmp`` (torch keeps a cache folder of its own there)."""
    return [p for p in os.listdir(tmp) if p.startswith("nogradlab-estimate-")]


def _table(stdout):
    return [ln for ln in stdout.splitlines() if not ln.startswith("estimate JSON:")]


@pytest.mark.integration
def test_two_processes_give_the_one_process_document_and_leave_no_folder(tmp_path):
    one = _command(tmp_path, "--processes", "1", name="one")
    two = _command(tmp_path, "--processes", "2", name="two")
    assert one[0] == two[0] == 0, (one[2], two[2])
    assert _same(two[3]) == _same(one[3]) and list(two[3]["modes"]) == ["grad", "no_grad", "inference_mode", "train"]
    assert _table(two[1]) == _table(one[1])
    assert _ours(tmp_path / "tmp") == []  # the second process's folder is gone


@pytest.mark.integration
def test_a_second_process_that_fails_leaves_the_training_step_to_the_first(tmp_path):
    model = "yourmodel_factories:attention_not_in_a_second_process"
    one = _command(tmp_path, "--processes", "1", model=model, name="one")
    two = _command(tmp_path, "--processes", "2", model=model, name="two")
    assert one[0] == two[0] == 0, two[2]
    assert _same(two[3]) == _same(one[3]) and "train" in two[3]["modes"]
    assert _ours(tmp_path / "tmp") == []


def _helpers_of(tmp: Path) -> list:
    """The pids of second processes whose TMPDIR is ``tmp`` (Linux: their environment in /proc)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"{split.HELPER_ENV}=1".encode() in env and f"TMPDIR={tmp}".encode() in env:
            found.append(int(pid))
    return found


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_stops_both_processes_and_removes_the_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp),
               PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop(split.HELPER_ENV, None)
    proc = subprocess.Popen([sys.executable, "-m", "nogradlab", "estimate", "torchvision.models:swin_t", "--input",
                             "3x224x224", "--processes", "2", "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not _helpers_of(tmp) and time.monotonic() < deadline:
        time.sleep(0.05)
    helpers = _helpers_of(tmp)
    assert helpers, "no second process started"
    time.sleep(4)  # both have loaded torch and are tracing
    proc.send_signal(signal.SIGINT)  # to the first process only (a terminal would send it to both)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    deadline = time.monotonic() + 10
    while _helpers_of(tmp) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _helpers_of(tmp) and _ours(tmp) == []


def test_the_command_freezes_the_collector_once_at_exit():
    import atexit

    from nogradlab import __main__ as m

    before = atexit._ncallbacks()
    m._freeze_at_exit()
    m._freeze_at_exit()
    assert atexit._ncallbacks() - before <= 1 and m._FREEZE_REGISTERED
