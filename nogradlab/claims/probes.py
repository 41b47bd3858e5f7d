"""Checks of the semantic claims: what ``torch.no_grad`` does and does not do, asserted on the
running torch and device. Each check returns ``(verdict, summary, evidence)`` computed from what
it observes here; none asserts anything itself (a behaviour that differs on another torch version
shows up as a different verdict, not as an exception).

Every check builds its models on ``ctx.device`` and runs in about a second at ``scale="tiny"``.
"""
from __future__ import annotations



import threading


import torch


from torch.utils._python_dispatch import TorchDispatchMode

from nogradlab.core import workloads




# --------------------------------------------------------------------------------------------
# small helpers


def _tracking(t: torch.Tensor) -> dict:
    """How autograd sees ``t``: requires_grad, grad_fn name, is_leaf."""
    return {"requires_grad": bool(t.requires_grad),
            "grad_fn": type(t.grad_fn).__name__ if t.grad_fn is not None else None,
            "is_leaf": bool(t.is_leaf)}


def _workload(ctx, default: str = "mlp"):
    """(workload, model in eval mode on ctx.device, input batch) for ``ctx.params['workload']``."""
    wl = workloads.get(ctx.params.get("workload", default), ctx.scale)
    model = wl.build(ctx.device).eval()
    x = wl.make_input(ctx.params.get("batch", wl.default_batch), ctx.device)
    return wl, model, x


def _in_new_thread(fn):
    """Run ``fn()`` in a fresh ``threading.Thread``; return its result (re-raise its error)."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the caller
            box["error"] = e

    th = threading.Thread(target=target)
    th.start()
    th.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


class _OpRecorder(TorchDispatchMode):
    """Records the ATen operators that reach the dispatcher's Python key: (name, first arg shape)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        self.ops.append((func.__name__, tuple(first.shape) if first is not None else None))
        return func(*args, **(kwargs or {}))


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float() - b.detach().float()).abs().max().item())


def _error_text(fn) -> "str | None":
    """The message of the exception ``fn()`` raises (``"Type: message"``), or None."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the text is the evidence
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


# --------------------------------------------------------------------------------------------
# section 1


# --------------------------------------------------------------------------------------------
# section 2


# --------------------------------------------------------------------------------------------
# section 3


# --------------------------------------------------------------------------------------------
# section 4


# --------------------------------------------------------------------------------------------
# section 6


# --------------------------------------------------------------------------------------------
# section 7


# --------------------------------------------------------------------------------------------
# FAQ


# --------------------------------------------------------------------------------------------
# what the article leaves out


