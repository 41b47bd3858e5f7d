"""Shared measurements of the numeric claims: one timing per condition, memory estimates, knobs.

The checks themselves live in the notebooks' modules (``nb01_what_no_grad_does.py`` ...); what
several of them read is measured here, once:

* **One timing per condition.** A forward timing of (workload, scale, batch, device) is measured
  once per run by :func:`forward_condition` (every setting of :func:`_lever_settings` interleaved,
  one protocol: warm-up, CUDA sync, ``cudnn.benchmark`` on and clocks warmed on CUDA, TF32 state
  recorded) and read by every speed claim alike (:data:`nogradlab.claims.runcache.RUN`). A claim that
  needs another quantity (a training step, a compiled model, a validation loop's scope) measures
  it once too and names it.
* **Speed.** Always :func:`nogradlab.timing.compare` (interleaved rounds in a random order, a signed-rank CI
  of the paired per-round ratios, valid when the rounds stop). "Cuts runtime by X %" is ``time_saved = 1 - t_case / t_base``. The
  article's "relative speed gain" (its table) and "more throughput" (of a wider no_grad scope) are read as a
  *throughput* gain, ``speedup - 1 = t_base / t_case - 1``; ``time_saved`` is given beside it.
* **Memory.** "Saved" is ``1 - peak(case) / peak(baseline)`` of *total* peaks: weights, buffers
  and inputs (what the device holds anyway) plus everything the step allocates. Real tiny runs use
  :func:`nogradlab.memory.measure`; article-sized models use :func:`nogradlab.estimate.fake.estimate`
  on fake tensors on a virtual CUDA device, with the kernels the CUDA dispatcher would pick
  (:mod:`nogradlab.cudamodel`: fused scaled-dot-product attention, the transformer's fused fast
  path, cuBLAS workspaces); each estimate's own notes say what it modelled.
* **Transformer memory on real CPU runs.** ``nn.TransformerEncoder``'s fused inference fast path
  runs a whole layer inside one operator, whose temporaries a dispatch-level tracker cannot see;
  real measurements and fake-CPU estimates therefore switch it off (:func:`accounting`), CUDA
  estimates do not (the kernel model accounts for it).
* **Verdicts** are the judges' (:mod:`nogradlab.claims.rules`: one reading of a band).

At ``scale="tiny"`` on a CPU the checks run single-threaded (on a shared two-core machine a second
OpenMP thread mostly measures the neighbours: calls get several times slower and noisier; bytes
do not depend on it), with few timing rounds and small sweeps; article-sized estimates are
included everywhere, since they need no GPU. On a GPU or at ``scale="full"`` the rounds and the
sweeps grow and :func:`nogradlab.core.timing.threads_here`'s count is used (torch's own, one where the
CPUs are few or busy). Every timing reads a CPU-time clock on a CPU (:data:`nogradlab.core.timing.CLOCKS`).
``ctx.params`` may override
``rounds``, ``min_run_time``, ``warmup`` and the per-check knobs named in each docstring.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import re


import torch


from nogradlab.core import format as _format
from nogradlab.core import memory, modes, timing, workloads

from nogradlab.claims import ledger as claims_registry
from nogradlab.claims.rules import MIN_BOOTSTRAP_ROUNDS, RULES
from nogradlab.claims import runcache as _runcache
from nogradlab.estimate.sweep import accounting, with_seq_len, estimate_row, estimate_sweep, measure_forward, memory_saved, param_bytes, _torch_threads, _estimate_cached  # noqa: F401 (the checks import them from here)

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
    """compare() settings. ``rounds`` is the minimum (10, the first look; a smaller value from the
    params is raised to 10, since over fewer rounds a look read at 99 % has no finite interval); a shared forward condition then goes on, a block of rounds at a time, until its
    intervals decide every rule that reads it (:func:`_condition_edges`), up to ``max_rounds`` or
    ``time_budget`` seconds of rounds (the comparison's ``stopped`` says which). Tiny CPU runs take
    short single-threaded samples (on a shared two-core machine two OpenMP threads mostly measure
    the neighbours: 10 ms a sample, at most 1.5 s of rounds a condition), a GPU the same with 3
    warm-up calls (a condition times up to 8 cases, and a full-size forward often takes longer than
    a sample: ``tools/plan.py`` keeps a learner's notebook within a minute on an H200), other CPU
    runs 50 ms and 20 s with :func:`~nogradlab.core.timing.threads_here`'s count. ``quick_overrides`` adjust the
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
    r = k["rounds"]
    if isinstance(r, int) and not isinstance(r, bool) and 2 <= r < MIN_BOOTSTRAP_ROUNDS:
        # fewer rounds give the first look no finite interval at its 99 % (a signed-rank interval over
        # n pairs is bounded only once 2 / 2**n < 1 %): such a condition could only read "unresolved"
        # and store an infinite bound, so a smaller ``rounds`` is raised to the checks' first look
        k["rounds"] = MIN_BOOTSTRAP_ROUNDS
        m = k.get("max_rounds")
        if isinstance(m, int) and not isinstance(m, bool) and m < MIN_BOOTSTRAP_ROUNDS:
            k["max_rounds"] = MIN_BOOTSTRAP_ROUNDS
    return k


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
    """``23%``; None or NaN: ``n/a``."""
    return _format.percent(v, 0)


def _pct_ci(t) -> str:
    """``23% [18%, 27%]``; an interval spanning 0 (a slowdown and a speedup both possible) reads
    ``no clear difference (noisy): 3% [-5%, 9%]``."""
    return _format.percent_ci(*t)


def _open_for(claim_id: str, c) -> bool:
    """Whether a condition whose rounds stopped before they decided (time budget, most rounds) leaves
    ``claim_id``'s own reading open: a no_grad case's interval straddles one of the claim's own edges.
    The shared rounds go on until every claim reading the condition is decided; another claim's edge
    keeping them open makes nothing provisional here."""
    cmp = c.comparison
    if cmp is None or cmp.decided:
        return False
    reads = claims_registry.get(claim_id).speedup_edges
    edges = reads(c.workload) if reads is not None else None
    if edges is None:
        return True
    for case in _EDGE_CASES:
        ci = cmp.ci.get(case)
        if ci is not None and any(ci[0] < e < ci[1] for e in edges):
            return True
    return False


_STOPPED_NOTE = re.compile(r"\s*\d+ of \d+ timed conditions stopped \(.*?\) before their intervals decided "
                           r"\(.*?\): provisional; a longer time_budget or a quieter machine would decide them\.")


def provisional_note(note: str, rows, conds) -> str:
    """A stored ``provisional`` note re-read by a judge: its stopped-conditions sentence is rebuilt from
    the rows the claim reads (``rows``: stored rows with ``stopped``, ``workload``, ``batch``; ``conds``:
    the judge's readings of them, in order), naming only those that stopped early with the claim's own
    reading unresolved. The note is kept as stored when a row lacks ``stopped``."""
    note = note or ""
    if not rows or any("stopped" not in r for r in rows):
        return note
    open_ = [f"{r['workload']}@{r['batch']}" for r, c in zip(rows, conds)
             if r["stopped"] not in ("rounds", "decided") and c["reading"] == "unresolved"]
    stopped = sorted({r["stopped"] for r, c in zip(rows, conds)
                      if r["stopped"] not in ("rounds", "decided") and c["reading"] == "unresolved"})
    out = _STOPPED_NOTE.sub("", note).strip()
    if open_:
        out = (out + " " if out else "") + (
            f"{len(open_)} of {len(rows)} timed conditions stopped ({', '.join(stopped)}) before their "
            f"intervals decided ({', '.join(open_)}): provisional; a longer time_budget or a quieter machine "
            "would decide them.")
    return out


def _samples_note(ctx, claim_id: str, conditions=()) -> str:
    """A warning for the summary when the run timed fewer rounds than the rule's minimum, when a
    no_grad case's samples lasted more than :data:`nogradlab.core.timing.UNEQUAL_SAMPLES` longer or
    shorter than grad's, or when a condition's rounds stopped (time budget, most rounds) before its
    intervals decided this claim's rule (:func:`_open_for`: only the cases and edges the claim reads)."""
    need = RULES[claim_id].min_samples
    got = _knobs(ctx)["rounds"]
    out = (f" Only {got} timing rounds per case, fewer than the rule's minimum of {need}: a provisional "
           "verdict." if need and got < need else "")
    uneven = []
    for c in conditions:
        if c.comparison is None:
            continue
        for case, r in c.comparison.unequal_samples().items():
            if case in _EDGE_CASES:
                uneven.append(f"{c.workload}@{c.batch} ({case}'s {_format.ratio(r, 2)} grad's)")
    if uneven:
        out += (f" Samples of unequal length in {', '.join(uneven)}: one call lasts longer than a sample, so the "
                "calls per sample could not balance the two; read these ratios with care.")
    open_ = [c for c in conditions if _open_for(claim_id, c)]
    if open_:
        out += (f" {len(open_)} of {len(conditions)} timed conditions stopped "
                f"({', '.join(sorted({c.comparison.stopped for c in open_}))}) before their intervals "
                f"decided ({', '.join(f'{c.workload}@{c.batch}' for c in open_)}): provisional; a longer "
                "time_budget or a quieter machine would decide them.")
    return out


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


def resolve(ctx, workload) -> workloads.Workload:
    """``workload`` resolved once: a :class:`~nogradlab.core.workloads.Workload` as it is, a name looked
    up (and checked) at ``ctx.scale``. Pass the result down: its :attr:`~Workload.key` keys the caches."""
    if isinstance(workload, workloads.Workload):
        return workload
    return workloads.get(workload, ctx.scale)


def _build(name, scale, device, batch, seed):
    """(workload, model in eval mode, input batch, target) with a seeded initialisation; ``name`` may be
    a resolved Workload (``scale`` is then its own)."""
    wl = name if isinstance(name, workloads.Workload) else workloads.get(name, scale)
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


# --------------------------------------------------------------------------------------------
# memory helpers (public: the notebooks sweep with them too)


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
        # notebook's minute on an H200: tools/plan.py); the reference run times both
        default = (d,)
    else:
        default = (d, 4 * d)
    return tuple(dict.fromkeys(_batches(ctx, "batches", default)))


def _lever_batches(ctx, wl) -> tuple:
    """The batches whose conditions also time the levers (notebook 09): every speed batch, so both the
    overhead-bound and the compute-bound regime are shown (at small/full scale on a CPU, and in the
    GPU reference run); only the main speed batch (:func:`_speed_batch`: the default batch) on a tiny
    CPU run, and in a learner's GPU run, whose speed batches are that one anyway (on an H200 the levers
    at 4x the transformer's batch alone cost half a notebook's minute: ``tools/plan.py``)."""
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


def _lever_settings(ctx, workload, batch: "int | None" = None) -> list:
    """Every forward setting timed in one condition, whichever check asks first (so that each
    number is measured once, with one protocol): grad (the baseline), no_grad, the transformer's
    no_grad with its fused fast path switched off, and, at the batches of :func:`_lever_batches`,
    inference_mode, autocast on top of no_grad (bf16 on CPU; fp16 and bf16 on CUDA) and
    channels_last for the CNNs (stacked with the autocast dtypes on CUDA). A learner's GPU run times
    fp16 alone, and channels_last only stacked with it (5 cases for a CNN where the reference run has
    8: each case costs every round; ``tools/plan.py``). The set depends only on
    the condition, never on which check asks. torch.compile is the levers claim's own quantity
    (:func:`_compiled_timing`): compiling costs tens of seconds a model, which no other check
    should pay."""
    wl = resolve(ctx, workload)
    name = wl.name
    out = ["grad", "no_grad"]
    if name == "transformer_base":
        out.append("no_grad (fast path off)")
    if batch is not None and batch not in _lever_batches(ctx, wl):
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
                # autocast's weight cache off: every call enters autocast anew, so each weight is cast
                # once per call either way; the cache would only hold the casts until the call ends
                # (a ResNet-50's 49 MiB of bf16 weights beside its fp32 ones, at the peak of a 1-2 GB
                # learner's kernel)
                st.enter_context(torch.autocast(device_type=device.type, dtype=modes.AUTOCAST_DTYPES[cast],
                                                cache_enabled=False))
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
        """(t_a / t_b, CI) for two cases of this condition: ``b``'s speedup over ``a``, the signed-rank
        interval of the paired rounds at the comparison's look confidence (:meth:`timing.Comparison.ratio`)."""
        return self.comparison.ratio(a, b)

    def ms(self, case: str) -> float:
        return self.comparison.timings[case].median * 1e3

    def to_dict(self) -> dict:
        return {"workload": self.workload, "scale": self.scale, "batch": self.batch, "device": self.device,
                "settings": self.settings, "state": self.state, "skipped": self.skipped,
                "comparison": self.comparison.to_dict() if self.comparison is not None else None}


#: the cases of a forward condition read against edges over grad (a claim's declared ``speedup_edges`` and
#: ``stop_edges``); the levers (inference_mode, autocast, channels_last) are read against no_grad instead,
#: by no edge over grad
_EDGE_CASES = ("no_grad", "no_grad (fast path off)")


def _condition_edges(name: str) -> list:
    """The speedups (over grad) at which a rule reading a no_grad case of a forward condition of
    workload ``name`` changes its answer: every claim's declared ``stop_edges`` (whether it is faster at
    all, a band of time saved, the article's band of throughput gain for the workload). The condition's
    rounds go on until no interval of a case in :data:`_EDGE_CASES` straddles one of them
    (:func:`nogradlab.timing.resolves`): a lever's interval next to grad's decides nothing (an autocast
    lever as fast as grad on a CPU kept every tiny condition running to its time budget)."""
    edges = set()
    for c in claims_registry.all_claims():
        if c.stop_edges is not None:
            edges.update(c.stop_edges(name))
    return sorted(edges)


def forward_condition(ctx, workload, batch: int) -> Condition:
    """The shared forward timing of (``workload``: a name at ``ctx.scale`` or a resolved Workload,
    ``batch``, ``ctx.device``), keyed on the workload's :attr:`~nogradlab.core.workloads.Workload.key`:
    measured once per run (:data:`nogradlab.claims.runcache.RUN`) with one protocol (warm-up, CUDA sync,
    interleaved rounds, ``cudnn.benchmark`` on and clocks warmed on CUDA, the TF32 state
    recorded) and reused by every check asking for it."""
    wl = resolve(ctx, workload)
    knobs = _knobs(ctx)
    key = ("forward", wl.key, int(batch), str(ctx.device), ctx.seed,
           tuple(sorted(knobs.items(), key=lambda kv: kv[0])), tuple(_lever_settings(ctx, wl, int(batch))))
    return _runcache.shared(key, lambda: _measure_condition(ctx, wl, int(batch), knobs, key))


def _measure_condition(ctx, wl, batch, knobs, key) -> Condition:
    name = wl.name
    settings = _lever_settings(ctx, wl, batch)
    skipped = {}
    if name not in CNNS:
        skipped["channels_last"] = "not a convolutional network"
    elif _quick(ctx):
        skipped["channels_last"] = _CL_QUICK_NOTE
    wl, model, x, _ = _build(wl, wl.scale, ctx.device, batch, ctx.seed)
    holder, cases = {}, {}
    try:
        for s in settings:
            cases[s] = _case_fn(name, s, model, x, ctx.device, holder)
        with _torch_threads(knobs["num_threads"]), \
                timing.timing_state(ctx.device, warm_fn=cases["grad"]) as state:
            # intervals narrower than 1 % of a speedup around an edge would take too long to move off it;
            # the edges are the no_grad cases' only (_condition_edges)
            edges = {s: _condition_edges(name) for s in cases if s in _EDGE_CASES}
            cmp = timing.compare(cases, baseline="grad", device=ctx.device, seed=ctx.seed,
                                 until=timing.resolves(edges, min_width=0.01), **knobs)
    except torch.OutOfMemoryError:
        cmp, state = None, timing.gpu_state(ctx.device)
        skipped["all"] = f"out of memory at batch {batch} on {ctx.device}"
    finally:
        del model, x, holder
        if ctx.on_gpu:
            torch.cuda.empty_cache()
    return Condition(name, wl.scale, batch, str(ctx.device), cmp, [s for s in settings if s in cases],
                     dict(state, threads=cmp.threads if cmp is not None else knobs["num_threads"] or 1,
                          clock=cmp.clock if cmp is not None else None), skipped, key)


def enter_exit(ctx, nested: bool = False) -> "timing.Timing":
    """One ``with torch.no_grad(): pass`` (entered from grad mode, or ``nested`` inside another
    no_grad): measured once per run and shared by the claims that read that cost."""
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

    return _runcache.shared(key, make)


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


def _tier_line(speedup: dict, ci: dict, tiers: list) -> str:
    """``tiers`` as one line, fastest first: '=' inside a tier (every two intervals in it overlap: a tie),
    and between two tiers '>' only when every interval of the faster tier lies wholly above every interval
    of the slower one; where some overlap, '≥' (no ranking, and no tie either: '=' is transitive to a
    reader, overlap is not, so "a = b = c" would tie a and c whose intervals may lie apart)."""
    def tier(t):
        return " = ".join(f"{k} {_format.ratio(speedup[k])}" for k in t)
    line = tier(tiers[0]) if tiers else ""
    for a, b in zip(tiers, tiers[1:]):
        apart = all(ci[i][0] > ci[j][1] for i in a for j in b)
        line += (" > " if apart else " ≥ ") + tier(b)
    return line


def _beats(speedup: dict, ci: dict, case: str, ref: str, margin: float) -> bool:
    """``case`` beats ``ref``: its speedup CI lies wholly above ``ref``'s and its point estimate is
    at least ``margin`` faster (so a verdict cannot rest on a hair's breadth between runs)."""
    return ci[case][0] > ci[ref][1] and speedup[case] >= (1 + margin) * speedup[ref]


