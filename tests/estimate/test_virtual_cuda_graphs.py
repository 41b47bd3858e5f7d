"""The virtual CUDA device where autograd cannot record a graph on it (torch 2.9.1's CUDA wheel without a
driver: the process aborts, issue 41): the grad-mode step is traced on the fake CPU device instead, with a
note, and gives the same numbers as the fake CUDA trace where that works."""
import subprocess

import pytest
import torch
import torch.nn as nn

from nogradlab import memory
from nogradlab.estimate import cudamodel

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the virtual CUDA device: no GPU here")


def _net():
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))


@pytest.fixture
def unrecordable(monkeypatch):
    """This process as torch 2.9.1 without a driver finds it (the check's answer, without aborting here)."""
    monkeypatch.setattr(cudamodel, "_fake_cuda_graphs", False)
    # an earlier estimate in this process may have found that building on the virtual device fails (torch 2.9.1
    # without a driver), which falls back before the graph question is asked: this test asks it alone
    monkeypatch.setattr(cudamodel, "_fake_cuda_builds", None)
    monkeypatch.setattr(cudamodel, "_fake_cuda_graphs_why", "the check process ended with CUDA driver ...")


def test_grad_step_is_traced_on_the_fake_cpu_device_with_a_note(unrecordable):
    r = memory.estimate(_net, 2, "cuda", "grad", inputs=(3, 8, 8))
    assert any(n.startswith("autograd cannot record a graph on the virtual CUDA device") for n in r.notes)
    assert r.device == "cuda:0" and r.reserved_bytes >= r.allocated_bytes > 0


def test_the_safe_path_gives_the_numbers_of_the_fake_cuda_trace(monkeypatch):
    if not cudamodel.fake_cuda_records_graphs() or cudamodel.fake_cuda_builds() is False:
        pytest.skip("this torch cannot trace on the virtual CUDA device: nothing to compare with")
    fields = ("peak_bytes", "saved_bytes", "retained_bytes", "allocated_bytes", "reserved_bytes")
    on_cuda = memory.estimate(_net, 4, "cuda", "grad", inputs=(3, 8, 8))
    assert not any("autograd cannot record" in n for n in on_cuda.notes)
    monkeypatch.setattr(cudamodel, "_fake_cuda_graphs", False)
    # an earlier estimate in this process may have found that building on the virtual device fails (torch 2.9.1
    # without a driver), which falls back before the graph question is asked: this test asks it alone
    monkeypatch.setattr(cudamodel, "_fake_cuda_builds", None)
    on_cpu = memory.estimate(_net, 4, "cuda", "grad", inputs=(3, 8, 8))
    assert {f: getattr(on_cpu, f) for f in fields} == {f: getattr(on_cuda, f) for f in fields}


def test_no_grad_steps_stay_on_the_virtual_cuda_device(unrecordable):
    r = memory.estimate(_net, 2, "cuda", "no_grad", inputs=(3, 8, 8))
    assert not any("autograd cannot record" in n for n in r.notes)


def test_the_check_runs_in_a_subprocess_and_reads_an_abort_as_no(monkeypatch):
    calls = []

    def aborted(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, -6, "", "terminate called after throwing an instance of "
                                           "'c10::AcceleratorError'\n  what():  CUDA driver version is insufficient\n")

    monkeypatch.setattr(cudamodel, "_fake_cuda_graphs", None)
    monkeypatch.setattr(cudamodel, "_GRAPH_OK_FROM", (99, 0))  # a release the check must ask
    monkeypatch.setattr(subprocess, "run", aborted)
    assert cudamodel.fake_cuda_records_graphs() is False
    assert cudamodel.fake_cuda_records_graphs() is False and len(calls) == 1  # asked once per process
    assert "CUDA driver version is insufficient" in cudamodel.fake_cuda_graph_note()


@pytest.mark.integration
def test_the_real_check_survives_and_answers():
    """The subprocess itself (about 2 s: it imports torch): on torch 2.9.1 without a driver it answers
    False (its abort stays in the subprocess), from 2.14 on it need not be asked."""
    old = cudamodel._fake_cuda_graphs, cudamodel._GRAPH_OK_FROM
    try:
        cudamodel._fake_cuda_graphs, cudamodel._GRAPH_OK_FROM = None, (99, 0)
        ok = cudamodel.fake_cuda_records_graphs()
    finally:
        cudamodel._fake_cuda_graphs, cudamodel._GRAPH_OK_FROM = old
    release = cudamodel._torch_release()
    if release >= (2, 14):
        assert ok is True
    elif release == (2, 9):
        assert ok is False


@pytest.mark.integration
def test_a_grad_estimate_on_the_virtual_cuda_device_leaves_the_process_alive():
    """The reproduction itself, in a process of its own: on torch 2.9.1 without a CUDA driver the grad mode's
    estimate aborted it (SIGABRT, exit status 134 in a shell, -6 here)."""
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import torch.nn as nn\n"
            "from nogradlab.estimate import cli\n"
            "d = cli.estimate(lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU()), '4', gpu='1GiB', modes='grad')\n"
            "print('largest batch', d['modes']['grad']['largest_batch'])\n")
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "largest batch" in p.stdout
