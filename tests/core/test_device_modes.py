import pytest
import torch
import torch.nn as nn

from nogradlab import device, modes


def test_resolve_cpu_and_auto():
    assert device.resolve("cpu") == torch.device("cpu")
    assert device.resolve("CPU ") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert device.resolve("auto").type in (expected, "mps")
    assert device.resolve(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize("bad", ["gpu", "tpu", "", "cuda:x", "cpu:0:1"])
def test_resolve_unknown_names_allowed_values(bad):
    with pytest.raises(ValueError, match="allowed: auto, cpu, cuda, cuda:N, mps"):
        device.resolve(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="machine has CUDA")
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_says_why(name):
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        device.resolve(name)


def test_describe_and_label():
    info = device.describe("cpu")
    assert info["type"] == "cpu" and info["torch"] == torch.__version__
    assert info["threads"] == torch.get_num_threads() and info["total_memory"] > 0
    assert "torch" in device.label(info) and "threads" in device.label(info)
    device.synchronize("cpu")  # a no-op, but callable


def test_modes_by_name():
    assert modes.names() == ("grad", "no_grad", "inference_mode")
    x = torch.ones(2, requires_grad=True)
    for name, tracked in (("grad", True), ("no_grad", False), ("inference_mode", False)):
        with torch.no_grad():
            with modes.get(name)():
                assert (x * 2).requires_grad is tracked
    with pytest.raises(ValueError, match="allowed: grad, no_grad, inference_mode"):
        modes.get("nograd")


def test_setting_parse_and_restore():
    s = modes.parse("eval+no_grad+bf16")
    assert (s.mode, s.train, s.autocast, s.name) == ("no_grad", False, "bf16", "eval+no_grad+bf16")
    assert modes.parse("train").mode == "grad"
    for bad in ["eval+eval", "no_grad+grad", "fast", "", "bf16+fp16"]:
        with pytest.raises(ValueError):
            modes.parse(bad)
    m = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
    m.train()
    m[1].eval()  # a mixed state is restored submodule by submodule
    with modes.setting("eval+no_grad+bf16", model=m, device="cpu"):
        assert not m.training and not m[0].training and not torch.is_grad_enabled()
        assert m(torch.ones(1, 2)).dtype == torch.bfloat16
    assert m.training and not m[1].training and torch.is_grad_enabled()
    with pytest.raises(ValueError, match="needs model"):
        with modes.setting("eval"):
            pass


def test_setting_restores_on_error():
    m = nn.Linear(2, 2)
    with pytest.raises(KeyError):
        with modes.setting("eval+inference_mode", model=m):
            raise KeyError("boom")
    assert m.training and torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
