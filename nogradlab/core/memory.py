"""Memory probes: what a call really allocates, keeps, and saves for backward.

``measure(fn)`` runs ``fn()`` once and returns a :class:`MemoryReport`:

* ``peak_bytes``: the highest live tensor bytes during the call, above what was live at entry;
* ``retained_bytes``: what is still alive after the call returns (held by the return value and
  its autograd graph; garbage is collected first);
* ``saved_bytes``: the bytes of the distinct storages autograd saved for backward during the
  call, deduplicated by storage, parameters and buffers excluded, inputs included;
* ``modules``: the same per module (innermost module that was running).

How it measures:

* ``method="storage"`` (the default off CUDA): a ``TorchDispatchMode`` sees every tensor an
  operator returns; each new storage is counted when it appears and uncounted when its
  ``UntypedStorage`` dies (a weakref callback), the approach of PyTorch's own
  ``torch.distributed._tools.mem_tracker``. Works on any device, and under ``FakeTensorMode``.
  Under ``torch.inference_mode`` a composite operator (``aten.linear``, ``aten.cross_entropy_loss``)
  reaches the mode whole, as autograd is not there to split it: the tracker runs its parts itself
  (``nogradlab.modes.run_composite``), so that what it allocates inside counts as under ``no_grad``.
* ``method="allocator"`` (the default on CUDA): the caching allocator's own statistics
  (``memory_allocated`` / ``max_memory_allocated``). Nested probes are safe: before a probe resets
  the peak counter, every enclosing probe folds the peak seen so far into its own record.

Saved-for-backward bytes come from ``torch.autograd.graph.saved_tensors_hooks`` in both methods.
``estimate(...)`` runs the same storage tracker under ``FakeTensorMode``: nothing is allocated,
so a 12 GiB GPU batch can be sized on a laptop.

Every probe restores what it touched (grad mode, garbage collector, hooks, dispatch modes, the
allocator's peak counter for enclosing probes), even when ``fn`` raises; the exception reaches the
caller unchanged.
"""
from __future__ import annotations

import contextlib
import gc
import math
import threading
from dataclasses import asdict, dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from nogradlab.core import device as _device
from nogradlab.core import format as _format
from nogradlab.core import modes as _modes
from nogradlab.core.tracker import StorageTracker, storage as _storage

__all__ = ["MemoryReport", "ModuleMemory", "measure", "train_step", "format_bytes", "release",
           "fused_paths_off", "FUSED_PATH_NOTE", "resident_bytes", "measure_modes",
           "METHODS", "STEPS", "CUDA_BLOCK", "LazyResultWarning"]

METHODS = ("auto", "storage", "allocator")
STEPS = ("forward", "train")
CUDA_BLOCK = 512  # the CUDA caching allocator rounds every block up to a multiple of 512 bytes
_TIMELINE_CAP = 200_000


#: ``1536 -> '1.50 KiB'``: :func:`nogradlab.core.format.bytes_`, under its earlier name.
format_bytes = _format.bytes_


@dataclass
class ModuleMemory:
    """Per-module share of a probe: bytes attributed to the innermost module that was running."""

    name: str
    type: str
    calls: int = 0
    allocated_bytes: int = 0  # new storage bytes created while it was the innermost module
    saved_bytes: int = 0  # distinct saved-for-backward bytes first saved while it was innermost


@dataclass
class MemoryReport:
    """What one call allocated, kept and saved. All byte counts are exact integers."""

    peak_bytes: int
    retained_bytes: int
    saved_bytes: int
    saved_tensors: int  # distinct storages saved for backward
    device: str
    method: str  # "storage", "allocator", or "fake" (an estimate)
    modules: list = field(default_factory=list)
    timeline: "list | None" = None  # [(event index, live bytes, label)] when asked for
    baseline_bytes: "int | None" = None  # estimates: parameters, buffers and inputs live at entry
    notes: list = field(default_factory=list)
    # memory the figures above do not hold, by operator: [{"op", "bytes" (likely size, None if not known),
    # "why"}] (an operator's workspace a fake kernel leaves empty, a library's buffers no tensor shows)
    missed: list = field(default_factory=list)
    label: str = ""
    # estimates on a CUDA device: the caching allocator's view (nogradlab.allocator) of a process
    # that built the model (and ran a warm-up step) and then this step
    allocated_bytes: "int | None" = None  # modelled torch.cuda.max_memory_allocated, whole process
    reserved_bytes: "int | None" = None  # modelled torch.cuda.max_memory_reserved (segments)
    allocator: "str | None" = None  # the allocator mode modelled
    events: "list | None" = field(default=None, repr=False, compare=False)  # the allocation trace
    # the same trace with each library workspace kept as the operator's call ("ws": its bytes at any batch)
    program: "list | None" = field(default=None, repr=False, compare=False)

    @property
    def total_peak_bytes(self) -> "int | None":
        """Peak including what was live at entry (estimates only, where that is known)."""
        return None if self.baseline_bytes is None else self.baseline_bytes + self.peak_bytes

    def to_dict(self) -> dict:
        events, self.events = self.events, None  # the trace stays out of the dict (thousands of events)
        program, self.program = self.program, None
        try:
            d = asdict(self)
        finally:
            self.events, self.program = events, program
        d.pop("events", None)
        d.pop("program", None)
        d["total_peak_bytes"] = self.total_peak_bytes
        if self.timeline is not None:
            d["timeline"] = [list(e) for e in self.timeline]
        return d

    def module_frame(self):
        """The per-module breakdown as a pandas DataFrame."""
        import pandas as pd

        cols = ["name", "type", "calls", "allocated_bytes", "saved_bytes"]
        return pd.DataFrame([asdict(m) for m in self.modules], columns=cols)

    def __str__(self) -> str:
        head = f"{self.label}: " if self.label else ""
        s = (f"{head}peak {format_bytes(self.peak_bytes)}, retained {format_bytes(self.retained_bytes)}, "
             f"saved for backward {format_bytes(self.saved_bytes)} ({self.saved_tensors} storages) "
             f"[{self.method} on {self.device}]")
        if self.baseline_bytes is not None:
            s += f"; with weights and inputs {format_bytes(self.total_peak_bytes)}"
        if self.reserved_bytes is not None:
            s += (f"; the allocator ({self.allocator}) would reserve {format_bytes(self.reserved_bytes)} "
                  f"for {format_bytes(self.allocated_bytes)} allocated")
        return s

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{v}</td></tr>" for k, v in (
            ("peak", format_bytes(self.peak_bytes)), ("retained", format_bytes(self.retained_bytes)),
            ("saved for backward", f"{format_bytes(self.saved_bytes)} ({self.saved_tensors} storages)"),
            ("method", f"{self.method} on {self.device}")))
        if self.reserved_bytes is not None:
            rows += (f"<tr><th style='text-align:left'>allocated / reserved ({self.allocator})</th>"
                     f"<td>{format_bytes(self.allocated_bytes)} / {format_bytes(self.reserved_bytes)}</td></tr>")
        return f"<table>{rows}</table>"


FUSED_PATH_NOTE = ("estimated with PyTorch's fused transformer fast path off: that path runs a whole "
                   "layer inside one operator whose temporaries no tracker can see; a real run that "
                   "takes it may need less")


@contextlib.contextmanager
def fused_paths_off():
    """Switch off ``nn.MultiheadAttention``/``nn.TransformerEncoderLayer``'s fused inference fast
    path inside the block (it computes a whole layer inside one operator, hiding its temporaries
    from storage tracking); the previous setting is restored on exit, also on error."""
    mha = getattr(torch.backends, "mha", None)
    if mha is None or not hasattr(mha, "set_fastpath_enabled"):
        yield
        return
    fast = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(fast)


def release() -> None:
    """Give freed memory back: collect garbage, empty CUDA's cache (if CUDA is in use) and ask
    glibc to return free heap pages to the system (``malloc_trim``; a no-op elsewhere). Freed
    tensors otherwise stay in the process's heap, so a notebook's resident memory only grows,
    which matters on a 1-2 GB Binder machine."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC = None


# --------------------------------------------------------------------------------------------
# building blocks


def _rounded(n: int, block: int) -> int:
    if block <= 1 or n == 0:
        return n
    return int(math.ceil(n / block) * block)


class _ModuleStack:
    """Global module hooks that keep a stack of running modules and the order they were seen."""

    def __init__(self):
        self.stack: list = []
        self.seen: dict = {}  # id -> module, in order of first call
        self.calls: dict = {}
        self.excluded = WeakIdKeyDictionary()  # storages of parameters and buffers
        self._walked: dict = {}  # id -> module whose own parameters and buffers are in ``excluded``
        self._handles = []
        self._thread = None

    def _pre(self, module, args):
        if threading.get_ident() != self._thread:  # the hooks are global; the probe is not
            return
        if id(module) not in self.seen:
            self.seen[id(module)] = module
            self._exclude(module)
        self.calls[id(module)] = self.calls.get(id(module), 0) + 1
        self.stack.append(module)

    def _exclude(self, module):
        """Mark the parameters and buffers of ``module`` and of all its submodules, called or not: a
        module may use a submodule's weights without calling it (``nn.MultiheadAttention`` passes
        ``out_proj.weight`` to a function, Swin's attention its ``qkv``/``proj`` weights), and those
        weights are not activations. Each module's subtree is walked once."""
        todo = [module]
        while todo:
            m = todo.pop()
            if id(m) in self._walked:
                continue
            self._walked[id(m)] = m  # kept alive with the probe, so the id is not reused
            for t in [*m._parameters.values(), *m._buffers.values()]:
                st = _storage(t) if t is not None else None
                if st is not None:
                    self.excluded[st] = True
            todo.extend(c for c in m._modules.values() if c is not None)

    def _post(self, module, args, output):
        if threading.get_ident() != self._thread:
            return
        # pop the innermost matching frame (robust to hooks that raise half way)
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] is module:
                del self.stack[i:]
                break

    @property
    def current(self):
        return self.stack[-1] if self.stack else None

    def __enter__(self):
        from torch.nn.modules import module as _m

        self._thread = threading.get_ident()
        self._handles = [_m.register_module_forward_pre_hook(self._pre),
                         _m.register_module_forward_hook(self._post, always_call=True)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        self.stack.clear()
        return False

    def names(self) -> dict:
        """id(module) -> qualified name, rooted at the outermost modules that ran."""
        children = set()
        for m in self.seen.values():
            for c in m.modules():
                if c is not m:
                    children.add(id(c))
        roots = [m for i, m in self.seen.items() if i not in children]
        out = {}
        for r in roots:
            prefix = type(r).__name__ if len(roots) > 1 else ""
            for name, sub in r.named_modules():
                full = ".".join(p for p in (prefix, name) if p) or type(r).__name__
                out.setdefault(id(sub), full)
        return out


class _SavedTracker:
    """saved_tensors_hooks that count distinct saved storages (parameters and buffers excluded)."""

    def __init__(self, modules: _ModuleStack, exclude=(), block: int = 1):
        self.modules = modules
        self.block = block
        self.seen = WeakIdKeyDictionary()
        self.bytes = 0
        self.count = 0
        self.per_module: dict = {}
        self.extra_excluded = WeakIdKeyDictionary()
        for t in exclude:
            ts = list(t.parameters()) + list(t.buffers()) if isinstance(t, torch.nn.Module) else [t]
            for x in ts:
                st = _storage(x)
                if st is not None:
                    self.extra_excluded[st] = True
        self._ctx = None

    def pack(self, t):
        st = _storage(t)
        if (st is not None and not isinstance(t, torch.nn.Parameter) and st not in self.seen
                and st not in self.modules.excluded and st not in self.extra_excluded):
            self.seen[st] = True
            n = _rounded(st.nbytes(), self.block)
            self.bytes += n
            self.count += 1
            cur = self.modules.current
            if cur is not None:
                self.per_module[id(cur)] = self.per_module.get(id(cur), 0) + n
        # Returning ``t`` itself would make output tensors own their own graph through a
        # reference cycle that Python's collector cannot see; a detached alias shares the
        # storage without that cycle.
        return t.detach()

    @staticmethod
    def unpack(t):
        return t

    def __enter__(self):
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)
        return False


class _LiveTracker(StorageTracker):
    """Counts the bytes of storages created by operators, from creation until they die (the dispatch
    tracker, :class:`nogradlab.core.tracker.StorageTracker`, shared with the estimator's recorder)."""

    def __init__(self, modules: _ModuleStack, block: int = 1, timeline: bool = False):
        super().__init__()
        self.modules = modules
        self.block = block
        self.sizes = WeakIdKeyDictionary()  # storage -> counted bytes
        self._counted = WeakIdKeyDictionary()  # storage -> [bytes its death callback subtracts]
        self.live = 0
        self.peak = 0
        self.per_module: dict = {}
        self.timeline = [] if timeline else None
        self._events = 0
        self.uncounted: set = set()  # kinds of tensor made whose bytes are not counted (sparse, nested)
        self.touched: set = set()  # storages (``_cdata``) operators of this thread read or wrote
        self.hidden: dict = {}  # operator -> (calls, likely bytes or None): library buffers no tensor shows

    def _event(self, label):
        self._events += 1
        if self.timeline is not None and len(self.timeline) < _TIMELINE_CAP:
            self.timeline.append((self._events, self.live, label))

    def _freed(self, n):
        if self.active:
            self.live -= n
            self._event("free")

    def _add(self, st, label):
        n = _rounded(st.nbytes(), self.block)
        self.sizes[st] = n
        counted = self._counted[st] = [n]  # what the death callback subtracts; resize_ updates it in place
        self._watch(st, lambda c=counted: self._freed(c[0]))
        self.live += n
        self.peak = max(self.peak, self.live)
        cur = self.modules.current
        if cur is not None:
            self.per_module[id(cur)] = self.per_module.get(id(cur), 0) + n
        self._event(label)

    def transient(self, nbytes, label="workspace", **_):
        """Bytes an operator allocates and frees again inside itself (a library's workspace, as
        ``nogradlab.cudamodel`` models them): they count toward the peak at this moment."""
        if not self.active:
            return
        n = _rounded(int(nbytes), self.block)
        self.peak = max(self.peak, self.live + n)
        self.live += n
        self._event(label)
        self.live -= n
        self._event(label + " freed")

    def _resized(self, st):
        old = self.sizes.get(st)
        if old is None:
            return
        new = _rounded(st.nbytes(), self.block)
        if new != old:
            self.live += new - old
            self.sizes[st] = new
            # the death callback subtracts what its cell holds: updated here in O(1) (a search through every
            # live storage's callback made a step with many live tensors and resizes quadratic)
            self._counted[st][0] = new
            self.peak = max(self.peak, self.live)
            self._event("resize")

    # the dispatch tracker's walk (StorageTracker.__torch_dispatch__) asks these
    def _before(self, func, args):
        if func in _SET_STORAGE and args and isinstance(args[0], torch.Tensor):
            before = _storage(args[0])
            return before is not None and self.sizes.get(before) == 0 and _rebuilding()
        return None

    def _after(self, func, args, out, installed) -> None:
        if func in _HIDDEN_OPS:
            self._hidden(func, args)
        if func in _LIFT_FRESH or installed:
            self._made_outside(out, func)

    def _read(self, inputs: set) -> None:
        self.touched |= inputs

    def _storage_of(self, t):
        st = _storage(t)
        if st is None or t.layout != torch.strided:
            if t.layout != torch.strided or t.is_nested:
                self.uncounted.add("nested" if t.is_nested else str(t.layout).replace("torch.", ""))
        return st

    def _known(self, st) -> bool:
        return st in self.sizes

    def _seen_again(self, st) -> None:
        self._resized(st)

    def _new(self, st, label: str) -> None:
        self._add(st, label)

    def _hidden(self, func, args):
        """Note an operator whose CPU kernel (oneDNN) keeps buffers inside itself that no tensor shows."""
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if (x is None or x.device.type != "cpu" or not torch.backends.mkldnn.is_available()
                or not torch._C._get_mkldnn_enabled() or x.dtype not in _ONEDNN_DTYPES):
            return  # the kernel does not take oneDNN's path (switched off, float64...)
        if func in _RNN_OPS:
            # oneDNN's scratchpad for the gates, one layer call at a time: T*N*4H floats (its good
            # leading dimension), the size that matched the allocator's excess on an LSTM (issue 41)
            h = args[10] if func is _RNN_OPS[0] else args[15]
            likely = int(x.shape[0]) * int(x.shape[1]) * _good_ld(4 * int(h)) * 4 if isinstance(h, int) else None
        else:
            likely = None
        name = str(func.overloadpacket).replace("aten::", "aten.")
        calls, most = self.hidden.get(name, (0, 0))
        self.hidden[name] = (calls + 1, None if likely is None else max(most or 0, likely))

    def _made_outside(self, t, func):
        """A tensor whose storage was made outside the dispatcher and appears here first: ``aten.lift_fresh``
        ends ``torch.tensor(data)``, ``torch.as_tensor``/``torch.from_numpy`` of an array (the storage is
        the array's memory, now a tensor's, counted also where the array was made before the call);
        ``aten.set_`` of a storage into a tensor made empty during the call, from
        ``torch._utils._rebuild_tensor``, is how ``torch.load`` and ``pickle.loads`` rebuild a tensor from
        the storage they read. Both return their input, which the check for aliases below skips: these
        read 0 B (issue 41)."""
        st = _storage(t) if isinstance(t, torch.Tensor) else None
        if st is not None and st not in self.sizes and t.layout == torch.strided:
            self._add(st, getattr(func, "__name__", str(func)))

    def __enter__(self):
        _resize_watch(self, True)
        try:
            return super().__enter__()
        except BaseException:
            _resize_watch(self, False)
            raise

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _resize_watch(self, False)


def _good_ld(d: int) -> int:
    """oneDNN's leading dimension for float32 work buffers: a multiple of 16, not of 256."""
    ld = -(-d // 16) * 16
    return ld + 16 if ld % 256 == 0 else ld


_RNN_OPS = tuple(getattr(torch.ops.aten, n).default for n in ("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward")
                 if hasattr(torch.ops.aten, n))
# operators whose CPU kernels run through oneDNN, which allocates scratch buffers (and reordered weights)
# inside the call: memory no tensor shows, seen by the allocator (torch.profiler) and missed here and by
# MemTracker (issue 41: an LSTM 19-28 % above the storage peak, a checkpointed conv net 14-24 %)
_HIDDEN_OPS = frozenset(_RNN_OPS + tuple(getattr(torch.ops.aten, n).default for n in
                                         ("convolution", "convolution_backward") if hasattr(torch.ops.aten, n)))
_ONEDNN_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: the words of the notes on oneDNN's scratch buffers (an estimate for a CUDA device leaves them out)
HIDDEN_MARK = "oneDNN keeps scratch buffers inside it"
HIDDEN_WHY = "oneDNN's scratch buffers, which no tensor shows"  # their entries' "why" in ``missed``
_LIFT_FRESH = frozenset(op for op in (getattr(torch.ops.aten.lift_fresh, "default", None),) if op is not None)
_SET_STORAGE = frozenset(getattr(torch.ops.aten.set_, name)
                         for name in ("source_Storage", "source_Storage_storage_offset")
                         if hasattr(torch.ops.aten.set_, name))


def _rebuilding(depth: int = 6) -> bool:
    """Whether ``torch._utils._rebuild_tensor`` (``torch.load``, ``pickle.loads``) is among the callers: its
    ``set_`` installs a storage it has just read, where a ``set_`` of one's own installs an existing one."""
    import sys

    import torch._utils as tu

    code = getattr(getattr(tu, "_rebuild_tensor", None), "__code__", None)
    f = sys._getframe(2)
    for _ in range(depth):
        if f is None:
            return False
        if f.f_code is code:
            return True
        f = f.f_back
    return False


class _AllocSeen(TorchDispatchMode):
    """Entered in another thread's work: notes, in each watching probe's flag, that it made tensors
    (nothing else)."""

    def __init__(self, flags: list):
        super().__init__()
        self.flags = flags

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(isinstance(t, torch.Tensor) for t in tree_flatten(out)[0]):
            for flag in self.flags:
                flag[0] = True
        return out


# The thread watch: ``threading.Thread.run`` and the thread pool's ``_WorkItem.run`` are wrapped once,
# by the first probe that watches, and put back exactly by the last one out, whatever order probes in
# several threads leave in (each probe saving and restoring what it found left a dead probe's wrapper
# behind when two overlapped). The wrapper looks up the probes watching when a thread starts its work.
_WATCH_LOCK = threading.Lock()
_WATCHERS: list = []
_WATCH_SAVED: list = []  # (class, attribute, original, wrapper) while installed


def _watched(run):
    def run_watched(obj, *a, **k):
        me = threading.get_ident()
        with _WATCH_LOCK:
            flags = [w.allocated for w in _WATCHERS if w.ident != me]
        if not flags:
            return run(obj, *a, **k)
        with _AllocSeen(flags):
            return run(obj, *a, **k)
    run_watched.__wrapped__ = run
    return run_watched


def _watch_threads(watcher, on: bool) -> None:
    import concurrent.futures.thread as cft

    with _WATCH_LOCK:
        if on:
            if not _WATCHERS:
                for cls in (threading.Thread, cft._WorkItem):
                    orig = cls.__dict__["run"]
                    wrapper = _watched(orig)
                    _WATCH_SAVED.append((cls, "run", orig, wrapper))
                    cls.run = wrapper
            _WATCHERS.append(watcher)
            return
        if watcher in _WATCHERS:
            _WATCHERS.remove(watcher)
        if not _WATCHERS:
            for cls, name, orig, wrapper in _WATCH_SAVED:
                # put the original back unless someone wrapped ours since (theirs calls ours, which
                # then finds no probe watching and runs the original directly)
                if cls.__dict__.get(name) is wrapper:
                    setattr(cls, name, orig)
            _WATCH_SAVED.clear()


class _OtherThreads:
    """While a CPU probe runs: a thread started then (``threading.Thread``) and work a thread pool runs
    then (``concurrent.futures``) are watched for tensors they make. The storage tracker counts the
    measuring thread only, so such work makes the report say so. Removed on exit (by the last probe
    watching, in any thread)."""

    def __init__(self):
        self.allocated = [False]
        self.ident = threading.get_ident()

    def __enter__(self):
        _watch_threads(self, True)
        return self

    def __exit__(self, *exc):
        _watch_threads(self, False)
        return False


# ``UntypedStorage.resize_`` bypasses the dispatcher (as mem_tracker notes), so it is patched while
# any tracker is active, in any thread: one patch, installed by the first tracker and removed by
# the last, telling every active tracker (each ignores storages it did not count).
_RESIZE_LOCK = threading.Lock()
_RESIZE_TRACKERS: list = []
_ORIG_RESIZE = torch.UntypedStorage.resize_


def _resize_watch(tracker, on: bool) -> None:
    with _RESIZE_LOCK:
        if on:
            if not _RESIZE_TRACKERS:
                torch.UntypedStorage.resize_ = _tracked_resize
            _RESIZE_TRACKERS.append(tracker)
        else:
            if tracker in _RESIZE_TRACKERS:
                _RESIZE_TRACKERS.remove(tracker)
            if not _RESIZE_TRACKERS:
                torch.UntypedStorage.resize_ = _ORIG_RESIZE


def _tracked_resize(st, size):
    r = _ORIG_RESIZE(st, size)
    for tracker in list(_RESIZE_TRACKERS):
        tracker._resized(st)
    return r


# Enclosing allocator probes, so that a nested probe's reset does not hide their peaks.
_ALLOCATOR_PROBES: list = []


class _AllocatorProbe:
    def __init__(self, device: torch.device):
        self.device = device
        self.entry = 0
        self.peak_seen = 0

    def __enter__(self):
        _device.synchronize(self.device)
        for outer in _ALLOCATOR_PROBES:
            if outer.device == self.device:
                outer.peak_seen = max(outer.peak_seen, torch.cuda.max_memory_allocated(self.device))
        self.entry = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.peak_seen = self.entry
        _ALLOCATOR_PROBES.append(self)
        return self

    def peak(self) -> int:
        _device.synchronize(self.device)
        return max(self.peak_seen, torch.cuda.max_memory_allocated(self.device)) - self.entry

    def current(self) -> int:
        _device.synchronize(self.device)
        return torch.cuda.memory_allocated(self.device) - self.entry

    def __exit__(self, *exc):
        mine = max(self.peak_seen, torch.cuda.max_memory_allocated(self.device))
        if self in _ALLOCATOR_PROBES:
            _ALLOCATOR_PROBES.remove(self)
        # the enclosing probes saw everything this one saw
        for outer in _ALLOCATOR_PROBES:
            if outer.device == self.device:
                outer.peak_seen = max(outer.peak_seen, mine)
        return False


# --------------------------------------------------------------------------------------------
# measure


def _check_method(method, dev):
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")
    if method == "auto":
        return "allocator" if dev is not None and dev.type == "cuda" else "storage"
    if method == "allocator" and (dev is None or dev.type != "cuda"):
        raise ValueError("method 'allocator' needs a CUDA device; use method='storage' elsewhere")
    return method


def _lazy_kind(result) -> "str | None":
    """What kind of lazy object ``result`` is (its work has not run yet), or None."""
    import inspect
    from collections.abc import Iterator

    if inspect.isgenerator(result):
        return "a generator"
    if inspect.iscoroutine(result) or inspect.isawaitable(result):
        return "a coroutine (an awaitable)"
    if inspect.isasyncgen(result):
        return "an async generator"
    import concurrent.futures

    if isinstance(result, concurrent.futures.Future):
        return f"a future ({type(result).__name__}, {'done' if result.done() else 'still running'})"
    if isinstance(result, (map, filter, zip)):
        return f"a lazy {type(result).__name__} object"
    if isinstance(result, Iterator) and not isinstance(result, torch.Tensor):
        return f"an iterator ({type(result).__name__})"
    return None


def _lazy_note(kind: str) -> str:
    return (f"the function returned {kind}: its work runs only when the result is consumed, so "
            "nothing was measured (the bytes above are just the call that built it); measure "
            "lambda: list(...) of it instead")


OTHER_THREADS = ("warn", "ignore")


@_device.leaves_rng_alone  # a probe leaves the global RNG (CPU, CUDA) as it found it
def measure(fn, device=None, *, method: str = "auto", exclude=(), timeline: bool = False,
            block: "int | None" = None, label: str = "", return_result: bool = False,
            other_threads: str = "warn"):
    """Run ``fn()`` once and report its memory (see the module docstring).

    ``device``: where ``fn`` computes. ``None`` tracks storages on every device. On CUDA the
    default method reads the caching allocator; ``method="storage"`` forces storage tracking.
    ``exclude``: extra modules/tensors whose storages never count as saved-for-backward.
    ``timeline``: keep the live-bytes curve (one point per allocation or free).
    ``block``: round every storage up to this many bytes (default: 512 on CUDA, else 1).
    ``return_result``: return ``(report, fn())`` instead of the report alone.
    ``other_threads``: on the CPU the storage method counts the calling thread only; ``"warn"`` (the
    default) watches threads and thread-pool work started during the call and notes and warns when they
    made tensors, and notes and warns when the function returns tensors that the calling thread neither
    made nor used while other threads run (a ``threading.Thread`` started before the call, which the watch
    cannot wrap); ``"ignore"`` for a caller that measures each thread's own work in that thread while
    others run (a server measuring every request in the thread that serves it).
    Tensors whose storage is made outside the dispatcher count when they appear: ``torch.tensor(data)``,
    ``torch.as_tensor``/``torch.from_numpy`` of an array, ``torch.load`` and ``pickle.loads`` of a tensor.

    ``fn`` returning lazy work (a generator, ``map``, any iterator, a coroutine) warns and adds a
    note: nothing ran yet, so the report would read 0 B. It is not consumed here (it may be
    endless, or the caller may want it); wrap it, ``lambda: list(gen())``.
    The global random number generators are as before afterwards (also the draws ``fn`` made), so
    measuring a call does not change what the notebook draws next.
    """
    if not callable(fn):
        raise TypeError(f"measure needs a callable, got {type(fn).__name__}")
    if other_threads not in OTHER_THREADS:
        raise ValueError(f"other_threads must be one of {', '.join(OTHER_THREADS)}; got {other_threads!r}")
    dev = _device.resolve(device) if device is not None else None
    method = _check_method(method, dev)
    if block is None:
        block = CUDA_BLOCK if dev is not None and dev.type == "cuda" else 1
    if not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive integer number of bytes, got {block!r}")
    report, result = _run(fn, dev, method, exclude, timeline, block, label, True,
                          watch_threads=other_threads == "warn")
    kind = _lazy_kind(result)
    if kind is not None:
        import warnings

        report.notes.append(_lazy_note(kind))
        warnings.warn(f"memory.measure: {_lazy_note(kind)}", LazyResultWarning, stacklevel=3)
    for note in report.notes:
        if note.startswith(_UNSEEN):  # bytes the probe could not see: say so where the caller looks
            import warnings

            warnings.warn(f"memory.measure: {note}", stacklevel=3)
    if return_result:
        return report, result
    return report


#: how the notes of bytes a probe could not see begin (other threads, sparse or nested tensors)
_UNSEEN = ("another thread made tensors", "another thread may have made", "made ")


def _unseen_result_bytes(result, live, mods, saved) -> int:
    """Bytes of the distinct storages of the tensors ``result`` holds that the calling thread neither made
    nor passed to an operator during the call, parameters and buffers aside: made elsewhere (a thread
    started before the probe, which the thread watch cannot wrap) or before the call."""
    total, seen = 0, set()
    for t in tree_flatten(result)[0]:
        if not isinstance(t, torch.Tensor) or isinstance(t, torch.nn.Parameter):
            continue
        st = _storage(t)
        if (st is None or st._cdata in seen or st in live.sizes or st._cdata in live.touched
                or st in mods.excluded or st in saved.extra_excluded):
            continue
        seen.add(st._cdata)
        total += st.nbytes()
    return total


class LazyResultWarning(UserWarning):
    """A probe measured a call that returned lazy work (a generator...): nothing ran yet."""


_WARMED = False


def _warm_up():
    """The first dispatch through a mode and the first hooked module call import lazy parts of
    torch (``torch._dynamo``); those imports leave reference cycles that hold the first probed
    activations until the next garbage collection. Pay for that once, on a throw-away model."""
    global _WARMED
    if _WARMED:
        return
    _WARMED = True
    mods = _ModuleStack()
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    with mods, _SavedTracker(mods), _LiveTracker(mods), torch.enable_grad():
        net(torch.ones(1, 2, requires_grad=True)).sum().backward()
    gc.collect()


def _run(fn, dev, method, exclude, timeline, block, label, return_result, fake=False, watch_threads=True):
    _warm_up()
    grad_enabled = torch.is_grad_enabled()
    gc_enabled = gc.isenabled()
    if method == "allocator":
        gc.collect()  # free earlier garbage so that it does not sit in the entry baseline
    gc.disable()  # a collection at a random moment would make peaks irreproducible
    result = None
    try:
        with contextlib.ExitStack() as stack:
            mods = stack.enter_context(_ModuleStack())
            saved = stack.enter_context(_SavedTracker(mods, exclude, block))
            if method == "allocator":
                alloc = stack.enter_context(_AllocatorProbe(dev))
                live = None
            else:
                live = stack.enter_context(_LiveTracker(mods, block, timeline))
            others = stack.enter_context(_OtherThreads()) if method != "allocator" and watch_threads else None
            result = fn()
            torch.set_grad_enabled(grad_enabled)
            if live is not None:
                peak = live.peak
                # With the collector off, every object made during the call is still in the
                # youngest generation: collecting it frees the call's garbage cycles, cheaply.
                gc.collect(0)
                retained = live.live
                live.active = False
            else:
                peak = alloc.peak()
                gc.collect(0)
                retained = alloc.current()
        names = mods.names()
        per_alloc = live.per_module if live is not None else {}
        modules = [ModuleMemory(name=names.get(i, type(m).__name__), type=type(m).__name__,
                                calls=mods.calls.get(i, 0), allocated_bytes=per_alloc.get(i, 0),
                                saved_bytes=saved.per_module.get(i, 0))
                   for i, m in mods.seen.items()]
        report = MemoryReport(
            peak_bytes=int(peak), retained_bytes=int(retained), saved_bytes=int(saved.bytes),
            saved_tensors=saved.count, device=str(dev) if dev is not None else "any",
            method="fake" if fake else method, modules=modules,
            timeline=(live.timeline if live is not None and timeline else None), label=label)
        if method == "allocator" and timeline:
            report.notes.append("timeline is only kept by the storage method")
        if live is not None and live.uncounted:
            report.notes.append(f"made {', '.join(sorted(live.uncounted))} tensor(s), whose bytes are not "
                                "counted (the storage method sees strided storages only): the report reads low")
        if live is not None:
            for op, (calls, likely) in sorted(live.hidden.items()):
                size = (f"by about {format_bytes(likely)} (its scratch for the gates, one layer call's)" if likely
                        else "by an amount not known here (in a small conv net's training step: 20 % of its peak)")
                report.notes.append(
                    f"{op} ran on the CPU ({calls} call(s)): {HIDDEN_MARK} that no tensor shows, so the process's "
                    f"peak is likely higher than reported {size}; torch.profiler's memory timeline sees them")
                report.missed.append({"op": op, "bytes": likely, "why": HIDDEN_WHY})
        if others is not None and result is not None:
            unseen = _unseen_result_bytes(result, live, mods, saved)
            if unseen and threading.active_count() > 1:
                report.notes.append(
                    f"another thread may have made the {format_bytes(unseen)} of tensors the function returned: this "
                    "thread neither made them nor used them during the call, and other threads are running (a "
                    "threading.Thread started before the call?); the storage method counts the calling thread "
                    "only, so the peak lacks them: measure the work in the thread that does it (if they were made "
                    "before the call, nothing is missing)")
        if others is not None and others.allocated[0]:
            report.notes.append("another thread made tensors during the call (a thread pool or "
                                "threading.Thread): the storage method counts the calling thread only, so "
                                "their bytes are missing; measure the work in the thread that does it")
    finally:
        torch.set_grad_enabled(grad_enabled)
        if gc_enabled:
            gc.enable()
    if return_result:
        return report, result
    del result
    return report


def _run_traced(fn, dev, label) -> MemoryReport:
    """``fn()`` as :func:`_run` runs it (the collector off, the grad mode restored, a young-generation
    collection, then the result dropped), without the storage trackers: for an estimate that needs only
    the allocation trace its recorder keeps. The report's storage figures read 0."""
    _warm_up()
    grad_enabled = torch.is_grad_enabled()
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        result = fn()
        torch.set_grad_enabled(grad_enabled)
        gc.collect(0)
        del result
    finally:
        torch.set_grad_enabled(grad_enabled)
        if gc_enabled:
            gc.enable()
    return MemoryReport(peak_bytes=0, retained_bytes=0, saved_bytes=0, saved_tensors=0, device=str(dev),
                        method="fake (allocation trace only)", label=label)


def measure_modes(fn, modes=("grad", "no_grad", "inference_mode"), device=None, *, model=None,
                  method: str = "auto", timeline: bool = False, on_mode=None) -> dict:
    """``{mode: MemoryReport}``: :func:`measure` of ``fn()`` once under each gradient mode or
    setting (``"eval+no_grad"``...; train/eval settings need ``model``). All modes are checked
    before any runs; ``on_mode(mode)`` is called before each (for progress bars)."""
    settings = [_modes.parse(m) for m in modes]
    if not settings:
        raise ValueError(f"name at least one mode; allowed: {', '.join(_modes.names())}")
    if any(s.train is not None for s in settings) and model is None:
        raise ValueError("a train/eval setting needs model=")
    dev = _device.resolve(device) if device is not None else None
    _check_method(method, dev)
    out = {}
    for m, s in zip(modes, settings):
        if on_mode is not None:
            on_mode(m)

        def run(s=s):
            with _modes.setting(s, model=model, device=dev):
                return fn()

        out[m] = measure(run, dev, method=method, timeline=timeline, label=str(m))
    return out


# --------------------------------------------------------------------------------------------
# a training step, and what is resident before it


def train_step(model, inputs, target, loss_fn, optimizer):
    """One training step: forward, loss, backward, optimizer step, gradients set to None. A tuple
    or list of ``inputs`` is passed as positional arguments, a dict as keyword arguments."""
    from nogradlab.core.ownmodel import forward

    model.train()
    with torch.enable_grad():
        loss = loss_fn(forward(model, inputs), target)
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


_OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True),
}




def resident_bytes(model, tensors=(), device=None) -> int:
    """Bytes of ``model``'s parameters and buffers plus ``tensors`` (inputs, targets), distinct
    storages once each, rounded as ``device`` rounds them (CUDA's 512-byte blocks): what is
    resident before a step, to add to a report's ``peak_bytes`` for the device's total."""
    dev = torch.device(device) if device is not None else None
    return _entry_bytes(model, tensors, CUDA_BLOCK if dev is not None and dev.type == "cuda" else 1)


def _entry_bytes(model, tensors, block) -> int:
    seen = WeakIdKeyDictionary()
    total = 0
    for t in list(model.parameters()) + list(model.buffers()) + list(tensors):
        st = _storage(t)
        if st is not None and st not in seen:
            seen[st] = True
            total += _rounded(st.nbytes(), block)
    return total
