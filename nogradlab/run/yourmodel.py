"""Notebook 10's instrument: every no_grad effect measured on *your* model, in the CLI's own terms.

    from nogradlab import yourmodel
    spec = yourmodel.check("torchvision.models:resnet18", "3x224x224", "float32", "24GiB")
    net, x = spec.build("cpu"), spec.sample(2, "cpu")
    saved = yourmodel.saved_by_layer(net, x)          # what one forward keeps for backward, per layer
    here = yourmodel.measure_here(spec, "cpu", "tiny", seed=0)   # peaks and times per mode, here
    gpu = yourmodel.estimate(spec)                     # the `nogradlab estimate --json` document
    yourmodel.caveats(gpu)                             # its notes in plain words, by the rows they qualify
    sizes = yourmodel.gpu_sizes(spec, gpu, "tiny")     # the largest batch on a few common GPUs
    yourmodel.recipe(saved, here, gpu, sizes)          # what to do, from what was measured
    yourmodel.save(spec, gpu, here)                    # that document plus "here", to spec.save_json

The terms are ``python -m nogradlab estimate``'s: ``model`` is ``MODULE:FACTORY``, a function called with
no arguments that returns the model (with ``weights=None`` when it takes that keyword; a factory defined in
a notebook is ``__main__:factory``), ``input`` one sample's shape (``"3x224x224"``), ``dtype``
the inputs' dtype (a floating dtype is the model's too; an integer dtype gives token ids, zeros), ``gpu``
the memory budget. Several inputs: shapes joined by commas (``"3x32x32,16"``), with one dtype for all or
one per input (``"float32,int64"``); they are passed as positional arguments. (The command takes one input
today; for several, :func:`estimate` runs the same engine calls as the command, by the same arguments.)

Everything is checked by :func:`check` before any work (``ValueError`` naming what is allowed).
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import re
from dataclasses import dataclass

import torch
from torch import nn

from nogradlab.estimate import batch as _batch
from nogradlab.core import device as _device
from nogradlab.core import format as _format
from nogradlab.estimate import cli as estimate_cmd
from nogradlab.core import memory as _memory
from nogradlab.core import ownmodel
from nogradlab.core import timing as _timing
from nogradlab.estimate import sweep as _sweep
from nogradlab.core.saved import SavedByLayer, saved_by_layer
from nogradlab.core.session import frozen_gc
from nogradlab.estimate import fake as _fake

__all__ = ["MODES", "COMMON_GIB", "VALIDATION", "Spec", "check", "saved_by_layer", "SavedByLayer",
           "measure_here", "here_frame", "estimate", "estimate_frame", "sizes_frame", "EstimateFailed", "gpu_sizes", "caveats", "recipe", "document", "save",
           "plot_here", "here_batch"]

#: the four modes, in the command's names (estimate_cmd.MODES), and what each runs
MODES = {"train": "a training step (forward, loss, backward, SGD step)",
         "grad": "a forward pass with grad on (model in eval)",
         "no_grad": "model.eval() and torch.no_grad()",
         "inference_mode": "model.eval() and torch.inference_mode()"}
#: common GPU memory sizes, GiB (the budget `gpu` is added when it is not one of them)
COMMON_GIB = (16, 24, 40, 80)
#: what the estimate engine was checked against (README, "Estimates" and "On a GPU")
VALIDATION = ("against 26 real out-of-memory searches on one NVIDIA H200 (4 built-in workloads x 3 modes x "
              "12 and 16 GiB, and two with expandable_segments), every estimated largest batch was within 2.6 % "
              "(median 1.35 %); "
              "benchmarks/allocator_vs_h200.py prints the table")
LIMITS = ("The allocator model and its cuDNN/cuBLAS workspace sizes were calibrated on one NVIDIA H200 only "
          "(nogradlab/estimate/data/gpu_workspaces.json). On another GPU the caching allocator behaves the same (it is "
          "PyTorch's, not the GPU's), but the libraries choose other kernels and workspaces, and the driver and "
          "CUDA context take memory outside PyTorch's budget (a few hundred MiB, more on some GPUs): leave 5-10 % "
          "headroom and confirm the batch on the real GPU (batch.largest_batch(..., method='search')). A shape "
          "the H200 table does not hold gets no workspace: the caveats under the table count them; there the "
          "estimate can be low.")
#: the batch measured on this device, by scale (tiny keeps a 2-core CPU within seconds; 2 keeps
#: BatchNorm's training step defined)
_HERE_BATCH = {"tiny": 2, "small": 4, "full": 16}


def here_batch(scale: str) -> int:
    if scale not in _HERE_BATCH:
        raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(_HERE_BATCH)}")
    return _HERE_BATCH[scale]


# --------------------------------------------------------------------------------------------
# the request, checked before any work


@dataclass
class Spec:
    """A checked request: the model's builder, its inputs, the budget, where to save."""

    model: str
    input: str
    dtype: str
    gpu: str
    budget: int
    inputs: list  # [(shape, torch.dtype)] per positional input
    builder: object  # zero-argument builder (model dtype set for floating inputs)
    request: "estimate_cmd.Request | None"  # the command's own request (one input)
    save_json: "str | None" = None

    @property
    def name(self) -> str:
        return self.builder.__qualname__

    @property
    def several(self) -> bool:
        return len(self.inputs) > 1

    def build(self, device="cpu", seed: int = 0) -> nn.Module:
        """The model with real (random) weights on ``device``, seeded; the global RNG left alone."""
        with _device.rng_preserved(torch.device(device)):
            torch.manual_seed(seed)
            with torch.device(device):
                return self.builder()

    def sample(self, batch: int, device="cpu", seed: int = 0):
        """A batch of inputs on ``device``: random floats (zeros for integer dtypes: valid token ids); a
        tensor for one input, a tuple for several."""
        with _device.rng_preserved(torch.device(device)):
            torch.manual_seed(seed)
            xs = [_make(shape, dt, batch, device) for shape, dt in self.inputs]
        return xs[0] if len(xs) == 1 else tuple(xs)

    def own(self) -> ownmodel.Model:
        """The model as the estimate engine takes it (``ownmodel.Model``)."""
        if not self.several:
            shape, dt = self.inputs[0]
            return ownmodel.Model(self.builder, (shape, dt), name=self.name)
        inputs = list(self.inputs)

        def make(batch):  # runs under torch.device(...): lands on the estimated device
            return tuple(_make(shape, dt, batch, None) for shape, dt in inputs)

        return ownmodel.Model(self.builder, make, name=self.name)


def _make(shape, dt, batch, device):
    size = (batch, *shape)
    if dt.is_floating_point:
        return torch.randn(size, dtype=dt, device=device)
    return torch.zeros(size, dtype=dt, device=device)


def check(model: str, input: str, dtype: str = "float32", gpu: str = "24GiB", save_json=None) -> Spec:
    """Every argument checked, as ``nogradlab estimate`` checks them (``ValueError`` naming what is
    allowed); the model's module is imported, nothing is built."""
    if isinstance(input, int) and not isinstance(input, bool):  # papermill's -p input 16 gives an int
        input = str(input)
    shapes = [s for s in str(input).split(",")]
    if not all(s.strip() for s in shapes):
        raise ValueError(f"input is one sample's shape, e.g. 3x224x224, or several joined by commas, e.g. "
                         f"3x32x32,16; got {input!r}")
    dtypes = [d for d in str(dtype).split(",")]
    if len(dtypes) not in (1, len(shapes)):
        raise ValueError(f"dtype is one dtype for every input or one per input ({len(shapes)} here), "
                         f"e.g. float32,int64; got {dtype!r}")
    dts = [ownmodel.parse_dtype(d) for d in dtypes] * (len(shapes) if len(dtypes) == 1 else 1)
    parsed = [(ownmodel.parse_shape(s), dt) for s, dt in zip(shapes, dts)]
    if save_json is not None:
        from nogradlab.run import outdir

        if not isinstance(save_json, (str, bytes)) and not hasattr(save_json, "__fspath__"):
            raise ValueError(f"save_json is a file name (or None), got {save_json!r}")
        try:
            outdir.check_file_target(save_json, "JSON file of estimate --json", ours=estimate_cmd.is_estimate_doc)
        except outdir.OutputError as e:
            raise ValueError(f"save_json: {e}") from None
    if len(parsed) == 1:
        req = estimate_cmd.check(model, str(input), parsed[0][1], gpu)
        return Spec(model=model, input=str(input), dtype=str(dtype), gpu=str(gpu), budget=req.budget,
                    inputs=parsed, builder=req.build, request=req, save_json=save_json)
    budget = estimate_cmd.parse_bytes(gpu)
    factory = estimate_cmd.load_factory(model)
    floating = next((dt for _, dt in parsed if dt.is_floating_point), None)
    builder = factory
    if floating is not None:  # as the command does: a floating input dtype is the model's too
        from nogradlab.core.workloads import _default_dtype

        def builder():
            with _default_dtype(floating):
                return factory()
        builder.__qualname__ = factory.__qualname__
    return Spec(model=model, input=str(input), dtype=str(dtype), gpu=str(gpu), budget=budget, inputs=parsed,
                builder=builder, request=None, save_json=save_json)


# --------------------------------------------------------------------------------------------
# on this device: peaks and times per mode


def _settings():
    return {m: _batch._SETTINGS[estimate_cmd.MODES[m]] for m in MODES}


def _step(own, model, x, mode, dev, batch, opt=None):
    """A no-argument function running ``mode`` once (the same step the estimate traces)."""
    from nogradlab.core import modes

    if mode == "train":
        target = own.make_target(batch, dev)
        opt = opt if opt is not None else _memory._OPTIMIZERS["sgd"](model.parameters())
        return lambda: _memory.train_step(model, x, target, own.loss, opt), (target,)
    setting = _settings()[mode]

    def fn():
        with modes.setting(setting, model=model, device=dev):
            return ownmodel.forward(model, x)

    return fn, ()


def _timing_knobs(dev, scale, seed) -> dict:
    """compare()'s settings as the claim checks take them at this device and scale."""
    from nogradlab import claims
    from nogradlab.claims import measure as _measure

    k = _measure._knobs(claims.Context(torch.device(dev), scale, seed, {}))
    return {key: k[key] for key in ("rounds", "min_run_time", "warmup", "num_threads")}


def _time_modes(own, base, x, dev, b: int, scale: str, seed: int) -> dict:
    """The document's ``here["timing"]``: each mode's time per call on ``base`` by ``nogradlab.timing.compare``
    with the claim checks' knobs, the ratio to the grad forward with its paired signed-rank interval."""
    from nogradlab.core import timing

    # the same steps on the same weights (each forward case sets eval itself). The training step: plain SGD
    # with a small learning rate (weights that stay finite keep the times honest; no momentum buffers held
    # between rounds: a copy of the weights fewer in memory on a 1 GB Binder machine)
    opt = torch.optim.SGD(base.parameters(), lr=1e-4, foreach=True)
    cases = {mode: _step(own, base, x, mode, dev, b, opt if mode == "train" else None)[0]
             for mode in ("grad", "no_grad", "inference_mode", "train")}
    knobs = _timing_knobs(dev, scale, seed)
    cmp = timing.compare(cases, baseline="grad", device=dev, seed=seed, **knobs)
    return {
        "protocol": (f"nogradlab.timing.compare: {cmp.rounds} interleaved rounds, {knobs['warmup']} warm-up "
                     f"call(s), {cmp.threads} thread(s), cases in a random order each round, median per call, ratio to "
                     f"the grad forward with a {timing.CONFIDENCE:.0%} signed-rank interval of the paired rounds; "
                     "the training step timed with SGD "
                     f"without momentum; {timing.CLOCKS[cmp.clock]}; the fused transformer fast path on "
                     "(PyTorch's default)"),
        "threads": cmp.threads, "rounds": cmp.rounds,
        "modes": {m: {"median_s": t.median, "iqr_s": t.iqr,
                      "over_grad": 1.0 / cmp.speedup[m],
                      "over_grad_ci": [1.0 / cmp.ci[m][1], 1.0 / cmp.ci[m][0]]}
                  for m, t in cmp.timings.items()}}


def _peaks_by_mode(own, base, x, tensors, dev, b) -> tuple:
    """``({mode: peak bytes}, the probe's method, a later training step's peak)`` of :func:`measure_here`: the
    three forwards, then a training step with a fresh optimizer and a second one that holds its momentum."""
    peaks, method, later = {}, None, None
    cuda = dev.type == "cuda"
    for mode in ("grad", "no_grad", "inference_mode", "train"):
        model = base
        opt = _memory._OPTIMIZERS["sgd"](model.parameters()) if mode == "train" else None  # kept for a 2nd step
        fn, extra = _step(own, model, x, mode, dev, b, opt)
        if cuda:  # library workspaces (cuBLAS, cuDNN) made once: not this step's
            warm, _ = _step(own, copy.deepcopy(model), x, mode, dev, b)
            warm()
            del warm
            _device.synchronize(dev)
        fused_off = _memory.fused_paths_off() if not cuda else contextlib.nullcontext()
        with frozen_gc(), fused_off:
            rep = _memory.measure(fn, dev)
        method = rep.method
        entry = tensors + [t for t in extra if isinstance(t, torch.Tensor)]
        peaks[mode] = int(_memory.resident_bytes(model, entry, dev) + rep.peak_bytes)
        if mode == "train":
            # a fresh optimizer's first step makes SGD's momentum buffers after backward has freed what the
            # forward saved (torch/optim/sgd.py clones the gradient when a buffer is None); every later step
            # holds them through backward: a second step, the buffers resident before it
            with frozen_gc(), (_memory.fused_paths_off() if not cuda else contextlib.nullcontext()):
                rep = _memory.measure(fn, dev)
            state = [t for st in opt.state.values() for t in st.values() if isinstance(t, torch.Tensor)]
            later = int(_memory.resident_bytes(model, entry + state, dev) + rep.peak_bytes)
            del state, opt
        del model, fn, rep, extra
        _memory.release()  # freed tensors back to the system: a 1-2 GB Binder machine runs this too
    return peaks, method, later


def measure_here(spec: Spec, device="cpu", scale: str = "tiny", seed: int = 0, *, time_it: bool = True) -> dict:
    """On ``device``, at the batch of ``scale`` (:func:`here_batch`): each mode's peak memory (weights,
    inputs and the step's own peak; live storages off CUDA, the caching allocator on CUDA; one copy of the
    model, ours: the three forwards first, then the training step with a fresh optimizer, whose first step
    is ``peak_bytes["train"]``, and a second step that holds the momentum buffers through backward,
    ``train_later_step_bytes``) and, with
    ``time_it``, each mode's time per call by ``nogradlab.timing.compare`` with the claim checks' knobs
    (interleaved rounds; the ratio to the grad forward with its paired signed-rank 95 % interval; the timed
    training step uses SGD without momentum). Returns a JSON-ready dict (the document's ``here``)."""
    _memory.release()  # what earlier cells freed, back to the system before the largest steps run
    dev = _device.resolve(device)
    b = here_batch(scale)
    own = spec.own()
    base = spec.build(dev, seed)
    x = spec.sample(b, dev, seed)
    tensors = ownmodel.model_tensors(x)
    cuda = dev.type == "cuda"
    # one copy of the weights, ours: the forward modes change nothing in it, the training step (last) steps it.
    # On a CPU with the timings' thread count (bytes do not depend on it): beside a busy neighbour on a 2-core
    # machine a second OpenMP thread waits for the core it holds, and these steps took 0.6-4 s each, not 0.1-0.4 s
    with _sweep._torch_threads(None if dev.type != "cpu" else _timing.threads_here()[0]):
        peaks, method, later = _peaks_by_mode(own, base, x, tensors, dev, b)
    peaks = {m: peaks[m] for m in MODES}  # in the table's order
    info = _device.describe(dev)
    here = {"device": str(dev), "hardware": _device.label(info), "torch": torch.__version__, "scale": scale,
            "batch": b, "seed": int(seed), "measured_at": datetime.datetime.now(datetime.timezone.utc)
            .isoformat(timespec="seconds"),
            "peak_bytes": peaks, "peak_method": f"{method} ({'the caching allocator' if cuda else 'live storages'})"
            " plus the weights and inputs resident before the step"
            + ("" if cuda else "; measured with PyTorch's fused transformer fast path off (its one fused operator "
               "hides its temporaries from a storage probe), where the timing below runs with it on, as the model "
               "serves"),
            "fused_fast_path": {"memory": "on" if cuda else "off", "timing": "on"},
            # peak_bytes["train"] is a first step (a fresh optimizer); this, a second, holds the momentum throughout
            "train_later_step_bytes": later}
    if time_it:
        here["timing"] = _time_modes(own, base, x, dev, b, scale, seed)
    del base
    _memory.release()
    return here


def here_frame(here: dict):
    """The measured-here figures as a table, one row per mode."""
    import pandas as pd

    rows = []
    grad_peak = here["peak_bytes"]["grad"]
    for m in MODES:
        row = {"mode": m, "peak memory": _format.bytes_(here["peak_bytes"][m]),
               "peak / grad forward": _format.ratio(here["peak_bytes"][m] / grad_peak)}
        t = here.get("timing", {}).get("modes", {}).get(m)
        if t is not None:
            lo, hi = t["over_grad_ci"]
            row.update({"time per call (median)": _format.seconds(t["median_s"]),
                        "IQR": _format.seconds(t["iqr_s"], digits=2),
                        "time / grad forward [95% CI]": _format.ratio_ci(t["over_grad"], lo, hi, noisy=False)})
        rows.append(row)
    return pd.DataFrame(rows).set_index("mode")


def plot_here(here: dict):
    """Peak memory and time per call per mode, side by side."""
    import matplotlib.pyplot as plt

    modes = list(MODES)
    timed = "timing" in here
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(9 if timed else 4.8, 3.0), squeeze=False)
    colors = ["#c44e52", "#dd8452", "#55a868", "#4c72b0"]
    ax = axes[0][0]
    # the train bar is a first step (a fresh optimizer: its momentum made after backward); a later step's peak
    # beside it, where measured
    names = ["train (first step)" if m == "train" else m for m in modes]
    ax.bar(names, [here["peak_bytes"][m] / 2**20 for m in modes], color=colors)
    if here.get("train_later_step_bytes"):
        later = here["train_later_step_bytes"] / 2**20
        ax.scatter([names[modes.index("train")]], [later], marker="_", s=400,
                   color="#1f2328", zorder=3, label="a later training step")
        ax.set_ylim(top=1.35 * max([later] + [here["peak_bytes"][m] / 2**20 for m in modes]))  # room for the key
        ax.legend(fontsize=7, loc="upper left")
    ax.set_ylabel("peak MiB")
    ax.set_title(f"peak memory, batch {here['batch']}")
    if timed:
        ax = axes[0][1]
        t = here["timing"]["modes"]
        g = t["grad"]["median_s"] * 1e3  # each ratio's interval, in the grad forward's milliseconds
        med = [t[m]["over_grad"] * g for m in modes]
        lo = [(t[m]["over_grad"] - t[m]["over_grad_ci"][0]) * g for m in modes]
        hi = [(t[m]["over_grad_ci"][1] - t[m]["over_grad"]) * g for m in modes]
        ax.bar(modes, med, color=colors, yerr=[[max(v, 0) for v in lo], [max(v, 0) for v in hi]], capsize=4)
        ax.set_ylabel("ms per call: grad's median x ratio")
        ax.set_title("time; bars: 95% CI of the ratio to grad")
    for a in axes[0]:
        a.tick_params(axis="x", labelsize=8, rotation=15)
    fig.suptitle(here["hardware"], fontsize=9)
    fig.tight_layout()
    plt.close(fig)
    return fig


# --------------------------------------------------------------------------------------------
# for GPUs: the estimate engine


class EstimateFailed(RuntimeError):
    """The estimate could not run this model (``op``: the operator, when one is named)."""

    def __init__(self, message, op=None):
        super().__init__(message)
        self.op = op


_OP_RE = (re.compile(r"<CustomOpDef\(([\w:.]+)\)>"), re.compile(r"\b(aten\.[\w.]+|[\w]+::[\w.]+)"))


def _operator_of(e: BaseException) -> "str | None":
    op = getattr(e, "op", None)
    if op:
        return str(op)
    func = getattr(e, "func", None)
    if func is not None:
        return str(func)
    for rx in _OP_RE:
        m = rx.search(str(e))
        if m:
            return m.group(1)
    return None


def _fake_refusal(e: BaseException) -> bool:
    """An error of fake tensors refusing the model (not a bug of ours): NotEstimable, or fake tensors'
    own exceptions, or a custom operator without a fake implementation."""
    from torch._subclasses import fake_tensor as ft

    if isinstance(e, (_fake.NotEstimable, ft.UnsupportedOperatorException, ft.DataDependentOutputException,
                      ft.DynamicOutputShapeException)):
        return True
    text = str(e)
    # the command's one-line error when no mode could run, carrying the first mode's refusal
    return isinstance(e, (RuntimeError, estimate_cmd.ModelError)) and ("fake impl" in text or "fake tensor" in text.lower()
                                            or "meta" in text and "kernel" in text)


def _mixed_fake_modes(e: BaseException) -> bool:
    """Fake tensors deep-copied while the model was built (``nn.TransformerEncoder`` clones its layer
    with ``copy.deepcopy``) belong to another fake mode than the step's."""
    return isinstance(e, AssertionError) and "Mixing fake modes" in str(e)


BUILT_ON_META = ("the factory deep-copies modules while it builds (nn.TransformerEncoder clones its layer), "
                 "which fake tensors refuse: the model was built once on the meta device (no memory) and copied "
                 "with fake weights of the same shapes for each step")


def estimate(spec: Spec, budget: "int | None" = None) -> dict:
    """The document ``python -m nogradlab estimate MODEL --input INPUT --dtype DTYPE --gpu GPU --json``
    writes (``budget``: another budget in bytes instead of ``spec.budget``). One input: the command's own
    ``estimate_cmd.run``. Several: the same engine calls (``memory.estimate`` at batch 1, then
    ``batch.largest_batch`` per mode, as the command makes them) on the model with a function of the batch
    as its inputs. A factory whose construction deep-copies modules is built on the meta device and copied
    fake instead (a note says so). :class:`EstimateFailed` (naming the operator) when fake tensors cannot
    run the model."""
    import warnings

    b = spec.budget if budget is None else int(budget)
    gpu = spec.gpu if budget is None else f"{b}B"
    command = (f"python -m nogradlab estimate {spec.model} --input {spec.input} --dtype {spec.dtype} --gpu {gpu}"
               " --json FILE")
    try:
        mixed = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if spec.request is not None:
                    req = copy.copy(spec.request)
                    req.budget = b
                    doc = estimate_cmd.run(req, progress=False, command=command)
                else:
                    doc = _run_engine(spec, spec.own(), b, command)
            except AssertionError as e:
                if not _mixed_fake_modes(e):
                    raise
                mixed = e
        if mixed is None:
            for w in caught:  # the warnings of a run that worked reach the caller as they were
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            return doc
        # (the failed attempt's warnings were about the deep-copied fake tensors: dropped with it)
        with torch.device("meta"):
            meta = spec.builder()
        own = ownmodel.Model(meta, spec.own().inputs, dtype=spec.inputs[0][1], name=spec.name)
        doc = _run_engine(spec, own, b, command)
        doc["notes"].insert(0, BUILT_ON_META)
        return doc
    except Exception as e:  # noqa: BLE001 - only fake tensors' refusals are turned into a message
        if not _fake_refusal(e):
            raise
        op = _operator_of(e)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise EstimateFailed(f"the estimate cannot run {spec.name}: fake tensors refused the operator "
                             f"{op or '(not named)'} ({first[:300]})", op) from e
    finally:
        _memory.release()  # the traces' memory back to the system


def _run_engine(spec: Spec, own: ownmodel.Model, budget: int, command: str) -> dict:
    """``estimate_cmd.run``'s loop and document (the same calls, the same arguments, the same keys) for
    ``own``: a model of several inputs, or one built on the meta device."""
    trainable = any(p.requires_grad for p in _fake._TEMPLATES.own(own, None)[0].parameters())  # as the command
    out, notes, skipped, not_applicable = estimate_cmd.estimate_modes(own, MODES_ORDER, budget, trainable=trainable)
    if not out and skipped:
        first = next(iter(skipped))
        raise estimate_cmd.ModelError(f"no mode could be estimated; {first}: {skipped[first]}")
    from nogradlab.estimate import cudamodel

    ng = out.get("no_grad")
    return {
        "meta": {"tool": "nogradlab", "source": "estimate", "model": spec.model, "name": spec.name,
                 "input": ",".join("x".join(map(str, s)) for s, _ in spec.inputs),
                 "dtype": ",".join(str(d).replace("torch.", "") for _, d in spec.inputs),
                 "gpu_bytes": budget, "allocator": "native", "batch": 1, "max_batch": 65536,
                 "device": "cuda" if torch.cuda.is_available() else "cuda (virtual: no GPU here)",
                 "gpu_profile": cudamodel.profile().name, "torch": torch.__version__, "command": command},
        "modes": out,
        "no_grad_factor": {"over_grad": estimate_cmd._factor(ng, out.get("grad")),
                           "over_train": estimate_cmd._factor(ng, out.get("train"))},
        "notes": notes,
        **({"skipped": skipped, "not_applicable": not_applicable} if skipped else {}),
    }


#: the command's default order of modes (its --modes default)
MODES_ORDER = ("grad", "no_grad", "inference_mode", "train")


def estimate_frame(doc: dict):
    """The estimate document's modes as a table (the command's terminal table, as a DataFrame)."""
    import pandas as pd

    b = doc["meta"]["batch"]
    rows = [{"mode": m, f"allocated @{b}": _format.bytes_(e["allocated_peak_bytes"]),
             f"reserved @{b}": _format.bytes_(e["reserved_peak_bytes"]),
             f"largest batch under {_format.bytes_(doc['meta']['gpu_bytes'])}":
                 f">= {e['largest_batch']} (search limit)" if e["at_limit"] else str(e["largest_batch"]),
             "trials": e["trials"]} for m, e in doc["modes"].items()]
    if any(e.get("missed") for e in doc["modes"].values()):  # the table says where a figure is low, as the command's
        for row, e in zip(rows, doc["modes"].values()):
            row[f"not counted @{b}"] = "; ".join(
                f"{'about ' + _format.bytes_(x['bytes']) if x.get('bytes') else 'unknown'} ({x['op']})"
                for x in e.get("missed", [])) or "-"
    return pd.DataFrame(rows).set_index("mode")


#: the engine's notes (nogradlab.estimate: cudamodel, fake, batch) that qualify every row of the table
_EVERY_ROW = ("no GPU here:", "decided as the real cap decides:")
#: the first note of a training step's own (fake.estimate, on a virtual device): what follows is the train row's
_TRAIN_MARK = "backward cannot run on a fake CUDA device"
_PLAIN = [
    (re.compile(r"workspaces at the sizes (?P<gpu>.+?) reported \(cuDNN [^)]*\): (?P<calls>\d+) convolution calls, "
                r"\d+ other calls; (?P<n>\d+) convolution shapes are not in the table and were given no workspace "
                r"\((?P<eg>.*?)\): cuDNN may take more there"),
     lambda m: "cuDNN workspace (scratch memory a convolution takes while it runs): the table measured on the " + (
         f"{m['gpu']} has a size for none of the {m['n']} convolution shapes here, so none is counted"
         if m["calls"] == "0" else
         f"{m['gpu']} has no size for {m['n']} of the convolution shapes here, so none is counted for them") +
     f" ({m['eg']}). A real GPU may need more memory, so fewer samples than shown may fit."),
    (re.compile(r"workspaces at the sizes (?P<gpu>.+?) reported \(cuDNN [^)]*\): \d+ convolution calls, \d+ other "
                r"calls$"),
     lambda m: f"Library workspaces (scratch memory an operation takes while it runs): the sizes the {m['gpu']} "
               "reported, for every call here."),
    (re.compile(r"^(?P<n>\d+) depthwise convolution calls given no workspace: "),
     lambda m: f"Depthwise convolutions ({m['n']} calls): in float32 (or bfloat16) and the default memory layout "
               "PyTorch runs them on its own kernel, not cuDNN, so they take no workspace and none is counted."),
    (re.compile(r"workspaces interpolated between the batches measured on (?P<gpu>.+?) \(not measured at this "
                r"batch\) for (?P<n>\d+) operator signatures \((?P<eg>.*)\)$"),
     lambda m: f"The workspaces of {m['n']} operator shape(s) ({m['eg']}) are read between two batches the "
               f"{m['gpu']} measured, not measured at this batch."),
    (re.compile(r"library workspaces kept by the process, as on (?P<gpu>.+?) \(sm\d+\): (?P<parts>.*)$"),
     lambda m: f"Counted at every batch: the workspaces the libraries keep once they have run ({m['parts']}), "
               f"sizes as on the {m['gpu']}."),
    (re.compile(r"no GPU here: estimated on a virtual \S+ device$"),
     lambda m: "No GPU here: the figures come from fake tensors (shapes without data) on a virtual CUDA device; "
               "nothing was allocated."),
    (re.compile(r"decided as the real cap decides: .* under a cap of (?P<cap>.+?) reserved$"),
     lambda m: f"Largest batch: every batch tried is replayed, allocation by allocation, through the model of "
               f"PyTorch's caching allocator under a cap of {m['cap']} of reserved memory, as "
               "torch.cuda.set_per_process_memory_fraction caps a real process."),
    (re.compile(r"backward cannot run on a fake CUDA device without a GPU in this torch \((?P<torch>[^)]*)\); "
                r"estimated on the fake CPU device with CUDA's (?P<block>\d+)-byte block rounding"),
     lambda m: f"This torch ({m['torch']}) cannot run backward on fake CUDA tensors without a GPU, so the training "
               f"step was traced on fake CPU tensors, with CUDA's kernels modelled and every size rounded up to "
               f"{m['block']} bytes as CUDA's allocator rounds it."),
]


def _rows_label(modes: list) -> str:
    return "the " + (modes[0] if len(modes) == 1 else ", ".join(modes[:-1]) + " and " + modes[-1]) + \
        (" row" if len(modes) == 1 else " rows")


def _plain(note: str) -> str:
    for pattern, say in _PLAIN:
        m = pattern.search(note)
        if m:
            return say(m)
    return note  # a note this function does not know, word for word: never dropped


def caveats(doc: dict) -> dict:
    """The estimate's notes in plain words, by the rows of :func:`estimate_frame` they qualify:
    ``{"every row": [...], "the grad, no_grad and inference_mode rows": [...], "the train row": [...]}``
    (empty groups left out). The engine lists each note once, in the order of the modes it estimated
    (``estimate_cmd.estimate_modes``), so a note first given by the training step follows the forward
    modes'; on a virtual device the training step's own notes open with the one saying backward ran on
    the fake CPU device, which is where the train row's start. Without that note, the notes that are not
    every row's go to all rows. A note not known here is kept word for word."""
    modes = list(doc.get("modes", {}))
    forward = [m for m in modes if m != "train"]
    keys = ["every row", _rows_label(forward) if forward else "every row", "the train row"]
    groups: dict = {k: [] for k in keys}
    notes = list(doc.get("notes", []))
    split = next((i for i, n in enumerate(notes) if n.startswith(_TRAIN_MARK)), None)
    for i, note in enumerate(notes):
        if note.startswith(_EVERY_ROW) or split is None:
            key = keys[0]
        else:
            key = keys[2] if i >= split else keys[1]
        groups[key].append(_plain(note))
    return {k: v for k, v in groups.items() if v}


def gpu_sizes(spec: Spec, doc: dict, scale: str = "tiny", gib=COMMON_GIB) -> list:
    """The largest batch per mode on a few common GPU sizes (plus the budget ``gpu``). The budget of
    ``doc`` is the engine's own answer; the other sizes are read off the straight line through batch 1's
    reserved bytes and that answer (memory is close to affine in the batch). At ``scale="full"`` the
    largest of them is also searched by the engine (one more estimate per mode), and its row holds both:
    the engine's answer, and the line's in ``line`` (so the line's error is shown where it is largest).
    ``how`` says where each row's figures come from."""
    budget = int(doc["meta"]["gpu_bytes"])
    sizes = sorted({int(g * 2**30) for g in gib} | {budget})
    check = max((x for x in sizes if x != budget), default=None) if scale == "full" else None
    rows = []
    for size in sizes:
        row = {"gpu_bytes": size, "gpu": _format.bytes_(size)}
        line = {m: _extrapolate(e, budget, size) for m, e in doc["modes"].items()}
        if size == budget or size == check:
            src = doc if size == budget else estimate(spec, size)
            row.update({m: (e["largest_batch"], e["at_limit"]) for m, e in src["modes"].items()})
            row["how"] = "engine"
            if size == check:
                row["line"] = line
        else:
            row.update(line)
            row["how"] = "line"
        rows.append(row)
    return rows


def _extrapolate(e: dict, budget: int, size: int):
    """(batch, is a lower bound) at ``size`` bytes on the line through (1, reserved at batch 1) and
    (largest batch, budget); (None, False) where the line says nothing."""
    n, r1 = e["largest_batch"], e["reserved_peak_bytes"]
    if e["at_limit"]:
        return (n, True) if size >= budget else (None, False)
    if n <= 1 or r1 is None or budget <= r1:
        return (None, False)
    per = (budget - r1) / (n - 1)
    b = max(int(1 + (size - r1) // per), 0)
    limit = 65536  # the command's max_batch: the engine would stop there too
    return (limit, True) if b >= limit else (b, False)


def sizes_frame(rows: list):
    import pandas as pd

    def cell(v):
        b, lower = v
        return "n/a" if b is None else (f">= {b}" if lower else str(b))

    out = []
    for r in rows:
        row = {"GPU memory": r["gpu"], **{m: cell(r[m]) for m in MODES_ORDER if m in r},
               "how": {"engine": "estimate engine", "line": "line through the engine's answer"}[r["how"]]}
        if "line" in r:  # the engine's answer where the line was checked: the line's own in brackets
            row.update({m: f"{cell(r[m])} (line: {cell(r['line'][m])})" for m in MODES_ORDER if m in r})
        out.append(row)
    return pd.DataFrame(out).set_index("GPU memory")


# --------------------------------------------------------------------------------------------
# what to do, and the saved document


def _ratio_digits(lo: float, hi: float, digits: int = 3, most: int = 6) -> int:
    """The fewest decimals (at least ``digits``, at most ``most``) at which no end of ``[lo, hi]`` other
    than 1 itself prints as 1: rounding reaches 1 but never crosses it, so a printed end then lies on the
    same side of 1 as the unrounded one."""
    for d in range(digits, most + 1):
        if all(v == 1 or float(f"{v:.{d}f}") != 1 for v in (lo, hi)):
            return d
    return most


def _ratio_end(v: float, digits: int) -> str:
    """One end of a ratio's interval at ``digits`` decimals; an end still printing as 1 (closer to 1 than
    the digits show) reads 'just below 1×' or 'just above 1×'."""
    if v != 1 and float(f"{v:.{digits}f}") == 1:
        return f"just {'below' if v < 1 else 'above'} {_format.ratio(1, 0)}"
    return _format.ratio(v, digits)


def recipe(saved: "SavedByLayer | None", here: "dict | None", doc: "dict | None", sizes: "list | None" = None,
           error: "str | None" = None) -> list:
    """The learner's recipe for this model, one markdown bullet per finding, generated from the figures."""
    fb = _format.bytes_
    out = []
    if here is not None:
        p = here["peak_bytes"]
        best = min(("inference_mode", "no_grad"), key=lambda m: p[m])
        out.append(f"**Serve and evaluate under `model.eval()` and `torch.{best}()`**: at batch {here['batch']} "
                   f"on {here['device']} its peak was {fb(p[best])}, against {fb(p['grad'])} for the same forward "
                   f"with grad on ({_format.ratio(p['grad'] / p[best])}) and {fb(p['train'])} for a first training "
                   "step (SGD with momentum, a fresh optimizer: its momentum buffers are made after backward)"
                   + (f"; a later step, which holds them through backward, peaked at {fb(here['train_later_step_bytes'])}"
                      if here.get("train_later_step_bytes") else "") + ".")
        t = here.get("timing", {}).get("modes")
        if t:
            for m in ("no_grad", "inference_mode"):
                lo, hi = t[m]["over_grad_ci"]
                # the word from the unrounded interval; the ends printed so that neither contradicts it
                verdict = ("faster than it" if hi < 1 else "slower than it" if lo > 1
                           else _format.NO_CLEAR_DIFFERENCE)
                d = _ratio_digits(lo, hi)
                out.append(f"Time: `{m}` took {_format.ratio(t[m]['over_grad'], d)} the grad forward's time here "
                           f"(95 % CI {_format.interval(lo, hi, lambda v, d=d: _ratio_end(v, d))}): {verdict} "
                           "on this device.")
            out.append("Prefer `torch.inference_mode()` where the outputs never meet autograd again; keep "
                       "`torch.no_grad()` where they feed a training step later (targets, EMA weights).")
    if saved is not None and saved.total_bytes:
        most = max(r["saved_bytes"] for r in saved.rows)
        tops = [r["layer"] for r in saved.rows if r["saved_bytes"] == most]  # every layer that keeps the most
        types = saved.by_type()
        t0 = next(iter(types))
        where = (f"the most in one layer is `{tops[0]}` ({fb(most)})" if len(tops) == 1 else
                 f"the layers that keep the most are {', '.join(f'`{t}`' for t in tops[:-1])} and `{tops[-1]}` "
                 f"({fb(most)} each)")
        out.append(f"With grad on, one forward keeps {fb(saved.total_bytes)} for backward; the "
                   f"`{t0}` layers keep {_format.percent(types[t0] / saved.total_bytes, 0)} of it; {where}.")
        block = saved.best_block()
        if block is not None:
            single = (f" Checkpointing a `{t0}` alone would free little: what it saves is mostly its input, which "
                      "checkpoint keeps." if t0.startswith("BatchNorm") or t0 in ("ReLU", "GELU", "SiLU", "Dropout")
                      else "")
            bn = " It holds BatchNorm layers: recomputed in training mode, they update their running statistics " \
                 "a second time each step." if block.get("has_batchnorm") else ""
            out.append(f"To train at a larger batch, recompute a whole block in backward instead of keeping what it "
                       f"saves: `torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)` keeps only the "
                       f"block's inputs. Here `{block['block']}` ({block['type']}) saves {fb(block['saved_bytes'])} "
                       f"and takes {fb(block['input_bytes'])} of inputs; the layers after it save "
                       f"{fb(block['after_bytes'])}. Recomputing it would take at most about {fb(block['frees'])} "
                       "off a training step's peak: the lesser of what it saves and what the layers after it save, "
                       "less the inputs it keeps, since backward recomputes the block once theirs are freed while "
                       "all that was saved before it is still held (a block that is nearly the whole model frees "
                       "nothing). The gradients made by then can put the peak elsewhere: measure the step with it. "
                       "Recomputing several blocks in turn (`torch.utils.checkpoint.checkpoint_sequential` on a "
                       "`Sequential`) can free more."
                       f"{single}{bn}")
        for a in saved.attention:
            if a["saves_LxL"]:
                how = ("call it with `need_weights=False`, which lets it use `F.scaled_dot_product_attention`"
                       if a["type"] == "MultiheadAttention" else
                       "compute it with `F.scaled_dot_product_attention`")
                out.append(f"Attention `{a['layer']}` saves an L x L matrix for backward: {how}, whose fused kernels "
                           "save the query, key, value and output and one log-sum-exp per row and head: nothing "
                           "L x L.")
    if doc is not None:
        m = doc["modes"]
        gpu = fb(doc["meta"]["gpu_bytes"])

        def b(mode):
            e = m.get(mode)
            if e is None:
                return "n/a"
            return f"at least {e['largest_batch']} (the search's limit)" if e["at_limit"] else str(e["largest_batch"])

        # the forward modes' count first, then the training step's (its backward convolutions count too)
        counts = list(dict.fromkeys(int(hit.group(1)) for n in doc.get("notes", [])
                                    if (hit := re.search(r"(\d+) convolution shapes are not in the table", n))))
        missing = (f"{counts[0]} convolution shapes ({counts[1]} in the training step)" if len(counts) > 1 and
                   "train" in doc["modes"] else f"{counts[0]} convolution shapes" if counts else "")
        out.append(f"On a {gpu} GPU (estimated, {doc['meta']['gpu_profile']} modelled), the largest batch: a training "
                   f"step {b('train')}; a forward with grad on {b('grad')}, `no_grad` {b('no_grad')}, "
                   f"`inference_mode` {b('inference_mode')}. Confirm it on the real GPU and keep 5-10 % headroom"
                   + (f", more where cuDNN runs the {missing} no workspace was counted for (the caveats above)"
                      if missing else "") + ".")
        f = doc["no_grad_factor"]["over_grad"]
        if f is not None:
            out.append(f"The `no_grad` factor: {_format.ratio(f)} the batch of a grad forward under the same budget.")
    if error:
        out.append(f"The GPU estimate could not run ({error}); measure on a GPU instead: "
                   "`batch.largest_batch(model, mode, budget, 'cuda', method='search', inputs=...)`.")
    return out


def document(doc: "dict | None", here: dict, spec: Spec, error: "str | None" = None) -> dict:
    """The saved document: ``doc`` (what ``nogradlab estimate --json`` writes) plus ``here``. Where the
    estimate failed: the command's ``meta`` and an empty ``modes``, with ``error``."""
    if doc is None:
        doc = {"meta": {"tool": "nogradlab", "source": "estimate", "model": spec.model, "name": spec.name,
                        "input": spec.input, "dtype": spec.dtype, "gpu_bytes": spec.budget},
               "modes": {}, "no_grad_factor": {"over_grad": None, "over_train": None}, "notes": [], "error": error}
    return {**doc, "here": here}


def save(spec: Spec, doc: "dict | None", here: dict, error: "str | None" = None) -> "str | None":
    """Write :func:`document` to ``spec.save_json`` (nothing when it is None); the path written."""
    if spec.save_json is None:
        return None
    import json
    from pathlib import Path

    from nogradlab.run import outdir

    path = outdir.check_file_target(spec.save_json, "JSON file of estimate --json", ours=estimate_cmd.is_estimate_doc)
    outdir.write_text_atomic(Path(path), json.dumps(document(doc, here, spec, error), indent=1) + "\n")
    return str(path)
