"""A model of PyTorch's CUDA caching allocator, to turn an allocation trace into reserved bytes.

    from nogradlab import allocator
    r = allocator.simulate([("alloc", "a", 3_000_000), ("alloc", "b", 600), ("free", "a")],
                           limit_bytes=12 * 2**30)
    r.allocated_peak_bytes, r.reserved_peak_bytes, r.oom, r.segments

A GPU does not run out of memory when the tensors' bytes reach its size: PyTorch asks CUDA for
memory in *segments* and hands out *blocks* carved from them, keeping freed blocks cached for reuse.
``torch.cuda.set_per_process_memory_fraction`` caps the segments (the *reserved* bytes), so what fits
depends on rounding, segment sizes and fragmentation. ``simulate`` replays a trace of allocations and
frees through the rules of ``c10/cuda/CUDACachingAllocator.cpp`` in PyTorch's source (read for this
model; torch 2.11 on an H200 was checked against it, see the end of this docstring):

* every request is rounded up to a multiple of 512 bytes (``kMinBlockSize``; the optional power-of-2
  rounding, ``roundup_power2_divisions``, is off by default and not modelled);
* requests up to 1 MiB (``kSmallSize``) come from the *small pool*, made of 2 MiB segments
  (``kSmallBuffer``); larger ones from the *large pool*: a request under 10 MiB (``kMinLargeAlloc``)
  gets a 20 MiB segment (``kLargeBuffer``), a larger one a segment of its size rounded up to 2 MiB
  (``kRoundLarge``);
* a request first takes the *best fit* among the pool's cached free blocks: the smallest block that
  is large enough, the lowest address among equal sizes;
* a block larger than the request is *split* when the rest is worth keeping: in the small pool when
  at least 512 bytes remain, in the large pool when more than 1 MiB remains (and the request is below
  ``max_split_size``); otherwise the whole block is handed out;
* a freed block merges with free neighbours of its segment and returns to its pool;
* ``max_split_size`` (``PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N``, unlimited by default): cached
  blocks at least that large are not split, serve a smaller request only if that request is also
  oversize and the block is less than 20 MiB larger, and are the first to be released;
* when no cached block fits, a new segment is requested; under a cap (``limit_bytes``) the request
  fails when the reserved bytes plus the new segment exceed it. Before reporting an out-of-memory
  error the allocator releases cached oversize blocks (with ``max_split_size``), then every segment
  that holds no allocated block (what ``torch.cuda.empty_cache()`` does), and retries once;
* ``mode="expandable_segments"`` (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``): one segment
  per pool that grows by mapping pages (2 MiB for the small pool, 20 MiB for the large one) at its end
  or into unmapped gaps; any block may be split (512 bytes or more left); free whole pages are
  unmapped (returned to CUDA) when the cache is released. Best fit counts a free block at the mapped
  end of a segment as large as it could grow. The cap check still uses the request's segment size
  (as the source does), so near the cap a request may fail although fewer pages would do.

Not modelled: several streams (``record_stream``, cross-stream frees), CUDA graphs' private pools,
garbage collection (``garbage_collection_threshold``, off by default), and memory taken outside
the allocator (the CUDA context, NCCL), which a cap set by ``set_per_process_memory_fraction`` does
not count either. Where CUDA places a segment in the address space matters only to break ties
between free blocks of equal size, but such ties can decide a batch: each new segment gets an
address below the older ones, as cudaMalloc gave them on the H200 for the large segments that
matter (it reuses freed ranges too, which the model does not); with the opposite order the U-Net's
largest eval+no_grad batch under 12 GiB would come out 163 instead of the 196 the H200 found. With that, the model reproduced six allocator traces recorded on an
NVIDIA H200 (torch 2.11) event for event: every segment, every refused request, both modes
(``tests/estimate/test_allocator.py``).

``events`` for :func:`simulate`: ``("alloc", key, nbytes)`` and ``("free", key)``; also
``("try_alloc", key, nbytes)``: a request whose failure the caller survives (cuDNN asks for a
convolution's workspace and falls back to another algorithm when it cannot be had: the allocator
has released its cache by then, as before any out-of-memory error); ``nbytes`` may be a tuple of
sizes tried in turn (the plans' workspaces), the first that can be served is kept; ``("empty_cache",)``
(``torch.cuda.empty_cache()``) and ``("reset_peak",)`` (``torch.cuda.reset_peak_memory_stats()``).
Allocations of 0 bytes take no block, as in CUDA.
"""
from __future__ import annotations

import bisect
import math
import numbers
from dataclasses import dataclass, field

__all__ = ["simulate", "Allocator", "SimResult", "Segment", "OutOfMemory", "MODES",
           "round_size", "allocation_size", "K_MIN_BLOCK", "K_SMALL_SIZE", "K_SMALL_BUFFER",
           "K_LARGE_BUFFER", "K_MIN_LARGE_ALLOC", "K_ROUND_LARGE", "H200_BYTES"]

MODES = ("native", "expandable_segments")

K_MIN_BLOCK = 512  # kMinBlockSize: all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1 << 20  # kSmallSize: largest "small" allocation, 1 MiB
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: small allocations are packed in 2 MiB segments
K_LARGE_BUFFER = 20 << 20  # kLargeBuffer: 1-10 MiB allocations share 20 MiB segments
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: below this a large request gets kLargeBuffer
K_ROUND_LARGE = 2 << 20  # kRoundLarge: larger segments are rounded up to 2 MiB
H200_BYTES = 150_109_880_320  # total memory of the reference GPU (NVIDIA H200)


def round_size(nbytes: int) -> int:
    """The block size the allocator hands out for a request of ``nbytes`` (512-byte multiples)."""
    if nbytes < K_MIN_BLOCK:
        return K_MIN_BLOCK
    return K_MIN_BLOCK * ((nbytes + K_MIN_BLOCK - 1) // K_MIN_BLOCK)


def allocation_size(size: int) -> int:
    """The segment requested from CUDA for a (rounded) block of ``size`` bytes that no cached
    block can serve (``get_allocation_size``)."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class OutOfMemory(Exception):
    """A request the model cannot serve under the cap, even after releasing the cache."""

    def __init__(self, nbytes: int, allocated: int, reserved: int, limit: "int | None"):
        self.nbytes, self.allocated, self.reserved, self.limit = nbytes, allocated, reserved, limit
        super().__init__(f"out of memory: tried to allocate {nbytes} bytes with {allocated} allocated, "
                         f"{reserved} reserved, cap {limit}")


@dataclass
class Segment:
    """One segment (a cudaMalloc, or the mapped range of an expandable segment): its address,
    size, pool and blocks ``[(size, allocated), ...]`` in address order."""

    address: int
    size: int
    pool: str  # "small" | "large"
    expandable: bool
    blocks: list

    @property
    def allocated_bytes(self) -> int:
        return sum(s for s, a in self.blocks if a)


@dataclass
class SimResult:
    """What :func:`simulate` found. Byte counts are the allocator's (rounded block sizes)."""

    mode: str
    limit_bytes: "int | None"
    allocated_peak_bytes: int  # torch.cuda.max_memory_allocated
    reserved_peak_bytes: int  # torch.cuda.max_memory_reserved
    oom: bool
    oom_event: "int | None" = None  # index of the event that could not be served
    oom_request_bytes: "int | None" = None
    allocated_bytes: int = 0  # at the end (or at the OOM)
    reserved_bytes: int = 0
    segments: list = field(default_factory=list)  # Segment list at the allocated peak
    num_alloc_retries: int = 0  # requests served only after the cache was released
    num_device_alloc: int = 0  # cudaMalloc calls or page-range mappings
    num_device_free: int = 0
    failed_tries: int = 0  # "try_alloc" requests that could not be served (the caller fell back)
    events: int = 0  # events replayed

    @property
    def fragmentation(self) -> float:
        """Share of the reserved peak not covered by the allocated peak (0 when nothing reserved)."""
        if not self.reserved_peak_bytes:
            return 0.0
        return 1.0 - self.allocated_peak_bytes / self.reserved_peak_bytes


class _Block:
    __slots__ = ("ptr", "size", "allocated", "mapped", "prev", "next", "pool", "seg")

    def __init__(self, ptr, size, pool, seg, mapped=True):
        self.ptr, self.size, self.pool, self.seg, self.mapped = ptr, size, pool, seg, mapped
        self.allocated = False
        self.prev = self.next = None

    def is_split(self):
        return self.prev is not None or self.next is not None


class _Pool:
    """Free mapped blocks ordered by (size, address), unmapped ones by address."""

    def __init__(self, small: bool):
        self.small = small
        self.keys: list = []  # sorted (size, ptr)
        self.by_key: dict = {}
        self.unmapped: list = []  # sorted ptr
        self.unmapped_by_ptr: dict = {}

    def insert(self, b):
        k = (b.size, b.ptr)
        bisect.insort(self.keys, k)
        self.by_key[k] = b

    def erase(self, b):
        k = (b.size, b.ptr)
        i = bisect.bisect_left(self.keys, k)
        assert i < len(self.keys) and self.keys[i] == k, "block not in its pool"
        del self.keys[i]
        del self.by_key[k]

    def insert_unmapped(self, b):
        bisect.insort(self.unmapped, b.ptr)
        self.unmapped_by_ptr[b.ptr] = b

    def erase_unmapped(self, b):
        i = bisect.bisect_left(self.unmapped, b.ptr)
        assert i < len(self.unmapped) and self.unmapped[i] == b.ptr, "block not unmapped"
        del self.unmapped[i]
        del self.unmapped_by_ptr[b.ptr]


class _ExpandableSegment:
    __slots__ = ("ptr", "size", "page", "small")

    def __init__(self, ptr, size, page, small):
        self.ptr, self.size, self.page, self.small = ptr, size, page, small


class Allocator:
    """One device's caching allocator (a single stream): ``malloc(nbytes) -> handle``,
    ``free(handle)``, ``empty_cache()``, ``snapshot()``; statistics as attributes."""

    def __init__(self, mode: str = "native", limit_bytes: "int | None" = None, *,
                 max_split_size: "int | None" = None, device_bytes: int = H200_BYTES):
        if mode not in MODES:
            raise ValueError(f"unknown allocator mode {mode!r}; allowed: {', '.join(MODES)}")
        if limit_bytes is not None and (isinstance(limit_bytes, bool)
                                        or not isinstance(limit_bytes, numbers.Integral) or limit_bytes < 0):
            raise ValueError(f"limit_bytes must be a non-negative integer or None, got {limit_bytes!r}")
        if max_split_size is not None and (isinstance(max_split_size, bool)
                                           or not isinstance(max_split_size, numbers.Integral)
                                           or max_split_size < 1):
            raise ValueError(f"max_split_size must be a positive integer or None, got {max_split_size!r}")
        self.mode = mode
        self.expandable = mode == "expandable_segments"
        self.limit = int(limit_bytes) if limit_bytes is not None else None  # numpy integers work too
        self.max_split = int(max_split_size) if max_split_size is not None else math.inf
        self.device_bytes = int(device_bytes)
        self.small = _Pool(True)
        self.large = _Pool(False)
        self.allocated = self.reserved = 0
        self.allocated_peak = self.reserved_peak = 0
        self.num_alloc_retries = self.num_device_alloc = self.num_device_free = 0
        self._next_addr = 1 << 47  # new segments are placed below the last one (top-down)
        self._active: set = set()  # allocated blocks
        self._expandable: list = []  # live expandable segments
        self.log = None  # a list to receive ("segment_alloc"|"segment_free"|"map"|"unmap", bytes)

    # -- public -------------------------------------------------------------------------------

    def malloc(self, nbytes: int):
        """Serve a request of ``nbytes``; returns a handle for :meth:`free` (``None`` for 0 bytes).
        Raises :class:`OutOfMemory` when the request cannot be served under the cap."""
        if nbytes == 0:
            return None
        size = round_size(nbytes)
        pool = self.small if size <= K_SMALL_SIZE else self.large
        alloc_size = allocation_size(size)
        block = self._get_free_block(pool, size)
        if block is None:
            block = self._alloc_block(pool, size, alloc_size)
            if block is None and self._release_available_cached_blocks(pool, size):
                block = self._alloc_block(pool, size, alloc_size)
            if block is None:
                self.release_cached_blocks()
                self.num_alloc_retries += 1
                block = self._alloc_block(pool, size, alloc_size)
            if block is None:
                raise OutOfMemory(nbytes, self.allocated, self.reserved, self.limit)
        return self._alloc_found_block(block, pool, size)

    def free(self, block) -> None:
        if block is None:
            return
        if not block.allocated:
            raise ValueError("block freed twice")
        block.allocated = False
        self._active.discard(block)
        self.allocated -= block.size
        self._free_block(block)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: release every segment (or page) holding no allocated block."""
        self.release_cached_blocks()

    def reset_peak(self) -> None:
        self.allocated_peak, self.reserved_peak = self.allocated, self.reserved

    def snapshot(self) -> list:
        """The segments now, in address order, as :class:`Segment` objects (for expandable
        segments, one per contiguous mapped range, as ``torch.cuda.memory_snapshot`` reports)."""
        blocks = list(self._active)
        for pool in (self.small, self.large):
            blocks.extend(pool.by_key.values())
        heads = [b for b in blocks if b.mapped and (b.prev is None or not b.prev.mapped)]
        out = []
        for head in sorted(heads, key=lambda b: b.ptr):
            parts, b, total = [], head, 0
            while b is not None and b.mapped:
                parts.append((b.size, b.allocated))
                total += b.size
                b = b.next
            out.append(Segment(address=head.ptr, size=total, pool="small" if head.pool.small else "large",
                               expandable=head.seg is not None, blocks=parts))
        return out

    # -- the allocator's rules ----------------------------------------------------------------

    def _get_free_block(self, pool, size):
        keys = pool.keys
        i = bisect.bisect_left(keys, (size, 0))
        if i == len(keys):
            return None
        block = pool.by_key[keys[i]]
        if block.seg is not None and self.expandable:
            # a free block at the mapped end of an expandable segment counts as large as it can grow
            def exp_size(b):
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)
            j = i + 1
            while block.seg is not None and j < len(keys):
                nxt = pool.by_key[keys[j]]
                if exp_size(nxt) < exp_size(block):
                    block, i = nxt, j
                    j += 1
                else:
                    break
        # oversize blocks (max_split_size) serve only oversize requests, and not far larger ones
        if size < self.max_split and block.size >= self.max_split:
            return None
        if size >= self.max_split and block.size >= size + K_LARGE_BUFFER:
            return None
        pool.erase(block)
        return block

    def _alloc_block(self, pool, size, alloc_size):
        if self.limit is not None and self.reserved + alloc_size > self.limit:
            return None
        if self.expandable:
            return self._try_allocate_expandable_block(pool, size)
        ptr = self._new_address(alloc_size)
        block = _Block(ptr, alloc_size, pool, None)
        if self.log is not None:
            self.log.append(("segment_alloc", alloc_size))
        self._grow_reserved(alloc_size)
        self.num_device_alloc += 1
        return block

    def _new_address(self, nbytes):
        self._next_addr -= -(-nbytes // K_ROUND_LARGE) * K_ROUND_LARGE
        return self._next_addr

    def _grow_reserved(self, n):
        self.reserved += n
        if self.reserved > self.reserved_peak:
            self.reserved_peak = self.reserved

    def _should_split(self, block, size):
        remaining = block.size - size
        if block.pool.small or self.expandable:
            return remaining >= K_MIN_BLOCK
        return size < self.max_split and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, block, pool, size):
        if self._should_split(block, size):
            remaining = block
            block = _Block(remaining.ptr, size, pool, remaining.seg)
            block.prev = remaining.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.ptr += size
            remaining.size -= size
            pool.insert(remaining)
        block.allocated = True
        self._active.add(block)
        self.allocated += block.size
        if self.allocated > self.allocated_peak:
            self.allocated_peak = self.allocated
        return block

    def _free_block(self, block):
        pool = block.pool
        for cand in (block.prev, block.next):
            self._try_merge(block, cand, pool)
        pool.insert(block)

    def _try_merge(self, dst, src, pool):
        if src is None or src.allocated or src.mapped != dst.mapped:
            return 0
        if src.mapped:
            pool.erase(src)
        else:
            pool.erase_unmapped(src)
        if dst.prev is src:  # [src dst]
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def _release_available_cached_blocks(self, pool, size):
        """With max_split_size: release one cached oversize block large enough, or the largest
        ones until enough is released."""
        if self.max_split == math.inf:
            return False
        target = max(size, self.max_split)
        keys = pool.keys
        i = bisect.bisect_left(keys, (target, 0))
        if i == len(keys):
            released = 0
            j = len(keys) - 1
            cands = []
            while released < target and j >= 0 and keys[j][0] >= self.max_split:
                cands.append(pool.by_key[keys[j]])
                released += keys[j][0]
                j -= 1
            if released < target:
                # the source releases them anyway before giving up
                for b in cands:
                    self._release_block(b)
                return False
            for b in cands:
                self._release_block(b)
            return True
        self._release_block(pool.by_key[keys[i]])
        return True

    def _release_block(self, block):
        # only whole segments (never split) are released; blocks of expandable segments are unmapped
        if block.is_split() or block.seg is not None:
            return
        block.pool.erase(block)
        self.reserved -= block.size
        self.num_device_free += 1
        if self.log is not None:
            self.log.append(("segment_free", block.size))

    def release_cached_blocks(self):
        for pool in (self.large, self.small):
            to_unmap = []
            for k in list(pool.keys):
                b = pool.by_key.get(k)
                if b is None:
                    continue
                if b.seg is not None:
                    to_unmap.append(b)
                elif not b.is_split():
                    self._release_block(b)
            for b in to_unmap:
                self._unmap_block(b)
                if not b.mapped and b.prev is None and b.next is None:
                    pool.erase_unmapped(b)
                    self._expandable.remove(b.seg)

    # -- expandable segments ------------------------------------------------------------------

    def _find_expandable_block(self, pool, size):
        for ptr in pool.unmapped:
            c = pool.unmapped_by_ptr[ptr]
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            total, b = 0, c
            while total < size and b is not None and not b.allocated:
                total += b.size
                b = b.next
            if total >= size:
                return c
        page = K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER
        # address space for 1 1/8 of the device's memory, in pages
        space = -(-(self.device_bytes + self.device_bytes // 8) // page) * page
        es = _ExpandableSegment(self._new_address(space), space, page, pool.small)
        self._expandable.append(es)
        c = _Block(es.ptr, space, pool, es, mapped=False)
        pool.insert_unmapped(c)
        return c

    def _map_block(self, to_map, size):
        es = to_map.seg
        begin = (to_map.ptr - es.ptr) // es.page
        end = -(-(to_map.ptr + size - es.ptr) // es.page)
        mapped = (end - begin) * es.page
        assert es.ptr + begin * es.page == to_map.ptr and mapped >= size
        pool = to_map.pool
        pool.erase_unmapped(to_map)
        to_map.mapped = True
        if mapped < to_map.size:
            rest = _Block(to_map.ptr + mapped, to_map.size - mapped, pool, es, mapped=False)
            rest.prev, rest.next = to_map, to_map.next
            if to_map.next is not None:
                to_map.next.prev = rest
            to_map.next = rest
            pool.insert_unmapped(rest)
            to_map.size = mapped
        self._try_merge(to_map, to_map.prev, pool)
        self._try_merge(to_map, to_map.next, pool)
        pool.insert(to_map)
        if self.log is not None:
            self.log.append(("map", mapped))
        self._grow_reserved(mapped)
        self.num_device_alloc += 1
        return True

    def _try_allocate_expandable_block(self, pool, size):
        cand = self._find_expandable_block(pool, size)
        if not cand.mapped:
            self._map_block(cand, min(cand.size, size))
        while cand.size < size:
            nxt = cand.next
            self._map_block(nxt, min(size - cand.size, nxt.size))
            cand = nxt
        pool.erase(cand)
        return cand

    def _unmap_block(self, block):
        es = block.seg
        begin = -(-(block.ptr - es.ptr) // es.page)
        end = (block.ptr + block.size - es.ptr) // es.page
        if begin >= end:
            return
        pool = block.pool
        pool.erase(block)
        uptr, usize = es.ptr + begin * es.page, (end - begin) * es.page
        before = uptr - block.ptr
        if before > 0:
            bf = _Block(block.ptr, before, pool, es)
            bf.prev, bf.next = block.prev, block
            if block.prev is not None:
                block.prev.next = bf
            block.prev = bf
            pool.insert(bf)
        after = block.size - before - usize
        if after > 0:
            af = _Block(uptr + usize, after, pool, es)
            af.prev, af.next = block, block.next
            if block.next is not None:
                block.next.prev = af
            block.next = af
            pool.insert(af)
        block.ptr, block.size, block.mapped = uptr, usize, False
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.insert_unmapped(block)
        self.reserved -= usize
        self.num_device_free += 1
        if self.log is not None:
            self.log.append(("unmap", usize))


def simulate(events, mode: str = "native", limit_bytes: "int | None" = None, *,
             max_split_size: "int | None" = None, device_bytes: int = H200_BYTES,
             keep_segments: bool = True) -> SimResult:
    """Replay ``events`` through the allocator model (see the module docstring) and return a
    :class:`SimResult`: the allocated and reserved peaks, whether (and where) a request failed
    under ``limit_bytes`` (``oom``; the replay stops there, as the real run would raise), and the
    segments at the allocated peak, the moment the most bytes were in use (``keep_segments``).

    ``mode``: ``"native"`` or ``"expandable_segments"``. ``limit_bytes``: the cap on reserved bytes
    (``set_per_process_memory_fraction`` times the device's memory); ``None``: no cap.
    ``max_split_size``: ``PYTORCH_CUDA_ALLOC_CONF``'s ``max_split_size_mb`` in bytes (default: none).
    """
    if mode not in MODES:
        raise ValueError(f"unknown allocator mode {mode!r}; allowed: {', '.join(MODES)}")
    events = events if isinstance(events, list) else list(events)
    alloc, result, peak_at = _replay(events, mode, limit_bytes, max_split_size, device_bytes)
    if keep_segments and peak_at is not None:
        again, _, _ = _replay(events[:peak_at + 1], mode, limit_bytes, max_split_size, device_bytes)
        result.segments = again.snapshot()
    return result


def _replay(events, mode, limit_bytes, max_split_size, device_bytes):
    """(allocator at the end, SimResult without segments, index of the event that set the
    allocated peak)."""
    alloc = Allocator(mode, limit_bytes, max_split_size=max_split_size, device_bytes=device_bytes)
    live: dict = {}
    failed: set = set()
    result = SimResult(mode=mode, limit_bytes=limit_bytes, allocated_peak_bytes=0,
                       reserved_peak_bytes=0, oom=False)
    peak_at, best = None, 0
    n = -1
    for n, ev in enumerate(events):
        kind = ev[0] if isinstance(ev, (tuple, list)) and ev else None
        if kind == "alloc" or kind == "try_alloc":
            _, key, nbytes = ev
            if key in live:
                raise ValueError(f"event {n}: key {key!r} allocated twice without a free")
            sizes = tuple(nbytes) if kind == "try_alloc" and isinstance(nbytes, (tuple, list)) else (nbytes,)
            for b in sizes:
                if isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 0:
                    raise ValueError(f"event {n}: nbytes must be a non-negative integer, got {b!r}")
            sizes = tuple(int(b) for b in sizes)  # numpy integers (np.int64) as Python ints
            served = False
            for b in sizes:
                try:
                    live[key] = alloc.malloc(b)
                    served = True
                    break
                except OutOfMemory:
                    if kind == "try_alloc":
                        result.failed_tries += 1
            if not served:
                if kind == "try_alloc":
                    failed.add(key)  # the caller falls back to a way that needs no memory
                    continue
                result.oom, result.oom_event, result.oom_request_bytes = True, n, (
                    nbytes if isinstance(nbytes, (tuple, list)) else int(nbytes))
                break
            failed.discard(key)
            if alloc.allocated > best:
                best, peak_at = alloc.allocated, n
        elif kind == "free":
            key = ev[1]
            if key in failed:
                failed.discard(key)
                continue
            if key not in live:
                raise ValueError(f"event {n}: free of unknown key {key!r}")
            alloc.free(live.pop(key))
        elif kind == "empty_cache":
            alloc.empty_cache()
        elif kind == "reset_peak":
            alloc.reset_peak()
            best, peak_at = alloc.allocated, n
        else:
            raise ValueError(f"event {n}: unknown event {ev!r}; allowed kinds: alloc, try_alloc, "
                             "free, empty_cache, reset_peak")
    result.events = result.oom_event if result.oom else n + 1
    result.allocated_peak_bytes = alloc.allocated_peak
    result.reserved_peak_bytes = alloc.reserved_peak
    result.allocated_bytes = alloc.allocated
    result.reserved_bytes = alloc.reserved
    result.num_alloc_retries = alloc.num_alloc_retries
    result.num_device_alloc = alloc.num_device_alloc
    result.num_device_free = alloc.num_device_free
    return alloc, result, peak_at
