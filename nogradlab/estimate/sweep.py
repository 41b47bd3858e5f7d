"""Memory rows for a workload across batches and settings: :func:`estimate_row` (a cached
:func:`nogradlab.estimate.fake.estimate`), :func:`estimate_sweep`, :func:`measure_forward` (a real
:func:`nogradlab.core.memory.measure`), and the arithmetic the claims read from them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools

import torch

from nogradlab.core import memory, modes, workloads
from nogradlab.core.session import frozen_gc
from nogradlab.estimate import fake

__all__ = ["accounting", "with_seq_len", "estimate_row", "estimate_sweep", "measure_forward",
           "memory_saved", "param_bytes"]


@contextlib.contextmanager
def accounting():
    """Memory probes that see every allocation, quickly: ``nn.TransformerEncoder``'s fused fast
    path is switched off (it hides a layer's temporaries inside one operator) and the garbage
    collector's old objects are frozen (:func:`nogradlab.core.session.frozen_gc`). Both restored on exit."""
    with memory.fused_paths_off(), frozen_gc():
        yield


def with_seq_len(wl: workloads.Workload, seq_len: int) -> workloads.Workload:
    """The transformer workload ``wl`` at another sequence length (same layers and widths)."""
    if wl.name != "transformer_base":
        raise ValueError(f"only transformer_base has a sequence length, not {wl.name!r}")
    seq_len = workloads.check_batch(seq_len)
    return dataclasses.replace(wl, params={**wl.params, "seq_len": seq_len},
                               input_shape=(seq_len, wl.params["d_model"]))


@functools.lru_cache(maxsize=2048)
def _estimate_cached(name, scale, batch, setting, device, seq_len):
    from nogradlab.estimate import programs

    fast = None
    if str(device) == "cuda":  # the fused fast path is modelled on CUDA: its switch decides the estimate
        mha = getattr(torch.backends, "mha", None)
        fast = mha.get_fastpath_enabled() if mha is not None and hasattr(mha, "get_fastpath_enabled") else None
    fields = {"workload": name, "mode": str(setting), "scale": scale, "batch": int(batch), "device": str(device),
              "seq_len": seq_len, "fast": fast}
    return programs.remembered("row", fields, lambda: _estimate_now(name, scale, batch, setting, device, seq_len))


def _estimate_now(name, scale, batch, setting, device, seq_len):
    wl = workloads.get(name, scale)
    if seq_len is not None:
        wl = with_seq_len(wl, seq_len)
    # CUDA estimates model the fused fast path's kernel (cudamodel); elsewhere it would hide temporaries
    with (accounting() if str(device) != "cuda" else frozen_gc()):
        if setting == "train":
            r = fake.estimate(wl, batch, device, step="train", scale=scale)
        else:
            r = fake.estimate(wl, batch, device, mode=setting, scale=scale)
    return (r.peak_bytes, r.total_peak_bytes, r.saved_bytes, r.baseline_bytes, tuple(r.notes))


def estimate_row(workload: str, batch: int, setting: str, *, device="cuda", scale="full",
                 seq_len: "int | None" = None) -> dict:
    """One :func:`nogradlab.estimate.fake.estimate` as a dict (``setting``: ``"train"`` for a training
    step, else a forward setting such as ``"eval+no_grad"``); off CUDA under :func:`accounting` (CUDA estimates model the fused paths).
    Estimates are deterministic, so they are cached for the process."""
    if setting != "train":
        modes.parse(setting)
    workloads.get(workload, scale)
    peak, total, saved, base, notes = _estimate_cached(workload, scale, int(batch), setting,
                                                       str(device), seq_len)
    return {"workload": workload, "scale": scale, "batch": int(batch), "setting": setting,
            "seq_len": seq_len, "device": str(device), "method": "estimate", "peak_bytes": peak,
            "total_peak_bytes": total, "saved_bytes": saved, "resident_bytes": base,
            "notes": list(notes)}


def estimate_sweep(workload: str, batches, settings=("eval+grad", "eval+no_grad"), *,
                   device="cuda", scale="full", seq_lens=(None,)) -> list:
    """:func:`estimate_row` for every batch x sequence length x setting (all arguments checked
    first). Returns the rows, ``memory_saved`` can pair them."""
    batches = [workloads.check_batch(b) for b in batches]
    for s in settings:
        if s != "train":
            modes.parse(s)
    workloads.get(workload, scale)
    return [estimate_row(workload, b, s, device=device, scale=scale, seq_len=L)
            for L in seq_lens for b in batches for s in settings]


@contextlib.contextmanager
def _torch_threads(n: "int | None"):
    """torch's CPU thread count set to ``n`` for the block (None: unchanged); restored on exit."""
    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def measure_forward(model, x, setting: str, device, num_threads: "int | None" = None) -> dict:
    """Real :func:`nogradlab.memory.measure` of ``model(x)`` under ``setting``, as a dict with the
    total peak (what was resident at entry, weights and input, plus the call's own peak).
    ``num_threads``: torch CPU threads for the call (bytes do not depend on it; time does)."""
    def fn():
        with modes.setting(setting, model=model, device=device):
            return model(x)

    dev = torch.device(device)
    with accounting(), _torch_threads(num_threads):
        rep = memory.measure(fn, dev)
    resident = memory.resident_bytes(model, [x], dev)
    return {"batch": int(x.shape[0]), "setting": setting, "method": rep.method,
            "device": str(dev), "peak_bytes": rep.peak_bytes, "resident_bytes": resident,
            "total_peak_bytes": resident + rep.peak_bytes, "saved_bytes": rep.saved_bytes}


def memory_saved(baseline_total: int, case_total: int) -> float:
    """``1 - case / baseline``: the fraction of the baseline's peak that the case does not need."""
    return 1.0 - case_total / baseline_total


@functools.lru_cache(maxsize=32)
def param_bytes(workload: str, scale: str = "full") -> int:
    """Bytes of the workload's parameters (built on the meta device: nothing allocated)."""
    model = workloads.get(workload, scale).build("meta")
    return sum(p.numel() * p.element_size() for p in model.parameters())


