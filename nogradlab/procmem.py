"""Peak resident memory of the processes a block of code starts (a Jupyter kernel and what it starts).

Used by the notebook tests (the memory guard) and by ``benchmarks/session.py`` (the learner's-session
budgets): both read each process's own high-water mark (``VmHWM`` in ``/proc``), so a short peak
between two polls is not missed.

    from nogradlab.procmem import PeakRSS
    with PeakRSS(kernels_only=True) as rss:
        papermill.execute_notebook(...)
    rss.peak   # bytes, summed over the kernel and its children
"""
from __future__ import annotations

import threading

__all__ = ["PeakRSS", "import_floor", "FLOOR_IMPORTS"]

#: what every notebook's first cells import: a kernel running only this peaks at the "import floor"
FLOOR_IMPORTS = ("import torch, torchvision, pandas, matplotlib.pyplot\n"
                 "import nogradlab, nogradlab.claims, nogradlab.widgets")


def import_floor(kernel_name: str = "python3") -> int:
    """Peak RSS (bytes) of a Jupyter kernel that only runs :data:`FLOOR_IMPORTS`: the floor under every
    notebook's figure, set by the PyTorch build (the CUDA wheels map their CUDA libraries at import:
    torch 2.14.1+cu130 holds about 0.73 GB after ``import torch`` alone, the CPU wheel torch 2.13.0+cpu
    0.22 GB, both measured on a 2-core AMD EPYC)."""
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
    the peak; the polled RSS where /proc is missing), summed over the processes."""

    def __init__(self, interval: float = 0.05, kernels_only: bool = False):
        import psutil

        self.kernels_only = kernels_only  # only Jupyter kernels and what they start

        self._me = psutil.Process()
        self._psutil = psutil
        self.interval = interval
        self.peaks: dict = {}  # pid -> highest resident bytes seen
        self._before = {p.pid for p in self._me.children(recursive=True)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    @property
    def peak(self) -> int:
        return sum(self.peaks.values())

    def _high_water(self, proc) -> int:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return proc.memory_info().rss

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
            for p in kids:
                if p.pid in self._before:
                    continue
                try:
                    if p.pid not in self.peaks and self._is_fork_of_parent(p):
                        continue
                    self.peaks[p.pid] = max(self.peaks.get(p.pid, 0), self._high_water(p))
                except self._psutil.Error:
                    pass
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False
