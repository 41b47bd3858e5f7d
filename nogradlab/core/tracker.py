"""The dispatch tracker: a ``TorchDispatchMode`` that sees every storage an operator makes, from its
creation until it dies. One concept, two uses: the storage method of :func:`nogradlab.core.memory.measure`
counts the bytes alive (``_LiveTracker``), and the estimator's :class:`nogradlab.estimate.cudamodel.AllocationRecorder`
records the allocations and frees in order, to replay through the CUDA allocator model. Each says what a
new storage counts (:meth:`StorageTracker._new`); the walk over an operator's outputs is this one.
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from nogradlab.core import modes as _modes


def storage(t):
    """The tensor's UntypedStorage, or None for tensors without one (sparse, nested, ...)."""
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def input_storages(args, kwargs) -> set:
    """The storages (``_cdata``) an operator's tensor arguments hold: an output sharing one is an alias of
    an input, not a new allocation."""
    inputs = set()
    for a in tree_flatten((args, kwargs))[0]:
        if isinstance(a, torch.Tensor):
            st = storage(a)
            if st is not None:
                inputs.add(st._cdata)
    return inputs


class StorageTracker(TorchDispatchMode):
    """Sees each storage an operator makes once, while ``active``: a composite seen whole (inference_mode)
    is run operator by operator (:func:`nogradlab.core.modes.run_composite`), an output that is an alias
    of an input or a storage already tracked is not new. A subclass says what it tracks of an output
    (:meth:`_storage_of`), whether a storage is already tracked (:meth:`_known`, and :meth:`_seen_again`
    when it is) and what a new one counts (:meth:`_new`, with :meth:`_watch` for its death)."""

    def __init__(self):
        super().__init__()
        self.active = True
        self._refs: dict = {}  # id(weakref) -> weakref (keeps the death callbacks alive)

    def _watch(self, st, on_death):
        """Call ``on_death()`` when storage ``st`` dies; returns the weak reference."""
        def died(ref):
            self._refs.pop(id(ref), None)
            on_death()

        ref = weakref.ref(st, died)
        self._refs[id(ref)] = ref
        return ref

    # what a subclass says
    def _before(self, func, args):
        """Called before an operator runs (while active); its answer goes to :meth:`_after`."""
        return None

    def _after(self, func, args, out, before) -> None:
        """Called after an operator ran, before its outputs are walked (while active)."""

    def _read(self, inputs: set) -> None:
        """The storages (``_cdata``) the operator read or wrote."""

    def _storage_of(self, t):
        """The storage of output tensor ``t`` to track, or None to skip it."""
        return storage(t)

    def _known(self, st) -> bool:
        raise NotImplementedError

    def _seen_again(self, st) -> None:
        """A tracked storage an operator returned again (resized in place, say)."""

    def _new(self, st, label: str) -> None:
        raise NotImplementedError

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.active:  # a composite seen whole (inference_mode): track what it allocates inside
            out = _modes.run_composite(self, func, args, kwargs)
            if out is not NotImplemented:
                return out
        before = self._before(func, args) if self.active else None
        out = func(*args, **(kwargs or {}))
        if not self.active:
            return out
        self._after(func, args, out, before)
        inputs = input_storages(args, kwargs)
        self._read(inputs)
        label = getattr(func, "__name__", str(func))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = self._storage_of(t)
            if st is None:
                continue
            if self._known(st):
                self._seen_again(st)
            elif st._cdata not in inputs:  # an alias of an input is not a new allocation
                self._new(st, label)
        return out
