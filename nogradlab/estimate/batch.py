"""The largest batch that fits a memory budget, per mode.

    from nogradlab import batch
    r = batch.largest_batch("resnet50", "eval+no_grad", 12 * 2**30, device="cuda")
    r.batch, r.method, r.trials

Modes (``MODES``):

* ``"train"``: one training step (forward, loss, backward, SGD-with-momentum step; a fresh
  optimizer per trial, so its state is counted as in a first step);
* ``"grad"``: a forward pass with gradients enabled, model in eval mode (so that the only difference
  from the next mode is the grad mode);
* ``"eval+no_grad"``: eval mode and ``torch.no_grad``;
* ``"inference_mode"``: eval mode and ``torch.inference_mode``.

Two ways to decide whether a batch fits (``METHODS``), one search for both:

* ``"estimate"`` (the default off CUDA): fake tensors, so nothing is allocated. On a CUDA device
  (a *virtual* one on a machine without a GPU) it decides as the real cap does: the step's
  allocation trace (``memory.estimate``: the model's weights, the library workspaces a warm-up step
  leaves, the inputs, the step as the GPU runs it) is replayed through the caching allocator's model
  (``nogradlab.allocator``) under a cap of ``budget`` on *reserved* bytes, releasing cached blocks and
  retrying before an out-of-memory error, as ``set_per_process_memory_fraction`` makes the real
  allocator do; ``allocator`` picks ``"native"`` (the default) or ``"expandable_segments"``. Off
  CUDA (no caching allocator): ``memory.estimate(...).total_peak_bytes <= budget``.
* ``"search"`` (the default on a real GPU): real runs under a cap set with
  ``torch.cuda.set_per_process_memory_fraction(budget / total memory)``; a run that raises
  ``torch.cuda.OutOfMemoryError`` does not fit. After each OOM the failed attempt's tensors are
  freed outside the ``except`` block (the traceback holds them until it ends), then
  ``gc.collect()`` and ``torch.cuda.empty_cache()``; the previous cap is restored afterwards, also
  when something else raises. The cap limits what the caching allocator *reserves* (rounded
  segments), and the search uses the process's own allocator (``PYTORCH_CUDA_ALLOC_CONF``).

The search (``search``) assumes memory grows with the batch: it doubles from ``start`` until a
batch does not fit, then bisects; the answer is exact. From ``start=1`` it needs at most
``2*log2(N) + 2`` trials for an answer ``N``. ``largest_batch`` starts by default (``start="auto"``)
from a guess. For an estimate on a (virtual) CUDA device one allocation program serves every batch
(:class:`Program`): the step's traces at batches 16 and 64, each library workspace kept as its operator's
call, are fitted allocation by allocation as a line in the batch, and checked at a third batch (the first
of 1, 2, 4, 8 on the line, else 17); the workspaces come from each operator's shape at the batch asked
(the table of ``nogradlab.cudamodel``). Every search, under any budget, then runs on replays of the
program through the allocator's model, no trace (3-5 traces make a program, once per step and process,
kept between processes by :mod:`nogradlab.estimate.programs`). Where a step's traces are not one line
(data-dependent operations), the earlier search runs, saying so in a note: two traces fitted as a line
and its answer verified by traces at ``N`` and ``N + 1`` (:func:`_affine_find`), and where even that
fails the bracket search: the answer is bracketed between the
batch whose allocated peak reaches the budget (nothing larger fits) and the batch whose uncapped
reserved bytes do (nothing smaller fails), then closed from both ends (:func:`_bracketed`). Elsewhere
(CPU estimates, real searches) the guess is the secant through the bytes of batches 1 and 2 (a larger
second batch, x16 at a time, when those two reserve the same bytes), refined through the last two
measured batches (memory is close to affine in the batch); the search then steps outward from it.
Where fitting is monotone in the batch the answer is the same as from ``start=1``; the trials fewer: 4 to 7
for a CPU estimate (bytes affine in the batch), and for the full-scale workloads under 12 and 16 GiB of
virtual CUDA 5 to 24 (measured: 266 trials for the 24 searches, against 400 with the secant alone;
ResNet-50's no_grad forward 6, against 21).
"""
from __future__ import annotations

import collections
import contextlib
import functools
import gc
import math
import numbers
import re
import time
from dataclasses import asdict, dataclass, field

import torch

from nogradlab.core import device as _device
from nogradlab.core import memory as _memory
from nogradlab.core import ownmodel as _ownmodel
from nogradlab.core import workloads as _workloads
from nogradlab.core.session import frozen_gc
from nogradlab.estimate import fake as _fake

__all__ = ["MODES", "METHODS", "BatchResult", "largest_batch", "largest_batches", "search",
           "search_on_cuda", "memory_cap", "measured_bytes", "max_trials", "frozen_gc"]

# mode -> the nogradlab.modes setting of the forward pass (None: a training step)
_SETTINGS = {"train": None, "grad": "eval+grad", "eval+no_grad": "eval+no_grad",
             "inference_mode": "eval+inference_mode"}
MODES = tuple(_SETTINGS)
METHODS = ("auto", "estimate", "search")


@dataclass
class BatchResult:
    """The answer of one search: ``batch`` (0 when even batch 1 does not fit) and how it was found.

    ``trials``: ``(batch, fits, bytes)`` in the order they ran; ``bytes`` is, for an estimate on
    a CUDA device, the modelled reserved peak without a cap (what the allocator would take; a
    batch can fit below a cap it exceeds, since cached blocks are released before giving up), off
    CUDA the estimated total peak, for a real search ``torch.cuda.max_memory_allocated`` of the
    run (``None`` after an OOM). ``allocated_before/after``: ``torch.cuda.memory_allocated``
    around a real search (equal when nothing leaked); ``None`` for estimates. ``allocator``: the
    caching allocator's mode (modelled, or the process's for a real search); ``None`` off CUDA.
    """

    workload: str
    mode: str
    budget_bytes: int
    batch: int
    trials: list
    method: str
    device: str
    scale: str = ""
    notes: list = field(default_factory=list)
    seconds: float = 0.0
    allocated_before: "int | None" = None
    allocated_after: "int | None" = None
    allocator: "str | None" = None

    @property
    def at_limit(self) -> bool:
        """True when every batch up to ``max_batch`` fitted (the real limit may be larger)."""
        return any(n.startswith(_AT_LIMIT) for n in self.notes)

    capped = at_limit

    @property
    def answer(self) -> str:
        """The batch as a reader should read it: ``"152448"``, or ``">= 65536 (search limit)"`` when
        every batch up to the search's limit fitted (then it is a lower bound, not the answer)."""
        return f">= {self.batch} (search limit)" if self.at_limit else str(self.batch)

    def bytes_at(self, batch: int) -> "int | None":
        for b, _, n in self.trials:
            if b == batch:
                return n
        return None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["trials"] = [list(t) for t in self.trials]
        return d

    def __str__(self) -> str:
        alloc = f", {self.allocator} allocator" if self.allocator else ""
        scale = f" ({self.scale})" if self.scale else ""
        limit = (" (every batch up to the search limit max_batch fitted: the real largest batch may be larger)"
                 if self.at_limit else "")
        return (f"{self.workload}{scale} {self.mode}: largest batch {self.answer}{limit} under "
                f"{_memory.format_bytes(self.budget_bytes)} on {self.device} [{self.method}{alloc}, "
                f"{len(self.trials)} trials, {self.seconds:.1f} s]")


_AT_LIMIT = "every batch up to max_batch="  # the note of a search capped by max_batch
#: a real search's default limit (each trial runs the step on the GPU)
REAL_MAX_BATCH = 65536


# --------------------------------------------------------------------------------------------
# the search, generic over a predicate


def max_trials(n: int) -> int:
    """The most trials ``search(start=1)`` needs for answer ``n`` (1 when ``n`` is 0)."""
    return 1 if n < 1 else int(2 * math.floor(math.log2(n)) + 2)


def search(fits, *, max_batch: int = 65536, start: int = 1, known: "dict | None" = None):
    """The largest ``b`` in ``[1, max_batch]`` with ``fits(b)`` true, assuming that ``fits`` is
    monotone (true up to some batch, false above); 0 when ``fits(1)`` is false.

    From ``start`` it steps up (``start+1, start+2, start+4, ...``: plain doubling from 1) while
    batches fit, or down likewise while they do not, then bisects between the last batch that fit
    and the first that did not. ``known``: ``{batch: fits}`` already decided (the guess's trials):
    a step never goes past the nearest known batch on its side, so those bounds are not probed
    again. Returns ``(batch, [(b, fits), ...])`` (the new trials only).
    """
    max_batch = _check_positive_int(max_batch, "max_batch")
    start = min(max(_check_positive_int(start, "start"), 1), max_batch)
    known = dict(known or {})
    trials = []

    def probe(b):
        if b in known:
            return known[b]
        ok = bool(fits(b))
        trials.append((b, ok))
        known[b] = ok
        return ok

    def nearest_fail_above(b):
        above = [k for k, ok in known.items() if not ok and k > b]
        return min(above) if above else None

    def nearest_fit_below(b):
        below = [k for k, ok in known.items() if ok and k < b]
        return max(below) if below else None

    step = 1
    if probe(start):
        lo, hi = start, None  # lo fits, hi does not
        while hi is None:
            if lo == max_batch:
                return lo, trials
            b = min(lo + step, max_batch)
            bound = nearest_fail_above(lo)
            if bound is not None and b >= bound:
                hi = bound
            elif probe(b):
                lo, step = b, step * 2
            else:
                hi = b
    else:
        lo, hi = None, start
        while lo is None:
            if hi == 1:
                return 0, trials
            b = max(hi - step, 1)
            bound = nearest_fit_below(hi)
            if bound is not None and b <= bound:
                lo = bound
            elif probe(b):
                lo = b
            else:
                hi, step = b, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return lo, trials


def _check_positive_int(v, name):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def _guess(probe, budget: int, max_batch: int, second: int = 2, rounds: int = 3) -> int:
    """A starting batch for the search: the secant through the bytes of batch 1 and ``second``
    (2, or a hint near the answer), refined up to ``rounds`` times through the last two measured
    batches (memory is close to affine in the batch, but at small batches a training step peaks at
    the optimizer step instead: the refinements fix that). Every probe is one of the trials."""
    ok, n0 = probe(1)[:2]
    if not ok or max_batch == 1:
        return 1
    b0, b1 = 1, min(max(int(second), 2), max_batch)
    ok, n1 = probe(b1)[:2]
    # Small batches can reserve the same bytes (the caching allocator's segments hold them all): no
    # slope to follow. Step the second batch up (x16) until the bytes grow, while it fits.
    while ok and n1 is not None and n1 == n0 and b1 < max_batch:
        b1 = min(b1 * 16, max_batch)
        ok, n1 = probe(b1)[:2]
    for _ in range(rounds):
        if n0 is None or n1 is None or b1 == b0 or (n1 - n0) * (b1 - b0) <= 0:
            break  # an OOM (no bytes) or memory that does not grow: search from here
        g = int(min(max(b1 + (budget - n1) * (b1 - b0) // (n1 - n0), 1), max_batch))
        if g == b1:
            break
        n = probe(g)[1]
        b0, n0, b1, n1 = b1, n1, g, n
    return b1


def _secant(pts: dict, idx: int, a: int, b: int, budget: int, max_batch: int) -> "int | None":
    """The batch where quantity ``pts[.][idx]`` reaches ``budget`` on the line through batches
    ``a`` and ``b``; None where the line does not rise (or a value is missing)."""
    ya, yb = pts[a][idx], pts[b][idx]
    if ya is None or yb is None or a == b or (yb - ya) * (b - a) <= 0:
        return None
    return int(min(max(b + (budget - yb) * (b - a) // (yb - ya), 1), max_batch))


def _bracketed(probe, fits, known: dict, budget: int, max_batch: int, second: int = 2) -> "int | None":
    """The estimate's search on a (virtual) CUDA device, where ``probe(b)`` gives ``(fits, reserved
    bytes without a cap, allocated peak)``: two lines bracket the answer.

    * Allocated bytes grow with the batch and are what the cap must hold: where the allocated peak
      passes the budget nothing fits (an upper end). Its secant from batches 1 and ``second``,
      refined once through the batch it proposed.
    * Reserved bytes without a cap: a batch that reserves no more than the budget never meets the cap
      and fits (a lower end). Reserved bytes come in whole segments (2 and 20 MiB) and are flat, or
      even fall, between batches 1 and 2, so their secant runs through the large batches above.

    The answer lies between, at the lower end for an inference forward (nothing cached to give
    back: ResNet-50's no_grad forward under 12 GiB fits 905, reserving 12.88 GB of 12.88) and near the
    upper end for a training step (the allocator frees cached blocks and retries before it fails:
    144 fits, reserving 15.1 GB uncapped). So the bracket is closed from both ends at once, by two
    steps from each end (1, then 2), then by bisection. Exact for any
    monotone ``fits``: the lines only choose the trials. Returns None where the lines give no
    bracket (the caller then searches by doubling)."""
    pts = {1: probe(1)}
    if not pts[1][0] or max_batch == 1:
        return None
    b2 = min(max(int(second), 2), max_batch)
    pts[b2] = probe(b2)
    g = _secant(pts, 2, 1, b2, budget, max_batch)
    if g is None:
        return None
    pts[g] = probe(g)
    g2 = _secant(pts, 2, b2, g, budget, max_batch)
    if g2 is not None and g2 not in pts:
        pts[g2] = probe(g2)
        g = g2
    # the upper line can fit (a cuDNN workspace the cap shrinks: U-Net's no_grad forward allocates 20.6 GB
    # uncapped at batch 262, which fits under 16 GiB): step up by a quarter until a batch does not
    up = g
    for _ in range(6):
        if not pts[up][0] or up >= max_batch:
            break
        up = min(max(up + 1, int(up * 1.25)), max_batch)
        if up not in pts:
            pts[up] = probe(up)
    low = _secant(pts, 1, b2, g, budget, max_batch)
    best_fit = max((b for b, r in pts.items() if r[0]), default=1)
    if low is not None and low <= best_fit:
        low = None  # a larger batch is known to fit: the lower line has nothing to add
    if low is not None and low not in pts:
        pts[low] = probe(low)
        gap = max(g - low, 1)
        for _ in range(3):  # a segment's rounding can put the lower end just past the cap: step down
            if pts[low][0] or low <= 1:
                break
            low = max(low - gap, 1)
            gap *= 2
            if low not in pts:
                pts[low] = probe(low)
    return _close_bracket(fits, known, b2)


def _close_bracket(fits, known: dict, b2: int) -> "int | None":
    """The bracket search's last part: between the largest batch ``known`` to fit and the smallest known
    not to, each end's neighbour once, then bisection (a gallop down from the upper end first, where only
    batches 1 and ``b2`` are known to fit). None where ``known`` gives no bracket."""
    lo = max((b for b, ok in known.items() if ok), default=None)
    hi = min((b for b, ok in known.items() if not ok), default=None)
    if lo is None or hi is None or hi <= lo:
        return None
    if lo in (1, b2):
        # nothing but the first two batches fits: no line gave a lower end (a training step whose hint,
        # the grad forward's batch, just fails: ResNet-50 under 12 GiB, 146 fails and 144 fits), so the
        # answer lies below the upper end: gallop down from it (hi-1, hi-2, hi-4, ...), then bisect
        step = 1
        while hi - lo > 1:
            b = max(hi - step, lo + 1) if step * 2 <= hi - lo else (lo + hi) // 2
            step *= 2
            if fits(b):
                lo = b
                break
            hi = b
    first = True
    while hi - lo > 1:
        # each end's neighbour once (a line is often exact there: the no_grad forward's lower end,
        # the grad forward's upper end), then bisection
        if first and hi - lo > 2:
            for b in (lo + 1, hi - 1):
                if fits(b):
                    lo = b
                else:
                    hi = b
                    break
            first = False
            continue
        first = False
        b = (lo + hi) // 2
        if fits(b):
            lo = b
        else:
            hi = b
    return lo


# --------------------------------------------------------------------------------------------
# the estimate's search on a (virtual) CUDA device: an affine fit of the allocation trace


SEARCH_NOTE = "how the largest batch was searched"  # the start of the note that says so (one per search)


def _affine_trace(ev_a: list, a: int, ev_b: list, b: int):
    """``trace(n)``: the allocation trace at batch ``n`` on the line through the traces at batches
    ``a`` and ``b`` (every allocation's bytes affine in the batch, rounded to whole bytes), or None
    where the two traces are not the same operations in the same order (shapes or control flow that
    change with the batch) or a size shrinks as the batch grows."""
    if len(ev_a) != len(ev_b) or a == b:
        return None
    varying = []  # (index, kind, key, bytes at a, bytes at b): only what changes with the batch
    for i, (x, y) in enumerate(zip(ev_a, ev_b)):
        if x == y:
            continue
        if x[0] != y[0] or x[0] not in ("alloc", "try_alloc") or x[1] != y[1]:
            return None
        sa = x[2] if x[0] == "try_alloc" else (x[2],)
        sb = y[2] if y[0] == "try_alloc" else (y[2],)
        if x[0] == "try_alloc" and len(sa) != len(sb):
            # a cuDNN workspace's fallback (the input's bytes, proportional to the batch) is offered only
            # while it is smaller than the workspace: carry it from the trace that has it, scaled
            if min(len(sa), len(sb)) != 1 or max(len(sa), len(sb)) != 2:
                return None
            src, at_b = (sa, a) if len(sa) == 2 else (sb, b)
            varying.append((i, "try_alloc*", x[1], (sa[0], sb[0]), (src[1], at_b)))
            continue
        if any((q - p) * (b - a) < 0 for p, q in zip(sa, sb)):
            return None
        varying.append((i, x[0], x[1], sa, sb))

    def at(n: int, p: int, q: int) -> int:
        return max(0, p + ((q - p) * (n - a) * 2 + (b - a)) // (2 * (b - a)))  # rounded to the nearest

    def trace(n: int) -> list:
        out = list(ev_a)
        for i, kind, key, sa, sb in varying:
            if kind == "try_alloc*":
                ws, (f, fb) = at(n, *sa), sb
                fallback = (f * n + fb // 2) // fb
                out[i] = ("try_alloc", key, (ws, fallback) if 0 < fallback < ws else (ws,))
                continue
            sizes = tuple(at(n, p, q) for p, q in zip(sa, sb))
            out[i] = (kind, key, sizes) if kind == "try_alloc" else (kind, key, sizes[0])
        return out

    return trace


def _first_pair(events_of, real, traced, second: int, max_batch: int, hint) -> tuple:
    """The two batches :func:`_affine_find` fits its first line through: with a hint, two of ``traced``
    (traces that searches under other budgets took) that lie on one line, so the first line costs no new
    trace (a few pairs tried: a cuDNN workspace can change the operations); else batches 1 and ``second``."""
    for pair in (_fit_pairs([b for b in traced if b <= max_batch], second)[:16] if hint else ()):
        if _affine_trace(events_of(pair[0]), pair[0], events_of(pair[1]), pair[1]) is not None:
            for b in pair:
                real(b)
            return pair
    real(second)
    return (1, second)


def _affine_find(probe, events_of, replay, budget: int, max_batch: int, hint=None, traced=()) -> tuple:
    """The largest batch that fits, from few traces: ``(batch, note)``.

    ``probe(b)``: a real trial (a fake-tensor trace replayed through the allocator's model under the
    cap: ``(fits, reserved, allocated)``, recorded); ``events_of(b)``: that trial's allocation trace;
    ``replay(events)``: ``(fits, reserved, allocated)`` of any trace. The traces at batches 1 and 2 (or
    ``hint``, a batch believed near the answer; with a hint, two of ``traced``, batches whose traces
    earlier searches took, where they lie on one line: :func:`_fit_pairs`) are fitted, allocation by
    allocation, by a line in the batch (:func:`_affine_trace`); the search then runs on traces taken from that line, replays only,
    exact for them (:func:`_find`). The answer ``N`` is then verified by two real trials, at ``N``
    (fits) and ``N + 1`` (does not). Where the check fails the line is fitted again through the real
    traces nearest the answer (a library workspace grows piecewise with the batch); where the traces
    differ in their operations, or the second fit misses too, the bracket search
    (:func:`_bracketed`, every trial real) finishes from what is known, and the note says so. Exact
    for any ``fits`` that is monotone in the batch: the fit only chooses the trials."""
    known = {}

    def real(b):
        ok = bool(probe(b)[0])
        known[b] = ok
        return ok

    if not real(1):
        return 0, None
    if max_batch == 1:
        return 1, None
    second = min(max(int(hint or 2), 2), max_batch)
    pts = _first_pair(events_of, real, traced, second, max_batch, hint)
    replays = 0
    why = None
    misses = 0
    while misses < 2:
        line = _affine_trace(events_of(pts[0]), pts[0], events_of(pts[1]), pts[1])
        if line is None and pts[0] == 1 and 2 * pts[1] <= max_batch:
            # batch 1 is often special (a transpose of a dimension of size 1 is a view, not a copy):
            # fit through the second batch and twice it instead
            pts = (pts[1], 2 * pts[1])
            real(pts[1])  # a trace for the line, whether it fits or not
            continue
        if line is None:
            why = (f"the allocation traces of batches {pts[0]} and {pts[1]} are not the same operations "
                   "(shapes or control flow change with the batch)")
            break
        seen = {}

        def synth(b, line=line, seen=seen):
            if b in known:  # traced already: what the bracket search would see there
                return probe(b)
            if b not in seen:
                seen[b] = replay(line(b))
            return seen[b]

        # the bracket search's own trial sequence (from batches 1 and ``second``), on traces from the line
        n = _find(synth, budget, max_batch, "auto", second if misses == 0 else pts[1])
        replays += len(seen)
        # verified: the answer fits and one more does not, and their real traces are the line's
        if n >= 1 and real(n) and (n == max_batch or not real(n + 1)) \
                and all(events_of(b) == line(b) for b in (n, n + 1) if b <= max_batch):
            return n, (f"{SEARCH_NOTE}: on the allocation trace fitted as a line in the batch through batches "
                       f"{pts[0]} and {pts[1]} ({replays} replays), verified by trials at {n} (fits)"
                       + (f" and {n + 1} (does not)" if n < max_batch else "") + ", their traces on the line")
        # fit again through the two real traces nearest the boundary
        misses += 1
        near = sorted(known, key=lambda b: (abs(b - n), b))[:2]
        if len(near) < 2:
            break
        pts = tuple(sorted(near))
        why = "memory is not affine in the batch here (the fitted line missed twice)"
    found = _find(probe, budget, max_batch, "auto", hint)
    return found, (f"{SEARCH_NOTE}: bracket search, every trial traced ({why or 'the fitted line missed'}; "
                   f"{replays} replays of fitted traces chose no answer)")


# --------------------------------------------------------------------------------------------
# the estimate's search on a (virtual) CUDA device: one allocation program serves every batch


#: the batches a program is fitted through
PROGRAM_FIT = (16, 64)
#: the small batches checked against the line, in turn, until one lies on it (a third batch on the line:
#: the check). Below that batch a step can differ (a transpose of a dimension of size 1 is a view, not a
#: copy; the transformer's training step at batch 2): those batches keep their own traces
PROGRAM_SMALL = (1, 2, 4, 8)
#: the batch checked where none of the small ones lies on the line (the line then serves from 16)
PROGRAM_CHECK = 17


def _affine_events(ev_a: list, a: int, ev_b: list, b: int):
    """``at(n)``: the recorded trace (workspace calls as calls, ``("ws", ...)``) at batch ``n`` on the
    line through the traces at batches ``a`` and ``b``: every tensor's bytes, and every workspace call's
    batch and input bytes, affine in the batch (rounded to the nearest). None where the two traces are not
    the same events in the same order (shapes or control flow that change with the batch), or a size
    shrinks as the batch grows."""
    if len(ev_a) != len(ev_b) or a == b:
        return None
    varying = []  # (index, {slot: (value at a, value at b)})
    for i, (x, y) in enumerate(zip(ev_a, ev_b)):
        if x == y:
            continue
        if x[0] != y[0] or x[1] != y[1]:
            return None
        if x[0] == "alloc":
            slots = (2,)
        elif x[0] == "ws" and x[5] == y[5]:
            slots = (3, 4)
        else:
            return None
        pairs = {k: (x[k], y[k]) for k in slots if x[k] != y[k]}
        if any((q - p) * (b - a) < 0 for p, q in pairs.values()):
            return None
        op = None
        if x[0] == "ws" and x[2] != y[2]:
            # the operator's key holds a shape with the batch inside (its first dimension is not the
            # batch: a sum over a sequence-first tensor): its numbers must be affine in the batch too
            op = _affine_key(x[2], a, y[2], b)
            if op is None:
                return None
        varying.append((i, pairs, op))

    def at(n: int) -> list:
        out = list(ev_a)
        for i, pairs, op in varying:
            e = list(out[i])
            for k, (p, q) in pairs.items():
                e[k] = _on_line(n, a, p, b, q)
            if op is not None:
                e[2] = op(n)
            out[i] = tuple(e)
        return out

    return at


def _on_line(n: int, a: int, p: int, b: int, q: int) -> int:
    """The value at ``n`` on the line through ``(a, p)`` and ``(b, q)``, rounded to the nearest."""
    return max(0, p + ((q - p) * (n - a) * 2 + (b - a)) // (2 * (b - a)))


_NUMBER = re.compile(r"-?\d+")


def _affine_key(ka: str, a: int, kb: str, b: int):
    """``key(n)``: an operator's key (its arguments' shapes) at batch ``n``, from its keys at batches ``a``
    and ``b``, where they differ only in numbers that are affine in the batch with whole slopes; None
    otherwise."""
    ta, tb = _NUMBER.split(ka), _NUMBER.split(kb)
    na, nb = [int(v) for v in _NUMBER.findall(ka)], [int(v) for v in _NUMBER.findall(kb)]
    if ta != tb or len(na) != len(nb) or any((q - p) % (b - a) for p, q in zip(na, nb)):
        return None

    def key(n: int) -> str:
        nums = [str(p + (q - p) // (b - a) * (n - a)) for p, q in zip(na, nb)]
        return "".join(t + v for t, v in zip(ta, nums + [""]))

    return key


@dataclass
class Program:
    """The allocation program of one step (a model, a mode, its dtype, on the modelled GPU): the trace
    at any batch from traces at two batches (:data:`PROGRAM_FIT`), every tensor's bytes affine in the
    batch and each library workspace computed from its operator's shape at that batch (the table of
    ``nogradlab.cudamodel``). Checked when made: its trace at a third batch (the first of
    :data:`PROGRAM_SMALL` on the line, else :data:`PROGRAM_CHECK`) equals the one traced there, event for
    event. A search, or a new budget, then costs replays through the allocator's
    model, not traces. ``lowest``: the smallest batch the line serves (checked there; a smaller batch is
    traced, as a trial). ``notes``: the estimate's notes of the traced batches."""

    a: int
    ev_a: list
    b: int
    ev_b: list
    checked: tuple
    lowest: int = 1  # the smallest batch the line serves (smaller ones are traced)
    notes: tuple = ()
    own: dict = field(default_factory=dict)  # batch below ``lowest`` -> its own trace (the ones checked)
    source: str = "traced"  # or "cache": read from the cache folder
    replays: dict = field(default_factory=dict, repr=False, compare=False)  # (n, allocator, held) -> peaks

    def __post_init__(self):
        self._at = _affine_events(self.ev_a, self.a, self.ev_b, self.b)
        if self._at is None:
            raise ValueError("the two traces are not one line in the batch")

    def serves(self, n: int) -> bool:
        return n >= self.lowest or n in self.own

    def recorded(self, n: int) -> list:
        """The trace at batch ``n`` (at least :attr:`lowest`, or one of :attr:`own`), workspace calls as calls."""
        if n in self.own:
            return self.own[n]
        if n < self.lowest:
            raise ValueError(f"batch {n} lies below the batches this program serves (from {self.lowest})")
        return self._at(n)

    def events(self, n: int, held: int = 0) -> list:
        """The allocation trace at batch ``n`` (what ``memory.estimate`` records there), with ``held``
        bytes the process holds allocated first."""
        from nogradlab.estimate.cudamodel import expand_workspaces

        out = expand_workspaces(self.recorded(n))
        return ([("alloc", ("held",), int(held))] + out) if held else out

    def describe(self) -> str:
        below = "" if self.lowest == 1 else (
            f"; batch{'es' if len(self.own) > 1 else ''} {', '.join(map(str, sorted(self.own)))} off the line, "
            f"kept as traced" + (f", other batches under {self.lowest} traced as trials"
                                 if set(self.own) != set(range(1, self.lowest)) else ""))
        return (f"the step's allocation program (traces at batches {self.a} and {self.b} fitted as a line in "
                f"the batch, workspaces from each operator's shape, checked at batch "
                f"{', '.join(map(str, sorted(self.checked)))}{below}"
                f"{'; kept from an earlier run' if self.source == 'cache' else ''})")


def _replayed(prog: Program, allocator: str, held: int, budget: int, n: int) -> tuple:
    """``(fits, reserved peak without a cap, allocated peak)`` of the program's trace at batch ``n``
    replayed through the allocator's model: what a traced trial gives (:func:`_modelled_fit`). The
    uncapped replay is kept per batch (it serves every budget); the capped one runs only where the cap
    can matter (the uncapped reserved peak passes the budget)."""
    from nogradlab.estimate import allocator as _alloc

    if not prog.serves(n):
        return None  # the caller traces it
    k = (n, allocator, held)
    free = prog.replays.get(k)
    if free is None:
        sim = _alloc.simulate(prog.events(n, held), allocator, None, keep_segments=False)
        free = prog.replays[k] = (sim.reserved_peak_bytes, sim.allocated_peak_bytes)
    reserved, allocated = free
    if reserved <= budget:
        fits = True  # the cap is never reached
    else:  # (an allocated peak over the budget may still fit: a convolution takes its fallback under a cap)
        fits = not _alloc.simulate(prog.events(n, held), allocator, budget, keep_segments=False).oom
    return fits, reserved, allocated


#: ``(workload, scale, mode, device, fast) -> Program``, or the reason there is none (a string)
_PROGRAMS: dict = {}


def _program(workload, scale: str, mode: str, dev: str, fast=None) -> "Program | str":
    """The step's :class:`Program`, made once per process (and kept between processes:
    :mod:`nogradlab.estimate.programs`), or the reason why its traces are not one line in the batch."""
    k = (workload, scale, mode, dev, fast)
    hit = _PROGRAMS.get(k)
    if hit is not None:
        return hit
    from nogradlab.estimate import programs as _store

    kept = _store.load(workload, scale, mode, dev, fast)
    if kept is not None:
        try:
            _PROGRAMS[k] = prog = Program(**kept)
            return prog
        except (ValueError, TypeError, IndexError):
            pass  # its traces are not one line in the batch: not a program, made again

    def recorded(b):
        return _trace(workload, scale, mode, b, dev, "native", 0, fast)

    # batch 1 first, as every search traces it first: the first trace of a step in a process can hold a
    # few small allocations later ones do not (22 of 8-16 bytes in ResNet-50's training step, made once),
    # and batch 1 is where a search meets them
    recorded(1)
    a, b = PROGRAM_FIT
    ra, rb = recorded(a), recorded(b)
    at = _affine_events(ra[4], a, rb[4], b)
    if at is None:
        _PROGRAMS[k] = why = (f"the allocation traces of batches {a} and {b} are not the same operations (shapes "
                              "or control flow change with the batch)")
        return why
    # a third batch on the line checks it: the first small batch that lies on it (the line then serves from
    # there), else PROGRAM_CHECK (from the fitted batch up; the small batches keep their own traces)
    traced, lowest, own, checked = [], None, {}, ()
    for small in PROGRAM_SMALL:
        r = recorded(small)
        traced.append(r)
        if at(small) == r[4]:
            lowest, checked = small, (small,)
            break
        own[small] = r[4]  # off the line: kept as it is (a search starts at batch 1)
    if lowest is None:
        rc = recorded(PROGRAM_CHECK)
        traced.append(rc)
        if at(PROGRAM_CHECK) != rc[4]:
            _PROGRAMS[k] = why = (f"the trace at batch {PROGRAM_CHECK} is not on the line through batches {a} "
                                  f"and {b}")
            return why
        lowest, checked = a, (PROGRAM_CHECK,)
    notes = tuple(dict.fromkeys(n for r in [ra, rb] + traced for n in r[3]))
    prog = Program(a=a, ev_a=ra[4], b=b, ev_b=rb[4], lowest=lowest, notes=notes, own=own, checked=checked)
    _PROGRAMS[k] = prog
    _store.save(workload, scale, mode, dev, fast, prog)
    return prog


def _fastpath_enabled():
    """The transformer fast path's switch (``torch.backends.mha``), or None where torch has none."""
    mha = getattr(torch.backends, "mha", None)
    return mha.get_fastpath_enabled() if mha is not None and hasattr(mha, "get_fastpath_enabled") else None


# --------------------------------------------------------------------------------------------
# the two predicates


@functools.lru_cache(maxsize=4096)
def _estimated_bytes(workload: str, scale: str, mode: str, batch: int, dev: str, fast=None) -> tuple:
    """(total estimated peak: weights, inputs and everything the step allocates; the estimate's
    notes). Estimates are deterministic, so they are cached."""
    r = _estimate(workload, scale, mode, batch, dev, "native", 0, fast)
    return int(r.total_peak_bytes), tuple(r.notes)


@functools.lru_cache(maxsize=4)
def _estimate(workload: str, scale: str, mode: str, batch: int, dev: str, allocator: str, held: int,
              fast=None):
    """The ``memory.estimate`` report of one step (with its allocation trace on CUDA); the last few
    are cached, for the byte count and the allocator's replay of the same trial (a trace of a
    full-size model holds tens of thousands of events: a larger cache costs a learner's kernel
    hundreds of MB). ``fast``: the transformer fast path's switch when asked, part of the key only
    (the trace with the fast path on differs, and a claim may estimate with it off)."""
    lean = dict(_trace_only=True) if str(dev).startswith("cuda") else {}  # the search needs the trace only
    if mode == "train":
        return _fake.estimate(workload, batch, dev, step="train", scale=scale, allocator=allocator,
                                held_bytes=held, **lean)
    return _fake.estimate(workload, batch, dev, _SETTINGS[mode], scale=scale, allocator=allocator,
                            held_bytes=held, **lean)


@functools.lru_cache(maxsize=4096)
def _modelled_fit(workload: str, scale: str, mode: str, batch: int, dev: str, allocator: str,
                  held: int, budget: int, fast=None) -> tuple:
    """(fits, modelled reserved peak without a cap, modelled allocated peak, notes): the step's trace
    replayed through the caching allocator's model under a cap of ``budget`` reserved bytes."""
    from nogradlab.estimate import allocator as _alloc

    events, reserved, allocated, notes = _trace(workload, scale, mode, batch, dev, allocator, held, fast)[:4]
    sim = _alloc.simulate(events, allocator, budget, keep_segments=False)
    return not sim.oom, reserved, allocated, notes


#: the allocation traces searches took, newest last: ``(workload, scale, mode, batch, device,
#: allocator, held, fast) -> (events, reserved, allocated, notes)``. A trace is 0.1-1.3 MB (ResNet-50's
#: training step: 1,919 events), so :data:`TRACES_MAX` of them cost a learner's kernel at most ~80 MB;
#: they let a search under a new budget fit its line through traces it already has (:func:`_fit_pairs`).
_TRACES: "collections.OrderedDict" = collections.OrderedDict()
TRACES_MAX = 64


def _trace(workload: str, scale: str, mode: str, batch: int, dev: str, allocator: str, held: int,
           fast=None) -> tuple:
    """(allocation trace, reserved and allocated peaks without a cap, notes) of one step: what a search
    needs of an estimate, kept for more steps than :func:`_estimate` keeps whole reports (the newest
    :data:`TRACES_MAX`), so that the searches of one model under several budgets share their traces."""
    k = (workload, scale, mode, int(batch), dev, allocator, held, fast)
    hit = _TRACES.get(k)
    if hit is not None:
        _TRACES.move_to_end(k)
        return hit
    r = _estimate(workload, scale, mode, batch, dev, allocator, held, fast)
    out = _TRACES[k] = (r.events, int(r.reserved_bytes), int(r.allocated_bytes), tuple(r.notes), r.program)
    while len(_TRACES) > TRACES_MAX:
        _TRACES.popitem(last=False)
    return out


def _traced_batches(workload, scale: str, mode: str, dev: str, allocator: str, held: int, fast=None) -> list:
    """The batches whose traces :func:`_trace` holds for this step, ascending."""
    return sorted(k[3] for k in _TRACES
                  if (k[0] is workload or k[0] == workload) and k[1:3] == (scale, mode)
                  and k[4:] == (dev, allocator, held, fast))


def _fit_pairs(traced, hint: int) -> list:
    """Pairs of traced batches (batch 1 left out: often special) to fit a line through for an answer
    near ``hint``, best first: the pair whose farther batch is nearer to it (a line is surest near the
    batches it was fitted through; a library workspace changes piecewise with the batch), a pair
    around it before a pair beside it, then the longer."""
    cands = sorted(set(b for b in traced if b > 1))
    pairs = [(a, b) for i, a in enumerate(cands) for b in cands[i + 1:]]
    return sorted(pairs, key=lambda p: (max(abs(p[0] - hint), abs(p[1] - hint)), not p[0] <= hint < p[1],
                                        p[0] - p[1]))


def _forget_estimates() -> None:
    """Empty the estimate caches (after a search of your own model, whose object they hold)."""
    for cached in (_estimated_bytes, _estimate, _modelled_fit):
        cached.cache_clear()
    _TRACES.clear()
    _PROGRAMS.clear()


def _process_allocator() -> str:
    """The caching allocator's mode of this process (``PYTORCH_CUDA_ALLOC_CONF``, or its newer
    name ``PYTORCH_ALLOC_CONF``)."""
    import os
    import re

    conf = ",".join(os.environ.get(k, "") for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"))
    return "expandable_segments" if re.search(r"expandable_segments\s*:\s*true", conf, re.I) else "native"


def _real_runner(wl, mode: str, dev: torch.device):
    """``run(batch) -> peak bytes`` of one real step on ``dev`` (the model is built once, here),
    and ``reset()``, which drops what a failed step may have left behind (gradients)."""
    from nogradlab.core import modes
    from nogradlab.core.ownmodel import forward

    model = wl.build(dev)

    def run(batch):
        torch.cuda.reset_peak_memory_stats(dev)
        x = wl.make_input(batch, dev)
        if mode == "train":
            target = wl.make_target(batch, dev)
            opt = _memory._OPTIMIZERS["sgd"](model.parameters())
            _memory.train_step(model, x, target, wl.loss, opt)
        else:
            with modes.setting(_SETTINGS[mode], model=model, device=dev):
                out = forward(model, x)  # noqa: F841 - alive until the peak is read
        _device.synchronize(dev)
        return torch.cuda.max_memory_allocated(dev)

    def reset():
        model.zero_grad(set_to_none=True)

    return run, reset, model


@_device.leaves_rng_alone
def measured_bytes(workload: str, mode: str, batch: int, device="cpu", *, scale: str = "full",
                   warmup: bool = True) -> int:
    """The real counterpart of an estimate: total peak of one real step of ``workload`` in
    ``mode`` at ``batch`` on ``device`` (weights, buffers and inputs, rounded as the device rounds
    them, plus the step's own peak from :func:`nogradlab.memory.measure`: live storages off CUDA,
    the caching allocator on CUDA). ``warmup`` first runs the step once at batch 1 on CUDA, so
    that lazily created library workspaces (cuBLAS) are not counted as the step's."""
    from nogradlab.core import modes

    if mode not in _SETTINGS:
        raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    wl = _workloads.get(workload, scale)
    dev = _device.resolve(device)
    _workloads.check_batch(batch)

    def step(b):
        with _device.rng_preserved(dev):  # seeded, leaving the caller's RNG (CPU and CUDA) alone
            torch.manual_seed(0)
            model = wl.build(dev)
            x = wl.make_input(b, dev)
        entry = [x]
        if mode == "train":
            y = wl.make_target(b, dev)
            entry.append(y)
            opt = _memory._OPTIMIZERS["sgd"](model.parameters())

            def fn():
                return _memory.train_step(model, x, y, wl.loss, opt)
        else:
            def fn():
                with modes.setting(_SETTINGS[mode], model=model, device=dev):
                    return model(x)
        # off CUDA the storage tracker cannot see inside the fused transformer path: measure
        # without it, as the estimate does (the allocator on CUDA sees everything)
        fused_off = _memory.fused_paths_off() if dev.type != "cuda" else contextlib.nullcontext()
        with frozen_gc(), fused_off:
            rep = _memory.measure(fn, dev)
        return _memory.resident_bytes(model, entry, dev) + rep.peak_bytes

    if warmup and dev.type == "cuda":
        step(1)
    return step(batch)


@contextlib.contextmanager
def memory_cap(budget_bytes: int, device):
    """Cap what this process may allocate on ``device`` at ``budget_bytes`` (a fraction of the
    device's total memory) for the block; the previous fraction is restored on exit, whatever
    happens. Cached blocks of earlier work are released first: they would count against the cap."""
    total = torch.cuda.get_device_properties(device).total_memory
    if budget_bytes > total:
        raise ValueError(f"budget {_memory.format_bytes(budget_bytes)} exceeds the device's "
                         f"{_memory.format_bytes(total)}")
    # get_per_process_memory_fraction is recent (torch 2.6); before it the default cap was 1.0
    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    previous = getter(device) if getter is not None else 1.0
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(budget_bytes / total, device)
    try:
        yield
    finally:
        torch.cuda.set_per_process_memory_fraction(previous, device)


def _oom_guarded(run, reset=None):
    """``probe(batch) -> (fits, bytes)`` around ``run``: an OOM means "does not fit"."""

    def probe(batch):
        peak, oom = None, False
        try:
            peak = run(batch)
        except torch.cuda.OutOfMemoryError:
            oom = True
        # outside the except block: the traceback, and the failed attempt's tensors held by its
        # frames, are released now; only then can the collector and the cache give memory back
        if reset is not None:
            reset()
        gc.collect()
        torch.cuda.empty_cache()
        return not oom, peak

    return probe


def _recorded(probe, on_trial=None):
    """Memoize ``probe`` (each batch runs once) and report each new trial to ``on_trial``."""
    seen = {}

    def wrapped(batch):
        if batch not in seen:
            seen[batch] = probe(batch)
            if on_trial is not None:
                on_trial(batch, *seen[batch][:2])
        return seen[batch]

    return wrapped


def _find(probe, budget: int, max_batch: int, start, hint=None) -> int:
    """The search over ``probe(batch) -> (fits, bytes)``, from ``start`` or (``"auto"``) from the
    secant guess through batch 1 and ``hint`` (default 2)."""
    known = {}

    def fits(b):
        ok = bool(probe(b)[0])
        known[b] = ok
        return ok

    if start == "auto":
        if len(probe(1)) > 2 and probe(1)[0]:  # (fits, reserved, allocated): an estimate on CUDA
            found = _bracketed(lambda b: (fits(b), *probe(b)[1:]), fits, known, budget, max_batch, hint or 2)
            if found is not None:
                return found
        start = _guess(lambda b: (fits(b), *probe(b)[1:]), budget, max_batch, hint or 2)
    found, _ = search(fits, max_batch=max_batch, start=start, known=known)
    return found


def search_on_cuda(run, budget_bytes: int, device, *, max_batch: int = 65536, start=1,
                   reset=None, on_trial=None, hint=None) -> int:
    """Largest batch for which ``run(batch)`` completes under a cap of ``budget_bytes`` on
    ``device``. ``run`` returns the bytes it peaked at, or raises ``torch.cuda.OutOfMemoryError``;
    ``reset()`` runs after every attempt; ``on_trial(batch, fits, bytes)`` sees each trial."""
    probe = _recorded(_oom_guarded(run, reset), on_trial)
    with frozen_gc(), memory_cap(budget_bytes, device):
        return _find(probe, budget_bytes, max_batch, start, hint)


# --------------------------------------------------------------------------------------------
# the public entry point


def _validate(workload, mode, budget_bytes, device, scale, method, max_batch, start,
              allocator=None, held_bytes=0, inputs=None):
    """Check every argument before any work; return (Workload, device string, is_virtual, method)."""
    if allocator is not None and allocator not in _fake.ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; allowed: {', '.join(_fake.ALLOCATORS)}")
    if isinstance(held_bytes, bool) or not isinstance(held_bytes, numbers.Integral) or held_bytes < 0:
        raise ValueError(f"held_bytes must be a non-negative integer, got {held_bytes!r}")
    if mode not in _SETTINGS:
        raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, numbers.Real) \
            or not budget_bytes >= 1 or math.isinf(budget_bytes):
        raise ValueError(f"budget_bytes must be a positive, finite number of bytes, at least 1, got {budget_bytes!r}")
    if max_batch is not None:
        _workloads.check_batch(max_batch, "max_batch")  # also: no larger than workloads.MAX_BATCH
    if start != "auto":
        _workloads.check_batch(start, "start (or 'auto')")
    wl = _ownmodel.resolve(workload, scale, inputs)
    name = device.strip().lower() if isinstance(device, str) else str(device)
    virtual = name.startswith("cuda") and not torch.cuda.is_available()
    if virtual:
        if not _device._CUDA_RE.match(name):
            raise ValueError(f"unknown device {device!r}; allowed: {', '.join(_device.ALLOWED)}")
        if method == "search":
            raise RuntimeError(f"method 'search' needs a real CUDA device, and {device!r} is not "
                               "available here; use method 'estimate' (a virtual CUDA device)")
        dev = "cuda:0" if name == "cuda" else name
    else:
        dev = str(_device.resolve(device))
    if method == "auto":
        method = "search" if dev.startswith("cuda") and not virtual else "estimate"
    if method == "search":
        if not dev.startswith("cuda"):
            raise ValueError(f"method 'search' needs a CUDA device (real runs under a memory cap), "
                             f"got {dev!r}; use method 'estimate'")
        if allocator is not None and allocator != _process_allocator():
            raise ValueError(f"a real search runs with this process's allocator "
                             f"({_process_allocator()}), not {allocator!r}: set "
                             "PYTORCH_CUDA_ALLOC_CONF before starting Python, or use method 'estimate'")
        if held_bytes:
            raise ValueError("held_bytes is for estimates; a real search counts what the process holds")
        total = _device.total_memory(dev)
        if budget_bytes > total:
            raise ValueError(f"budget {_memory.format_bytes(budget_bytes)} exceeds {dev}'s "
                             f"{_memory.format_bytes(total)}")
    return wl, dev, virtual, method


@_device.leaves_rng_alone  # a real search builds the model on the device: the caller's RNG stays as it was
def largest_batch(workload: str, mode: str, budget_bytes: int, device="cpu", *, scale: str = "full",
                  method: str = "auto", max_batch: "int | None" = None, progress: bool = False,
                  start="auto", hint: "int | None" = None, allocator: "str | None" = None,
                  held_bytes: int = 0, inputs=None) -> BatchResult:
    """The largest batch of ``workload`` (at ``scale``) whose step in ``mode`` fits in
    ``budget_bytes`` on ``device`` (see the module docstring for modes and methods).

    ``workload``: a built-in workload's name, or your own model (an ``nn.Module`` or a function
    that builds one, with ``inputs``; or a ``nogradlab.ownmodel.Model``), as ``memory.estimate``
    takes them; ``scale`` is then ignored. A real search on a GPU runs a copy of a given module.

    ``allocator``: the CUDA caching allocator's mode an estimate models, ``"native"`` (the default)
    or ``"expandable_segments"``; a real search runs with the process's own (naming another is an
    error). ``held_bytes``: for an estimate, memory the process already holds on the device besides
    the model (other tensors), allocated first and counted against the cap.

    ``start``: ``"auto"`` (a secant guess from batches 1 and 2, refined) or the batch the search
    starts from (1: plain doubling). ``hint``: with ``"auto"``, a batch believed near the answer
    (another mode's, say), used instead of batch 2 for the guess; on a (virtual) CUDA device the
    line is then fitted through traces that earlier searches of the same step took, where two lie
    on one line (under another budget, say: no new trace). Where fitting is monotone in the batch
    the answer is exact either way and these only change the number of trials. Where the allocator's
    rounding makes it not quite monotone (ResNet-50 at tiny scale under 384 MiB fits up to 208, not
    209-213, and 214-216 again), every answer is still verified (it fits, one more does not), but a
    search from another start can stop at another such boundary. ``progress`` shows a bar of trials.

    ``max_batch``: the search's limit. By default an estimate (cheap: fake tensors, whatever the
    batch) searches up to :data:`nogradlab.workloads.MAX_BATCH` and a real search up to
    :data:`REAL_MAX_BATCH`. A search that reaches its limit says so (``at_limit``; ``str()`` and
    ``answer`` read ">= N (search limit)"): N is then a lower bound, not the answer.
    """
    wl, dev, virtual, method = _validate(workload, mode, budget_bytes, device, scale, method,
                                         max_batch, start, allocator, held_bytes, inputs)
    if max_batch is None:
        max_batch = _workloads.MAX_BATCH if method == "estimate" else REAL_MAX_BATCH
    own = isinstance(wl, _ownmodel.Model)
    key = wl if own else wl.name  # the estimate caches key on the model object itself
    scale = "" if own else scale
    cuda = dev.startswith("cuda")
    if cuda:
        allocator = allocator or ("native" if method == "estimate" else _process_allocator())
    else:
        allocator = None
    if hint is not None:
        _check_positive_int(hint, "hint")
    held_bytes, budget_bytes = int(held_bytes), int(budget_bytes)
    t0 = time.perf_counter()
    trials, notes = [], []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc=f"{wl.name} {mode}", unit="trial")

    def record(b, ok, n):
        trials.append((int(b), bool(ok), None if n is None else int(n)))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(batch=b, fits=ok)

    result = BatchResult(workload=wl.name, mode=mode, budget_bytes=budget_bytes, batch=0,
                         trials=trials, method=method, device=dev, scale=scale, notes=notes,
                         allocator=allocator)
    try:
        with frozen_gc():
            if method == "estimate":
                result.batch = _search_estimate(key, scale, mode, dev, virtual, allocator, held_bytes,
                                                budget_bytes, max_batch, start, hint, record, notes, trials)
            else:
                result.batch = _search_real(wl, mode, torch.device(dev), budget_bytes, max_batch,
                                            start, record, result, hint)
    finally:
        if bar is not None:
            bar.close()
        if own:  # the caches would keep your model (and its weights) alive
            _forget_estimates()
    if result.batch == max_batch:
        notes.append(f"{_AT_LIMIT}{max_batch} fitted; the limit may be larger")
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


def _search_estimate(key, scale, mode, dev, virtual, allocator, held_bytes, budget_bytes, max_batch, start,
                     hint, record, notes, trials) -> int:
    """The estimate's search (``largest_batch``'s ``method="estimate"``): replays of the step's allocation
    program on a (virtual) CUDA device, else a fitted line or the bracket (:func:`_affine_find`), off CUDA
    the secant search on estimated totals. Appends the notes that say how; returns the batch."""
    cuda = dev.startswith("cuda")
    if virtual:
        notes.append(f"no GPU here: estimated on a virtual {dev} device")
    if cuda:
        notes.append(f"decided as the real cap decides: the step's allocations replayed "
                     f"through the caching allocator's model ({allocator}) under a cap "
                     f"of {_memory.format_bytes(budget_bytes)} reserved")
    fast = _fastpath_enabled()  # part of every cache key: a trace with the fast path differs

    def estimated(b):
        if cuda:
            ok, n, allocated, est_notes = _modelled_fit(key, scale, mode, b, dev, allocator,
                                                        held_bytes, budget_bytes, fast)
        else:
            n, est_notes = _estimated_bytes(key, scale, mode, b, dev, fast)
            ok, allocated = n <= budget_bytes, None
        notes.extend(x for x in est_notes if x not in notes and not x.startswith("reserved bytes"))
        return (ok, n, allocated) if cuda else (ok, n)

    if not (cuda and start == "auto"):
        return _find(_recorded(estimated, record), budget_bytes, max_batch, start, hint)
    prog = _program(key, scale, mode, dev, fast)
    if isinstance(prog, Program):
        notes.extend(x for x in prog.notes if x not in notes and not x.startswith("reserved bytes"))

        def replayed_or_traced(b):
            out = _replayed(prog, allocator, held_bytes, budget_bytes, b)
            return estimated(b) if out is None else out

        found = _find(_recorded(replayed_or_traced, record), budget_bytes, max_batch, "auto", hint)
        small = sum(1 for t in trials if not prog.serves(t[0]))
        notes.append(f"{SEARCH_NOTE}: by {len(trials) - small} replays of {prog.describe()}"
                     + (f", and {small} trial{'s' if small > 1 else ''} traced below it" if small else ""))
        return found
    from nogradlab.estimate import allocator as _alloc

    def events_of(b):
        return _trace(key, scale, mode, b, dev, allocator, held_bytes, fast)[0]

    def replay(events):
        capped = _alloc.simulate(events, allocator, budget_bytes, keep_segments=False)
        free = _alloc.simulate(events, allocator, None, keep_segments=False)
        return not capped.oom, free.reserved_peak_bytes, free.allocated_peak_bytes

    traced = _traced_batches(key, scale, mode, dev, allocator, held_bytes, fast)
    found, how = _affine_find(_recorded(estimated, record), events_of, replay, budget_bytes, max_batch, hint,
                              traced=traced)
    if how:
        notes.append(how + f"; no allocation program serves every batch: {prog}")
    return found


def _search_real(wl, mode, dev, budget, max_batch, start, record, result, hint=None) -> int:
    """Real runs under a cap. The model is built first and one warm-up step runs at batch 1
    (without the cap, not a trial): library workspaces made once per thread (cuBLAS, also in the
    backward thread) are then in place, so ``allocated_before/after``, read around the search with
    the model alive, differ only if the search itself left something behind."""
    run = reset = model = None
    try:
        run, reset, model = _real_runner(wl, mode, dev)
        _oom_guarded(run, reset)(1)
        _device.synchronize(dev)
        result.allocated_before = torch.cuda.memory_allocated(dev)
        result.notes.append(f"{_memory.format_bytes(result.allocated_before)} allocated before the "
                            "search (the model's weights and anything else this process holds) "
                            "counted against the cap")
        found = search_on_cuda(run, budget, dev, max_batch=max_batch, start=start, reset=reset,
                               on_trial=record, hint=hint)
        _device.synchronize(dev)
        result.allocated_after = torch.cuda.memory_allocated(dev)
        if result.allocated_after != result.allocated_before:
            result.notes.append(f"allocated bytes changed during the search: "
                                f"{result.allocated_before} before, {result.allocated_after} after")
        return found
    finally:
        del run, reset, model
        gc.collect()
        torch.cuda.empty_cache()


def largest_batches(workload: str, budget_bytes: int, device="cpu", *, modes=MODES, **kwargs) -> dict:
    """``{mode: BatchResult}`` for several modes under the same budget (all validated first)."""
    modes = list(modes)
    for m in modes:
        if m not in _SETTINGS:
            raise ValueError(f"unknown mode {m!r}; allowed: {', '.join(MODES)}")
    for m in modes:
        _validate(workload, m, budget_bytes, device, kwargs.get("scale", "full"),
                  kwargs.get("method", "auto"), kwargs.get("max_batch", 65536),
                  kwargs.get("start", "auto"), kwargs.get("allocator"), kwargs.get("held_bytes", 0),
                  kwargs.get("inputs"))
    return {m: largest_batch(workload, m, budget_bytes, device, **kwargs) for m in modes}
