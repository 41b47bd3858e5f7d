"""Peak resident memory of the processes a block of code starts (a Jupyter kernel and what it starts).

Used by the notebook tests (the memory guard) and by ``benchmarks/session.py`` (the learner's-session
budgets): both read each process's own high-water mark (``VmHWM`` in ``/proc``), so a short peak
between two polls is not missed.

    from tools.procmem import PeakRSS
    with PeakRSS(kernels_only=True) as rss:
        papermill.execute_notebook(...)
    rss.peak   # bytes, summed over the kernel and its children

:class:`MemoryLimit` answers the other question, whether a notebook *fits* a container's memory cap
(a memory cgroup: what mybinder.org enforces), for ``benchmarks/session.py --memory-limit``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import warnings

__all__ = ["PeakRSS", "import_floor", "FLOOR_IMPORTS", "MemoryLimit", "MemoryLimitUnavailable", "drop_page_cache"]

#: what every notebook's first cells import: a kernel running only this peaks at the "import floor"
FLOOR_IMPORTS = ("import torch, torchvision, pandas, matplotlib.pyplot\n"
                 "import nogradlab, nogradlab.claims, nogradlab.widgets")


def import_floor(kernel_name: str = "python3") -> int:
    """Peak RSS (bytes) of a Jupyter kernel that only runs :data:`FLOOR_IMPORTS`: the floor under every
    notebook's figure, set by the PyTorch build (the CUDA wheels map their CUDA libraries at import:
    torch 2.14.1+cu130 peaks at 0.53 GB for ``import torch`` alone, the CPU wheel torch 2.13.0+cpu at
    0.24 GB, both measured on a 2-core AMD EPYC; torchvision then imports torch._dynamo, sympy and,
    with the CUDA wheel, triton: 0.70 GB, and a kernel with the rest 0.81-0.85 GB)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(FLOOR_IMPORTS)])
    with PeakRSS(kernels_only=True) as rss:
        NotebookClient(nb, kernel_name=kernel_name, timeout=600).execute()
    return rss.peak


class PeakRSS:
    """Peak resident memory of the processes this process starts while it watches (the kernel and
    whatever the kernel starts; children that already existed, e.g. a kernel still exiting, are
    left out): per process the kernel's own high-water mark (VmHWM in /proc, exact however short
    the peak; the polled RSS where /proc is missing), summed over the processes. ``anon_peak`` is
    the highest polled sum of their anonymous memory (RssAnon; a peak shorter than ``interval`` can
    be missed): RSS less the file-backed pages, which depend on the PyTorch build and the page cache."""

    def __init__(self, interval: float = 0.05, kernels_only: bool = False):
        import psutil

        self.kernels_only = kernels_only  # only Jupyter kernels and what they start

        self._me = psutil.Process()
        self._psutil = psutil
        self.interval = interval
        self.peaks: dict = {}  # pid -> highest resident bytes seen
        self.anon_peak = 0  # the highest sum of the processes' anonymous resident bytes (RssAnon), polled
        self._before = {p.pid for p in self._me.children(recursive=True)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    @property
    def peak(self) -> int:
        return sum(self.peaks.values())

    @staticmethod
    def _status_bytes(proc, field: str):
        """A ``kB`` field of ``/proc/<pid>/status`` in bytes; None where /proc has no such figure."""
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def _anon(self, proc) -> int:
        """Anonymous resident bytes (``RssAnon``): the part a container cannot drop under its cap, unlike
        the file-backed pages (the libraries' code) that RSS counts too. 0 where /proc has no figure."""
        return self._status_bytes(proc, "RssAnon") or 0

    def _high_water(self, proc) -> int:
        hwm = self._status_bytes(proc, "VmHWM")
        return hwm if hwm is not None else proc.memory_info().rss

    def _kernel_trees(self, kids) -> list:
        """The Jupyter kernels among ``kids`` and their descendants (not, say, a server another
        test left behind that starts a process meanwhile)."""
        out = []
        for p in kids:
            try:
                if any("ipykernel" in part for part in p.cmdline()):
                    out += [p, *p.children(recursive=True)]
            except self._psutil.Error:
                pass
        return out

    @staticmethod
    def _is_fork_of_parent(proc) -> bool:
        """A child caught between fork (or vfork, as subprocess uses) and exec: it still runs its
        parent's program with the parent's memory (vfork: the very same pages; /proc shows the
        parent's high-water mark under the child's pid). Counting it would count the kernel twice
        (seen once in CI: 2.15 GB for a 1.1 GB kernel), so it is skipped until it has exec'd."""
        parent = proc.parent()
        return parent is not None and proc.cmdline() == parent.cmdline()

    def _poll(self):
        while not self._stop.is_set():
            try:
                kids = self._me.children(recursive=True)
                if self.kernels_only:
                    kids = self._kernel_trees(kids)
            except self._psutil.Error:
                kids = []
            anon = 0
            for p in kids:
                if p.pid in self._before:
                    continue
                try:
                    if p.pid not in self.peaks and self._is_fork_of_parent(p):
                        continue
                    self.peaks[p.pid] = max(self.peaks.get(p.pid, 0), self._high_water(p))
                    anon += self._anon(p)
                except self._psutil.Error:
                    pass
            self.anon_peak = max(self.anon_peak, anon)
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False


class MemoryLimitUnavailable(RuntimeError):
    """This machine gives no writable memory cgroup (not Linux, not root, or no memory controller)."""


class MemoryLimit:
    """Run commands in a memory cgroup of their own, capped at ``limit_bytes``, the way a container
    platform caps a session (mybinder.org: 1 GB guaranteed, the Jupyter server in the same allowance).

    Where :class:`PeakRSS` says how much a kernel *touched*, this says whether it *fits*: under the cap
    the kernel drops clean file-backed pages (the libraries' code, most of what the CUDA wheels map at
    import) and reads them again when needed; anonymous memory it cannot drop, so a kernel that needs
    more than the cap is killed (``oom_kills``) or slows down reading pages back (``refault_bytes``).

        with MemoryLimit(1_000_000_000) as box:
            box.run([sys.executable, "-m", "papermill", "in.ipynb", "out.ipynb"], timeout=300)
        box.stats()   # {'peak_bytes': ..., 'oom_kills': 0, 'refault_bytes': ...}

    Linux only, as root, with cgroup v1's ``memory`` controller or cgroup v2 with ``memory`` enabled
    for the children of this process's cgroup; anything else raises :class:`MemoryLimitUnavailable`
    before any work starts. Swap is capped too (the cap is then real). Only the group this object
    made is removed on exit, after whatever still runs in it has been killed. The page cache is
    machine-wide: pages another process already cached are charged to that process's cgroup, not to
    this one, so a fair figure starts from a cold cache (:func:`drop_page_cache`).
    """

    V1_ROOT = "/sys/fs/cgroup/memory"
    V2_ROOT = "/sys/fs/cgroup"

    def __init__(self, limit_bytes, parent: str | None = None):
        import math

        if (isinstance(limit_bytes, bool) or not isinstance(limit_bytes, (int, float))
                or not math.isfinite(limit_bytes) or not limit_bytes >= 2**20):
            raise ValueError(f"limit_bytes must be a number of bytes >= 1 MiB (e.g. 1e9), got {limit_bytes!r}")
        self.limit = int(limit_bytes)
        self.version, self.parent = self._find(parent)
        self.path = None
        self.anon_peak = 0  # bytes: the highest anonymous charge seen by the poller (every 50 ms)
        self._stop = None

    # -- where ------------------------------------------------------------------------------
    @classmethod
    def _own_path(cls, version: int) -> str:
        """This process's cgroup, relative to the hierarchy's root (``/proc/self/cgroup``)."""
        try:
            lines = open("/proc/self/cgroup").read().splitlines()
        except OSError:
            return "/"
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if (version == 1 and "memory" in controllers.split(",")) or (version == 2 and controllers == ""):
                return path
        return "/"

    @classmethod
    def _find(cls, parent):
        def writable(d):
            return os.path.isdir(d) and os.access(d, os.W_OK)

        if parent is not None:  # given: v1 when it has v1's files, else v2
            if not writable(parent):
                raise MemoryLimitUnavailable(f"{parent}: not a writable cgroup directory")
            return (1 if os.path.exists(os.path.join(parent, "memory.limit_in_bytes")) else 2), parent
        if not sys.platform.startswith("linux"):
            raise MemoryLimitUnavailable(f"memory cgroups are Linux's; this is {sys.platform}")
        v1 = os.path.join(cls.V1_ROOT, cls._own_path(1).lstrip("/"))
        if os.path.exists(os.path.join(v1, "memory.limit_in_bytes")):
            if writable(v1):
                return 1, v1
            raise MemoryLimitUnavailable(f"{v1}: the memory cgroup is not writable (run as root)")
        v2 = os.path.join(cls.V2_ROOT, cls._own_path(2).lstrip("/"))
        try:
            enabled = open(os.path.join(v2, "cgroup.subtree_control")).read().split()
        except OSError:
            enabled = []
        if "memory" in enabled and writable(v2):
            return 2, v2
        raise MemoryLimitUnavailable(
            "no writable memory cgroup: needs cgroup v1's memory controller at /sys/fs/cgroup/memory, or "
            f"cgroup v2 with 'memory' in {os.path.join(v2, 'cgroup.subtree_control')}, and root")

    # -- life ---------------------------------------------------------------------------------
    def _write(self, name: str, value) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def _read(self, name: str) -> str:
        if self.path is None:
            return ""
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return ""

    def __enter__(self):
        name = f"nogradlab-{os.getpid()}-{id(self):x}"
        self.path = os.path.join(self.parent, name)
        os.mkdir(self.path)
        try:
            if self.version == 1:
                self._write("memory.limit_in_bytes", self.limit)
                if os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes")):
                    self._write("memory.memsw.limit_in_bytes", self.limit)  # no swapping round the cap
            else:
                self._write("memory.max", self.limit)
                if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                    self._write("memory.swap.max", 0)
        except BaseException:
            self._remove()
            raise
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._poller.join()
        self._remove()
        return False

    def _stat(self) -> dict:
        """The group's ``memory.stat`` as numbers."""
        out = {}
        for line in self._read("memory.stat").splitlines():
            k, _, v = line.partition(" ")
            if v.strip().isdigit():
                out[k] = int(v)
        return out

    def _anon(self, stat: dict | None = None) -> int:
        """Anonymous memory charged to the group now (what it cannot drop under the cap)."""
        stat = self._stat() if stat is None else stat
        keys = ("total_rss", "total_shmem") if self.version == 1 else ("anon", "shmem")
        return sum(stat.get(k, 0) for k in keys)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.anon_peak = max(self.anon_peak, self._anon())
            self._stop.wait(0.05)

    def pids(self) -> list:
        return [int(p) for p in self._read("cgroup.procs").split()]

    def _kill_all(self) -> list:
        """SIGKILL every live process in the group (the ones :meth:`run` put there and what they
        started); the pids it signalled."""
        left = [pid for pid in self.pids() if os.path.exists(f"/proc/{pid}")]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return left

    def _remove(self) -> None:
        """Kill what still runs in the group, wait for it to empty (10 s at most), then remove the
        group's directory, nothing else."""
        if self.path is None:
            return
        deadline = time.monotonic() + 10
        while self._kill_all() and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            self._rmdir(self.path)
        except OSError as e:
            warnings.warn(f"could not remove the memory cgroup {self.path}: {e}", RuntimeWarning, stacklevel=3)
        self.path = None

    @staticmethod
    def _rmdir(path: str) -> None:
        os.rmdir(path)  # a cgroup goes with rmdir, its files and all

    def run(self, cmd, timeout: float | None = None, **kwargs):
        """``subprocess.run(cmd, ...)`` with the child (and all it starts) inside the group from its
        first instruction. On ``timeout`` the whole group is killed and ``TimeoutExpired`` raised."""
        if self.path is None:
            raise RuntimeError("MemoryLimit.run outside its `with` block")
        procs = os.path.join(self.path, "cgroup.procs")
        # a shell joins the group, then becomes the command (exec): no preexec_fn, which is unsafe
        # in a process with threads (PeakRSS polls in one)
        wrapped = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *[str(c) for c in cmd]]
        try:
            return subprocess.run(wrapped, timeout=timeout, **kwargs)
        except subprocess.TimeoutExpired:
            self._kill_all()
            raise

    def stats(self) -> dict:
        """What the group measured so far (call it inside the ``with`` block): its peak charge (bytes:
        anonymous memory and page cache together; under a cap the page cache fills it to the cap), the
        peak of its anonymous memory alone (polled every 50 ms, so a shorter peak can be missed), how
        many of its processes the kernel killed for memory, and how many bytes of dropped file pages it
        had to read back (the cost of fitting under the cap)."""
        stat = self._stat()
        peak_file, events_file = (("memory.max_usage_in_bytes", "memory.oom_control") if self.version == 1
                                  else ("memory.peak", "memory.events"))
        peak = self._read(peak_file).strip()
        events = dict(line.split()[:2] for line in self._read(events_file).splitlines() if " " in line)
        refaults = stat.get("workingset_refault_file", stat.get("workingset_refault", 0))
        self.anon_peak = max(self.anon_peak, self._anon(stat))
        return {"limit_bytes": self.limit, "peak_bytes": int(peak) if peak.isdigit() else None,
                "anon_peak_bytes": self.anon_peak, "oom_kills": int(events.get("oom_kill", 0)),
                "refault_bytes": refaults * os.sysconf("SC_PAGE_SIZE"),
                "major_faults": stat.get("pgmajfault", 0), "cgroup_version": self.version}


def drop_page_cache() -> None:
    """Write dirty pages out, then drop the machine's clean page cache (``/proc/sys/vm/drop_caches``,
    root only): afterwards every library a process maps is read, and charged, anew. Nothing is lost;
    every process reads from disk again once. Raises :class:`MemoryLimitUnavailable` where it can't."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
    except OSError as e:
        raise MemoryLimitUnavailable(f"cannot drop the page cache ({e}); run as root") from e
