"""The claims run's cache: what several checks of one run measure once (:data:`RUN`, :func:`shared`),
kept beside the run's ledger so that a notebook reads what an earlier notebook of the same run measured
(:func:`attach_run_cache`).
"""
from __future__ import annotations





from typing import Callable

__all__ = ["RunCache", "RUN", "shared", "clear_cache", "attach_run_cache"]


class RunCache:
    """Measurements made once per run and shared by every check that asks for the same condition.

    A key names the condition completely (for a forward timing: workload, scale, batch, device,
    seed and the timing knobs); :meth:`get` returns the stored value or makes it with ``make()``
    and stores it. ``claims.check_all`` (and ``python -m nogradlab claims``) start with an empty
    cache; within a notebook's kernel the cache lives as long as the process, so two checks of one
    run read the same numbers. :meth:`clear` empties it (``claims.new_run()`` calls it).

    ``disk_dir``, when set, also keeps every value in that folder (one pickle per key): the run
    pipeline sets it (:func:`nogradlab.claims.runcache.attach_run_cache`) so that each notebook kernel of
    ``python -m nogradlab run`` reads what an earlier notebook of the same run measured."""

    def __init__(self, disk_dir: "str | None" = None):
        self._store: dict = {}
        self.hits = 0
        self.misses = 0
        self.disk_dir = disk_dir

    def _disk_path(self, key) -> "str | None":
        import hashlib
        import os

        if not self.disk_dir:
            return None
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:32] + ".pkl"
        return os.path.join(self.disk_dir, name)

    def get(self, key, make: Callable[[], object]):
        import os
        import pickle

        if key in self._store:
            self.hits += 1
            return self._store[key]
        path = self._disk_path(key)
        if path is not None and os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    stored_key, value = pickle.load(f)
                if stored_key == key:
                    self.hits += 1
                    self._store[key] = value
                    return value
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
                pass  # unreadable: measure again
        self.misses += 1
        value = make()
        self._store[key] = value
        if path is not None:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path + ".tmp", "wb") as f:
                    pickle.dump((key, value), f)
                os.replace(path + ".tmp", path)
            except (OSError, pickle.PicklingError, TypeError, AttributeError):
                pass  # not picklable or not writable: shared within this process only
        return value

    def __contains__(self, key) -> bool:
        return key in self._store

    def __len__(self) -> int:
        return len(self._store)

    def keys(self) -> list:
        return list(self._store)

    def clear(self) -> None:
        self._store.clear()
        self.hits = self.misses = 0


#: the process's run cache (see :class:`RunCache`)
RUN = RunCache()


def shared(key, make: Callable[[], object]):
    """``RUN.get(key, make)``: a measurement made once per run, shared by every check asking for it."""
    return RUN.get(key, make)


def clear_cache() -> None:
    """Forget every shared measurement (a new run)."""
    RUN.clear()


def attach_run_cache() -> None:
    """Keep the run's shared measurements beside the ledger (``<ledger>.timings/``), or in this
    process only outside a run."""
    from nogradlab.core.pipeline import ledger_path

    path = ledger_path()
    RUN.disk_dir = (path + ".timings") if path else None
