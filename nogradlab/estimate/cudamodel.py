"""What a CUDA GPU would run and allocate, for estimates on a virtual CUDA device (no GPU needed).

Fake tensors give every operator's output shapes, but a GPU also picks kernels of its own and its
libraries allocate memory of their own. This module models, for ``memory.estimate`` on a CUDA device:

* **fused attention**: ``F.scaled_dot_product_attention`` runs the kernel PyTorch's CUDA dispatcher
  selects (``select_sdp_backend`` in ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``): flash
  attention for fp16/bf16 without a mask, memory-efficient attention otherwise when its alignment
  rules hold, the math path last. Without a GPU, fake CUDA tensors otherwise fall back to the math
  path, which materialises the attention matrix the fused kernels never allocate;
* **the transformer fast path**: in eval mode without grad, ``nn.TransformerEncoderLayer`` calls
  ``torch._transformer_encoder_layer_fwd``, one operator with no fake-tensor kernel. It is replaced by
  the sequence of operators its CUDA kernel runs (``transformer_encoder_layer_forward`` and
  ``native_multi_head_attention_cuda``: packed QKV projection, fused attention on views of it,
  output projection, in-place residual adds, layer norms, ``_addmm_activation`` for the first
  feed-forward layer), so that every tensor it allocates is seen;
* **fused dropout**: training-mode dropout as CUDA's ``native_dropout`` (a one-byte mask); a
  training step without a GPU is traced on the CPU device, whose dropout keeps a float mask;
* **library workspaces**: the cuBLAS workspace each thread's handle gets on its first matrix product
  and keeps (32 MiB on Hopper, sm90; 8 MiB + 128 KiB elsewhere; ``CUBLAS_WORKSPACE_CONFIG``
  honoured), the cuBLASLt workspace (1 MiB; ``CUBLASLT_WORKSPACE_SIZE``; none extra with
  ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=1``), both kept for the life of the process (torch's
  ``CublasHandlePool.cpp``); a training step's backward runs on another thread, with a handle and a
  workspace of its own. And the memory operators allocate for themselves and free again: cuDNN's
  convolution workspaces, reductions' scratch buffers, losses' temporaries, at the sizes the
  reference GPU reported (``data/gpu_workspaces.json``: an NVIDIA H200, torch 2.11, cuDNN 9.19,
  ``cudnn.benchmark`` off, measured with ``benchmarks/gpu_alloc_probe.py`` and built with
  ``benchmarks/build_workspace_table.py``), linear between measured batches. A convolution's
  workspace is asked for with fallbacks: when it cannot be had under a cap, cuDNN tries its next
  plans, which on the H200 needed the input's size (a layout conversion), then nothing. A
  convolution the table does not know gets no workspace, and the notes say so;
* **autocast**: ``torch.autocast("cuda")`` disables itself without a GPU; the virtual device enables
  CUDA autocast's thread state directly, so the casts (and the cached half-precision weights) are
  traced.

Under ``torch.inference_mode`` composite operators (``aten.linear``, ``aten.conv2d``) reach the model
whole; it runs their parts (``nogradlab.modes.run_composite``), so that the ``addmm`` and
``convolution`` inside get their workspaces as under ``no_grad`` (the GPU runs the same kernels).

What is not modelled: other GPUs' libraries (the table is the H200's; on another GPU the sizes
differ), ``cudnn.benchmark`` (which picks plans by timing them), half-precision convolutions'
workspaces (not measured), CUDA graphs, several streams.
"""
from __future__ import annotations

import ast
import bisect
import contextlib
import functools
import json
import os
import re
import threading
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from nogradlab.core import modes as _modes
from nogradlab.core.tracker import StorageTracker, storage as _storage

__all__ = ["Profile", "profile", "kernel_model", "virtual_autocast", "AllocationRecorder",
           "op_signature", "op_workspace", "expand_workspaces", "NotModelled", "REFERENCE"]

MiB = 1 << 20


@dataclass(frozen=True)
class Profile:
    """The GPU an estimate models: its name, compute capability and library workspace sizes."""

    name: str
    capability: tuple
    cublas_workspace: int  # bytes, per (thread's handle, stream), kept
    cublaslt_workspace: int  # bytes, per (handle, stream), kept; 0 when unified with cuBLAS's
    total_memory: int


def _cublas_workspace(capability) -> int:
    """torch's ``parseChosenWorkspaceSize``: ``CUBLAS_WORKSPACE_CONFIG`` (``:SIZE_KiB:COUNT`` pairs)
    or the default, 32 MiB on sm90 (``:4096:8``) and ``:4096:2:16:8`` elsewhere."""
    default = 4096 * 8 * 1024 if tuple(capability) == (9, 0) else 4096 * 1024 * 2 + 16 * 1024 * 8
    val = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if not val:
        return default
    pairs = re.findall(r":([0-9]+):([0-9]+)", val)
    if not pairs:
        return default
    return sum(int(size) * 1024 * int(count) for size, count in pairs)


def _cublaslt_workspace(cublas: int) -> int:
    """torch's ``getCUDABlasLtWorkspaceSize``: ``CUBLASLT_WORKSPACE_SIZE`` KiB, default 1024; with
    ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=1`` cuBLASLt uses the cuBLAS workspace (0 extra bytes)."""
    if os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "").strip().lower() in ("1", "true", "yes", "on"):
        return 0
    text = os.environ.get("CUBLASLT_WORKSPACE_SIZE", "").strip() or "1024"
    try:
        kib = int(text)
    except ValueError:
        kib = -1
    if kib < 0:
        raise ValueError(f"CUBLASLT_WORKSPACE_SIZE={text!r}: must be a non-negative whole number of KiB "
                         "(torch's default 1024); unset it or fix it")
    return kib * 1024


REFERENCE = ("NVIDIA H200", (9, 0), 150_109_880_320)


def profile() -> Profile:
    """The GPU to model: this machine's first CUDA device if there is one, else the reference
    GPU the workspace table was measured on (NVIDIA H200, sm90)."""
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        name, cap, total = p.name, (p.major, p.minor), p.total_memory
    else:
        name, cap, total = REFERENCE
    cublas = _cublas_workspace(cap)
    return Profile(name=name, capability=tuple(cap), cublas_workspace=cublas,
                   cublaslt_workspace=_cublaslt_workspace(cublas), total_memory=total)


# ----------------------------------------------------------------------------------------------
# workspaces, measured: cuDNN convolutions, reductions, losses


_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "gpu_workspaces.json")


@functools.lru_cache(maxsize=1)
def _workspace_table() -> dict:
    """``{"meta": ..., "ops": {signature: {batch: bytes}}, "names": {operator names}}``."""
    if not os.path.exists(_DATA):
        return {"meta": {}, "ops": {}, "names": frozenset()}
    with open(_DATA) as f:
        data = json.load(f)
    names = set()
    for key in data["ops"]:
        names.add(ast.literal_eval(key)[0])
    data["names"] = frozenset(names)
    return data


# arguments that never carry the batch (a convolution's weight and bias)
_NOT_BATCHED = {"convolution": {1, 2}, "convolution_backward": {2}}


def _shape_dtype(x):
    if isinstance(x, torch.Tensor):
        return tuple(int(d) for d in x.shape), str(x.dtype).replace("torch.", "")
    if isinstance(x, dict) and "shape" in x:
        return tuple(int(d) for d in x["shape"]), str(x["dtype"])
    return None


def _norm(x, batch, batched):
    """A hashable stand-in for an operator argument (a live tensor or the probe's description of
    one): tensors become ``("T", shape, dtype)``, without the first dimension when that is the
    batch."""
    sd = _shape_dtype(x)
    if sd is not None:
        shape, dtype = sd
        if batched and shape and shape[0] == batch:
            return ("T", shape[1:], dtype)
        return ("T", shape, dtype)
    if isinstance(x, (list, tuple)):
        return tuple(_norm(v, batch, batched) for v in x)
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    return str(x)


def op_signature(op: str, args) -> tuple:
    """``(key, batch)``: the key of an operator call in the workspace table (its name and
    arguments, the batch dimension left out of the tensors that carry it) and the batch (the first
    tensor argument's first dimension); ``(None, None)`` for a call without such a tensor."""
    batch = None
    for a in args:
        sd = _shape_dtype(a)
        if sd is not None and sd[0]:
            batch = sd[0][0]
            break
    if batch is None:
        return None, None
    skip = _NOT_BATCHED.get(op, ())
    try:
        norm = tuple(_norm(a, batch, i not in skip) for i, a in enumerate(args))
    except (TypeError, ValueError):
        return None, None
    return repr((op,) + norm), int(batch)


def native_depthwise(op: str, args) -> bool:
    """Whether a convolution call is depthwise and runs on PyTorch's own CUDA kernel (``conv_depthwise2d``,
    ``conv_depthwise3d``), which takes no cuDNN workspace. As ``aten/src/ATen/native/Convolution.cpp``
    decides (``ConvParams::is_depthwise`` and ``use_cudnn_depthwise``, torch 2.x): groups equal to the
    input's channels and above 1, output channels a multiple of them, not transposed, a 4-D or 5-D input;
    cuDNN takes it instead in channels_last, for float16 (from 32 channels), or past 32-bit indexing, which
    are left to the table here."""
    if op == "convolution" and len(args) >= 9:
        inp, weight, transposed, groups = args[0], args[1], args[6], args[8]
    elif op == "convolution_backward" and len(args) >= 10:
        inp, weight, transposed, groups = args[1], args[2], args[7], args[9]
    else:
        return False
    if not (isinstance(inp, torch.Tensor) and isinstance(weight, torch.Tensor)) or transposed:
        return False
    if not isinstance(groups, int) or groups <= 1 or inp.dim() not in (4, 5) or inp.shape[1] != groups:
        return False
    return (weight.shape[0] % groups == 0 and inp.dtype != torch.float16 and inp.is_contiguous()
            and weight.is_contiguous() and inp.numel() < 2 ** 31 and weight.numel() < 2 ** 31)


def op_workspace(key: str, batch: int) -> "int | None":
    """The bytes the operator ``key`` allocated for itself at ``batch`` on the reference GPU: the
    measured value at that batch, else linear between the two nearest measured batches (one
    algorithm's workspace grows with the batch), proportional below the smallest and linear from
    the two largest above them; ``None`` when the signature was never measured."""
    entry = _workspace_table()["ops"].get(key)
    if not entry:
        return None
    pts = sorted((int(b), int(ws)) for b, ws in entry.items())
    bs = [b for b, _ in pts]
    i = bisect.bisect_left(bs, batch)
    if i < len(bs) and bs[i] == batch:
        return pts[i][1]
    if i == 0:
        b1, w1 = pts[0]
        return int(round(w1 * batch / b1))
    if i == len(pts):
        if len(pts) == 1:
            return pts[0][1]
        (b0, w0), (b1, w1) = pts[-2], pts[-1]
    else:
        (b0, w0), (b1, w1) = pts[i - 1], pts[i]
    return max(0, int(round(w0 + (w1 - w0) * (batch - b0) / (b1 - b0))))


def _fallbacks(ws: int, inb: int, conv: bool) -> tuple:
    """A convolution's fallback: the input's bytes (a plan that converts only its layout), offered
    while it is smaller than the first plan's workspace."""
    return (inb,) if conv and 0 < inb < ws else ()


def expand_workspaces(events: list) -> list:
    """The allocation trace with each recorded workspace call (``("ws", key, op, batch, input bytes,
    is a convolution)``, :meth:`AllocationRecorder.workspace`) replaced by what it allocates: the
    table's bytes for that operator at that batch (:func:`op_workspace`), asked for and freed at
    once (``try_alloc`` with the input's bytes as fallback for a convolution); nothing where the
    table gives none. A trace recorded once can so be given the workspaces of any batch."""
    out = []
    for e in events:
        if e[0] != "ws":
            out.append(e)
            continue
        _, key, op, batch, inb, conv = e
        ws = op_workspace(op, batch)
        if not ws:
            continue
        out.append(("try_alloc", key, (int(ws),) + _fallbacks(ws, inb, conv)) if conv else ("alloc", key, int(ws)))
        out.append(("free", key))
    return out


# ----------------------------------------------------------------------------------------------
# fused attention: the backend the CUDA dispatcher would pick


def _sdpa_backend(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa=False) -> str:
    """``flash``, ``efficient`` or ``math``, as ``select_sdp_backend`` decides on sm80 and later
    for dense tensors (the checks that matter for shapes and dtypes; the user's enable flags in
    ``torch.backends.cuda`` are honoured)."""
    cuda = torch.backends.cuda
    dims_ok = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
    if not dims_ok or q.is_nested:
        return "math"
    last_contig = all(t.stride(-1) == 1 for t in (q, k, v))
    head = q.size(-1)
    same_heads = q.size(1) == k.size(1) == v.size(1)
    dt = q.dtype
    if (cuda.flash_sdp_enabled() and dt in (torch.float16, torch.bfloat16) and attn_mask is None
            and head <= 256 and head % 8 == 0 and k.size(-1) == head and v.size(-1) == head
            and last_contig and (same_heads or enable_gqa)):
        return "flash"
    align = 8 if dt in (torch.float16, torch.bfloat16) else 4
    if (cuda.mem_efficient_sdp_enabled() and dt in (torch.float32, torch.float16, torch.bfloat16)
            and head % align == 0 and v.size(-1) % align == 0 and last_contig and same_heads):
        return "efficient"
    return "math"


def _fused_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                enable_gqa=False):
    backend = _sdpa_backend(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    aten = torch.ops.aten
    if backend == "flash":
        return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False,
                                                        scale=scale)[0]
    if backend == "efficient":
        lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        bias = attn_mask
        if bias is not None and bias.dtype == torch.bool:
            bias = torch.zeros_like(bias, dtype=query.dtype).masked_fill_(bias.logical_not(), float("-inf"))
        return aten._scaled_dot_product_efficient_attention(query, key, value, bias, lse, dropout_p,
                                                            is_causal, scale=scale)[0]
    return NotImplemented


_PATCH_LOCK = threading.Lock()
_PATCH_USERS: list = []
_ORIG = {"scaled_dot_product_attention": F.scaled_dot_product_attention, "dropout": F.dropout}


def _user():
    users = [u for u in _PATCH_USERS if u.thread == threading.get_ident()]
    return users[-1] if users else None


def _sdpa_routed(*args, **kwargs):
    """``F.scaled_dot_product_attention`` while a kernel model is active in this thread: the
    fused operator the GPU would run (anything the model does not cover goes to the original)."""
    user = _user()
    if user is not None:
        out = _fused_sdpa(*args, **kwargs)
        if out is not NotImplemented:
            user.log.add("sdpa")
            return out
    return _ORIG["scaled_dot_product_attention"](*args, **kwargs)


def _dropout_routed(input, p=0.5, training=True, inplace=False):
    """``F.dropout`` while a kernel model is active in this thread: CUDA's fused dropout
    (``native_dropout``: a one-byte mask), which the CPU device (used for training steps without a
    GPU) does not run (it multiplies by a float mask)."""
    user = _user()
    if (user is not None and training and 0.0 < p < 1.0 and not inplace
            and isinstance(input, torch.Tensor) and input.is_floating_point()):
        user.log.add("dropout")
        return torch.ops.aten.native_dropout(input, p, True)[0]
    return _ORIG["dropout"](input, p, training, inplace)


_ROUTED = {"scaled_dot_product_attention": _sdpa_routed, "dropout": _dropout_routed}


@contextlib.contextmanager
def _cuda_functions(state):
    """``torch.nn.functional.scaled_dot_product_attention`` and ``dropout`` replaced (module
    attributes, as ``nn.MultiheadAttention`` and ``nn.Dropout`` call them) for the block, for this
    thread only; the originals are restored by the last user, also on error."""
    state.thread = threading.get_ident()
    with _PATCH_LOCK:
        if not _PATCH_USERS:
            for name, fn in _ROUTED.items():
                setattr(F, name, fn)
        _PATCH_USERS.append(state)
    try:
        yield
    finally:
        with _PATCH_LOCK:
            if state in _PATCH_USERS:
                _PATCH_USERS.remove(state)
            if not _PATCH_USERS:
                for name, fn in _ORIG.items():
                    setattr(F, name, fn)


# ----------------------------------------------------------------------------------------------
# the transformer fast path, as its CUDA kernel allocates


class NotModelled(Exception):
    """An operator the model cannot trace as the GPU would run it."""


def _layer_norm(x, d, w, b, eps):
    return torch.ops.aten.layer_norm(x, [d], w, b, eps, True)


def _linear_for_ffn(bias, mat1, mat2, use_gelu):
    b, t = mat1.shape[0], mat1.shape[1]
    m = mat1.view(b * t, mat1.shape[2])
    if use_gelu is None:
        r = torch.ops.aten.addmm(bias, m, mat2.t())
    else:
        r = torch.ops.aten._addmm_activation(bias, m, mat2.t(), beta=1, alpha=1, use_gelu=use_gelu)
    return r.view(b, t, -1)


def _mha_fused(query, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask):
    dh = embed_dim // num_head
    if mask is not None or dh % 8 != 0:
        raise NotModelled("fast-path attention with a mask or a head size not a multiple of 8")
    q = query.view(query.size(0), -1, num_head, dh).transpose(1, 2)
    if _sdpa_backend(q, q, q, None, 0.0, False) == "math":
        raise NotModelled("fast-path attention on the math backend")
    x = torch.ops.aten.linear(query, qkv_weight, qkv_bias)
    chunks = list(x.chunk(3, -1))
    n = x.size(0)
    chunks = [c.view(n, -1, num_head, dh).transpose(1, 2) for c in chunks]
    y = _fused_sdpa(chunks[0], chunks[1], chunks[2], None, 0.0, False)
    past = y.transpose(1, 2).reshape(n, -1, embed_dim)
    return torch.ops.aten.linear(past, proj_weight, proj_bias)


def _encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                       use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                       norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                       mask_type=None):
    if src.is_nested:
        raise NotModelled("nested tensors")
    if src.numel() == 0:
        return src.clone()
    x = src
    if norm_first:
        x = _layer_norm(x, embed_dim, norm_weight_1, norm_bias_1, eps)
    x = _mha_fused(x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask)
    x.add_(src)
    if not norm_first:
        x = _layer_norm(x, embed_dim, norm_weight_1, norm_bias_1, eps)
    pre_ffn_res = x
    if norm_first:
        x = _layer_norm(x, embed_dim, norm_weight_2, norm_bias_2, eps)
    h = _linear_for_ffn(ffn_bias_1, x, ffn_weight_1, bool(use_gelu))
    x = _linear_for_ffn(ffn_bias_2, h, ffn_weight_2, None)
    del h
    x.add_(pre_ffn_res)
    if not norm_first:
        x = _layer_norm(x, embed_dim, norm_weight_2, norm_bias_2, eps)
    return x


# ----------------------------------------------------------------------------------------------
# the kernel model: operators replaced, workspaces added


_BLAS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "addr",
                   "_addmm_activation"})
_LT = frozenset({"addmm", "_addmm_activation"})


class _KernelModel(TorchDispatchMode):
    """Sits above the trackers: replaces the operators the GPU runs differently and reports the
    library workspaces to every :class:`AllocationRecorder` and ``_LiveTracker`` below it."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def _sinks(self):
        return [m for m in _get_current_dispatch_mode_stack() if hasattr(m, "transient")]

    def _persist(self, label, n):
        for m in _get_current_dispatch_mode_stack():
            if hasattr(m, "persistent"):
                m.persistent(label, n)

    def _blas(self, name):
        """The first cuBLAS call of a thread's handle allocates its workspace (and cuBLASLt's for
        the operators that use it), kept for the life of the process."""
        st = self.state
        thread = "backward" if torch._C._current_autograd_node() is not None else "forward"
        want = [("cublas", st.profile.cublas_workspace)]
        if name in _LT and st.profile.cublaslt_workspace:
            want.append(("cublaslt", st.profile.cublaslt_workspace))
        for lib, n in want:
            if (lib, thread) not in st.persistent:
                st.persistent[(lib, thread)] = n
                self._persist(f"{lib} workspace ({thread} thread)", n)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        st = self.state
        if name == "_transformer_encoder_layer_fwd":
            st.log.add("fast_path")
            self._blas("_addmm_activation")  # its projections run cuBLAS(Lt) below this mode
            return _encoder_layer_fwd(*args, **kwargs)
        # a composite seen whole (inference_mode skips the autograd keys that decompose it above this
        # mode): run its parts through this mode, so that its matrix products and convolutions get
        # their workspaces as under no_grad, and every mode below sees what they allocate
        out = _modes.run_composite(self, func, args, kwargs)
        if out is not NotImplemented:
            return out
        if name in _BLAS:
            self._blas(name)
        out = func(*args, **kwargs)
        if name.startswith("convolution") and native_depthwise(name, args):
            st.depthwise += 1  # PyTorch's own kernel: no workspace to look up
            return out
        if name in _workspace_table()["names"]:
            key, batch = op_signature(name, args)
            ws = op_workspace(key, batch) if key else None
            conv = name.startswith("convolution")
            if ws is None:
                if conv:
                    st.unmatched.add(key or name)
            else:
                st.matched[conv] = st.matched.get(conv, 0) + 1
                if str(batch) not in _workspace_table()["ops"][key]:
                    st.interpolated.add(key)
            # cuDNN tries its plans in turn: when the first plan's workspace cannot be had (the
            # allocator has released its cache by then), the plans seen next on the reference GPU
            # convert only the input's layout, then none at all
            inb = int(args[0].numel() * args[0].element_size()) if conv and isinstance(args[0], torch.Tensor) else 0
            for s in self._sinks() if key is not None else ():
                if hasattr(s, "workspace"):  # a recorder keeps the call itself: its bytes at any batch
                    s.workspace(key, batch, inb, conv)
                elif ws:
                    s.transient(ws, f"workspace of {name}", fallbacks=_fallbacks(ws, inb, conv), optional=conv)
        elif name.startswith("convolution"):
            key, _ = op_signature(name, args)
            st.unmatched.add(key or name)
        return out


@dataclass
class _State:
    profile: Profile
    log: set = field(default_factory=set)
    persistent: dict = field(default_factory=dict)  # (library, thread) -> bytes
    matched: dict = field(default_factory=dict)  # is a convolution -> calls given a workspace
    thread: int = 0
    unmatched: set = field(default_factory=set)
    interpolated: set = field(default_factory=set)  # signatures measured, but not at this batch
    depthwise: int = 0  # depthwise convolution calls run on PyTorch's own kernel (no workspace)


# Whether this process can build a module on the virtual CUDA device: None until an estimate tried.
# torch 2.9.1 (checked here; 2.14.1 can) cannot without a CUDA driver: ``aten.uniform_``'s
# decomposition, which every nn.Linear and nn.Conv2d runs to initialise its weights, calls the
# ``Tensor.copy_`` binding with the fake mode popped off the stack, which initialises CUDA and raises
# ``AcceleratorError`` (pytorch/pytorch#159566 and #157869 describe this class of bug). Skipping the
# fill does not help there: recording an autograd graph on fake CUDA tensors then initialises CUDA
# inside the engine and aborts the process.
_fake_cuda_builds: "bool | None" = None
_fake_cuda_error = ""
_DRIVER_ERRORS = ("cudaErrorInsufficientDriver", "CUDA driver version is insufficient", "no NVIDIA driver",
                  "Found no NVIDIA driver", "CUDA driver initialization failed")


def fake_cuda_builds() -> "bool | None":
    """False once an estimate found that this torch cannot build on the virtual CUDA device here."""
    return _fake_cuda_builds


def note_fake_cuda_error(e: BaseException) -> bool:
    """Record ``e`` if it is the missing-driver error of a virtual CUDA build; True if it was."""
    global _fake_cuda_builds, _fake_cuda_error
    text = str(e)
    if not any(m in text for m in _DRIVER_ERRORS):
        return False
    _fake_cuda_builds = False
    _fake_cuda_error = f"{type(e).__name__}: {text.splitlines()[0][:100]}"
    return True


def fake_cuda_fallback_note() -> str:
    return (f"the virtual CUDA device is not usable with torch {torch.__version__} in a process without a CUDA "
            f"driver: building a module on it initialises CUDA ({_fake_cuda_error}; torch 2.14.1 does not); "
            "estimated on the fake CPU device instead, with CUDA's 512-byte block rounding and the kernel "
            "model's substitutions the notes below list; operators that CUDA runs otherwise than the CPU "
            "are traced as the CPU runs them")


# Whether autograd can record a graph on the virtual CUDA device in this process: None until asked.
# torch 2.9.1's CUDA wheel on a machine without a CUDA driver cannot: every graph node made for a CUDA
# tensor (``AccumulateGrad`` for a parameter, ``MulBackward`` for an input's product) records the
# current CUDA stream in its ``InputMetadata``, which initialises CUDA, and the resulting
# ``c10::AcceleratorError`` is thrown where nothing catches it: the process aborts (SIGABRT), so no
# ``try`` can fall back. torch 2.14.1 records the graph without asking the driver (checked there).
# Releases before 2.14 are asked once, in a subprocess that records one node, before any grad-mode
# step is traced on the virtual device.
_GRAPH_OK_FROM = (2, 14)
_fake_cuda_graphs: "bool | None" = None
_fake_cuda_graphs_why = ""
_GRAPH_PROBE = ("import torch\n"
                "from torch._subclasses.fake_tensor import FakeTensorMode\n"
                "with FakeTensorMode():\n"
                "    x = torch.empty(2, device='cuda', requires_grad=True)\n"
                "    y = x * 2\n"
                "print('recorded', y.requires_grad)\n")


def _torch_release() -> tuple:
    import re

    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def fake_cuda_records_graphs() -> bool:
    """Whether recording autograd's graph on fake CUDA tensors is safe in this process (no GPU here):
    True from torch 2.14 on; before, one subprocess (this Python, this torch) records a node on the
    virtual device and says whether it survived. The answer is kept for the process."""
    global _fake_cuda_graphs, _fake_cuda_graphs_why
    if _fake_cuda_graphs is not None:
        return _fake_cuda_graphs
    if _torch_release() >= _GRAPH_OK_FROM:
        _fake_cuda_graphs = True
        return True
    import subprocess
    import sys

    try:
        p = subprocess.run([sys.executable, "-c", _GRAPH_PROBE], capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        ok = p.returncode == 0 and "recorded True" in p.stdout
        if not ok:
            lines = p.stderr.splitlines()
            err = ([ln for ln in lines if "driver" in ln.lower()] or [ln for ln in lines if "error" in ln.lower()])
            why = err[0].strip()[:120] if err else f"exit status {p.returncode}"
            _fake_cuda_graphs_why = f"the check process ended with {why}"
    except (OSError, subprocess.SubprocessError) as e:  # no subprocess here: take the safe path
        ok = False
        _fake_cuda_graphs_why = f"the check could not run ({type(e).__name__})"
    _fake_cuda_graphs = ok
    return ok


def fake_cuda_graph_note() -> str:
    return (f"autograd cannot record a graph on the virtual CUDA device with torch {torch.__version__} in a "
            f"process without a CUDA driver: it asks the driver for the current stream and the process aborts "
            f"({_fake_cuda_graphs_why}; torch 2.14.1 does not); this grad-mode step was estimated on the fake "
            "CPU device instead, with CUDA's 512-byte block rounding and the kernel model's substitutions "
            "the notes list; operators that CUDA runs otherwise than the CPU are traced as the CPU runs them")


# The device-generic autocast state API (``torch.is_autocast_enabled("cuda")``,
# ``torch.get_autocast_dtype("cuda")`` and their setters) came with torch 2.4
# (pytorch/pytorch#124359); before it the CUDA state had its own functions, without a device.
_GENERIC_AUTOCAST_API = hasattr(torch, "get_autocast_dtype")


def _cuda_autocast_state():
    if _GENERIC_AUTOCAST_API:
        return torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    return torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()  # pragma: no cover - torch < 2.4


def _set_cuda_autocast_state(enabled, dtype):
    if _GENERIC_AUTOCAST_API:
        torch.set_autocast_enabled("cuda", enabled)
        torch.set_autocast_dtype("cuda", dtype)
    else:  # pragma: no cover - torch < 2.4
        torch.set_autocast_enabled(enabled)
        torch.set_autocast_gpu_dtype(dtype)


@contextlib.contextmanager
def virtual_autocast(dtype):
    """CUDA autocast's thread state switched on directly (``torch.autocast("cuda")`` switches
    itself off without a GPU); restored on exit."""
    prev_enabled, prev_dtype = _cuda_autocast_state()
    prev_cache = torch.is_autocast_cache_enabled()
    _set_cuda_autocast_state(True, dtype)
    torch.set_autocast_cache_enabled(True)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        _set_cuda_autocast_state(prev_enabled, prev_dtype)
        torch.set_autocast_cache_enabled(prev_cache)


class kernel_model:
    """``with kernel_model(profile) as km:`` inside the trackers: fused attention, the transformer
    fast path, library workspaces. ``km.notes()`` says what was modelled."""

    def __init__(self, prof: "Profile | None" = None):
        self.state = _State(profile=prof or profile())
        self._stack = None

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_cuda_functions(self.state))
        self._stack.enter_context(_KernelModel(self.state))
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)

    @property
    def persistent_bytes(self) -> int:
        return sum(self.state.persistent.values())

    def notes(self) -> list:
        st, p = self.state, self.state.profile
        out = []
        if "fast_path" in st.log:
            out.append("transformer fast path (torch._transformer_encoder_layer_fwd) traced as its CUDA "
                       "kernel runs it: packed QKV projection, fused attention, in-place residuals")
        if "dropout" in st.log:
            out.append("dropout traced as CUDA's fused kernel (native_dropout, a one-byte mask)")
        if "sdpa" in st.log:
            out.append("scaled_dot_product_attention traced as the fused CUDA kernel the dispatcher "
                       "would pick (flash for fp16/bf16, memory-efficient otherwise), not the math path")
        if st.persistent:
            parts = ", ".join(f"{lib} {n / MiB:g} MiB ({th})" for (lib, th), n in st.persistent.items())
            out.append(f"library workspaces kept by the process, as on {p.name} (sm{p.capability[0]}"
                       f"{p.capability[1]}): {parts}")
        if st.matched or st.unmatched:
            meta = _workspace_table().get("meta", {})
            src = meta.get("device", "the reference GPU")
            msg = (f"workspaces at the sizes {src} reported (cuDNN {meta.get('cudnn')}): "
                   f"{st.matched.get(True, 0)} convolution calls, {st.matched.get(False, 0)} other calls")
            if st.unmatched:
                msg += (f"; {len(st.unmatched)} convolution shapes are not in the table and were "
                        f"given no workspace ({_examples(st.unmatched)}): cuDNN may take more there, "
                        "so this estimate can be low by their workspaces")
            out.append(msg)
        if st.depthwise:
            out.append(f"{st.depthwise} depthwise convolution calls given no workspace: in float32 or bfloat16 "
                       "and the default (NCHW) layout PyTorch runs them on its own depthwise kernel, not cuDNN "
                       "(aten/src/ATen/native/Convolution.cpp, use_cudnn_depthwise)")
        if st.interpolated:
            out.append(f"workspaces interpolated between the batches measured on "
                       f"{_workspace_table().get('meta', {}).get('device', 'the reference GPU')} "
                       f"(not measured at this batch) for {len(st.interpolated)} operator signatures "
                       f"({_examples(st.interpolated)})")
        return out


def _short(key: str) -> str:
    """``convolution 64x56x56*64x64x3x3``: an operator signature by its name and first two tensor
    shapes (the batch left out of the first)."""
    try:
        sig = ast.literal_eval(key)
    except (ValueError, SyntaxError):
        return str(key)
    if not isinstance(sig, tuple):
        return str(key)
    shapes = ["x".join(map(str, a[1])) or "scalar" for a in sig[1:]
              if isinstance(a, tuple) and len(a) == 3 and a[0] == "T"][:2]
    return f"{sig[0]} {'*'.join(shapes)}".strip()


def _examples(keys, n: int = 3) -> str:
    names = sorted(_short(k) for k in keys)
    more = f", and {len(names) - n} more" if len(names) > n else ""
    return "e.g. " + "; ".join(names[:n]) + more


# ----------------------------------------------------------------------------------------------
# the allocation trace


class AllocationRecorder(StorageTracker):
    """Records every new storage on ``device_type`` as ``("alloc", key, nbytes)`` and its death as
    ``("free", key)``, in order (a storage dies when its last tensor does, as on a GPU), plus the
    workspaces the kernel model reports: ``transient`` (allocated and freed inside an operator,
    recorded as ``("try_alloc", ...)`` then ``("free", ...)``: cuDNN falls back to another
    algorithm when a workspace cannot be allocated) and ``persistent`` (kept). The walk over each
    operator's outputs is the dispatch tracker's (:class:`nogradlab.core.tracker.StorageTracker`), the
    one :func:`nogradlab.core.memory.measure` counts with."""

    def __init__(self, device_type: str):
        super().__init__()
        self.device_type = device_type
        self.events: list = []
        self.persistent_events: list = []
        self._keys = 0
        self._seen: dict = {}  # id(storage) -> (weakref, key)

    def _key(self):
        self._keys += 1
        return self._keys

    def _freed(self, key, sid):
        seen = self._seen.get(sid)
        if seen is not None and seen[1] == key:
            del self._seen[sid]
        if self.active:
            self.events.append(("free", key))

    def _add(self, st):
        key = self._key()
        self.events.append(("alloc", key, int(st.nbytes())))
        self._register(st, key)

    def _register(self, st, key):
        """Know ``st`` as the storage allocated under ``key`` (its death is recorded as a free)."""
        sid = id(st)
        ref = self._watch(st, lambda k=key, sid=sid: self._freed(k, sid))
        self._seen[sid] = (ref, key)

    def transient(self, nbytes, label="", fallbacks=(), optional=False):
        if self.active:
            key = self._key()
            if optional:
                self.events.append(("try_alloc", key, (int(nbytes),) + tuple(int(f) for f in fallbacks)))
            else:
                self.events.append(("alloc", key, int(nbytes)))
            self.events.append(("free", key))

    def workspace(self, op: str, batch: int, input_bytes: int, conv: bool):
        """An operator of the workspace table was called: kept as ``("ws", key, op, batch, input
        bytes, conv)``, whatever the table gives at this batch (none, too), so that traces of one step
        at two batches hold the same events, and :func:`expand_workspaces` gives the bytes."""
        if self.active:
            self.events.append(("ws", self._key(), op, int(batch), int(input_bytes), bool(conv)))

    def persistent(self, label, nbytes):
        if self.active:
            self.persistent_events.append(("alloc", ("persistent", label), int(nbytes)))

    def mark(self, name):
        self.events.append(("mark", name))

    # the dispatch tracker's walk (StorageTracker.__torch_dispatch__) asks these
    def _storage_of(self, t):
        return _storage(t) if t.device.type == self.device_type else None

    def _known(self, st) -> bool:
        seen = self._seen.get(id(st))
        return seen is not None and seen[0]() is st

    def _new(self, st, label: str) -> None:
        self._add(st)
