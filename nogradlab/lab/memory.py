"""The notebooks' ``memory``: what a lesson calls to see a step's memory, under one name.

* measured on the real device: :func:`measure`, :func:`measure_modes`, :class:`MemoryReport`
  (:mod:`nogradlab.core.memory`, storage-level tracking on the CPU, allocator statistics on CUDA);
* estimated on fake tensors, no GPU needed: :func:`estimate` (:mod:`nogradlab.estimate.fake`) and
  :func:`estimate_sweep` (:mod:`nogradlab.estimate.sweep`).

``from nogradlab import memory`` gives this module. It defines nothing: every name is the wing's own
object, so ``memory.estimate is nogradlab.estimate.fake.estimate``.
"""
from __future__ import annotations

from nogradlab.core import memory as _core
from nogradlab.core.memory import *  # noqa: F403
from nogradlab.core.memory import __all__ as _core_all
from nogradlab.estimate import fake as _fake
from nogradlab.estimate.fake import ALLOCATORS, InputMismatch, NotEstimable, estimate
from nogradlab.estimate.sweep import estimate_sweep

__all__ = list(_core_all) + ["estimate", "estimate_sweep", "ALLOCATORS", "NotEstimable", "InputMismatch"]


def __getattr__(name):  # a name the wings keep to themselves (``memory._Templates``...): theirs, unchanged
    for mod in (_core, _fake):
        if hasattr(mod, name):
            return getattr(mod, name)
    raise AttributeError(f"module 'nogradlab.memory' has no attribute {name!r}")
