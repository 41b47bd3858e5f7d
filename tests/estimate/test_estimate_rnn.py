"""An LSTM's workspace (issue 41): oneDNN's ``aten.mkldnn_rnn_layer`` keeps one for the backward that its fake
kernel leaves empty. On the CPU the estimate gives it the real kernel's size and equals the real probe; on a
CUDA device (traced on the fake CPU device without a GPU) the miss is named, with its likely size, in the
notes, in ``missed`` and in the command's table."""
import random
import warnings

import pytest
import torch
import torch.nn as nn

from nogradlab import memory
from nogradlab.core import modes
from nogradlab.estimate import cli, onednn

T, FEATURES, H = 6, 8, 16


class Net(nn.Module):
    def __init__(self, bidirectional=False):
        super().__init__()
        self.lstm = nn.LSTM(FEATURES, H, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(H * (2 if bidirectional else 1), 3)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


def _measure(model, x, mode):
    def fn():
        with modes.setting(modes.parse(mode), model=model):
            return model(x)
    return memory.measure(fn)


FIELDS = ("peak_bytes", "retained_bytes", "saved_bytes", "saved_tensors")


@pytest.mark.parametrize("mode", ["grad", "eval+grad", "no_grad"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_cpu_estimate_equals_the_real_probe(mode, bidirectional):
    torch.manual_seed(0)
    x = torch.randn(4, T, FEATURES)
    real = _measure(Net(bidirectional), x, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own FakeTensor data_ptr warning inside nn.LSTM
        est = memory.estimate(lambda: Net(bidirectional), 4, mode=mode, inputs=(T, FEATURES))
    assert {f: getattr(est, f) for f in FIELDS} == {f: getattr(real, f) for f in FIELDS}
    if mode != "no_grad":  # without the workspace the estimate read 0.1 of these bytes saved
        assert est.saved_bytes > 2 * onednn.workspace_bytes(FEATURES, H, T, 4, onednn.state_copies() or 3)
        assert any(n.startswith(onednn.NOTE_PREFIX) and "modelled at the real kernel's size" in n for n in est.notes)
    assert not [m for m in est.missed if "workspace" in m["why"]]  # only oneDNN's scratch, as the real probe's
    assert est.missed == real.missed


def test_cpu_training_step_equals_the_real_probe():
    from nogradlab import ownmodel

    own = ownmodel.Model(Net, ((T, FEATURES), torch.float32))
    torch.manual_seed(0)
    model, x = Net(), torch.randn(4, T, FEATURES)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    memory.train_step(model, x, None, own.loss, opt)  # the momentum buffers exist, as in the estimate's warm state
    real = memory.measure(lambda: memory.train_step(model, x, None, own.loss, opt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = memory.estimate(own, 4, step="train")
    # the fake backward gave both bias gradients one storage: 1 KiB low before
    assert (est.peak_bytes, est.saved_bytes) == (real.peak_bytes, real.saved_bytes)


def test_the_workspace_formula_is_the_real_kernels():
    k = onednn.state_copies()
    assert k is not None, "this torch's oneDNN lays the LSTM workspace out otherwise: update onednn.py"
    rng = random.Random(5)
    for _ in range(6):
        i, h, t, n = (rng.randint(1, 80) for _ in range(4))
        assert onednn._real_workspace(i, h, t, n) == onednn.workspace_bytes(i, h, t, n, k), (i, h, t, n)


def test_an_unknown_layout_is_noted_with_the_likely_miss(monkeypatch):
    monkeypatch.setattr(onednn, "_COPIES", [None])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = memory.estimate(Net, 4, mode="grad", inputs=(T, FEATURES))
    likely = 2 * onednn.workspace_bytes(FEATURES, H, T, 4, 3)
    (ws,) = [m for m in est.missed if "workspace" in m["why"]]
    assert ws["op"] == "aten.mkldnn_rnn_layer" and ws["bytes"] == likely and "lays it out otherwise" in ws["why"]
    assert any(n.startswith(onednn.NOTE_PREFIX) and "likely low by about" in n for n in est.notes)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the virtual CUDA device: no GPU here")
def test_the_command_table_marks_a_cuda_lstm():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = cli.estimate(Net, f"{T}x{FEATURES}", gpu="64MiB", modes="grad,no_grad")
    assert doc["modes"]["grad"]["missed"][0]["op"] == "aten.mkldnn_rnn_layer"
    assert doc["modes"]["grad"]["missed"][0]["bytes"] == 2 * onednn.workspace_bytes(FEATURES, H, T, 1, 3)
    assert doc["modes"]["no_grad"]["missed"] == []  # no workspace without grad
    table = cli.text(doc)
    rows = {line.split()[0]: line for line in table.splitlines()[2:4]}
    assert rows["grad"].endswith("*") and not rows["no_grad"].endswith("*")
    assert any(line.startswith("* grad: low by about") and "cuDNN" in line for line in table.splitlines())
    from nogradlab.run import yourmodel

    frame = yourmodel.estimate_frame(doc)  # notebook 10's table says it too
    assert frame.loc["grad", "not counted @1"].endswith("(aten.mkldnn_rnn_layer)")
    assert frame.loc["no_grad", "not counted @1"] == "-"
