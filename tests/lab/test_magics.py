"""The %%memory and %%modes cell magics, run in an in-process IPython shell."""
import pytest
import torch
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import nogradlab
from nogradlab import memory, widgets

F32 = 4


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nogradlab")
    return shell


@pytest.fixture(autouse=True)
def _net(ip):
    torch.manual_seed(0)
    before = torch.is_grad_enabled()
    ip.user_ns.update(torch=torch, x=torch.randn(8, 16),
                      net=torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                              torch.nn.Linear(32, 4)))
    yield
    assert torch.is_grad_enabled() == before
    for k in ("y", "report", "res", "count"):
        ip.user_ns.pop(k, None)


def test_extension_registers_both_cell_magics(ip):
    cells = ip.magics_manager.magics["cell"]
    assert "memory" in cells and "modes" in cells
    assert callable(nogradlab.load_ipython_extension)


def test_memory_reports_the_cells_bytes_and_keeps_its_variables(ip, capsys):
    ip.run_cell_magic("memory", "--out report", "y = net(x)")
    out = capsys.readouterr().out
    r = ip.user_ns["report"]
    # grad on: autograd saves the input x (8x16) and the ReLU output (8x32)
    assert r.saved_bytes == (8 * 16 + 8 * 32) * F32
    # y (8x4) and the graph's saved ReLU output stay alive through the variable y
    assert r.retained_bytes >= 8 * 4 * F32 + 8 * 32 * F32
    assert r.peak_bytes >= r.retained_bytes
    assert "peak" in out and "saved for backward" in out and "retained" in out
    assert memory.format_bytes(r.saved_bytes) in out
    assert ip.user_ns["y"].shape == (8, 4) and ip.user_ns["y"].grad_fn is not None


def test_memory_under_no_grad_in_the_cell_saves_nothing(ip, capsys):
    ip.run_cell_magic("memory", "-o report", "with torch.no_grad():\n    y = net(x)\n")
    r = ip.user_ns["report"]
    assert r.saved_bytes == 0 and r.retained_bytes == 8 * 4 * F32
    assert "0 B" in capsys.readouterr().out


def test_memory_lets_the_cells_exception_through(ip):
    with pytest.raises(ZeroDivisionError):
        ip.run_cell_magic("memory", "", "1 / 0")


def test_modes_prints_one_table_with_speedup_ci_and_memory(ip, capsys):
    ip.run_cell_magic("modes", "grad no_grad inference_mode --rounds 3 --min-run-time 0.03 -o res",
                      "y = net(x)")
    out = capsys.readouterr().out
    res = ip.user_ns["res"]
    assert isinstance(res, widgets.ModesResult)
    assert res.modes == ["grad", "no_grad", "inference_mode"]
    assert res.comparison.rounds == 3 and res.comparison.baseline == "grad"
    assert res.memory["grad"].saved_bytes == (8 * 16 + 8 * 32) * F32
    assert res.memory["no_grad"].saved_bytes == 0 == res.memory["inference_mode"].saved_bytes
    header = [line for line in out.splitlines() if line.startswith("mode")]
    assert len(header) == 1  # one table
    for word in ("median", "speedup", "95% CI", "peak", "saved for backward", "retained"):
        assert word in header[0]
    for m in ("grad", "no_grad", "inference_mode"):
        assert any(line.startswith(m + " ") for line in out.splitlines())
    # the cell's assignments stay in the namespace (from its last run)
    assert ip.user_ns["y"].shape == (8, 4)


def test_modes_defaults_and_runs_the_cell_each_time(ip, capsys):
    ip.user_ns["count"] = 0
    ip.run_cell_magic("modes", "no_grad grad -r 2 -t 0.02 --warmup 1 --no-memory -o res",
                      "count += 1")
    res = ip.user_ns["res"]
    assert res.memory == {} and res.comparison.baseline == "no_grad"
    # warm-up, calibration and 2 rounds per mode: the cell really ran many times
    assert ip.user_ns["count"] >= 2 * (1 + 2)
    capsys.readouterr()
    ip.run_cell_magic("modes", "-r 2 -t 0.02 -o res", "y = net(x)")
    assert ip.user_ns["res"].modes == ["grad", "no_grad", "inference_mode"]


@pytest.mark.parametrize("magic, line, words", [
    ("modes", "grad nograd", ["unknown mode 'nograd'", "grad, no_grad, inference_mode"]),
    ("modes", "eval+no_grad", ["train/eval", "no_grad"]),
    ("modes", "grad grad", ["repeat"]),
    ("modes", "--rounds 0", ["--rounds", "positive"]),
    ("modes", "--rounds 1", ["at least 2"]),
    ("modes", "--min-run-time -1", ["--min-run-time", "positive"]),
    ("modes", "--min-run-time soon", ["--min-run-time"]),
    ("modes", "--min-run-time inf", ["--min-run-time", "finite"]),
    ("modes", "--min-run-time nan", ["--min-run-time", "finite"]),
    ("modes", "--device tpu", ["unknown device", "cpu"]),
    ("memory", "--method guess", ["guess", "storage"]),
    ("memory", "--method allocator", ["allocator", "cuda"]),
    ("memory", "--bogus", ["bogus"]),
])
def test_bad_arguments_raise_usage_errors_before_the_cell_runs(ip, magic, line, words):
    ip.user_ns["count"] = 0
    with pytest.raises(UsageError) as e:
        ip.run_cell_magic(magic, line, "count += 1")
    for w in words:
        assert w in str(e.value)
    assert ip.user_ns["count"] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_memory_on_cuda_reads_the_allocator(ip):
    ip.user_ns.update(xc=torch.randn(256, 1024, device="cuda"),
                      lin=torch.nn.Linear(1024, 1024, device="cuda"))
    ip.run_cell_magic("memory", "--device cuda -o report", "y = lin(xc)")
    r = ip.user_ns["report"]
    assert r.method == "allocator" and r.device.startswith("cuda")
    assert r.retained_bytes >= 256 * 1024 * F32  # y is alive in the namespace
    assert r.saved_bytes == 256 * 1024 * F32  # Linear saves its input for the weight gradient
