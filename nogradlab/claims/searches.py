"""Checks of the capacity claims: how large a batch fits, and what a server keeps per request.

* **Largest batch** comes from :func:`nogradlab.batch.largest_batch`, estimated on fake tensors
  (method ``"estimate"``: on the GPU's own device type when there is one, else on a *virtual* CUDA
  device of the article's size; the step's allocations, library workspaces included, replayed
  through the caching allocator's model under the cap, as ``nogradlab.allocator`` describes), with
  full-size models, whatever ``ctx.scale`` is: a 12 GiB budget only means something for the
  article's model sizes. On a real GPU, ``real_search`` says how many real OOM searches under a
  memory cap (method ``"search"``) check it: ``"one"`` by default (a notebook on a learner's GPU:
  the budget claim's real searches alone took 183 s on an H200), ``"all"`` in the reference run
  (``benchmarks/gpu_reference.py``), ``"none"``.
  Modes: ``"train"`` (a training step), ``"grad"`` (a grad-enabled forward, eval mode) and
  ``"eval+no_grad"``.
* **Serving** uses :mod:`nogradlab.serving`: a real Tornado server on loopback, memory per
  request measured with :func:`nogradlab.memory.measure` around the model call.

An estimate of a full-size model costs 0.1-0.6 s whatever the scale (a training step the most; the model
is built for real once, then copied: ``memory._Templates``); 3-5 of them make a step's allocation program,
once per process and kept between runs, and every search then replays it (:class:`nogradlab.batch.Program`),
so the estimated conditions are the same at every scale. ``ctx.params`` knobs are named in each docstring.
"""
from __future__ import annotations

import torch

from nogradlab.estimate import batch as _batch
from nogradlab.core import format as _format
from nogradlab.claims import runcache as _runcache
from nogradlab.claims.params import REAL_SEARCH



GiB = 2 ** 30
MiB = 2 ** 20
_MODES = ("train", "grad", "eval+no_grad")


def _quick(ctx) -> bool:
    return not ctx.on_gpu and ctx.scale == "tiny"




def _real_search(ctx) -> str:
    """``ctx.params['real_search']``: how many real OOM searches a GPU run makes. ``"one"`` (the
    default: a notebook on a learner's GPU stays within minutes) estimates every batch and checks
    one of them with a real search; ``"all"`` searches every one for real (the reference run,
    benchmarks/gpu_reference.py); ``"none"`` estimates only. Ignored without a GPU."""
    v = ctx.params.get("real_search", "all" if ctx.reference else "one")
    if v not in REAL_SEARCH:
        raise ValueError(f"real_search must be one of {', '.join(REAL_SEARCH)}; got {v!r}")
    return v


def _method(ctx) -> tuple:
    """(device for largest_batch, method): the real GPU with real OOMs when ``real_search="all"``,
    else estimates (on the GPU's own device type when there is one, else a virtual CUDA device)."""
    if ctx.on_gpu:
        return (str(ctx.device), "search" if _real_search(ctx) == "all" else "estimate")
    _real_search(ctx)
    return ("cuda", "estimate")


def _one_real_search(ctx, name: str, budget: int, estimate: "_batch.BatchResult | None", *,
                     scale: str = "full") -> "dict | None":
    """With ``real_search="one"`` on a GPU: one real OOM search (eval+no_grad) beside its estimate, of the
    model at ``scale`` (the claim's ``estimates_at``)."""
    if not (ctx.on_gpu and _real_search(ctx) == "one"):
        return None
    # the estimate as the secant's second point: the real search starts beside it (same answer, fewer trials)
    hint = estimate.batch if estimate is not None and estimate.batch > 2 else None
    r = _batch.largest_batch(name, "eval+no_grad", budget, str(ctx.device), scale=scale, method="search",
                             max_batch=2 ** 22, hint=hint)
    out = {"workload": name, "mode": "eval+no_grad", "budget_bytes": budget, "real": _row(r)}
    if estimate is not None:
        out["estimated_batch"] = estimate.batch
        out["estimate_over_real"] = estimate.batch / r.batch if r.batch else None
    return out


def _real_note(check: "dict | None") -> str:
    if check is None:
        return ""
    est = check.get("estimated_batch")
    return (f" One real OOM search checks the estimate: {check['workload']} eval+no_grad under "
            f"{_format.bytes_(check['budget_bytes'])} fits {check['real']['batch']} for real"
            + (f" (estimate {est}, {_format.ratio(check['estimate_over_real'])})" if est is not None and
               check.get("estimate_over_real") else "")
            + "; real_search='all' searches every batch for real.")


def shared_largest_batch(name: str, mode: str, budget: int, dev, *, scale: str = "full",
                         method: str = "auto", **kw) -> _batch.BatchResult:
    """:func:`nogradlab.batch.largest_batch`, an estimate searched once per run and shared (several
    claims ask for the same ones): its answer is exact whatever ``start``/``hint`` say, so they are
    not part of the key. Real searches are not shared (they depend on what the device holds)."""
    if method != "estimate":
        return _batch.largest_batch(name, mode, budget, dev, scale=scale, method=method, **kw)
    mha = getattr(torch.backends, "mha", None)
    fast = mha.get_fastpath_enabled() if mha is not None and hasattr(mha, "get_fastpath_enabled") else None
    key = ("largest_batch", name, mode, int(budget), str(dev), scale, method, fast,
           tuple(sorted((k, repr(v)) for k, v in kw.items() if k not in ("start", "hint", "progress"))))
    return _runcache.shared(key, lambda: _batch.largest_batch(name, mode, budget, dev, scale=scale,
                                                            method=method, **kw))


def _row(r: _batch.BatchResult) -> dict:
    return {"workload": r.workload, "mode": r.mode, "budget_bytes": r.budget_bytes, "batch": r.batch,
            "method": r.method, "device": r.device, "scale": r.scale, "trials": len(r.trials),
            "bytes_at_batch": r.bytes_at(r.batch), "seconds": r.seconds, "notes": r.notes,
            "at_limit": r.at_limit, "allocated_before": r.allocated_before,
            "allocated_after": r.allocated_after, "allocator": r.allocator}


def _searches(name: str, budget: int, dev, method: str, scale: str = "full", **kw) -> dict:
    """``{mode: BatchResult}`` for ``_MODES``. The training step's search takes the grad forward's
    answer as its hint (a training step keeps about what a grad forward keeps, while its guess from
    batches 1 and 2 is poor: there it peaks at the optimizer step). The answers are exact anyway;
    the hint saves trials."""
    grad = shared_largest_batch(name, "grad", budget, dev, scale=scale, method=method, **kw)
    hint = grad.batch if grad.batch > 1 else None
    return {"train": shared_largest_batch(name, "train", budget, dev, scale=scale, method=method,
                                          hint=hint, **kw),
            "grad": grad,
            "eval+no_grad": shared_largest_batch(name, "eval+no_grad", budget, dev, scale=scale,
                                                 method=method, **kw)}


def _ratio(a: int, b: int) -> "float | None":
    return a / b if b else None


def default_budgets(ctx) -> tuple:
    """The largest-batch-by-budget check's GPU budgets in GiB: 12 and 16 for every run on a CPU, whatever its scale (estimates of the
    full-size models on a virtual GPU: a verdict from them must not change with ``--scale``; one allocation
    program per step serves both budgets, :class:`nogradlab.batch.Program`) and in the GPU reference run (``real_search="all"``); 12 alone in a learner's GPU run
    short of the reference, where searches run for real."""
    if ctx.on_gpu and _real_search(ctx) != "all":
        return (12.0,)
    return (12.0, 16.0)
