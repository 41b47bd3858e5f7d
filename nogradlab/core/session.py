"""The process's garbage collector held still around a measurement: :func:`frozen_gc`.

Every memory probe and estimate makes full collections; with torch imported one costs ~0.1-0.2 s.
Freezing what is alive before the block makes them walk only what the block creates.
"""
from __future__ import annotations

import contextlib
import gc
import threading

__all__ = ["frozen_gc"]


_FROZEN_LOCK = threading.Lock()
_FROZEN_BY_US = 0  # frozen_gc blocks open, in every thread, under the freeze one of them made


@contextlib.contextmanager
def frozen_gc():
    """Move every object alive now into the collector's permanent generation for the block
    (``gc.freeze``), so that the full collections each memory probe makes only walk what the block
    creates: with torch imported, a full collection otherwise costs ~0.1-0.2 s. Unfrozen on exit;
    does nothing when something is frozen already (by an enclosing block, another thread's, or the
    program's own ``gc.freeze()``, which is left as it was). ``gc.get_freeze_count()`` walks the
    permanent generation (tens of ms with torch's objects in it), so a block inside one of ours
    does not ask it: a counter says so."""
    global _FROZEN_BY_US
    with _FROZEN_LOCK:
        if _FROZEN_BY_US:
            _FROZEN_BY_US += 1
            ours = True
        elif gc.get_freeze_count():
            ours = False  # frozen by the program: leave it to the program
        else:
            gc.freeze()
            _FROZEN_BY_US = 1
            ours = True
    try:
        yield
    finally:
        if ours:
            with _FROZEN_LOCK:
                _FROZEN_BY_US -= 1
                if _FROZEN_BY_US == 0:
                    gc.unfreeze()
