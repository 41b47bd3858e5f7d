"""oneDNN's LSTM workspace on fake tensors: ``aten.mkldnn_rnn_layer`` (an ``nn.LSTM`` layer and direction on the
CPU, under grad) returns a workspace that the backward reads, 1 MiB and more a layer, which its fake kernel
returns empty (0 bytes): an estimate missed it (issue 41: a grad forward read 26-92 % low, a training step
81 %). :class:`RnnWorkspace` gives the fake call a workspace of the real kernel's size.

The size is oneDNN's own layout (``rnn_utils::set_conf`` and ``set_offsets`` of its CPU RNN), each part
rounded up to a 4 KiB page: the gates (``T*N*ld(4H)``), the hidden states (``T*N*ld(H)``), ``k`` copies of the
layer/iteration states and their gradients (``2*(T+1)*N*ld(max(I, H))`` each) and two of the cell states
(``2*(T+1)*N*H``), float32, where ``ld`` rounds up to 16 floats and skips multiples of 256. ``k`` is 3 in
torch 2.14.1's oneDNN and 5 in torch 2.9.1's (the layer and iteration states stopped being stored twice):
it is read off the real kernel, run once per process on two small shapes outside every mode, and the
formula is used only where it gives both sizes exactly. Checked against the real kernel on 40 random shapes
(I, H up to 600, T and N up to 50) in both releases: equal to the byte. Where it does not hold (another
oneDNN, a dtype other than float32, packed sequences), the call is left as the fake kernel returns it and
a note names the operator and the size of the miss.
"""
from __future__ import annotations

import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["RnnWorkspace", "workspace_bytes", "state_copies", "NOTE_PREFIX"]

#: how this module's notes begin
NOTE_PREFIX = "aten.mkldnn_rnn_layer ("

_PAGE = 4096
_LOCK = threading.Lock()
_COPIES: "list" = []  # [k] once calibrated; [None] where no k reproduces the real kernel


def _rnd(n: int, a: int) -> int:
    return -(-n // a) * a


def _ld(d: int) -> int:
    """oneDNN's ``get_good_ld`` for float32: a 64-byte multiple, not a multiple of 256 elements."""
    ld = _rnd(d, 16)
    return ld + 16 if ld % 256 == 0 else ld


def workspace_bytes(i: int, h: int, t: int, n: int, copies: int) -> int:
    """Bytes of the workspace of one float32 LSTM layer and direction: input size ``i``, hidden size ``h``,
    ``t`` steps, batch ``n``; ``copies``: how many state-sized parts this oneDNN keeps (:func:`state_copies`)."""
    states = _rnd(2 * (t + 1) * n * _ld(max(i, h)) * 4, _PAGE)
    cells = _rnd(2 * (t + 1) * n * h * 4, _PAGE)
    return (_rnd(t * n * _ld(4 * h) * 4, _PAGE) + _rnd(t * n * _ld(h) * 4, _PAGE)
            + copies * states + 2 * cells)


def _real_workspace(i: int, h: int, t: int, n: int) -> "int | None":
    """The real kernel's workspace bytes at this shape (zeros; outside every tensor mode; grad on)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import _disable_current_modes

    with unset_fake_temporarily(), _disable_current_modes(), torch.enable_grad():
        z = torch.zeros
        out = torch.ops.aten.mkldnn_rnn_layer(
            z(t, n, i), z(4 * h, i), z(4 * h, h), z(4 * h), z(4 * h), z(n, h), z(n, h),
            False, [], 2, h, 1, True, False, False, True)
    ws = out[3]
    return None if ws is None else ws.untyped_storage().nbytes()


def state_copies() -> "int | None":
    """How many state-sized parts this torch's oneDNN keeps in an LSTM workspace (read off the real kernel
    once per process), or None where the formula reproduces no real size (or the kernel cannot run)."""
    with _LOCK:
        if _COPIES:
            return _COPIES[0]
        found = None
        try:
            shapes = [(5, 24, 3, 2), (40, 8, 2, 7)]
            real = [_real_workspace(*s) for s in shapes]
            for k in range(1, 9):
                if all(r == workspace_bytes(*s, k) for s, r in zip(shapes, real)):
                    found = k
                    break
        except (RuntimeError, NotImplementedError, TypeError):  # no oneDNN RNN in this build
            found = None
        _COPIES.append(found)
        return found


class RnnWorkspace(TorchDispatchMode):
    """Entered above the storage trackers of a fake CPU trace: each ``aten.mkldnn_rnn_layer`` call's empty
    workspace is replaced by one of the real kernel's size (a new allocation the trackers count and autograd
    saves, as the real one); ``aten.mkldnn_rnn_layer_backward``'s two bias gradients get a storage each.
    ``notes()`` says what was modelled or missed."""

    def __init__(self, for_cuda: bool = False):
        super().__init__()
        # a CUDA estimate traced on the fake CPU device (no GPU): a GPU runs cuDNN's RNN, whose reserve space
        # is not known here; the oneDNN workspace is not given (it is the CPU's), the miss is noted instead
        self.for_cuda = for_cuda
        self.modelled = 0  # calls given a workspace
        self.modelled_bytes = 0
        self.missed_by: dict = {}  # why -> (calls, likely bytes missed)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.mkldnn_rnn_layer_backward.default:
            return self._backward(out)
        if func is not torch.ops.aten.mkldnn_rnn_layer.default or kwargs:
            return out
        ws = out[3]
        if not isinstance(ws, torch.Tensor) or ws.numel() or not torch.is_grad_enabled():
            return out  # the real kernel keeps no workspace without grad (it returns none)
        # the input reaches the kernel time-major, (T, N, I), also where its batch_first flag is set
        # (nn.LSTM transposes it first; measured: the real workspace follows T = dim 0)
        x, hidden, batch_sizes = args[0], args[10], args[8]
        t, n = x.shape[0], x.shape[1]
        i, h = x.shape[2], int(hidden)
        likely = workspace_bytes(i, h, t, n, 3)
        why = None
        if self.for_cuda:
            why = ("a CUDA device: the trace ran on the fake CPU device, and a GPU runs cuDNN's RNN there, whose "
                   "reserve space for the backward (of the order of the CPU kernel's workspace) is not modelled")
        elif x.dtype != torch.float32:
            why = f"{str(x.dtype).replace('torch.', '')} inputs (the size is known for float32 only)"
        elif len(batch_sizes):
            why = "packed sequences"
        else:
            k = state_copies()
            if k is None:
                why = f"this torch's oneDNN ({torch.__version__}) lays it out otherwise than the model knows"
        if why is not None:
            calls, b = self.missed_by.get(why, (0, 0))
            self.missed_by[why] = (calls + 1, b + likely)
            return out
        nbytes = workspace_bytes(i, h, t, n, k)
        real = torch.empty(nbytes, dtype=torch.uint8, device=ws.device)
        self.modelled += 1
        self.modelled_bytes += nbytes
        return (out[0], out[1], out[2], real)

    @staticmethod
    def _backward(out):
        """The fake backward returns one tensor as the gradients of both biases; the real kernel returns
        two (measured: 1 KiB low in a 2-layer LSTM's training step). A second one is made."""
        if (isinstance(out, tuple) and len(out) > 4 and isinstance(out[3], torch.Tensor)
                and isinstance(out[4], torch.Tensor) and out[4].numel()
                and out[3].untyped_storage()._cdata == out[4].untyped_storage()._cdata):
            return (*out[:4], torch.empty_like(out[4]), *out[5:])
        return out

    def missed(self) -> list:
        """For the report's ``missed``: the operator, the likely bytes it keeps that the trace lacks, why."""
        return [{"op": "aten.mkldnn_rnn_layer", "bytes": b, "why": f"its workspace is not modelled for {why}"}
                for why, (calls, b) in self.missed_by.items()]

    def notes(self) -> list:
        from nogradlab.core.format import bytes_

        out = []
        if self.modelled:
            out.append(f"aten.mkldnn_rnn_layer (oneDNN's LSTM on the CPU): its workspace, which fake tensors "
                       f"leave empty, modelled at the real kernel's size: {bytes_(self.modelled_bytes)} in "
                       f"{self.modelled} layer call(s)")
        for why, (calls, b) in self.missed_by.items():
            out.append(f"aten.mkldnn_rnn_layer (an LSTM layer): its workspace is not modelled for {why}; this "
                       f"estimate is likely low by about {bytes_(b)} ({calls} layer call(s)), which the real "
                       "kernel keeps for the backward")
        return out
