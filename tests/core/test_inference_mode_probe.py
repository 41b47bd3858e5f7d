"""Under ``torch.inference_mode`` the probes count what is allocated, as under ``no_grad``.

inference_mode skips the autograd dispatch keys, and those are where a composite operator
(``aten.linear``, ``aten.conv2d``, ``aten.cross_entropy_loss``, ``aten.kl_div``...) is split into
the operators it runs. A dispatch mode then sees the composite whole; unless it runs the parts
itself, what they allocate inside is never seen, and neither are the matrix products and
convolutions the CUDA kernel model gives workspaces to."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from nogradlab import memory, modes, widgets

N, C = 64, 5000  # cross_entropy's log_softmax: N * C float32 values, allocated inside the composite
LOG_SOFTMAX_BYTES = N * C * 4


def _inputs():
    g = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(N, C, generator=g), "y": torch.randint(0, C, (N,), generator=g),
        "a": torch.randn(32, 3, 64, generator=g), "w": torch.randn(48, 64, generator=g),
        "b": torch.randn(48, generator=g),
        "im": torch.randn(4, 3, 32, 32, generator=g), "k": torch.randn(8, 3, 3, 3, generator=g),
    }


CALLS = {
    "cross_entropy": lambda t: F.cross_entropy(t["x"], t["y"]),
    "kl_div": lambda t: F.kl_div(F.log_softmax(t["x"], 1), F.softmax(t["x"], 1), reduction="batchmean"),
    "linear": lambda t: F.linear(t["a"], t["w"], t["b"]),  # 3-d input: matmul's reshapes inside
    "conv2d": lambda t: F.conv2d(t["im"], t["k"], padding=1),
    "layer_norm": lambda t: F.layer_norm(t["a"], (64,)),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_inference_mode_counts_the_same_bytes_as_no_grad(name):
    t = _inputs()
    fn = CALLS[name]
    r = memory.measure_modes(lambda: fn(t), ("no_grad", "inference_mode"), timeline=True)
    ng, im = r["no_grad"], r["inference_mode"]
    assert ng.peak_bytes > 0
    assert (im.peak_bytes, im.retained_bytes) == (ng.peak_bytes, ng.retained_bytes)
    # the same allocations, by the same operators, in the same order
    assert im.timeline == ng.timeline


def test_cross_entropy_under_inference_mode_counts_its_log_softmax():
    """The composite allocates N*C float32 values for log_softmax inside itself: PyTorch's profiler
    sees that allocation under both modes, and so does the probe (it read 4 bytes, the loss, before)."""
    t = _inputs()
    r = memory.measure_modes(lambda: F.cross_entropy(t["x"], t["y"]), ("no_grad", "inference_mode"))
    for rep in r.values():
        assert rep.peak_bytes >= LOG_SOFTMAX_BYTES and rep.retained_bytes == 4
    for ctx in (torch.no_grad, torch.inference_mode):
        with ctx(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                           profile_memory=True) as prof:
            F.cross_entropy(t["x"], t["y"])
        mem = {e.key: e.self_cpu_memory_usage for e in prof.key_averages()}
        assert mem["aten::_log_softmax"] == LOG_SOFTMAX_BYTES, ctx.__name__


def test_the_probe_agrees_with_memtracker_under_no_grad_for_a_model_with_a_loss():
    """PyTorch's MemTracker (a dispatch mode too) under no_grad, where autograd splits the composites
    for it, against the probe under inference_mode."""
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.manual_seed(0)
    # the peak is in the loss: the logits and cross_entropy's log_softmax (inside the composite)
    model = nn.Sequential(nn.Conv2d(3, 2, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 8 * 8, 2000))
    x, y = torch.randn(16, 3, 8, 8), torch.randint(0, 2000, (16,))

    def step():
        return F.cross_entropy(model(x), y)

    mt = MemTracker()
    mt.track_external(model, x)
    with mt, torch.no_grad():
        step()
    theirs = sum(v["Total"] for v in mt.get_tracker_snapshot("peak").values())
    params = sum(p.numel() * p.element_size() for p in model.parameters()) + x.numel() * 4
    ours = memory.measure(step_in(torch.inference_mode, step))
    assert ours.peak_bytes == theirs - params >= 2 * 16 * 2000 * 4


def step_in(ctx, fn):
    def run():
        with ctx():
            return fn()
    return run


def test_run_composite_leaves_operators_with_kernels_of_their_own_whole():
    """Only a C++ composite kernel is run: not an operator with CPU kernels that torch._decomp gave
    a Python decomposition for tracing (native_batch_norm), not a nested tensor's linear."""
    seen = []

    class Spy(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            out = modes.run_composite(self, func, args, kwargs)
            return func(*args, **(kwargs or {})) if out is NotImplemented else out

    x = torch.randn(4, 3, 8, 8)
    with torch.inference_mode(), Spy():
        F.batch_norm(x, torch.zeros(3), torch.ones(3), training=False)
        F.linear(torch.randn(2, 5), torch.randn(3, 5))
    assert "aten.native_batch_norm.default" in seen or "aten._native_batch_norm_legit_no_training.default" in seen
    assert "aten.batch_norm.default" in seen  # seen whole, then run as its parts
    assert "aten.addmm.default" in seen or "aten.mm.default" in seen
    assert modes.run_composite(Spy(), torch.ops.aten.add.Tensor, (x, x)) is NotImplemented  # no composite
    nested = torch.nested.nested_tensor([torch.randn(2, 5), torch.randn(3, 5)])
    assert modes.run_composite(Spy(), torch.ops.aten.linear.default, (nested, torch.randn(3, 5))) \
        is NotImplemented


# --- what the notebook tools show: no saving that is not there -----------------------------------

def test_modes_magic_shows_the_same_memory_under_inference_mode_as_under_no_grad(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "nogradlab")
    t = _inputs()
    ip.user_ns.update(F=F, x=t["x"], y=t["y"])
    ip.run_cell_magic("modes", "no_grad inference_mode --rounds 2 --min-run-time 0.01 --warmup 0 --out res",
                      "F.cross_entropy(x, y)")
    capsys.readouterr()
    res = ip.user_ns["res"]
    peaks = {m: r.peak_bytes for m, r in res.memory.items()}
    assert peaks["inference_mode"] == peaks["no_grad"] >= LOG_SOFTMAX_BYTES
    rows = res.frame().set_index("mode")
    assert rows.loc["inference_mode", "peak_bytes"] == rows.loc["no_grad", "peak_bytes"]


def test_widgets_measure_modes_shows_the_same_memory_under_inference_mode():
    t = _inputs()
    res = widgets.measure_modes(lambda: F.cross_entropy(t["x"], t["y"]), time=False)
    peaks = {m: r.peak_bytes for m, r in res.memory.items()}
    assert peaks["inference_mode"] == peaks["no_grad"] == peaks["grad"] >= LOG_SOFTMAX_BYTES


def test_budget_explorer_shows_no_larger_batch_under_inference_mode():
    """The MLP's linear layers under inference_mode reached the CUDA kernel model whole, without the
    cuBLAS workspace its addmm gets: 9362 against no_grad's 334 under 0.05 GiB (tiny scale)."""
    res = widgets.budget_explorer("mlp", "tiny", "cuda", 0.05, interactive=False,
                                  modes=("eval+no_grad", "inference_mode"))
    assert res.batches["inference_mode"] == res.batches["eval+no_grad"] > 0
