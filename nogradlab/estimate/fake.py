"""Estimates of a step's memory on fake tensors: :func:`estimate` traces the step on a virtual device
(``FakeTensorMode``) with the storage trackers of :mod:`nogradlab.core.memory` and, on CUDA, the
kernels the dispatcher would pick (:mod:`nogradlab.estimate.cudamodel`) and the caching allocator's
model (:mod:`nogradlab.estimate.allocator`). Nothing is allocated on a device.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import warnings
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nogradlab.core import device as _device
from nogradlab.core.memory import CUDA_BLOCK, FUSED_PATH_NOTE, HIDDEN_MARK, HIDDEN_WHY, STEPS, MemoryReport, _OPTIMIZERS, _entry_bytes, _run, _run_traced, _storage, format_bytes, fused_paths_off, train_step

__all__ = ["estimate", "ALLOCATORS", "NotEstimable", "InputMismatch"]


def _build_step(wl, batch, dev, step, mode, optimizer, dtype, built=None, autocast=None, model=None):
    """Build the model and inputs on ``dev`` (under whatever tensor mode is active) and return
    (fn, model, tensors live at entry). ``built()`` is called between the model and the inputs;
    ``autocast``: a context manager factory replacing the setting's own autocast (the virtual
    CUDA device). ``model``: a function making the model instead of ``wl.build`` (a template's
    copy: :class:`_Templates`)."""
    from nogradlab.core import modes
    from nogradlab.core.ownmodel import forward, model_tensors

    if model is not None:
        model = model()
    else:
        model = wl.build(dev, dtype=dtype) if dtype is not None else wl.build(dev)
    if built is not None:
        built()
    x = wl.make_input(batch, dev)
    if step == "train":
        target = wl.make_target(batch, dev)
        opt = _OPTIMIZERS[optimizer](model.parameters())

        def fn():
            return train_step(model, x, target, wl.loss, opt)

        entry = model_tensors(x) + model_tensors(target)
    else:
        setting = modes.parse(mode)
        if autocast is not None and setting.autocast:
            cast = modes.AUTOCAST_DTYPES[setting.autocast]
            setting = modes.Setting(mode=setting.mode, train=setting.train, autocast=None)

            def fn():
                with autocast(cast), modes.setting(setting, model=model, device=dev):
                    return forward(model, x)
        else:
            def fn():
                with modes.setting(setting, model=model, device=dev):
                    return forward(model, x)

        entry = model_tensors(x)
    return fn, model, entry


class _Templates:
    """Built-in models for estimates, built once per (workload, scale, dtype, device) and copied.

    Building a full-size model under ``FakeTensorMode`` costs as much as a forward pass (ResNet-50:
    0.1 s of a 0.2 s no_grad estimate), and a largest-batch search makes 5 to 15 estimates of the
    same model. The first estimate builds it for real (its allocation trace recorded as always); the
    model's structure is kept on the ``meta`` device, with the trace's construction part (every
    allocation and free up to the ``"model"`` mark) and which storage each parameter and buffer
    holds. A later estimate copies the structure, gives every parameter and buffer a fake storage
    of the same size, and replays the recorded construction events verbatim: the trace, and so the
    replay through the allocator's model, is the one a fresh build gives. A model whose tensors
    do not match what was recorded (a tensor kept outside its parameters and buffers) is built for
    real each time."""

    def __init__(self):
        self._store: dict = {}
        self._own = weakref.WeakKeyDictionary()  # your own model (ownmodel.Model) -> {dtype: entry}
        self._lock = threading.Lock()

    @staticmethod
    def _key(wl, dtype, dev, recorded):
        from nogradlab.core import workloads

        if type(wl) is not workloads.Workload:  # your own model: its builder may do anything
            return None
        # the sizes too: a workload's params (widths, layers, lengths) can be replaced under its name;
        # and whether an allocation trace is recorded (only then are construction events kept)
        return (wl.name, wl.scale, repr(sorted(wl.params.items())), str(dtype or torch.float32), str(dev),
                bool(recorded))

    def get(self, wl, dtype, dev, recorded):
        from nogradlab.core import ownmodel

        if isinstance(wl, ownmodel.Model):
            return self.own(wl, dtype)
        key = self._key(wl, dtype, dev, recorded)
        return None if key is None else self._store.get(key)

    def own(self, wl, dtype):
        """Your own model's template: its structure built once on ``meta`` (``Model.structure``:
        outside any fake mode, so a builder never runs on fake tensors, whose values read 0 and whose
        modes can clash with a builder's own), with the construction's allocations as recorded on
        ``meta`` (or, where the builder could not run on ``meta``, one allocation per tensor in the
        order the module holds them). Kept while the ``Model`` object lives."""
        from nogradlab.estimate import cudamodel

        key = str(dtype or "")
        with self._lock:
            entry = self._own.get(wl, {}).get(key)
        if entry is not None:
            return entry
        module, rec, how = wl.structure(dtype, recorder_factory=lambda: cudamodel.AllocationRecorder("meta"))
        hooks = _drop_hooks(module)
        named = self._named_storages(module)
        keys, events, last = {}, None, 0
        if rec is not None:
            for name, st in named:
                seen = rec._seen.get(id(st))
                if seen is None or seen[0]() is not st:
                    keys = None  # a tensor the recorder did not see being made (a view, a constant)
                    break
                keys[name] = seen[1]
            if keys is not None:
                alive = {e[1] for e in rec.events if e[0] == "alloc"} - {e[1] for e in rec.events if e[0] == "free"}
                if set(keys.values()) <= alive:
                    events = [e for e in rec.events if e[0] != "mark"]
                    last = max((e[1] for e in events if e[0] in ("alloc", "try_alloc", "ws") and isinstance(e[1], int)),
                               default=0)
        if events is None:
            # one allocation per storage, in the order a fake copy of the module makes them (module by
            # module: parameters, buffers, other tensor attributes)
            events, by_storage = [], {}
            for m in module.modules():
                for t in [*m._parameters.values(), *m._buffers.values(),
                          *(v for v in vars(m).values() if isinstance(v, torch.Tensor))]:
                    st = _storage(t) if t is not None else None
                    if st is not None and id(st) not in by_storage:
                        by_storage[id(st)] = len(by_storage) + 1
                        events.append(("alloc", by_storage[id(st)], int(st.nbytes())))
            keys = {name: by_storage[id(st)] for name, st in named}
            last = len(by_storage)
        entry = (module, events, keys, last, how, hooks)
        with self._lock:
            self._own.setdefault(wl, {})[key] = entry
        return entry

    def clear(self):
        with self._lock:
            self._store.clear()
            self._own.clear()

    @staticmethod
    def _named_storages(model):
        out = []
        for name, t in list(model.named_parameters(remove_duplicate=False)) + \
                list(model.named_buffers(remove_duplicate=False)):
            st = _storage(t)
            if st is not None:
                out.append((name, st))
        return out

    def observe(self, wl, dtype, dev, model, rec):
        """Right after a real build (inside the fake mode; under ``rec`` when a trace is recorded):
        the construction events and the storage key of every named tensor, or None where anything
        does not match (then the model is built for real each time)."""
        key = self._key(wl, dtype, dev, rec is not None)
        if key is None or key in self._store:
            return None
        named = self._named_storages(model)
        if len({id(st) for _, st in named}) != len(named):
            return None  # a storage shared by two tensors (tied weights)
        if rec is None:
            return key, [], {name: None for name, _ in named}, 0
        ev = rec.events
        i_model = next((i for i, e in enumerate(ev) if e[0] == "mark" and e[1] == "model"), None)
        if i_model is None:
            return None
        keys = {}
        for name, st in named:
            seen = rec._seen.get(id(st))
            if seen is None or seen[0]() is not st:
                return None  # a storage the recorder did not see being made
            keys[name] = seen[1]
        alloc_keys = {e[1] for e in ev[:i_model] if e[0] == "alloc"}
        freed = {e[1] for e in ev[:i_model] if e[0] == "free"}
        if not set(keys.values()) <= alloc_keys - freed:
            return None  # a storage freed during construction
        # the keys the construction used (the inputs, made since, take the next ones)
        last = max((e[1] for e in ev[:i_model] if e[0] in ("alloc", "try_alloc") and isinstance(e[1], int)),
                   default=0)
        return key, list(ev[:i_model]), keys, last

    def learn(self, wl, dtype, observed):
        """Keep what :meth:`observe` saw, with the model's structure built on ``meta`` (outside
        any tensor mode)."""
        if observed is None:
            return
        key, events, keys, last_key = observed
        try:
            meta = wl.build("meta", dtype=dtype) if dtype is not None else wl.build("meta")
        except Exception:  # noqa: BLE001 - a model that cannot be built on meta: build for real
            return
        if [n for n, _ in self._named_storages(meta)] != list(keys):
            return
        with self._lock:
            self._store.setdefault(key, (meta, events, keys, last_key))

    @staticmethod
    def copy(entry):
        """A copy of the template's structure, on ``meta`` (made outside any tensor mode). Its tensors are
        new ``meta`` tensors (:func:`~nogradlab.core.ownmodel._fake_copy`): a tensor attribute computed from
        the weights (pruning's ``weight``) is no graph leaf, and ``deepcopy`` refuses those."""
        from nogradlab.core.ownmodel import _fake_copy

        return _fake_copy(entry[0], "meta")

    @staticmethod
    def materialize(entry, skeleton, dev, rec):
        """Give ``skeleton`` (from :meth:`copy`) fake storages on ``dev`` under the active fake
        mode, and replay the construction's events into ``rec``."""
        events, keys, last_key = entry[1:4]
        if rec is not None:
            rec.active = False
        try:
            made = {}  # a tensor held by two modules gets one new tensor

            def fresh(t):
                if id(t) not in made:
                    n = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=dev)
                    made[id(t)] = torch.nn.Parameter(n, t.requires_grad) if isinstance(t, torch.nn.Parameter) else n
                return made[id(t)]

            for m in skeleton.modules():
                for tensors in (m._parameters, m._buffers):
                    for name, t in tensors.items():
                        if t is not None:
                            tensors[name] = fresh(t)
                for name, t in list(vars(m).items()):  # tensors kept as plain attributes (your own models)
                    if isinstance(t, torch.Tensor):
                        m.__dict__[name] = fresh(t)
            model = skeleton
        finally:
            if rec is not None:
                rec.active = True
        if rec is not None:
            named = _Templates._named_storages(model)
            if [n for n, _ in named] != list(keys):
                raise RuntimeError("the template's tensors changed")  # not expected: a bug
            rec.events.extend(events)
            for name, st in named:
                if id(st) not in rec._seen:
                    rec._register(st, keys[name])
            rec._keys = last_key
        return model


_TEMPLATES = _Templates()

# a module's hooks that see the step's tensors (the rest, state_dict's and load's, never run in a step)
_HOOK_DICTS = {"_forward_pre_hooks": "forward pre-hook", "_forward_hooks": "forward hook",
               "_backward_pre_hooks": "backward pre-hook", "_backward_hooks": "backward hook"}
_HOOK_BOOKS = ("_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


def _torchs(hook) -> bool:
    """True for a hook of torch's own (pruning's, weight norm's: part of the model's computation, holding
    no object of the user's), False for the user's functions."""
    h = hook.func if isinstance(hook, functools.partial) else hook
    mod = getattr(h, "__module__", None) or type(h).__module__
    return isinstance(mod, str) and (mod == "torch" or mod.startswith("torch."))


def _drop_hooks(module) -> "str | None":
    """Remove the user's hooks from your own model's copy (its structure on ``meta``, which every estimate
    copies) and say which they were, or None. They are the user's functions: run on the trace's fake tensors
    they would put FakeTensors into the user's own objects (a list of activations, a dict), and the next real
    ``torch.cat`` of them fails ("Mixing fake modes"). torch's own hooks (pruning recomputes ``weight`` in
    one) are kept: they are the model's computation. The user's module keeps all its hooks."""
    found = {}
    for name, m in module.named_modules():
        for attr, what in _HOOK_DICTS.items():
            hooks = getattr(m, attr, None)
            for key, hook in list((hooks or {}).items()):
                if _torchs(hook):
                    continue
                found.setdefault(what, []).append(name or type(m).__name__)
                del hooks[key]
                for book in _HOOK_BOOKS:
                    getattr(m, book, {}).pop(key, None)
    if not found:
        return None
    where = "; ".join(f"{len(names)} {what}{'s' if len(names) > 1 else ''} (on {', '.join(sorted(set(names))[:4])}"
                      f"{' ...' if len(set(names)) > 4 else ''})" for what, names in found.items())
    return (f"the model's hooks were not run in the estimate: {where}. On the estimate's fake tensors they would "
            "fill your own objects with FakeTensors; memory they keep in a real step (activations they store) "
            "is not counted")


ALLOCATORS = ("native", "expandable_segments")


def _attempts(dev, virtual: bool, step: str, setting) -> tuple:
    """``(notes, devices to trace on, in turn)``: on a virtual CUDA device (no GPU) the fake CUDA device
    where this torch can run the step on it, else (or after it fails) the fake CPU device with CUDA's
    rounding and kernels modelled; the notes say which and why."""
    from nogradlab.estimate import cudamodel

    notes, attempts = [], [dev]
    if virtual:
        if step == "train":
            notes.append("backward cannot run on a fake CUDA device without a GPU in this torch "
                         f"({torch.__version__}); estimated on the fake CPU device with CUDA's "
                         f"{CUDA_BLOCK}-byte block rounding and the CUDA kernels modelled")
            attempts = [torch.device("cpu")]
        elif cudamodel.fake_cuda_builds() is False:  # an earlier estimate in this process found out
            notes.append(cudamodel.fake_cuda_fallback_note())
            attempts = [torch.device("cpu")]
        elif setting.mode == "grad" and not cudamodel.fake_cuda_records_graphs():
            # a graph recorded on fake CUDA tensors would abort the process (torch 2.9.1 without a driver)
            notes.append(cudamodel.fake_cuda_graph_note())
            attempts = [torch.device("cpu")]
        else:
            attempts = [dev, torch.device("cpu")]
    if virtual and setting is not None and setting.autocast:
        notes.append(f"autocast ({setting.autocast}) on the virtual CUDA device: CUDA autocast's "
                     "state set directly (torch.autocast('cuda') switches itself off without a GPU)")
    return notes, attempts


def _finish(report, dev, base: int, fused: bool, fast_path: bool, rec, km, notes: list, held_bytes: int,
            allocator: str):
    """The report of a traced step, completed: its device and resident bytes, and on CUDA the allocation
    trace (the workspace calls as calls in ``program``, expanded in ``events``) replayed through the
    caching allocator's model without a cap; the notes in order (what was modelled first)."""
    from nogradlab.estimate import allocator as _alloc
    from nogradlab.estimate import cudamodel

    cuda = dev.type == "cuda"
    report.device = str(dev)
    report.baseline_bytes = base
    extra = []
    if cuda:
        extra = km.notes()
        program = _assemble(rec, held_bytes)  # workspace calls kept as calls ("ws")
        events = cudamodel.expand_workspaces(program)
        sim = _alloc.simulate(events, allocator, None, keep_segments=False)
        report.allocated_bytes = sim.allocated_peak_bytes
        report.reserved_bytes = sim.reserved_peak_bytes
        report.allocator = allocator
        report.events = events
        report.program = program
        extra.append(f"reserved bytes from the caching allocator's model ({allocator}): "
                     f"{format_bytes(sim.reserved_peak_bytes)} of segments for "
                     f"{format_bytes(sim.allocated_peak_bytes)} allocated at the peak (weights, "
                     "inputs, the step, library workspaces)")
        if held_bytes:
            extra.append(f"{format_bytes(held_bytes)} held by the process besides, allocated first")
    if fused and (not fast_path or not cuda):
        extra.append(FUSED_PATH_NOTE)
    report.notes = notes + extra + report.notes
    return report


def _first_that_runs(attempts, attempt, cuda: bool, notes: list, name: str) -> tuple:
    """Trace on each device of ``attempts`` in turn until one runs the step (the fused kernels' path first,
    the standard path where they are not modelled), saying in ``notes`` why an earlier one failed; the
    last one's error raised (as :class:`NotEstimable` where fake tensors refuse an operator). Returns
    ``(report, entry bytes, fused, fast path, recorder, kernel model)``."""
    from nogradlab.estimate import cudamodel

    last_error = None
    for target_dev in attempts:
        fast_path = cuda
        try:
            try:
                report, base, fused, rec, km = attempt(target_dev, fast_path)
            except cudamodel.NotModelled as e:
                fast_path = False  # trace the standard path instead, as the CPU estimates do
                notes.append(f"the fused kernels were not modelled here ({e}); estimated with the "
                             "fast path off")
                report, base, fused, rec, km = attempt(target_dev, fast_path)
        except Exception as e:  # noqa: BLE001 - only to fall back from fake CUDA to fake CPU
            if target_dev is attempts[-1] or isinstance(e, InputMismatch):
                _not_estimable(e, name)
                raise
            last_error = e
            continue
        if (last_error is not None and not getattr(last_error, "_nogradlab_in_step", False)
                and cudamodel.note_fake_cuda_error(last_error)):
            notes.append(cudamodel.fake_cuda_fallback_note())
        elif last_error is not None:
            notes.append(f"the fake CUDA device could not run this step without a GPU "
                         f"({type(last_error).__name__}: {(str(last_error).splitlines() or [''])[0][:120]}); "
                         "estimated on the "
                         f"fake CPU device with CUDA's {CUDA_BLOCK}-byte block rounding")
        return report, base, fused, fast_path, rec, km
    raise RuntimeError("unreachable")  # pragma: no cover


def _attempt(target_dev, fast_path: bool, *, wl, batch: int, step: str, mode: str, optimizer: str, dtype,
             seed: int, cuda: bool, virtual: bool, trace_only: bool, timeline: bool, block: int, own: bool):
    """Build and run the step on fake tensors on ``target_dev`` (one of :func:`_attempts`): (report, entry
    bytes, has a fused transformer path, recorder, kernel model)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from nogradlab.estimate import cudamodel, onednn

    rec = cudamodel.AllocationRecorder(target_dev.type) if cuda else None
    km = cudamodel.kernel_model() if cuda else None
    # oneDNN's LSTM workspace on the CPU; on CUDA traced on the fake CPU device, its miss noted
    rnn = onednn.RnnWorkspace(for_cuda=cuda) if target_dev.type == "cpu" else None
    paths = contextlib.nullcontext() if fast_path else fused_paths_off()
    autocast = cudamodel.virtual_autocast if (virtual and target_dev.type == "cuda") else None
    template = _TEMPLATES.get(wl, dtype, target_dev, rec is not None)
    skeleton = _TEMPLATES.copy(template) if template is not None else None  # outside the fake mode
    # seeded for reproducible shapes of random choices, without touching the caller's RNG
    with torch.random.fork_rng(devices=[]), paths, _quiet_fake_data_ptr(), \
            FakeTensorMode(allow_non_fake_inputs=False):
        torch.manual_seed(seed)
        with rec if rec is not None else contextlib.nullcontext():
            make = ((lambda: _TEMPLATES.materialize(template, skeleton, target_dev, rec))
                    if template is not None else None)
            fn, model, entry = _build_step(
                wl, batch, target_dev, step, mode, optimizer, dtype,
                built=(lambda: rec.mark("model")) if rec is not None else None, autocast=autocast,
                model=make)
            observed = _TEMPLATES.observe(wl, dtype, target_dev, model, rec) if template is None else None
            if rec is not None:
                rec.mark("inputs")
            fused = step == "forward" and any(
                isinstance(m, (torch.nn.TransformerEncoderLayer, torch.nn.MultiheadAttention))
                for m in model.modules())
            base = _entry_bytes(model, entry, block)
            run = fn
            if km is not None or own or rnn is not None:
                def run(fn=fn):  # the kernel model sits above the trackers _run enters
                    with km if km is not None else contextlib.nullcontext(), \
                            _SameDtypes(wl.name) if own else contextlib.nullcontext(), \
                            rnn if rnn is not None else contextlib.nullcontext():
                        return fn()
            label = f"{wl.name} {step} {mode if step == 'forward' else optimizer} batch {batch}"
            try:
                if trace_only:
                    report = _run_traced(run, target_dev, label)
                else:
                    report = _run(run, target_dev, "storage", (), timeline, block, label, False, fake=True)
            except Exception as e:
                # an error of the step itself (an operator, after the model was built): it says nothing
                # about other models on the virtual device (nn.LSTM asks the driver; a Conv2d does not)
                with contextlib.suppress(AttributeError, TypeError):
                    e._nogradlab_in_step = True
                raise
            finally:
                if rec is not None:
                    rec.active = False
    _TEMPLATES.learn(wl, dtype, observed)
    if cuda:  # a GPU runs no oneDNN: the CPU trace's notes on its scratch buffers do not apply
        report.notes = [n for n in report.notes if HIDDEN_MARK not in n]
        report.missed = [m for m in report.missed if m["why"] != HIDDEN_WHY]
    if rnn is not None:
        report.notes.extend(rnn.notes())
        report.missed.extend(rnn.missed())
    return report, base, fused, rec, km


@_device.leaves_rng_alone(device_param=None)  # the RNG as found (CPU; CUDA if initialised)
def estimate(workload, batch: int, device="cpu", mode: str = "no_grad", *, step: str = "forward",
             scale: str = "tiny", optimizer: str = "sgd", dtype=None, timeline: bool = False,
             seed: int = 0, allocator: str = "native", held_bytes: int = 0,
             inputs=None, _trace_only: bool = False) -> MemoryReport:
    """The memory report of one step of ``workload`` at ``batch``, computed under
    ``FakeTensorMode``: shapes and bytes without allocating, for any device (also ``"cuda"``
    on a machine without a GPU).

    ``workload``: a built-in workload's name (``nogradlab.workloads``, at ``scale``), or your own
    model: an ``nn.Module`` or a zero-argument function that builds one (built fake: nothing is
    allocated), with ``inputs`` one sample's shape (``(3, 224, 224)``, ``"3x224x224"``, or
    ``(shape, dtype)``) or a function of the batch returning the inputs; or a
    ``nogradlab.ownmodel.Model`` (which also takes a loss for training steps). An operator without a
    fake kernel, or control flow that depends on tensor values, raises :class:`NotEstimable` naming
    the operator and what to do.

    ``mode``: a setting for ``step="forward"`` (``"grad"``, ``"no_grad"``, ``"eval+no_grad"``,
    ``"inference_mode"``... see ``nogradlab.modes``). ``step="train"``: forward, loss, backward and
    an optimizer step (``optimizer`` ``"sgd"`` with momentum or ``"adam"``); ``mode`` is then
    ignored. ``baseline_bytes`` in the report holds parameters, buffers and inputs, so
    ``total_peak_bytes`` is what the device must hold at the peak.

    On a CUDA device the step is traced as the GPU would run it (``nogradlab.cudamodel``: fused
    attention, the transformer fast path, autocast, cuBLAS/cuDNN workspaces; the notes say which
    applied), and the trace of every allocation and free (``report.events``: the model's weights,
    the library workspaces a warm-up step leaves behind, the inputs, the step) is replayed through
    the caching allocator's model (``nogradlab.allocator``, ``allocator``: ``"native"`` or
    ``"expandable_segments"``): ``allocated_bytes`` and ``reserved_bytes`` are what
    ``torch.cuda.max_memory_allocated``/``max_memory_reserved`` would report in a process that
    built the model, ran one step at batch 1, emptied the cache and ran this one. ``held_bytes``:
    memory the process already holds besides (one block allocated first). There ``peak_bytes``
    counts, besides the tensors, the workspaces operators allocate and free inside themselves.
    """

    from nogradlab.core import modes, ownmodel, workloads

    if step not in STEPS:
        raise ValueError(f"unknown step {step!r}; allowed: {', '.join(STEPS)}")
    if optimizer not in _OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; allowed: {', '.join(_OPTIMIZERS)}")
    if allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; allowed: {', '.join(ALLOCATORS)}")
    if isinstance(held_bytes, bool) or not isinstance(held_bytes, int) or held_bytes < 0:
        raise ValueError(f"held_bytes must be a non-negative integer, got {held_bytes!r}")
    setting = modes.parse(mode) if step == "forward" else None
    wl = ownmodel.resolve(workload, scale, inputs)
    workloads.check_batch(batch)
    if isinstance(device, str) and device.strip().lower().startswith("cuda"):
        dev = torch.device(device.strip().lower())  # a virtual device: no GPU needed
        if dev.index is None:
            dev = torch.device("cuda", 0)
    else:
        dev = _device.resolve(device)
    cuda = dev.type == "cuda"
    virtual = cuda and not torch.cuda.is_available()
    block = CUDA_BLOCK if cuda else 1
    notes, attempts = _attempts(dev, virtual, step, setting)
    # the allocation trace alone (the largest-batch search's trials): the storage trackers are left out,
    # the trace is the same (they allocate nothing); peak_bytes, saved_bytes... then read 0
    trace_only = bool(_trace_only) and cuda and not timeline
    own = isinstance(wl, ownmodel.Model)
    if own:  # built once on meta, outside any fake mode (errors in the builder surface here)
        how, hooks = _TEMPLATES.own(wl, dtype)[4:6]
        if how not in ("built on the meta device", "a copy of the given module"):
            notes.append(f"{wl.name} was {how}")
        if hooks:
            notes.append(hooks)

    attempt = functools.partial(_attempt, wl=wl, batch=batch, step=step, mode=mode, optimizer=optimizer,
                                dtype=dtype, seed=seed, cuda=cuda, virtual=virtual, trace_only=trace_only,
                                timeline=timeline, block=block, own=own)

    report, base, fused, fast_path, rec, km = _first_that_runs(attempts, attempt, cuda, notes, wl.name)
    return _finish(report, dev, base, fused, fast_path, rec, km, notes, held_bytes, allocator)


@contextlib.contextmanager
def _quiet_fake_data_ptr():
    """Without torch's "Accessing the data pointer of FakeTensor is deprecated" warning: an RNN module
    (``nn.LSTM``, ``nn.GRU``) reads its weights' ``data_ptr()`` whenever it is built or moved (to flatten them
    for cuDNN), and the estimate's copies are fake by design, so the warning tells the user nothing (it
    reached the command's stderr). Only that warning, only inside the estimate."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor", category=UserWarning)
        yield


class InputMismatch(ValueError):
    """Your own model cannot take the inputs it is given: an operator that needs tensors of one dtype
    got several (``--dtype int64`` into an ``nn.Linear``; a builder that calls ``.half()`` fed float32
    inputs). Fake tensors' kernels do not check this; the real model raises."""


# operators whose tensor arguments must share one dtype on the real device
_SAME_DTYPE_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "matmul", "linear", "_addmm_activation",
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "cudnn_convolution", "mkldnn_convolution", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "scaled_dot_product_attention"})


class _SameDtypes(TorchDispatchMode):
    """Raises :class:`InputMismatch` where an operator of ``_SAME_DTYPE_OPS`` gets tensors of several
    dtypes, as the real kernels do (the fake ones do not check)."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = func.overloadpacket.__name__
        if op in _SAME_DTYPE_OPS:
            dts = list(dict.fromkeys(a.dtype for a in args if isinstance(a, torch.Tensor)))
            if len(dts) > 1:
                names = " and ".join(str(d).replace("torch.", "") for d in dts)
                ints = [d for d in dts if not (d.is_floating_point or d.is_complex)]
                hint = (" (integer inputs go to an embedding, not to this layer: give a floating --dtype)" if ints
                        else " (the model's weights and its inputs differ: give --dtype the weights' dtype)")
                raise InputMismatch(f"{self.name} cannot take these inputs: aten.{op} got {names} tensors, and "
                                    f"the real model raises a dtype error there{hint}")
        return func(*args, **(kwargs or {}))


class NotEstimable(RuntimeError):
    """A model that cannot run on fake tensors: an operator without a fake (meta) kernel, or
    control flow or output shapes that depend on tensor values. ``op`` names the operator."""

    def __init__(self, message, op=None):
        super().__init__(message)
        self.op = op


_MEASURE_INSTEAD = ("or measure it on a real device instead: memory.measure(lambda: model(x)) (exact "
                    "on the CPU; on a GPU the caching allocator's own figures)")


def _not_estimable(e: BaseException, name: str) -> None:
    """Raise :class:`NotEstimable` from ``e`` when it is fake tensors' refusal to run an operator
    (its message names the operator and what to do); return for any other error."""
    from torch._subclasses import fake_tensor as ft

    func = getattr(e, "func", None)
    op = str(func) if func is not None else None
    if isinstance(e, ft.UnsupportedOperatorException):
        msg = (f"{name}: the operator {op} has no fake (meta) kernel, so it cannot run on fake tensors "
               "and nothing can be estimated. Register one (torch.library.register_fake, for a custom "
               f"operator), replace the operator by standard ones, {_MEASURE_INSTEAD}")
    elif isinstance(e, (ft.DataDependentOutputException, ft.DynamicOutputShapeException)):
        kind = ("a value read from a tensor (bool(), .item(), .tolist(), or an `if` on a tensor)"
                if "local_scalar_dense" in (op or "") or isinstance(e, ft.DataDependentOutputException)
                else "an output whose shape depends on the values (nonzero, unique, masked_select...)")
        msg = (f"{name}: the operator {op} needs {kind}; fake tensors have shapes but no values, so "
               "control flow or shapes that depend on the data cannot be estimated. Make them depend "
               "on shapes or flags instead (e.g. a mask applied with torch.where rather than indexing), "
               f"{_MEASURE_INSTEAD}")
    else:
        try:
            from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
        except ImportError:  # pragma: no cover - older torch
            return
        if not isinstance(e, GuardOnDataDependentSymNode):
            return
        msg = (f"{name}: its control flow depends on a tensor's values ({str(e).splitlines()[0][:160]}), "
               f"which fake tensors do not have. Make it depend on shapes or flags instead, {_MEASURE_INSTEAD}")
    raise NotEstimable(msg, op) from e


def _assemble(rec, held_bytes: int) -> list:
    """The allocation trace of a process as the real search runs it: (what it holds already), the
    model's weights, the library workspaces its warm-up step left behind, ``empty_cache``, the
    inputs, the step."""
    ev = rec.events
    marks = {e[1]: i for i, e in enumerate(ev) if e[0] == "mark"}
    i_model = marks["model"]
    out = [("alloc", ("held",), held_bytes)] if held_bytes else []
    out += ev[:i_model]
    out += rec.persistent_events
    out.append(("empty_cache",))
    out += [e for e in ev[i_model + 1:] if e[0] != "mark"]
    return out
