"""Checks of the numeric claims: how much time and memory ``torch.no_grad`` saves, per workload.

Covered: C03 C08 C13 C16 C17 C18 C19 C20 C21 C23 X05.

Conventions (every figure in the evidence says which it is):

* **One timing per condition.** A forward timing of (workload, scale, batch, device) is measured
  once per run by :func:`forward_condition` (every setting of :func:`_lever_settings` interleaved,
  one protocol: warm-up, CUDA sync, ``cudnn.benchmark`` on and clocks warmed on CUDA, TF32 state
  recorded) and read by C03, C17, C20 and X05 alike (:data:`nogradlab.timing.RUN`). A claim that
  needs another quantity (a training step, a compiled model, a validation loop's scope) measures
  it once too and names it.
* **Speed.** Always :func:`nogradlab.timing.compare` (interleaved rounds, paired bootstrap CI).
  "Cuts runtime by X %" is ``time_saved = 1 - t_case / t_base``. The article's "relative speed
  gain" (C20's table) and "more throughput" (C13) are read as a *throughput* gain,
  ``speedup - 1 = t_base / t_case - 1``; ``time_saved`` is given beside it.
* **Memory.** "Saved" is ``1 - peak(case) / peak(baseline)`` of *total* peaks: weights, buffers
  and inputs (what the device holds anyway) plus everything the step allocates. The baseline is
  named per claim: a grad-enabled forward in the same model mode (C18, C19, C21) or a training
  step (C20, the article's "training versus evaluation with no_grad"). Real tiny runs use
  :func:`nogradlab.memory.measure`; article-sized models use :func:`nogradlab.memory.estimate`
  on fake tensors (a virtual CUDA device; training steps fall back to the fake CPU device with
  CUDA's block rounding, a note says so).
* **Transformer memory.** ``nn.TransformerEncoder``'s fused inference fast path runs a whole layer
  inside one operator, whose temporaries no dispatch-level tracker can see; memory is therefore
  measured with the fast path off (:func:`accounting`), so the no_grad peak is not understated.
  On a virtual CUDA device attention runs PyTorch's *math* backend (the fused kernels need a real
  GPU to be selected), which keeps the L x L attention probabilities for backward; the fused-
  attention variant (the CPU flash kernel, which keeps none) is given beside it.
* **Verdicts** follow the rules in :mod:`nogradlab.claims.rules` (band, rounding, tolerance,
  threshold, ties), against the article's band via :func:`nogradlab.claims.band_verdict`, one
  (point, CI low, CI high) per measured condition, rounded as printed. A claim worded as a lower bound ("cuts by
  20-40 %", "can exceed 40 %") agrees when the value reaches the band or lies above it; the
  cells of C20's table are figures to reproduce, so there a value must overlap the band itself.
  "About X %" is read as the band [X - 5, X + 5] percentage points.

At ``scale="tiny"`` on a CPU the checks run single-threaded (on a shared two-core machine a second
OpenMP thread mostly measures the neighbours: calls get several times slower and noisier; bytes
do not depend on it), with few timing rounds and small sweeps; article-sized estimates are
included everywhere, since they need no GPU. On a GPU or at ``scale="full"`` the rounds and the
sweeps grow and torch's own thread count is used. ``ctx.params`` may override
``rounds``, ``min_run_time``, ``warmup`` and the per-check knobs named in each docstring.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math

import numpy as np
import torch
import torch.nn as nn

from .. import batch as _batch
from .. import memory, modes, timing, workloads
from . import band_verdict, claim_check, format_saved
from .capacity import shared_largest_batch
from .rules import RULES, in_band

__all__ = ["accounting", "with_seq_len", "estimate_row", "estimate_sweep", "measure_forward",
           "memory_saved", "param_bytes", "GiB", "ARTICLE_TABLE"]

GiB = 2 ** 30

# The article's table (section 5): memory saved, speed gain, batch factor; 16 GB GPU, training
# versus evaluation with no_grad. Its "recurrent CNN (U-Net-style)" row is our U-Net, which has
# no recurrence at all.
ARTICLE_TABLE = {
    "resnet50": {"label": "ResNet-50 (ImageNet)", "memory": (0.30, 0.35), "speed": (0.25, 0.30),
                 "batch": (1.8, 2.2)},
    "transformer_base": {"label": "Transformer-base (12 layers)", "memory": (0.25, 0.30),
                         "speed": (0.20, 0.25), "batch": (1.6, 1.9)},
    "unet": {"label": "Recurrent CNN (U-Net-style)", "memory": (0.35, 0.40), "speed": (0.30, 0.35),
             "batch": (2.0, 2.3)},
    "mlp": {"label": "Two-layer MLP", "memory": (0.15, 0.20), "speed": (0.10, 0.15),
            "batch": (1.2, 1.4)},
}
ARTICLE_GPU_BYTES = 16 * GiB
FEED_FORWARD = ("mlp", "resnet50", "unet")  # "feed-forward networks without recurrent connections"
CNNS = ("resnet50", "unet")


# --------------------------------------------------------------------------------------------
# shared helpers


def _quick(ctx) -> bool:
    return not ctx.on_gpu and ctx.scale == "tiny"


def _knobs(ctx, **quick_overrides) -> dict:
    """compare() settings. ``rounds`` is the minimum (10: a paired bootstrap over fewer rounds is
    degenerate); a shared forward condition then goes on, a block of rounds at a time, until its
    intervals decide every rule that reads it (:func:`_condition_edges`), up to ``max_rounds`` or
    ``time_budget`` seconds of rounds (the comparison's ``stopped`` says which). Tiny CPU runs take
    short single-threaded samples (on a shared two-core machine two OpenMP threads mostly measure
    the neighbours: 10 ms a sample, at most 1.5 s of rounds a condition), a GPU the same with 3
    warm-up calls (a condition times up to 8 cases, and a full-size forward often takes longer than
    a sample: :mod:`nogradlab.plan` keeps a learner's notebook within a minute on an H200), other CPU
    runs 50 ms and 20 s with torch's thread count. ``quick_overrides`` adjust the
    tiny defaults; ctx.params wins."""
    if _quick(ctx):
        k = dict(rounds=10, min_run_time=0.1, warmup=1, num_threads=1, max_rounds=40, time_budget=1.5)
        k.update(quick_overrides)
    elif ctx.on_gpu:
        k = dict(rounds=10, min_run_time=0.1, warmup=3, num_threads=None, max_rounds=40, time_budget=1.5)
    else:
        k = dict(rounds=20, min_run_time=1.0, warmup=5, num_threads=None, max_rounds=80, time_budget=20.0)
    for key in k:
        if key in ctx.params:
            k[key] = ctx.params[key]
    return k


def _compare(ctx, cases: dict, baseline: str, **quick_overrides) -> timing.Comparison:
    return timing.compare(cases, baseline=baseline, device=ctx.device, seed=ctx.seed,
                          **_knobs(ctx, **quick_overrides))


def _speed_batch(ctx, wl) -> int:
    """The batch timed at ``ctx.scale``: half the default on a tiny CPU run (ResNet-50 at 64x64
    dominates the budget), else the default; ``ctx.params['batch']`` wins."""
    return int(ctx.params.get("batch", max(1, wl.default_batch // 2) if _quick(ctx) else wl.default_batch))


def _saved_triple(cmp: timing.Comparison, name: str) -> tuple:
    """(time saved, CI low, CI high) of ``name`` against the comparison's baseline."""
    lo, hi = cmp.time_saved_ci(name)
    return cmp.time_saved(name), lo, hi


def _gain_triple(cmp: timing.Comparison, name: str) -> tuple:
    """(throughput gain = speedup - 1, CI low, CI high)."""
    lo, hi = cmp.ci[name]
    return cmp.speedup[name] - 1.0, lo - 1.0, hi - 1.0


def _pct(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.0%}"


def _pct_ci(t) -> str:
    """``23% [18%, 27%]``; an interval spanning 0 (a slowdown and a speedup both possible) reads
    ``no clear difference (noisy): 3% [-5%, 9%]``."""
    text = f"{t[0]:.0%} [{t[1]:.0%}, {t[2]:.0%}]"
    return f"no clear difference (noisy): {text}" if t[1] < 0 < t[2] else text


def _samples_note(ctx, claim_id: str, conditions=()) -> str:
    """A warning for the summary when the run timed fewer rounds than the rule's minimum, or when a
    condition's rounds stopped (time budget, most rounds) before its intervals decided the rule."""
    need = RULES[claim_id].min_samples
    got = _knobs(ctx)["rounds"]
    out = (f" Only {got} timing rounds per case, fewer than the rule's minimum of {need}: a provisional "
           "verdict." if need and got < need else "")
    open_ = [c for c in conditions if c.comparison is not None and not c.comparison.decided]
    if open_:
        out += (f" {len(open_)} of {len(conditions)} timed conditions stopped "
                f"({', '.join(sorted({c.comparison.stopped for c in open_}))}) before their intervals "
                f"decided ({', '.join(f'{c.workload}@{c.batch}' for c in open_)}): provisional; a longer "
                "time_budget or a quieter machine would decide them.")
    return out


def _wide_note(items, higher_is_better=True) -> str:
    """A warning for the summary when, for some ``(triple, band)`` condition, the interval's width
    rather than its point estimate decided the agreement with the band (a noisy machine)."""
    n = sum(1 for t, band in items
            if band_verdict([t], *band, higher_is_better=higher_is_better)
            != band_verdict([(t[0], t[0], t[0])], *band, higher_is_better=higher_is_better))
    return (f" For {n} of {len(items)} conditions the interval's width, not the point estimate, "
            "decided the agreement (a noisy machine): rerun with more rounds for a firmer verdict."
            if n else "")


def _forward_fn(model, x, grad_mode):
    """``fn()`` running ``model(x)`` under ``grad_mode`` (a torch grad-mode context factory)."""

    def fn():
        with grad_mode():
            return model(x)

    return fn


def _eval_forward_fn(model, x, grad_mode):
    """Like ``_forward_fn``, with ``model.eval()`` set before each call (cheap: a flag per module)."""

    def fn():
        model.eval()
        with grad_mode():
            return model(x)

    return fn


def _train_fn(wl, model, x, y):
    # plain SGD: a momentum buffer would add a second copy of the weights for a timing that
    # barely notices it (one more in-place add per parameter), and Binder's RAM is small
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def fn():
        return memory.train_step(model, x, y, wl.loss, opt)

    return fn


def _build(name, scale, device, batch, seed):
    """(workload, model in eval mode, input batch, target) with a seeded initialisation."""
    wl = workloads.get(name, scale)
    torch.manual_seed(seed)
    model = wl.build(device).eval()
    return wl, model, wl.make_input(batch, device), wl.make_target(batch, device)


def _band_of(figure: float, half_width: float = 0.05) -> tuple:
    """The band an "about X" figure stands for: [X - 5 pp, X + 5 pp]."""
    return (round(figure - half_width, 6), round(figure + half_width, 6))


def _names(ctx) -> list:
    """``ctx.params['workloads']`` (default: all four), each checked before any work starts."""
    names = list(ctx.params.get("workloads") or workloads.names())
    for n in names:
        workloads.get(n, ctx.scale)
    return names


def _batches(ctx, key: str, default) -> list:
    """``ctx.params[key]`` (default ``default``) as positive ints, checked before any work."""
    return [workloads.check_batch(b) for b in (ctx.params.get(key) or default)]


def _check(claim_id: str):
    """``claim_check`` with one torch CPU thread on tiny CPU runs (see :func:`_knobs`: on a shared
    two-core machine a second OpenMP thread makes every call several times slower and noisier;
    bytes do not depend on it). The thread count is restored afterwards."""
    def deco(fn):
        @functools.wraps(fn)
        def run(ctx):
            with _torch_threads(1 if _quick(ctx) else None):
                return fn(ctx)

        claim_check(claim_id)(run)
        return fn

    return deco


# --------------------------------------------------------------------------------------------
# memory helpers (public: the notebooks sweep with them too)


@contextlib.contextmanager
def accounting():
    """Memory probes that see every allocation, quickly: ``nn.TransformerEncoder``'s fused fast
    path is switched off (it hides a layer's temporaries inside one operator) and the garbage
    collector's old objects are frozen (:func:`nogradlab.batch.frozen_gc`). Both restored on exit."""
    with memory.fused_paths_off(), _batch.frozen_gc():
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
    wl = workloads.get(name, scale)
    if seq_len is not None:
        wl = with_seq_len(wl, seq_len)
    with accounting():
        if setting == "train":
            r = memory.estimate(wl, batch, device, step="train", scale=scale)
        else:
            r = memory.estimate(wl, batch, device, mode=setting, scale=scale)
    return (r.peak_bytes, r.total_peak_bytes, r.saved_bytes, r.baseline_bytes, tuple(r.notes))


def estimate_row(workload: str, batch: int, setting: str, *, device="cuda", scale="full",
                 seq_len: "int | None" = None) -> dict:
    """One :func:`nogradlab.memory.estimate` as a dict (``setting``: ``"train"`` for a training
    step, else a forward setting such as ``"eval+no_grad"``), under :func:`accounting`.
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


def _pairs(rows, base: str, case: str) -> list:
    """Memory saved per (seq_len, batch) from a sweep's rows."""
    by = {(r["seq_len"], r["batch"], r["setting"]): r for r in rows}
    out = []
    for (L, b, s), r in by.items():
        if s != base or (L, b, case) not in by:
            continue
        c = by[(L, b, case)]
        out.append({"seq_len": L, "batch": b, "baseline": base, "case": case,
                    "baseline_total_bytes": r["total_peak_bytes"],
                    "case_total_bytes": c["total_peak_bytes"],
                    "memory_saved": memory_saved(r["total_peak_bytes"], c["total_peak_bytes"])})
    return out


# --------------------------------------------------------------------------------------------
# one timing per condition


def _speed_batches(ctx, wl) -> tuple:
    """The batches every speed check times, per workload: on a tiny CPU run batch 1 and half the
    default batch (the default itself where half is 1; ResNet-50 at 64x64 dominates the budget);
    on a GPU the default batch (often overhead-bound: a fixed cost per call), and 4x it
    (compute-bound) in the reference run (:attr:`~nogradlab.claims.Context.reference`); elsewhere
    1x and 4x. ``ctx.params['batches']`` wins."""
    d = wl.default_batch
    if _quick(ctx):
        default = (1, d // 2) if d // 2 > 1 else (1, max(d, 2))
    elif ctx.on_gpu and not ctx.reference:
        # a learner's GPU run: the default batch alone (4x the transformer's batch costs a quarter of a
        # notebook's minute on an H200: nogradlab.plan); the reference run times both
        default = (d,)
    else:
        default = (d, 4 * d)
    return tuple(dict.fromkeys(_batches(ctx, "batches", default)))


def _cast(ctx) -> str:
    return "fp16" if ctx.device.type == "cuda" else "bf16"


def _lever_batches(ctx, wl) -> tuple:
    """The batches whose conditions also time the levers (X05): every speed batch, so both the
    overhead-bound and the compute-bound regime are shown (at small/full scale on a CPU, and in the
    GPU reference run); only the main speed batch (:func:`_speed_batch`: the default batch) on a tiny
    CPU run, and in a learner's GPU run, whose speed batches are that one anyway (on an H200 the levers
    at 4x the transformer's batch alone cost half a notebook's minute: :mod:`nogradlab.plan`)."""
    bs = _speed_batches(ctx, wl)
    if _quick(ctx) or (ctx.on_gpu and not ctx.reference):
        main = _speed_batch(ctx, wl)
        return tuple(b for b in bs if b == main) or bs[-1:]
    return bs


# channels_last is timed on a copy of the model in that layout. In a tiny CPU run (a learner's Binder
# kernel, 1-2 GB) the copy of ResNet-50's 102 MB of weights, next to the original, pushed notebook 05's
# kernel to within a few MB of its 1.5 GB budget; channels_last is a GPU lever anyway, so there it is left
# to notebook 09's by-hand cell and to the small, full and CUDA runs.
_CL_QUICK_NOTE = ("not timed in a tiny CPU run (a copy of the model in channels_last layout costs a small "
                  "kernel its weights again; notebook 09 times it by hand); timed at small and full scale")


# C20's training-step row (shown, never deciding a cell) in a tiny CPU run: a ResNet-50 training step holds
# its weights three times (weights, gradients, SGD momentum: 300 MB) beside the forward's model, the
# largest share of notebook 05's kernel on a 1-2 GB Binder machine
_TRAIN_QUICK_NOTE = ("not timed in a tiny CPU run (a training step holds the weights three times, weights, "
                     "gradients and momentum, which a learner's 1-2 GB kernel should not pay for a row that "
                     "decides nothing; pass train_step_timing=True)")


def _lever_settings(ctx, name, batch: "int | None" = None) -> list:
    """Every forward setting timed in one condition, whichever check asks first (so that each
    number is measured once, with one protocol): grad (the baseline), no_grad, the transformer's
    no_grad with its fused fast path switched off, and, at the batches of :func:`_lever_batches`,
    inference_mode, autocast on top of no_grad (bf16 on CPU; fp16 and bf16 on CUDA) and
    channels_last for the CNNs (stacked with the autocast dtypes on CUDA). A learner's GPU run times
    fp16 alone, and channels_last only stacked with it (5 cases for a CNN where the reference run has
    8: each case costs every round; :mod:`nogradlab.plan`). The set depends only on
    the condition, never on which check asks. torch.compile is X05's own quantity
    (:func:`_compiled_timing`): compiling costs tens of seconds a model, which no other check
    should pay."""
    out = ["grad", "no_grad"]
    if name == "transformer_base":
        out.append("no_grad (fast path off)")
    if batch is not None and batch not in _lever_batches(ctx, workloads.get(name, ctx.scale)):
        return out
    out.append("inference_mode")
    learner_gpu = ctx.device.type == "cuda" and not ctx.reference
    casts = ("fp16",) if learner_gpu else ("fp16", "bf16") if ctx.device.type == "cuda" else ("bf16",)
    out += [f"no_grad+{c}" for c in casts]
    if name in CNNS and not _quick(ctx):  # see _CL_QUICK_NOTE
        if learner_gpu:  # the lever a GPU user would stack: channels_last with half precision
            out.append("no_grad+fp16+channels_last")
        else:
            out.append("no_grad+channels_last")
            if ctx.device.type == "cuda":
                out += [f"no_grad+{c}+channels_last" for c in casts]
    return out


def _case_fn(name, setting, model, x, device, holder):
    """``fn()`` for one setting of the shared condition (``holder`` keeps derived models alive)."""
    grad_mode = {"grad": torch.enable_grad, "inference_mode": torch.inference_mode}.get(setting, torch.no_grad)
    m, inp = model, x
    if "channels_last" in setting:
        if "cl_model" not in holder:
            holder["cl_model"] = copy.deepcopy(model).to(memory_format=torch.channels_last)
            holder["cl_x"] = x.contiguous(memory_format=torch.channels_last)
        m, inp = holder["cl_model"], holder["cl_x"]
    cast = next((c for c in ("fp16", "bf16") if f"+{c}" in setting), None)
    fast_off = setting == "no_grad (fast path off)"

    def fn():
        with contextlib.ExitStack() as st:
            st.enter_context(grad_mode())
            if cast:
                st.enter_context(torch.autocast(device_type=device.type, dtype=modes.AUTOCAST_DTYPES[cast]))
            if fast_off:
                st.enter_context(memory.fused_paths_off())
            return m(inp)

    return fn


@dataclasses.dataclass
class Condition:
    """One shared forward timing: every setting of :func:`_lever_settings` for (workload, scale,
    batch, device), timed together in interleaved rounds (``comparison``, baseline ``grad``)."""

    workload: str
    scale: str
    batch: int
    device: str
    comparison: "timing.Comparison | None"
    settings: list
    state: dict
    skipped: dict
    key: tuple

    def triple(self, case: str, kind: str = "saved") -> tuple:
        """(point, CI low, CI high) of ``case`` vs grad: ``"saved"`` time saved, ``"gain"``
        throughput gain (speedup - 1), ``"speedup"``."""
        cmp = self.comparison
        if kind == "saved":
            return _saved_triple(cmp, case)
        if kind == "gain":
            return _gain_triple(cmp, case)
        lo, hi = cmp.ci[case]
        return cmp.speedup[case], lo, hi

    def ratio(self, a: str, b: str) -> tuple:
        """(t_b / t_a, CI) for two cases of this condition: paired bootstrap over its rounds."""
        t = self.comparison.timings
        sp, ci = timing.bootstrap_speedup({a: t[a].times, b: t[b].times}, a, seed=self.comparison.seed)
        return sp[b], ci[b][0], ci[b][1]

    def ms(self, case: str) -> float:
        return self.comparison.timings[case].median * 1e3

    def to_dict(self) -> dict:
        return {"workload": self.workload, "scale": self.scale, "batch": self.batch, "device": self.device,
                "settings": self.settings, "state": self.state, "skipped": self.skipped,
                "comparison": self.comparison.to_dict() if self.comparison is not None else None}


def _condition_edges(name: str) -> list:
    """The speedups (over grad) at which a rule reading a forward condition of workload ``name``
    changes its answer: 1 (faster or not: C17, X05's ties), C03's band of time saved and C20's band
    of throughput gain for the workload. The condition's rounds go on until no interval straddles
    one of them (:func:`nogradlab.timing.resolves`)."""
    lo, hi = RULES["C03"].band
    edges = {1.0, 1.0 / (1.0 - lo), 1.0 / (1.0 - hi)}
    if name in ARTICLE_TABLE:
        a, b = ARTICLE_TABLE[name]["speed"]
        edges |= {1.0 + a, 1.0 + b}
    return sorted(edges)


def forward_condition(ctx, name: str, batch: int) -> Condition:
    """The shared forward timing of (workload ``name``, ``ctx.scale``, ``batch``, ``ctx.device``):
    measured once per run (:data:`nogradlab.timing.RUN`) with one protocol (warm-up, CUDA sync,
    interleaved rounds, ``cudnn.benchmark`` on and clocks warmed on CUDA, the TF32 state
    recorded) and reused by every check asking for it (C03, C17, C20, X05)."""
    knobs = _knobs(ctx)
    key = ("forward", name, ctx.scale, int(batch), str(ctx.device), ctx.seed,
           tuple(sorted(knobs.items(), key=lambda kv: kv[0])), tuple(_lever_settings(ctx, name, int(batch))))
    return timing.shared(key, lambda: _measure_condition(ctx, name, int(batch), knobs, key))


def _measure_condition(ctx, name, batch, knobs, key) -> Condition:
    settings = _lever_settings(ctx, name, batch)
    skipped = {}
    if name not in CNNS:
        skipped["channels_last"] = "not a convolutional network"
    elif _quick(ctx):
        skipped["channels_last"] = _CL_QUICK_NOTE
    wl, model, x, _ = _build(name, ctx.scale, ctx.device, batch, ctx.seed)
    holder, cases = {}, {}
    try:
        for s in settings:
            cases[s] = _case_fn(name, s, model, x, ctx.device, holder)
        with _torch_threads(knobs["num_threads"]), \
                timing.timing_state(ctx.device, warm_fn=cases["grad"]) as state:
            # intervals narrower than 1 % of a speedup around an edge would take too long to move off it
            cmp = timing.compare(cases, baseline="grad", device=ctx.device, seed=ctx.seed,
                                 until=timing.resolves(_condition_edges(name), min_width=0.01), **knobs)
    except torch.OutOfMemoryError:
        cmp, state = None, timing.gpu_state(ctx.device)
        skipped["all"] = f"out of memory at batch {batch} on {ctx.device}"
    finally:
        del model, x, holder
        if ctx.on_gpu:
            torch.cuda.empty_cache()
    return Condition(name, ctx.scale, batch, str(ctx.device), cmp, [s for s in settings if s in cases],
                     dict(state, threads=knobs["num_threads"] or torch.get_num_threads()), skipped, key)


# --------------------------------------------------------------------------------------------
# C03: runtime cut by no_grad


@_check("C03")
def c03(ctx):
    """Grad vs no_grad forward of each workload (model in eval mode in both) at two batch sizes,
    from the shared timing of each condition (:func:`forward_condition`). The transformer's eval
    fast path (a fused kernel taken only with grad off) is reported apart: no_grad with the fast
    path switched off is the bookkeeping saving alone. Knobs: ``workloads``, ``batches``."""
    rule = RULES["C03"]
    names = _names(ctx)
    rows, triples, fused = [], [], []
    for name in names:
        for b in _speed_batches(ctx, workloads.get(name, ctx.scale)):
            c = forward_condition(ctx, name, b)
            if c.comparison is None:
                continue
            case = "no_grad (fast path off)" if "no_grad (fast path off)" in c.settings else "no_grad"
            t = c.triple(case)  # the verdict: the bookkeeping saving, not a different kernel
            row = {"workload": name, "batch": b, "time_saved": t[0], "time_saved_ci": list(t[1:]),
                   "speedup": c.comparison.speedup[case], "speedup_ci": list(c.comparison.ci[case]),
                   "grad_ms": c.ms("grad"), "no_grad_ms": c.ms(case), "case": case,
                   "noisy": any(c.comparison.timings[k].noisy for k in ("grad", case))}
            if case != "no_grad":
                f = c.triple("no_grad")
                row.update(with_fast_path={"time_saved": f[0], "time_saved_ci": list(f[1:]),
                                           "no_grad_ms": c.ms("no_grad")},
                           fused_kernel_share=(f[0] - t[0]) / f[0] if f[0] > 0 else None)
                fused.append(f"{name}@{b}: {_pct_ci(f)} with the fused fast path, {_pct_ci(t)} without")
            triples.append(tuple(round(v, 2) for v in t))  # as printed: whole percent
            rows.append(row)
    verdict = band_verdict(triples, *rule.band, higher_is_better=rule.lower_bound)
    inside = [f"{r['workload']}@{r['batch']}" for r, t in zip(rows, triples)
              if band_verdict([t], *rule.band, higher_is_better=rule.lower_bound) == "holds"]
    below = [f"{r['workload']}@{r['batch']}" for r in rows if f"{r['workload']}@{r['batch']}" not in inside]
    lo, hi = min(r["time_saved"] for r in rows), max(r["time_saved"] for r in rows)
    summary = (f"Forward with grad vs without grad (eval mode, same model and input, {ctx.scale} scale, "
               f"{ctx.device}): no_grad cut the time by {lo:.0%} to {hi:.0%} across {len(rows)} workload x "
               f"batch conditions; article: 20-40 %. Reaches the band (or more) by its 95 % CI: "
               f"{', '.join(inside) or 'none'}; below it: {', '.join(below) or 'none'}."
               + (" The transformer's eval fast path (a fused kernel taken only with grad off) is "
                  "counted apart, not credited to no_grad: " + "; ".join(fused) + "." if fused else "")
               + _wide_note([(t, rule.band) for t in triples]) + _samples_note(ctx, "C03", [forward_condition(ctx, r["workload"], r["batch"]) for r in rows]))
    evidence = {"article_band": rule.band, "metric": "time_saved = 1 - t_no_grad / t_grad (eval mode, "
                "same model and input; CI: 95 % paired bootstrap); for the transformer no_grad is timed "
                "with the fused fast path off (the saving of the bookkeeping alone), the fast path's "
                "figure beside it", "rows": rows,
                "agree": inside, "below_band": below, "knobs": _knobs(ctx),
                "timing": "shared per condition (nogradlab.claims.numbers.forward_condition)",
                "state": next((forward_condition(ctx, r["workload"], r["batch"]).state for r in rows), {}),
                "note": "nn.TransformerEncoder in eval takes a fused fast path when grad is off: part "
                        "of its gain is a different kernel, not only skipped bookkeeping; "
                        "fused_kernel_share is that part's share of the whole saving."}
    noisy = sum(1 for t in triples if t[1] < 0 < t[2])
    evidence["reading"] = (f"no_grad's forward saving reaches the article's 20 % (by its CI) in {len(inside)} of "
                           f"{len(rows)} conditions" + (f"; {noisy} show no clear difference (noisy: the CI spans "
                                                        "both a slowdown and a speedup)" if noisy else "") + ".")
    return verdict, summary, evidence


# --------------------------------------------------------------------------------------------
# C08: is what backward keeps the largest share of training memory?


@_check("C08")
def c08(ctx):
    """Activation (saved-for-backward) bytes of one training step vs parameter + gradient +
    SGD-momentum bytes, per workload at the article's sizes (estimate on a virtual CUDA device),
    at batch 1 and the workload's default batch; the crossover batch follows from the slope.
    Knobs: ``batches`` (default ``(1, default)``)."""
    rows, crossovers, states = [], {}, []
    for name in workloads.names():
        wl = workloads.get(name, "full")
        p = param_bytes(name, "full")
        others = {"parameters": p, "gradients": p, "optimizer_state_sgd_momentum": p}
        batches = _batches(ctx, "batches", (1, wl.default_batch))
        acts = {}
        for b in batches:
            r = estimate_row(name, b, "train", scale="full")
            acts[b] = r["saved_bytes"]
            fixed = sum(others.values())
            largest = r["saved_bytes"] > fixed
            states.append(largest)
            rows.append({"workload": name, "batch": b, "activation_bytes": r["saved_bytes"],
                         **{f"{k}_bytes": v for k, v in others.items()},
                         "params_grads_optimizer_bytes": fixed,
                         "training_peak_bytes": r["total_peak_bytes"],
                         "activation_share_of_peak": r["saved_bytes"] / r["total_peak_bytes"],
                         "activations_exceed_the_rest": largest,
                         "activations_exceed_each_part": r["saved_bytes"] > p, "notes": r["notes"]})
        b1, b2 = min(acts), max(acts)
        slope = (acts[b2] - acts[b1]) / (b2 - b1) if b2 > b1 else acts[b1] / b1
        crossovers[name] = {"per_sample_activation_bytes": slope,
                            "crossover_batch_sgd": math.ceil(3 * p / slope) if slope > 0 else None,
                            "crossover_batch_adam": math.ceil(4 * p / slope) if slope > 0 else None}
    verdict = "holds" if all(states) else "does not hold" if not any(states) else "depends"
    parts = [f"{n} from batch {c['crossover_batch_sgd']}" for n, c in crossovers.items()]
    small = [min((r for r in rows if r["workload"] == n), key=lambda r: r["batch"]) for n in crossovers]
    large = [max((r for r in rows if r["workload"] == n), key=lambda r: r["batch"]) for n in crossovers]
    at = (f"{sum(r['activations_exceed_the_rest'] for r in small)} of {len(small)} workloads at the "
          f"smaller batch ({', '.join(str(r['batch']) for r in small)}), "
          f"{sum(r['activations_exceed_the_rest'] for r in large)} of {len(large)} at the larger "
          f"({', '.join(str(r['batch']) for r in large)})")
    summary = ("At the article's model sizes (training step, estimated), activations kept for backward "
               f"outweigh parameters + gradients + SGD-momentum state in {at}. They take "
               f"over above a crossover batch: {'; '.join(parts)} (Adam's two state tensors move it "
               "to 4P/slope); below it the weights and their companions dominate.")
    evidence = {"rows": rows, "crossover": crossovers, "method": "memory.estimate, train step "
                "(forward, loss, backward, SGD-momentum step), scale full, virtual CUDA",
                "criterion": "activation (saved-for-backward) bytes > parameter + gradient + "
                             "optimizer-state bytes; the crossover batch assumes activations grow "
                             "linearly with the batch (exact between the two estimated batches)"}
    return verdict, summary, evidence


def enter_exit(ctx, nested: bool = False) -> "timing.Timing":
    """One ``with torch.no_grad(): pass`` (entered from grad mode, or ``nested`` inside another
    no_grad): measured once per run and shared by C12 and C13."""
    k = _knobs(ctx)
    key = ("no_grad enter+exit", bool(nested), str(ctx.device), k["min_run_time"], k["num_threads"])

    def fn():
        with torch.no_grad():
            pass

    def make():
        with contextlib.ExitStack() as st:
            if nested:
                st.enter_context(torch.no_grad())
            return timing.measure(fn, ctx.device, min_run_time=k["min_run_time"], num_threads=k["num_threads"],
                                  label="enter+exit no_grad" + (" inside no_grad" if nested else ""))

    return timing.shared(key, make)


# --------------------------------------------------------------------------------------------
# C13: no_grad scope in a validation loop


def _val_loop(model, batches, scope: str):
    """A validation loop (forward + accuracy) with no_grad around the whole loop, around each
    batch, or around each batch and again (three levels deep) inside a whole-loop scope."""
    def per_batch():
        correct = 0
        for x, y in batches:
            with torch.no_grad():
                correct += int((model(x).argmax(1) == y).sum())
        return correct

    def whole():
        correct = 0
        with torch.no_grad():
            for x, y in batches:
                correct += int((model(x).argmax(1) == y).sum())
        return correct

    def nested():
        correct = 0
        with torch.no_grad():
            for x, y in batches:
                with torch.no_grad():
                    with torch.no_grad():
                        correct += int((model(x).argmax(1) == y).sum())
        return correct

    return {"per_batch": per_batch, "whole_loop": whole, "nested": nested}[scope]


@_check("C13")
def c13(ctx):
    """The same validation loop with no_grad around the whole loop, around each batch, and nested
    redundantly per batch; the smallest workload (mlp) so that a per-batch cost weighs the most:
    the case most favourable to the claim. Knobs: ``workload``, ``n_batches``."""
    name = ctx.params.get("workload", "mlp")
    if name not in ("mlp", "resnet50"):
        raise ValueError(f"C13 needs a classifier workload; allowed: mlp, resnet50 (got {name!r})")
    n = int(ctx.params.get("n_batches", 8 if _quick(ctx) else 50))
    wl, model, _, _ = _build(name, ctx.scale, ctx.device, 1, ctx.seed)
    batches = [(wl.make_input(wl.default_batch, ctx.device), wl.make_target(wl.default_batch, ctx.device))
               for _ in range(n)]
    scopes = ("per_batch", "whole_loop", "nested")
    results = {s: _val_loop(model, batches, s)() for s in scopes}
    cmp = _compare(ctx, {s: _val_loop(model, batches, s) for s in scopes}, "per_batch",
                   rounds=20, min_run_time=0.3)
    gain = _gain_triple(cmp, "whole_loop")

    enter = enter_exit(ctx)
    # the only difference between the two scopes: n - 1 more context entries and exits
    predicted = (n - 1) * enter.median / cmp.timings["whole_loop"].median
    band = RULES["C13"].band
    verdict = band_verdict([(round(predicted, 2), None, None)], *band)
    loop_ms = cmp.timings["whole_loop"].median * 1e3
    summary = (f"A per-batch no_grad differs from a whole-loop one by {n - 1} more context entries "
               f"and exits, {enter.median * 1e6:.2f} µs each, against a {loop_ms:.2f} ms "
               f"loop of {n} batches of the {ctx.scale} {name} ({ctx.device}): at most {predicted:.2%} "
               f"more throughput for the wider scope (article: about 30 %, read as 25-35 %). Timed directly: "
               f"{_pct_ci(gain)}; redundant nesting (two more levels per batch) "
               f"{_pct_ci(_saved_triple(cmp, 'nested'))} time saved vs per-batch. The survey behind "
               "the 30 % (projects, not loops) cannot be checked; the mechanism can.")
    evidence = {"workload": name, "batch": wl.default_batch, "n_batches": n,
                "throughput_gain_whole_vs_per_batch": gain[0], "ci": gain[1:],
                "enter_exit_s": enter.median, "predicted_gain_from_context_cost": predicted,
                "article_band": band, "metric": "throughput gain = t_per_batch / t_whole_loop - 1; the "
                "verdict uses the gain the context cost can explain, (n-1) * t_enter_exit / t_whole_loop, "
                "which a noisy machine cannot blur; the direct timing is the cross-check",
                "same_accuracy": len(set(results.values())) == 1,
                "correct": results, "comparison": cmp.to_dict(),
                "note": "survey statistic (projects, not loops) untestable; the mechanism is measured"}
    return verdict, summary, evidence


# --------------------------------------------------------------------------------------------
# C16: eval() and metric variability


def _dropout_classifier(device, seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 10)).to(device)


@_check("C16")
def c16(ctx):
    """Accuracy of one fixed model on one fixed data set over repeated runs (a different RNG state
    each run), in train mode (dropout active) and eval mode; also train mode under no_grad with
    the same seeds. Knobs: ``runs``."""
    runs = int(ctx.params.get("runs", 20))
    model = _dropout_classifier(ctx.device, ctx.seed)
    g = torch.Generator().manual_seed(ctx.seed + 1)
    x = torch.randn(512, 32, generator=g).to(ctx.device)
    with torch.no_grad():
        y = model.eval()(x).argmax(1)
    flip = torch.rand(512, generator=g).to(ctx.device) < 0.3
    y = torch.where(flip, torch.randint(0, 10, (512,), generator=g).to(ctx.device), y)

    def accuracies(train: bool, grad_mode):
        model.train(train)
        out = []
        for r in range(runs):
            torch.manual_seed(ctx.seed + 1000 + r)
            with grad_mode():
                out.append(float((model(x).argmax(1) == y).float().mean()))
        return out

    acc = {"train": accuracies(True, torch.enable_grad), "eval": accuracies(False, torch.enable_grad),
           "train+no_grad": accuracies(True, torch.no_grad)}
    model.eval()
    spread = {k: float(np.std(v)) for k, v in acc.items()}
    reduction = 1.0 - spread["eval"] / spread["train"] if spread["train"] > 0 else float("nan")
    no_grad_same = acc["train"] == acc["train+no_grad"]
    summary = (f"Not testable: the article's 7 % comes from an unnamed benchmark. The mechanism, shown: over "
               f"{runs} runs of one fixed model on one fixed data set, the accuracy's standard deviation was "
               f"{spread['train']:.4f} in train mode (dropout 0.1) and {spread['eval']:.4f} in eval mode. Here "
               "dropout is the only source of run-to-run randomness, so eval() removing "
               f"{_pct(reduction)} of it is true by construction and is no evidence for or against 7 %: in a "
               "real benchmark the share depends on how much of the variance dropout (and BatchNorm's batch "
               "statistics) caused, beside data order and initialisation. no_grad left the train-mode values "
               + ("identical." if no_grad_same else "different (unexpected)."))
    evidence = {"runs": runs, "accuracy": acc, "std": spread, "spread_reduction": reduction,
                "train_no_grad_identical_to_train": no_grad_same,
                "by_construction": "dropout is the only randomness (fixed model, fixed data): eval removes "
                                   "all of the spread whatever the benchmark's share would be",
                "model": "Linear(32,64)-ReLU-Dropout(0.1)-Linear(64,10), 512 fixed samples; labels: "
                         "its own eval predictions with 30 % replaced at random",
                "note": "the article's ~7 % comes from an unnamed benchmark: not testable. Eval "
                        "mode makes dropout the identity, so dropout's share of the variability "
                        "goes to zero; BatchNorm in train mode adds batch-composition dependence."}
    return "not testable", summary, evidence


# --------------------------------------------------------------------------------------------
# C17: validation loop, eval only vs eval + no_grad


@_check("C17")
def c17(ctx):
    """An eval-mode validation loop (ResNet-50 by default), grad on vs no_grad. Its speed is the
    shared forward timing of (workload, scale, batch, device) (:func:`forward_condition`: a loop
    step on data already on the device is one forward plus an argmax); its accuracy and
    predictions come from running the loop both ways over ``n_batches`` batches whose labels are
    drawn independently of the model. Knobs: ``workload``, ``n_batches``, ``batch``."""
    rule = RULES["C17"]
    name = ctx.params.get("workload", "resnet50")
    if name not in ("mlp", "resnet50"):
        raise ValueError(f"C17 needs a classifier workload; allowed: mlp, resnet50 (got {name!r})")
    wl = workloads.get(name, ctx.scale)
    b = _speed_batch(ctx, wl)
    n = int(ctx.params.get("n_batches", 8 if _quick(ctx) else 20))
    if n < 1:
        raise ValueError(f"n_batches must be a positive integer, got {n}")
    wl, model, _, _ = _build(name, ctx.scale, ctx.device, b, ctx.seed)
    g = torch.Generator().manual_seed(ctx.seed + 17)
    xs = [wl.make_input(b, ctx.device) for _ in range(n)]
    ncls = int(wl.params.get("num_classes", wl.params.get("classes", 0)) or 0)
    with torch.no_grad():
        ncls = ncls or int(model(xs[0][:1]).shape[1])
    # labels drawn from their own generator: independent of the model, so accuracy is free to move
    ys = [torch.randint(0, ncls, (b,), generator=g).to(ctx.device) for _ in range(n)]

    def loop(grad_mode):
        logits = []
        with grad_mode():
            for x in xs:
                logits.append(model(x).detach())
        return logits

    l_grad, l_ng = loop(torch.enable_grad), loop(torch.no_grad)
    p_grad, p_ng = [v.argmax(1) for v in l_grad], [v.argmax(1) for v in l_ng]
    acc = {k: float(sum(int((p == y).sum()) for p, y in zip(ps, ys)) / (n * b))
           for k, ps in (("eval", p_grad), ("eval+no_grad", p_ng))}
    same_preds = all(torch.equal(a, c) for a, c in zip(p_grad, p_ng))
    max_diff = max(float((a - c).abs().max()) for a, c in zip(l_grad, l_ng))
    distinct = len({int(v) for p in p_grad for v in p})
    del model, xs
    c = forward_condition(ctx, name, b)
    t = c.triple("no_grad")
    band = rule.band
    verdict = band_verdict([tuple(round(v, 2) for v in t)], *band, higher_is_better=rule.lower_bound)
    if acc["eval"] != acc["eval+no_grad"] or not same_preds:
        verdict = "does not hold"
    summary = (f"Validation loop of the {ctx.scale} {name} in eval mode ({n} batches of {b}, {ctx.device}): "
               f"adding no_grad cut each step's forward by {_pct_ci(t)} (the shared forward timing at "
               f"batch {b}: {c.ms('grad'):.3g} ms with grad, {c.ms('no_grad'):.3g} ms without; article: about "
               f"35 %, read as 30-40 %). Predictions over {n * b} images "
               + ("identical" if same_preds else "DIFFERENT") + f" (largest logit difference {max_diff:.2g}), "
               f"so the accuracy is the same for any labels: {acc['eval']:.3f} vs {acc['eval+no_grad']:.3f} on "
               f"labels drawn independently of the model (an untrained model predicts {distinct} distinct "
               "class(es): its accuracy is chance, only the identity of the predictions is evidence). "
               "The data is already on the device: a loader or host-to-device copies would add the same "
               "time to both." + _wide_note([(t, band)]) + _samples_note(ctx, "C17", [c]))
    evidence = {"workload": name, "batch": b, "n_batches": n, "time_saved": t[0], "ci": list(t[1:]),
                "article_band": band, "accuracy": acc, "same_predictions": same_preds,
                "max_logit_diff": max_diff, "distinct_predicted_classes": distinct,
                "labels": "uniform random classes from torch.Generator(seed + 17), independent of the model",
                "comparison": c.comparison.to_dict(),
                "timing": "shared per condition (forward_condition): the same numbers as C03/C20/X05",
                "metric": "time_saved = 1 - t(eval+no_grad forward)/t(eval forward) per loop step"}
    evidence["reading"] = (f"Time saved per loop step: {format_saved(*t)} against the article's about 35 %; "
                           + ("same predictions." if same_preds else "predictions differ."))
    return verdict, summary, evidence


# --------------------------------------------------------------------------------------------
# C18: feed-forward nets, peak memory


@_check("C18")
def c18(ctx):
    """Peak memory of a forward pass, grad vs no_grad (eval mode in both), for the feed-forward
    workloads (mlp, resnet50, unet: no recurrent connections; the transformer is C19's): real
    measurements of the ``ctx.scale`` models on ``ctx.device`` over a batch sweep, and estimates
    at the article's sizes on a virtual CUDA device. Knobs: ``batches``, ``full_batches``."""
    real, est = [], []
    for key in ("batches", "full_batches"):  # both lists checked before any model is built
        if ctx.params.get(key) is not None:
            _batches(ctx, key, ())
    for name in FEED_FORWARD:
        wl, model, _, _ = _build(name, ctx.scale, ctx.device, 1, ctx.seed)
        d = wl.default_batch
        for b in _batches(ctx, "batches", (1, d, 2 * d)):
            x = wl.make_input(b, ctx.device)
            g, ng = (measure_forward(model, x, s, ctx.device, _knobs(ctx)["num_threads"])
                     for s in ("eval+grad", "eval+no_grad"))
            real.append({"workload": name, "scale": ctx.scale, "batch": b,
                         "grad_total_bytes": g["total_peak_bytes"], "no_grad_total_bytes": ng["total_peak_bytes"],
                         "grad_peak_bytes": g["peak_bytes"], "no_grad_peak_bytes": ng["peak_bytes"],
                         "resident_bytes": g["resident_bytes"], "method": g["method"],
                         "memory_saved": memory_saved(g["total_peak_bytes"], ng["total_peak_bytes"])})
        del model
        full = workloads.get(name, "full").default_batch
        # the estimates' sweep: the default batch in a learner's notebook (tiny CPU or GPU), four batches else
        fb = _batches(ctx, "full_batches", (full,) if _quick(ctx) or (ctx.on_gpu and not ctx.reference)
                      else (1, full // 4, full, 4 * full))
        rows = estimate_sweep(name, fb, ("eval+grad", "eval+no_grad"))
        for p in _pairs(rows, "eval+grad", "eval+no_grad"):
            est.append({"workload": name, "scale": "full", "batch": p["batch"],
                        "grad_total_bytes": p["baseline_total_bytes"],
                        "no_grad_total_bytes": p["case_total_bytes"], "method": "estimate (virtual cuda)",
                        "memory_saved": p["memory_saved"]})
    rule = RULES["C18"]
    band = rule.band
    allr = real + est
    for r in allr:
        r["printed"] = round(r["memory_saved"], 2)
        r["position"] = ("in" if in_band(r["memory_saved"], band, rule.rounding) else
                         "below" if r["printed"] < band[0] else "above")
    n_in = sum(r["position"] == "in" for r in allr)
    verdict = "holds" if n_in == len(allr) else "does not hold" if n_in == 0 else "depends"
    below = sorted({f"{r['workload']}@{r['batch']} ({r['scale']})" for r in allr if r["position"] == "below"})
    above = sorted({f"{r['workload']}@{r['batch']} ({r['scale']})" for r in allr if r["position"] == "above"})
    summary = (f"no_grad cut the forward pass's total peak (weights and input included) by "
               f"{min(r['memory_saved'] for r in real):.0%}-{max(r['memory_saved'] for r in real):.0%} "
               f"in real {ctx.scale} runs on {ctx.device} and by "
               f"{min(r['memory_saved'] for r in est):.0%}-{max(r['memory_saved'] for r in est):.0%} "
               f"in estimates at the article's sizes (article: 20-40 %). In the band (as printed, whole %): "
               f"{n_in} of {len(allr)} conditions; below it: {', '.join(below) or 'none'}; above it (a larger "
               f"saving than the article says, not agreement): {', '.join(above) or 'none'}. The saving is the "
               "activations' share of the peak: small where weights dominate (small batches, the MLP), large "
               "where activations do.")
    evidence = {"article_band": band, "measured": real, "estimated_full_size": est,
                "feed_forward_workloads": list(FEED_FORWARD),
                "metric": "memory_saved = 1 - total_peak(eval+no_grad forward) / total_peak(eval+grad "
                          "forward); total = weights + buffers + input + the call's own peak",
                "below_band": below, "above_band": above, "in_band": n_in,
                "rounding": "memory_saved compared at whole percent, as printed"}
    return verdict, summary, evidence


# --------------------------------------------------------------------------------------------
# C19 / C21: transformers and sequence length


def _seq_sweep(ctx) -> dict:
    """Memory saved (eval+grad vs eval+no_grad forward, totals) vs sequence length: real runs of
    the ``ctx.scale`` transformer, and estimates at full size (batch 16) on a virtual CUDA device
    (math attention) and on the fake CPU device (fused flash attention). Both are exact and
    deterministic, so C19 and C21 share one sweep per process."""
    lens = tuple(_batches(ctx, "seq_lens", (32, 64, 128, 256, 512) if _quick(ctx) else
                          (128, 512, 2048) if ctx.on_gpu and not ctx.reference else
                          (128, 256, 512, 1024, 2048, 4096)))
    # the estimates' longer list of sequence lengths: at small/full scale on a CPU, and in the GPU reference
    reference = ctx.reference or (not ctx.on_gpu and not _quick(ctx))
    return copy.deepcopy(_seq_sweep_cached(str(ctx.device), ctx.scale, ctx.seed, lens, reference))


@functools.lru_cache(maxsize=8)
def _seq_sweep_cached(device: str, scale: str, seed: int, lens: tuple, reference: bool = True) -> dict:
    dev = torch.device(device)
    quick = dev.type != "cuda" and scale == "tiny"
    wl0, model, _, _ = _build("transformer_base", scale, dev, 1, seed)
    real, notes = [], []
    for L in lens:
        wl = with_seq_len(wl0, L)
        x = wl.make_input(wl.default_batch, dev)
        try:
            g, ng = (measure_forward(model, x, s, dev, 1 if quick else None) for s in ("eval+grad", "eval+no_grad"))
        except torch.OutOfMemoryError:
            notes.append(f"out of memory at sequence length {L} on {dev}: the real sweep stops there")
            break
        finally:
            del x
        real.append({"seq_len": L, "batch": wl.default_batch, "scale": scale,
                     "grad_total_bytes": g["total_peak_bytes"], "no_grad_total_bytes": ng["total_peak_bytes"],
                     "saved_for_backward_bytes": g["saved_bytes"],
                     "saved_per_token_bytes": g["saved_bytes"] / (wl.default_batch * L),
                     "memory_saved": memory_saved(g["total_peak_bytes"], ng["total_peak_bytes"])})
    del model
    full_b = workloads.get("transformer_base", "full").default_batch
    est = {}
    # without a GPU, fake CUDA tensors get PyTorch's math attention (the fused kernels check the
    # real device); with one, the estimate uses whatever kernel this GPU selects
    cuda_label = ("attention as this GPU selects it (fake tensors on cuda)" if torch.cuda.is_available()
                  else "math attention (virtual cuda)")
    variants = {cuda_label: ("cuda", (128, 256, 512, 1024, 2048, 4096)),
                "fused flash attention (fake cpu)": ("cpu", (128, 512, 1024, 4096))}
    if quick or not reference:
        variants = {cuda_label: ("cuda", (128, 1024, 4096)),
                    "fused flash attention (fake cpu)": ("cpu", (128, 4096))}
    for label, (dev, lens) in variants.items():
        rows = estimate_sweep("transformer_base", (full_b,), device=dev, seq_lens=lens)
        grad = {r["seq_len"]: r for r in rows if r["setting"] == "eval+grad"}
        est[label] = [{"seq_len": p["seq_len"], "batch": full_b, "grad_total_bytes": p["baseline_total_bytes"],
                       "no_grad_total_bytes": p["case_total_bytes"],
                       "saved_for_backward_bytes": grad[p["seq_len"]]["saved_bytes"],
                       "saved_per_token_bytes": grad[p["seq_len"]]["saved_bytes"] / (full_b * p["seq_len"]),
                       "memory_saved": p["memory_saved"]} for p in _pairs(rows, "eval+grad", "eval+no_grad")]
    return {"measured": real, "estimated_full_size": est, "notes": notes}


def _grows(rows) -> bool:
    s = [r["memory_saved"] for r in sorted(rows, key=lambda r: r["seq_len"])]
    return all(b >= a for a, b in zip(s, s[1:])) and s[-1] > s[0]


@_check("C19")
def c19(ctx):
    """Memory saved vs sequence length for transformer_base (see :func:`_seq_sweep`); the saving
    per token is the saved-for-backward bytes per token. Knobs: ``seq_lens`` (two or more)."""
    if ctx.params.get("seq_lens") and len(ctx.params["seq_lens"]) < 2:
        raise ValueError(f"C19 needs two or more sequence lengths, got seq_lens={ctx.params['seq_lens']!r}")
    sw = _seq_sweep(ctx)
    series = {k: v for k, v in {f"measured ({ctx.scale}, {ctx.device})": sw["measured"],
                                **sw["estimated_full_size"]}.items() if v}
    grows = {k: _grows(v) for k, v in series.items() if len(v) > 1}
    verdict = "holds" if all(grows.values()) else "does not hold" if not any(grows.values()) else "depends"
    flat = [k for k, g in grows.items() if not g]
    parts = [f"{k}: {_pct(v[0]['memory_saved'])} at {v[0]['seq_len']} -> {_pct(v[-1]['memory_saved'])} at "
             f"{v[-1]['seq_len']} tokens" for k, v in series.items()]
    per_token = {k: [round(r["saved_per_token_bytes"] / 1024, 1) for r in v] for k, v in series.items()}
    tok = "; ".join(f"{k}: {v[0]} -> {v[-1]} KiB ({'grows' if v[-1] > 1.05 * v[0] else 'flat or falling'})"
                    for k, v in per_token.items())
    summary = (f"Memory saved by no_grad (grad vs no_grad forward, eval mode, totals incl. weights) vs "
               f"sequence length: {'; '.join(parts)}; it grows in "
               f"{sum(grows.values())} of {len(grows)} series"
               + (f" (not monotone: {', '.join(flat)}" if flat else "")
               + ("; a no_grad forward with math attention also materialises the L x L scores, so at "
                  "the longest lengths its own peak grows as fast as the grad one" if any("math" in k for k in flat)
                  else "") + (")" if flat else "")
               + f". Saved-for-backward bytes per token: {tok}. "
               "Where they stay flat the fraction still grows because the fixed weights weigh less; "
               "where they grow, kept L x L attention probabilities add a quadratic term. 'Smaller per "
               "token' than other models names no reference, so only the growth is checked.")
    evidence = {"series": series, "grows": grows, "saved_per_token_kib": per_token,
                "baseline": "eval+grad forward", "case": "eval+no_grad forward",
                "notes": sw["notes"] + ["memory measured with nn.TransformerEncoder's fused fast path off (its "
                          "temporaries are invisible to the tracker)",
                          "virtual CUDA runs PyTorch's math attention, which keeps L x L probabilities "
                          "for backward; fused kernels on a real GPU keep none (see the flash series)"]}
    return verdict, summary, evidence


@_check("C21")
def c21(ctx):
    """From the C19 sweep: does the saving exceed 40 % at long sequences, and from which length?"""
    sw = _seq_sweep(ctx)
    series = {k: v for k, v in {f"measured ({ctx.scale}, {ctx.device})": sw["measured"],
                                **sw["estimated_full_size"]}.items() if v}
    longest = {k: max(v, key=lambda r: r["seq_len"]) for k, v in series.items()}
    first = {k: next((r["seq_len"] for r in sorted(v, key=lambda r: r["seq_len"])
                      if r["memory_saved"] > 0.40), None) for k, v in series.items()}
    rule = RULES["C21"]
    verdict = band_verdict([(round(r["memory_saved"], 2), None, None) for r in longest.values()], *rule.band)
    parts = [f"{k}: {_pct(r['memory_saved'])} at {r['seq_len']} tokens (above 40 % from "
             f"{first[k] or 'never'})" for k, r in longest.items()]
    summary = f"At the longest sequence measured the saving was {'; '.join(parts)}. Article: over 40 %."
    evidence = {"longest": longest, "first_seq_len_above_40pct": first, "series": series,
                "article_band": (0.40, 1.0), "baseline": "eval+grad forward", "case": "eval+no_grad forward"}
    return verdict, summary, evidence


# --------------------------------------------------------------------------------------------
# C20: the table


def _start_guess(name: str, setting: str, batch: int) -> int:
    """Where C20's training-step search starts: a line through the estimated totals at batch 1 and
    ``batch`` (the estimates C20's memory cells make anyway) gives a first guess, a secant through
    ``batch`` and that guess a second; the search (:func:`nogradlab.batch.largest_batch`) then finds
    the exact batch from there in a few trials. For a training step this beats the bracket from batches
    1 and 2, where the optimizer step's peak hides the slope (ResNet-50 under 16 GiB: 4 trials against
    10); the no_grad forward searches from the bracket (6 against 18)."""
    def line(b1, m1, b2, m2):
        if b2 == b1 or m2 <= m1:
            return None
        return int(min(max(b1 + (ARTICLE_GPU_BYTES - m1) * (b2 - b1) // (m2 - m1), 1), 2 ** 22))

    def total(b):
        return estimate_row(name, b, setting)["total_peak_bytes"]

    guess = line(1, total(1), batch, total(batch)) if batch > 1 else None
    if guess is None:
        return 1
    if guess != batch:
        guess = line(batch, total(batch), guess, total(guess)) or guess
    return guess


def _train_step_timing(ctx, name, batch) -> "timing.Timing":
    """A training step (forward, loss, backward, SGD step) of (workload, scale, batch, device): its
    own quantity, measured once per run like the forward conditions."""
    knobs = _knobs(ctx)
    key = ("train_step", name, ctx.scale, int(batch), str(ctx.device), ctx.seed,
           tuple(sorted(knobs.items(), key=lambda kv: kv[0])))

    def make():
        wl, model, x, y = _build(name, ctx.scale, ctx.device, batch, ctx.seed)
        fn = _train_fn(wl, model.train(), x, y)
        with _torch_threads(knobs["num_threads"]), timing.timing_state(ctx.device, warm_fn=fn):
            t = timing.measure(fn, ctx.device, min_run_time=knobs["min_run_time"],
                               warmup=knobs["warmup"], num_threads=knobs["num_threads"],
                               label=f"{name} training step")
        del model, x, y
        return t

    return timing.shared(key, make)


def _signed_ci(v, lo, hi) -> str:
    text = f"{v:+.0%} [{lo:+.0%}, {hi:+.0%}]"
    return f"no clear difference (noisy): {text}" if lo < 0 < hi else text


def _fmt_band(band, kind) -> str:
    return (f"{band[0]:.0%}-{band[1]:.0%}" if kind == "pct" else f"{band[0]:.1f}-{band[1]:.1f}x")


@_check("C20")
def c20(ctx):
    """Every cell of the article's table, per workload:

    * memory saved: ``1 - total_peak(eval+no_grad forward) / total_peak(training step)`` at the
      workload's full-size default batch, estimated on a virtual CUDA device, compared with the
      band as printed (whole percent);
    * speed gain: forward with grad against forward without grad (eval mode), the throughput gain
      ``t_grad / t_no_grad - 1`` with its 95 % CI, from the shared timing of the condition
      (:func:`forward_condition`; the transformer without its fused fast path, as in C03); the
      cell agrees when the CI overlaps the band. The training step against the no_grad forward
      (the article's "training versus evaluation" taken literally) is its own labelled row, with
      an unpaired CI, and does not decide a cell;
    * batch factor: largest eval+no_grad batch / largest training batch in 16 GiB
      (:func:`nogradlab.batch.largest_batch`, estimates on a virtual CUDA device, full size),
      compared with the band as printed (one decimal).

    Knobs: ``workloads``, ``batch_factor`` (False skips the largest-batch searches).
    """
    rule = RULES["C20"]
    names = _names(ctx)
    do_batch = ctx.params.get("batch_factor", True)
    rows, cells = [], []
    for name in names:
        art = ARTICLE_TABLE[name]
        full_b = workloads.get(name, "full").default_batch
        tr = estimate_row(name, full_b, "train")
        ev = estimate_row(name, full_b, "eval+no_grad")
        gr = estimate_row(name, full_b, "eval+grad")
        mem = memory_saved(tr["total_peak_bytes"], ev["total_peak_bytes"])
        mem_fwd = memory_saved(gr["total_peak_bytes"], ev["total_peak_bytes"])

        wl = workloads.get(name, ctx.scale)
        b = _speed_batch(ctx, wl)
        c = forward_condition(ctx, name, b)
        case = "no_grad (fast path off)" if "no_grad (fast path off)" in c.settings else "no_grad"
        speed = c.triple(case, "gain")
        speed_fast = c.triple("no_grad", "gain")
        train, train_row = None, (None, None, None)
        if ctx.params.get("train_step_timing", not _quick(ctx)):
            train = _train_step_timing(ctx, name, b)
            tr_ratio, (tr_lo, tr_hi) = timing.bootstrap_ratio(train.times, c.comparison.timings["no_grad"].times,
                                                              seed=ctx.seed)
            train_row = (tr_ratio - 1, tr_lo - 1, tr_hi - 1)

        factor, batches = None, {}
        if do_batch:
            with accounting():
                for mode in ("train", "eval+no_grad"):
                    start = _start_guess(name, mode, full_b) if mode == "train" else "auto"
                    r = shared_largest_batch(name, mode, ARTICLE_GPU_BYTES, "cuda", scale="full",
                                             method="estimate", max_batch=2 ** 22, start=start)
                    batches[mode] = {"batch": r.batch, "trials": len(r.trials), "seconds": r.seconds,
                                     "notes": r.notes}
            if batches["train"]["batch"] > 0:
                factor = batches["eval+no_grad"]["batch"] / batches["train"]["batch"]
        speed_printed = tuple(round(v, 2) for v in speed)  # printed to whole percent
        row = {"workload": name, "article_label": art["label"],
               "memory_saved": mem, "memory_band": art["memory"],
               "speed_gain": speed[0], "speed_gain_ci": list(speed[1:]), "speed_band": art["speed"],
               "speed_case": case, "speed_batch": b, "speed_scale": ctx.scale,
               "speed_gain_with_fast_path": speed_fast[0], "speed_gain_with_fast_path_ci": list(speed_fast[1:]),
               "batch_factor": factor, "batch_band": art["batch"],
               "training_step_vs_no_grad_forward": train_row[0],
               "training_step_vs_no_grad_forward_ci": list(train_row[1:]) if train is not None else None,
               "memory_saved_forward_only": mem_fwd,
               "parameter_bytes": param_bytes(name, "full"), "grad_forward_total_bytes": gr["total_peak_bytes"],
               "time_saved": c.triple(case)[0],
               "train_total_bytes": tr["total_peak_bytes"], "eval_no_grad_total_bytes": ev["total_peak_bytes"],
               "memory_batch": full_b, "largest_batch": batches,
               "timing": {"grad_forward": c.comparison.timings["grad"].median,
                          "no_grad_forward": c.comparison.timings[case].median,
                          "train_step": train.median if train is not None else None}}
        row["in_band"] = {
            "memory": in_band(mem, art["memory"], "pct0"),
            "speed": band_verdict([speed_printed], *art["speed"], higher_is_better=False) == "holds",
            "training_step": None if train is None else band_verdict(
                [tuple(round(v, 2) for v in train_row)], *art["speed"], higher_is_better=False) == "holds",
            "memory_forward_only": in_band(mem_fwd, art["memory"], "pct0"),
            "batch": None if factor is None else in_band(factor, art["batch"], "x1")}
        rows.append(row)
        cells += ["holds" if row["in_band"][k] else "no" for k in ("memory", "speed", "batch")
                  if row["in_band"][k] is not None]
    n_ok = cells.count("holds")
    verdict = "holds" if n_ok == len(cells) else "does not hold" if n_ok == 0 else "depends"
    desc = "; ".join(
        f"{r['workload']}: memory {_pct(r['memory_saved'])} (article {_fmt_band(r['memory_band'], 'pct')}), "
        f"speed {_signed_ci(r['speed_gain'], *r['speed_gain_ci'])} "
        f"(article +{_fmt_band(r['speed_band'], 'pct')}), batch "
        + (f"{r['batch_factor']:.1f}x" if r["batch_factor"] is not None else "n/a")
        + f" (article {_fmt_band(r['batch_band'], 'x')})" for r in rows)
    timed_train = [r for r in rows if r["training_step_vs_no_grad_forward"] is not None]
    train_desc = ", ".join(f"{r['workload']} {_signed_ci(r['training_step_vs_no_grad_forward'], *r['training_step_vs_no_grad_forward_ci'])}"
                           for r in timed_train)
    fast = [r for r in rows if r["speed_case"] != "no_grad"]
    summary = (f"{n_ok} of {len(cells)} cells fall in the article's band, as printed (memory to whole %, "
               f"batch factor to 0.1x; memory and batch factor at full size on a virtual 16 GiB CUDA device; "
               f"speed = forward with grad vs forward without grad, 95 % CI, {ctx.scale} scale on {ctx.device}). "
               f"{desc}."
               + "".join(f" {r['workload']}'s speed excludes its fused fast path (with it: "
                         f"{r['speed_gain_with_fast_path']:+.0%})." for r in fast)
               + (f" Separate row, not counted: a training step vs a no_grad forward takes {train_desc} "
                  "longer (not a no_grad effect: backward and the optimizer step are extra work)." if timed_train else
                  f" Separate row, not counted: a training step vs a no_grad forward, {_TRAIN_QUICK_NOTE}.")
               + _wide_note([((r["speed_gain"], *r["speed_gain_ci"]), r["speed_band"]) for r in rows],
                            higher_is_better=False) + _samples_note(ctx, "C20", [forward_condition(ctx, r["workload"], r["speed_batch"])
                                                                  for r in rows]))
    evidence = {"rows": rows, "cells_in_band": n_ok, "cells": len(cells),
                "reading": f"{n_ok} of {len(cells)} cells of the article's table are reproduced (as printed; "
                           "speed: forward with vs without grad).",
                "rounding": "memory compared at whole percent, batch factor at one decimal, speed CI ends "
                            "at whole percent: the values as the summary prints them",
                "definitions": {
                    "memory_saved": "1 - total_peak(eval+no_grad forward) / total_peak(training step: "
                                    "forward, loss, backward, SGD step), weights included; "
                                    "memory.estimate at full size and default batch, virtual CUDA",
                    "speed_gain": "throughput gain t(eval+grad forward)/t(eval+no_grad forward) - 1, the shared "
                                  f"forward timing at scale {ctx.scale} on {ctx.device}, 95 % paired-bootstrap CI",
                    "training_step_vs_no_grad_forward": "t(training step)/t(eval+no_grad forward) - 1, the "
                                  "training step measured on its own, unpaired bootstrap CI; shown, not counted",
                    "memory_saved_forward_only": "1 - total_peak(eval+no_grad forward) / total_peak(eval+grad "
                                                 "forward), same estimate; the training step also holds "
                                                 "gradients (parameter_bytes)",
                    "batch_factor": "largest batch eval+no_grad / largest batch training step under "
                                    "16 GiB (batch.largest_batch, estimate, virtual CUDA, full size)"},
                "notes": ["the article's 'recurrent CNN (U-Net-style)' row is a U-Net: a convolutional "
                          "encoder-decoder with skips, nothing recurrent",
                          "memory and batch cells must lie in the band as printed; a speed cell's CI must "
                          "overlap the band",
                          "transformer memory: fast path off; attention by PyTorch's math backend on the "
                          "virtual device (keeps L x L probabilities for backward, as C19 explains)"]}
    return verdict, summary, evidence


# --------------------------------------------------------------------------------------------
# C23: what the profiler shows


def _is_autograd_event(key: str) -> bool:
    return "autograd" in key.lower() or "Backward" in key or key.startswith("torch::autograd")


def _profile(fn, repeats: int) -> dict:
    """Self CPU time and op counts of ``fn`` run ``repeats`` times under the legacy autograd profiler:
    the same operator events torch.profiler records, without kineto. Kineto (even with
    ``use_kineto=False``) starts its activity profiler, which on a CUDA build of torch without a GPU
    writes ``gpuGetDeviceCount failed`` and USDT lines to the process's stderr, and takes seconds."""
    fn()
    try:
        from torch.autograd import profiler_legacy

        prof_ctx = profiler_legacy.profile()
        kind = "torch.autograd.profiler_legacy.profile()"
    except (ImportError, AttributeError, TypeError, RuntimeError):
        prof_ctx = torch.autograd.profiler.profile(use_kineto=False)
        kind = "torch.autograd.profiler.profile(use_kineto=False)"
    with prof_ctx as prof:
        for _ in range(repeats):
            fn()
    ev = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    auto = [e for e in ev if _is_autograd_event(e.key)]
    auto_us = sum(e.self_cpu_time_total for e in auto)
    return {"profiler": kind, "self_cpu_us": total, "ops": int(sum(e.count for e in ev)),
            "distinct_ops": len(ev), "autograd_self_cpu_us": auto_us,
            "autograd_share": auto_us / total if total else 0.0,
            "autograd_events": sorted({e.key for e in auto})[:20],
            "top_ops": [(e.key, int(e.count), float(e.self_cpu_time_total))
                        for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:8]]}


@_check("C23")
def c23(ctx):
    """The article's 28 % is a share of "autograd-related operators" in a profile; no profiler
    reports such a quantity for a forward pass (the graph is recorded inside each ordinary
    operator; events named after autograd appear only when backward runs), so the statistic is
    not testable. The mechanism is measured: total self operator time (autograd profiler) of a
    tiny transformer and mlp forward with grad and without, in interleaved rounds, with a 95 %
    paired-bootstrap CI; op counts; and a training step for where autograd events do appear.
    Knobs: ``repeats`` (calls per profile), ``profile_rounds``."""
    rule = RULES["C23"]
    reps = int(ctx.params.get("repeats", 3))
    rounds = int(ctx.params.get("profile_rounds", rule.min_samples))
    if reps < 1 or rounds < 2:
        raise ValueError(f"repeats must be >= 1 and profile_rounds >= 2, got {reps}, {rounds}")
    out, totals, cis = {}, {}, {}
    for name in ("transformer_base", "mlp"):
        wl, model, x, y = _build(name, "tiny", ctx.device, 2, ctx.seed)
        r = reps if name != "mlp" else 10 * reps  # the mlp's ops take microseconds
        fns = {"grad": _forward_fn(model, x, torch.enable_grad), "no_grad": _forward_fn(model, x, torch.no_grad)}
        samples = {"grad": [], "no_grad": []}
        profs = {}
        for i in range(rounds):  # interleaved, alternating order
            for mode in (("grad", "no_grad") if i % 2 == 0 else ("no_grad", "grad")):
                p = _profile(fns[mode], r)
                samples[mode].append(p["self_cpu_us"] / r)
                profs.setdefault(mode, p)
        sp, ci = timing.bootstrap_speedup(samples, "grad", seed=ctx.seed)
        drop = 1 - 1 / sp["no_grad"]
        totals[name] = {"op_time_us_per_call": {m: float(np.median(v)) for m, v in samples.items()},
                        "samples_us_per_call": samples, "op_time_saved": drop,
                        "op_time_saved_ci": [1 - 1 / ci["no_grad"][0], 1 - 1 / ci["no_grad"][1]]}
        out[name] = profs
        if name == "mlp":
            out[name]["train_step"] = _profile(_train_fn(wl, model.train(), x, y), r)
        del model, x, y
    fwd_shares = [out[n][m]["autograd_share"] for n in out for m in ("grad", "no_grad")]
    train_share = {n: out[n]["train_step"]["autograd_share"] for n in out if "train_step" in out[n]}
    drop = {n: t["op_time_saved"] for n, t in totals.items()}
    bracket = ", ".join(f"{n} {t['op_time_saved']:.0%} [{t['op_time_saved_ci'][0]:.0%}, "
                        f"{t['op_time_saved_ci'][1]:.0%}]" for n, t in totals.items())
    summary = (f"Not testable as stated: with grad on or off, a forward's profile has "
               f"{max(fwd_shares):.0%} of its self time in events named after autograd (the graph is "
               "recorded inside each ordinary operator), so no profiler shows the article's 'autograd-related "
               f"operator time'. The mechanism, measured: total operator time of a tiny forward fell under "
               f"no_grad by {bracket} ({rounds} interleaved profiled rounds, 95 % CI; article: about 28 %). "
               f"Op counts: transformer {out['transformer_base']['grad']['ops']} with grad, "
               f"{out['transformer_base']['no_grad']['ops']} without (the fused fast path: a different kernel); "
               f"mlp {out['mlp']['grad']['ops']} both ways. Autograd events appear only with backward: "
               f"{', '.join(f'{n} {v:.1%}' for n, v in train_share.items())} of a training step's self time. The "
               "'10 % from larger batches' is no profiler quantity.")
    evidence = {"profiles": out, "forward_autograd_shares": fwd_shares, "train_step_autograd_share": train_share,
                "total_op_time_drop": drop, "op_time": totals, "repeats": reps, "profile_rounds": rounds,
                "scale": "tiny", "statistic": {"figures": "28 % / 10 %", "testable": False,
                                               "why": "no profiler event class 'autograd-related operators' "
                                                      "exists in a forward pass"},
                "autograd_event_rule": "name contains 'autograd' or 'Backward' (engine evaluate_function, "
                                       "backward nodes, AccumulateGrad)"}
    return "not testable", summary, evidence


# --------------------------------------------------------------------------------------------
# X05: the bigger levers


def _compile_reason(ctx) -> "str | None":
    if ctx.params.get("compile") is False:
        return "skipped: compile=False"
    if _quick(ctx) and not ctx.params.get("compile", False):
        return ("skipped at tiny scale on CPU: compiling takes tens of seconds, more than this whole "
                "check's budget (pass compile=True to include it)")
    if ctx.on_gpu and not ctx.params.get("compile", ctx.reference):
        return ("skipped in a learner's GPU run: compiling takes tens of seconds a model, more than a "
                "notebook's minute for the four workloads (pass compile=True to include it; "
                "benchmarks/gpu_reference.py does)")
    if not hasattr(torch, "compile"):
        return "torch.compile is not available in this torch"
    return None


def _tiers(speedup: dict, ci: dict) -> list:
    """Cases grouped into tiers, fastest first: a case joins the current tier when its speedup CI
    overlaps the CI of every case already in it (overlap is a tie, never a ranking); otherwise it
    starts the next tier."""
    order = sorted(speedup, key=lambda k: -speedup[k])
    tiers = []
    for k in order:
        lo, hi = ci[k]
        if tiers and all(ci[j][0] <= hi and lo <= ci[j][1] for j in tiers[-1]):
            tiers[-1].append(k)
        else:
            tiers.append([k])
    return tiers


def _beats(speedup: dict, ci: dict, case: str, ref: str, margin: float) -> bool:
    """``case`` beats ``ref``: its speedup CI lies wholly above ``ref``'s and its point estimate is
    at least ``margin`` faster (so a verdict cannot rest on a hair's breadth between runs)."""
    return ci[case][0] > ci[ref][1] and speedup[case] >= (1 + margin) * speedup[ref]


def _compiled_timing(ctx, name, batch) -> tuple:
    """``(Timing or None, why not)``: the torch.compile'd forward under no_grad of (workload,
    scale, batch, device), compiled before timing (compile time is not in the figure), measured
    once per run with the shared protocol. X05's own quantity."""
    knobs = _knobs(ctx)
    key = ("compiled forward", name, ctx.scale, int(batch), str(ctx.device), ctx.seed,
           tuple(sorted(knobs.items(), key=lambda kv: kv[0])))

    def make():
        wl, model, x, _ = _build(name, ctx.scale, ctx.device, batch, ctx.seed)
        try:
            compiled = torch.compile(model)
            fn = _forward_fn(compiled, x, torch.no_grad)
            fn()
            with _torch_threads(knobs["num_threads"]), timing.timing_state(ctx.device, warm_fn=fn):
                return timing.measure(fn, ctx.device, min_run_time=knobs["min_run_time"], warmup=knobs["warmup"],
                                      num_threads=knobs["num_threads"], label=f"{name} compiled"), None
        except Exception as e:  # noqa: BLE001 - compile failing is a finding, not a crash
            return None, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        finally:
            del model, x

    return timing.shared(key, make)


@_check("X05")
def x05(ctx):
    """Per workload and batch, the shared forward timing (:func:`forward_condition`): grad (the
    baseline), no_grad, inference_mode, and levers on top of no_grad: autocast (bf16 on CPU;
    fp16 and bf16 on CUDA), channels_last for the CNNs (stacked with the autocast dtypes on CUDA),
    torch.compile where it runs (compiled before timing). On CUDA ``cudnn.benchmark`` is on and
    the TF32 state is reported; the batches cover the overhead-bound regime (the default batch)
    and the compute-bound one (4x); torch.compile at the default batch, timed on its own with an
    unpaired CI (:func:`_compiled_timing`); a tiny CPU run times the main speed batch only
    (:func:`_lever_batches`). Cases whose CIs overlap are ranked as ties. Knobs:
    ``workloads``, ``batches``, ``compile`` (True/False forces it on/off; off on tiny CPU runs)."""
    rule = RULES["X05"]
    margin = rule.threshold or 0.05
    names = _names(ctx)
    compile_reason = _compile_reason(ctx)
    rows, beats = [], {}
    state = {}
    for name in names:
        for b in _lever_batches(ctx, workloads.get(name, ctx.scale)):
            c = forward_condition(ctx, name, b)
            if c.comparison is None:
                rows.append({"workload": name, "batch": b, "skipped": c.skipped})
                continue
            cmp = c.comparison
            state = c.state
            speedup = dict(cmp.speedup)
            ci = {k: list(v) for k, v in cmp.ci.items()}
            skipped = dict(c.skipped)
            unpaired = []
            if b == _speed_batch(ctx, workloads.get(name, ctx.scale)):
                if compile_reason is None:
                    t_comp, why = _compiled_timing(ctx, name, b)
                    if t_comp is None:
                        skipped["compile"] = why
                    else:  # timed on its own: an unpaired CI against the shared grad timing
                        sp, (lo, hi) = timing.bootstrap_ratio(cmp.timings["grad"].times, t_comp.times, seed=ctx.seed)
                        speedup["no_grad+compile"], ci["no_grad+compile"] = sp, [lo, hi]
                        unpaired.append("no_grad+compile")
                else:
                    skipped["compile"] = compile_reason
            tiers = _tiers(speedup, ci)
            order = [k for t in tiers for k in t]
            levers = [k for k in speedup if k.startswith("no_grad+")]
            won = [k for k in levers if _beats(speedup, ci, k, "no_grad", margin)]
            beats[f"{name}@{b}"] = won
            im = c.ratio("no_grad", "inference_mode")
            rows.append({"workload": name, "batch": b, "speedup": speedup, "ci": ci,
                         "median_ms": {k: t.median * 1e3 for k, t in cmp.timings.items()},
                         "ranking": order, "tiers": tiers,
                         "no_grad_rank": order.index("no_grad") + 1,
                         "no_grad_tier": next(i for i, t in enumerate(tiers, 1) if "no_grad" in t),
                         "inference_mode_vs_no_grad": [im[0], im[1], im[2]],
                         "beats_no_grad": won, "skipped": skipped, "state": c.state,
                         "unpaired_ci": unpaired})

    def fmt_tiers(r):
        return " > ".join(" = ".join(f"{k} {r['speedup'][k]:.2f}x" for k in t) for t in r["tiers"])

    timed = [r for r in rows if "tiers" in r]
    parts = "; ".join(f"{r['workload']}@{r['batch']}: {fmt_tiers(r)}" for r in timed)
    gpu = ""
    if ctx.device.type == "cuda" and state:
        gpu = (f" CUDA settings: cudnn.benchmark {state.get('cudnn_benchmark')}, TF32 matmul "
               f"{state.get('tf32_matmul')}, TF32 cuDNN {state.get('tf32_cudnn')} (float32 matmul precision "
               f"{state.get('float32_matmul_precision')}); the default batch is the overhead-bound regime, "
               "4x it the compute-bound one.")
    cpu_note = ""
    if ctx.device.type == "cpu":
        cpu_note = (" On CPU, bf16 autocast casts the fp32 weights to bf16 again on every call (autocast's "
                    "cast cache lives only inside one autocast block), so at small batches the casts can "
                    "cost more than bf16 saves; converting the model once (model.to(torch.bfloat16)) avoids them.")
    summary = (f"Forward speedups over grad ({ctx.scale}, {ctx.device}, eval mode, 95 % CIs; '=' joins cases "
               f"whose CIs overlap: a tie, not a ranking): {parts}. A lever beats plain no_grad when its CI "
               f"lies wholly above no_grad's and it is at least {margin:.0%} faster: "
               + (", ".join(f"{k}: {', '.join(v) or 'none'}" for k, v in beats.items()))
               + f". torch.compile: {compile_reason or 'included where it compiled'}." + gpu + cpu_note
               + _samples_note(ctx, "X05", [forward_condition(ctx, r["workload"], r["batch"]) for r in rows]))
    verdict = ("holds" if beats and all(beats.values()) else
               "does not hold" if not any(beats.values()) else "depends")
    evidence = {"rows": rows, "best": {f"{r['workload']}@{r['batch']}": r["tiers"][0] for r in timed},
                "a_lever_beats_plain_no_grad": beats, "autocast": _cast(ctx),
                "compile_skipped": compile_reason, "margin": margin, "state": state,
                "metric": "speedup = t(grad forward) / t(case), eval mode, 95 % paired-bootstrap CI; levers "
                          "are applied on top of no_grad, the way inference code stacks them",
                "timing": "shared per condition (forward_condition): the same numbers as C03/C17/C20",
                "verdict_rule": rule.text,
                "reading": f"A lever clearly beats plain no_grad in {sum(1 for v in beats.values() if v)} of "
                           f"{len(beats)} conditions; elsewhere the CIs overlap (a tie) or no_grad is as fast."}
    return verdict, summary, evidence
