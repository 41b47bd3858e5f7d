"""``python -m nogradlab estimate MODULE:FACTORY --input 3x224x224 --gpu 24GiB``: your own model's GPU
memory per mode, its largest batch under the budget and the no_grad factor, on a virtual CUDA device
(no GPU needed): ``memory.estimate`` and ``batch.largest_batch`` with the caching allocator's model.

Every argument is checked before any work (``check``: ``ValueError`` naming what is allowed); ``run``
does the work and returns the JSON document that ``--json`` writes.
"""
from __future__ import annotations

import importlib
import inspect
import math
import re
from dataclasses import dataclass

import torch

from nogradlab.estimate import batch as _batch
from nogradlab.core import ownmodel
from nogradlab.estimate import fake as _fake

__all__ = ["MODES", "parse_bytes", "load_factory", "Request", "check", "run", "text", "is_estimate_doc",
           "ModelError", "failed", "one_line", "estimate"]

# the command's mode -> batch.largest_batch's mode (forward modes with the model in eval)
MODES = {"grad": "grad", "no_grad": "eval+no_grad", "inference_mode": "inference_mode", "train": "train"}
_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


_BYTE_LIMIT = 2 ** 62  # input bytes an estimate's arithmetic (int64, with room for sums) can hold


def parse_bytes(spec: str) -> int:
    """``"24GiB"`` -> 25769803776; binary (KiB..TiB, or K/M/G/T) and decimal (KB..TB) units, or bytes. A bare
    number under 1 MiB (``"24"``) is refused: a unit was surely left out."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", str(spec))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"a memory size is a number and a unit, e.g. 24GiB or 80GB (units: B, KiB, MiB, "
                         f"GiB, TiB, KB, MB, GB, TB); got {spec!r}")
    n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n <= 0:
        raise ValueError(f"a memory size must be positive, got {spec!r}")
    if not m.group(2) and n < 2 ** 20:  # "--gpu 24": 24 bytes, surely not what was meant
        raise ValueError(f"a memory size of {spec.strip()!r} has no unit and would mean {n} bytes; give the unit, "
                         f"e.g. {m.group(1)}GiB or {m.group(1)}GB ({m.group(1)}B if bytes are meant)")
    if n >= _BYTE_LIMIT:
        raise ValueError(f"a memory size must be under {_BYTE_LIMIT} bytes (4 EiB), got {spec!r}")
    return n


def load_factory(spec: str):
    """``"torchvision.models:resnet101"`` -> a zero-argument builder (called with ``weights=None``
    when it takes that keyword: no download, random weights)."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"the model is MODULE:FACTORY, an importable callable returning an nn.Module, "
                         f"e.g. torchvision.models:resnet101; got {spec!r}")
    mod_name, attr = spec.split(":")
    try:
        obj = importlib.import_module(mod_name)
    except ImportError as e:
        raise ValueError(f"cannot import {mod_name!r} ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{mod_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec!r} is a {type(obj).__name__}, not a callable that returns an nn.Module")
    try:
        takes_weights = "weights" in inspect.signature(obj).parameters
    except (TypeError, ValueError):
        takes_weights = False
    kwargs = {"weights": None} if takes_weights else {}

    def build():
        return obj(**kwargs)

    build.__qualname__ = attr.split(".")[-1]
    return build


class _ModuleBuilder:
    """A built module as the command's model: ``ownmodel.Model`` takes the module itself (copied with fake
    or meta tensors, never changed), converted to a floating ``dtype``."""

    def __init__(self, module, dtype):
        copy = ownmodel._fake_copy(module, "meta")  # shapes only: the module itself is never changed
        self.module = copy.to(dtype) if dtype.is_floating_point else copy
        self.__qualname__ = type(module).__name__


def estimate(model, input, dtype="float32", gpu="24GiB", modes="grad,no_grad,inference_mode,train",
             allocator="native", batch=1, progress=False) -> dict:
    """``nogradlab estimate`` from Python: the document ``--json`` writes (``modes``: per mode the
    allocated and reserved peaks at ``batch`` and the largest batch under ``gpu``; ``skipped``: modes that
    could not be estimated, and why). ``model``: ``"MODULE:FACTORY"`` as the command takes it, a function
    that builds an ``nn.Module``, or a built module (estimated as a copy: never changed). Raises
    ``ValueError`` for bad arguments and :class:`ModelError` for a model that cannot be estimated."""
    return run(check(model, input, dtype, gpu, modes, allocator, batch), progress=progress,
               command="nogradlab.estimate_cmd.estimate")


@dataclass
class Request:
    model: str
    build: object
    shape: tuple
    dtype: torch.dtype
    budget: int
    modes: list
    allocator: str
    batch: int
    max_batch: int = 65536


def check(model, input, dtype="float32", gpu="24GiB", modes="grad,no_grad,inference_mode,train",
          allocator="native", batch=1) -> Request:
    """Every argument checked (``ValueError`` naming the allowed values), nothing built yet."""
    shape = ownmodel.parse_shape(input)
    dt = ownmodel.parse_dtype(dtype)
    budget = parse_bytes(gpu)
    names = [m.strip() for m in str(modes).split(",") if m.strip()]
    bad = [m for m in names if m not in MODES]
    if bad or not names:
        raise ValueError(f"unknown mode {bad[0] if bad else modes!r}; allowed: {', '.join(MODES)} "
                         "(comma-separated)")
    if allocator not in _fake.ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; allowed: {', '.join(_fake.ALLOCATORS)}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"--batch must be a positive integer, got {batch!r}")
    from nogradlab.core.workloads import check_batch

    check_batch(batch, "--batch")
    sample = math.prod(shape) * dt.itemsize
    if sample * batch >= _BYTE_LIMIT:
        raise ValueError(f"--input {input} at --batch {batch} is {sample * batch} bytes of inputs, beyond the "
                         f"byte arithmetic of an estimate (int64: under {_BYTE_LIMIT} bytes)")
    if isinstance(model, str):
        build = load_factory(model)
    elif isinstance(model, torch.nn.Module):  # a built module: copied, converted to a floating dtype
        module = model
        build = _ModuleBuilder(module, dt)
        model = f"{type(module).__name__} (a built module)"
    elif callable(model):
        factory_fn = model

        def build():
            return factory_fn()
        build.__qualname__ = ownmodel._name_of(factory_fn)
        model = f"{getattr(factory_fn, '__module__', '?')}:{build.__qualname__}"
    else:
        raise ValueError(f"the model is MODULE:FACTORY (e.g. torchvision.models:resnet18), a function that "
                         f"builds an nn.Module, or an nn.Module; got {type(model).__name__}")
    if dt.is_floating_point and not isinstance(build, _ModuleBuilder):  # a floating dtype is the model's too (a bf16 model on bf16 inputs)
        from nogradlab.core.workloads import _default_dtype

        factory = build

        def build():
            with _default_dtype(dt):
                return factory()
        build.__qualname__ = factory.__qualname__
    return Request(model=model, build=build, shape=shape, dtype=dt, budget=budget,
                   modes=list(dict.fromkeys(names)), allocator=allocator, batch=batch,
                   max_batch=max(1, min(65536, _BYTE_LIMIT // max(sample, 1))))


def _factor(num, den):
    if num is None or den is None or not den["largest_batch"]:
        return None
    return round(num["largest_batch"] / den["largest_batch"], 3)


class ModelError(ValueError):
    """The model could not be built or estimated: one line saying why (the command exits 2)."""


def one_line(e: BaseException) -> str:
    """An exception as one line: its type (unless it is one of ours) and its message's first line."""
    from nogradlab.estimate.fake import InputMismatch, NotEstimable

    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, (ModelError, InputMismatch, NotEstimable)):
        return msg
    if isinstance(e, RecursionError):
        return f"RecursionError: {msg[:200]} (the model's forward or builder recurses without end)"
    return f"{type(e).__name__}: {msg[:300]}" if msg else type(e).__name__


def _structure(own, req):
    """The model built once on meta (``Model.structure``), errors as :class:`ModelError`, before any mode
    runs: a factory that raises (even ``SystemExit``), returns no module, or pins its weights elsewhere."""
    from nogradlab.estimate.fake import _TEMPLATES

    try:
        return _TEMPLATES.own(own, None)[0]
    except KeyboardInterrupt:
        raise
    except SystemExit as e:
        raise ModelError(f"the factory {req.model} raised SystemExit({e.code!r}) while building the model") from None
    except Exception as e:  # noqa: BLE001 - any failure of the user's builder: one line
        hint = (" (if the factory converts the model's dtype itself, e.g. .half(), give --dtype instead)"
                if "swap" in str(e).lower() or "dtype" in str(e).lower() else "")
        why = one_line(e) if not str(e).startswith("the builder") else str(e).splitlines()[0]
        raise ModelError(f"the factory {req.model} failed: {why}{hint}") from None


def estimate_modes(own, modes, budget: int, *, trainable: bool = True, allocator: str = "native",
                   batch: int = 1, max_batch: int = 65536, bar=None, notes_by_mode: "dict | None" = None) -> tuple:
    """The command's per-mode loop, shared with notebook 10 (:mod:`nogradlab.yourmodel`): per mode the
    estimate at ``batch`` and the largest batch under ``budget`` bytes. Returns ``(modes, notes, skipped,
    not_applicable)``; a mode that fails is skipped with its reason, the others kept. ``notes_by_mode``,
    when given, gets each mode's notes (those the earlier modes had not given) for :func:`merge_notes`."""
    from nogradlab.estimate import onednn
    from nogradlab.estimate.fake import InputMismatch

    out, notes, skipped, not_applicable = {}, [], {}, []
    fast = _batch._fastpath_enabled()
    for m in modes:
        if m == "train" and not trainable:
            skipped[m] = ("not applicable: no parameter of the model requires grad (a frozen or "
                          "parameter-free model), so there is no training step to size")
            not_applicable.append(m)
            if bar is not None:
                bar.update(2)
            continue
        if bar is not None:
            bar.set_postfix_str(f"{m}: batch {batch}")
        try:
            # the search's own cached trace: at batch 1 it is the search's first trial too
            r = _batch._estimate(own, "", MODES[m], batch, "cuda:0", allocator, 0, fast)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"{m}: largest batch")
            b = _batch.largest_batch(own, MODES[m], budget, "cuda", method="estimate",
                                     allocator=allocator, max_batch=max_batch)
        except (KeyboardInterrupt, SystemExit):
            raise
        except InputMismatch as e:  # the same for every mode: the inputs are wrong, not a mode
            raise ModelError(one_line(e)) from None
        except Exception as e:  # noqa: BLE001 - keep the modes already estimated; say why this one failed
            skipped[m] = one_line(e)
            continue
        finally:
            _batch._forget_estimates()
        if bar is not None:
            bar.update(1)
        out[m] = {"allocated_peak_bytes": r.allocated_bytes, "reserved_peak_bytes": r.reserved_bytes,
                  "largest_batch": b.batch, "at_limit": b.at_limit, "setting": MODES[m],
                  "trials": len(b.trials), "seconds": b.seconds,
                  "search": next((n.split(": ", 1)[1] for n in b.notes if n.startswith(_batch.SEARCH_NOTE)), ""),
                  # memory the figures lack, by operator (an LSTM's workspace on a CUDA device...): the table says it
                  "missed": [dict(x) for x in r.missed]}
        # the search's last trial repeats the notes at another batch; those that carry its sizes are left out
        mine = [n for n in dict.fromkeys(r.notes + [n for n in b.notes if not n.startswith(onednn.NOTE_PREFIX)])
                if n not in notes and not n.startswith("reserved bytes") and not n.startswith(_batch.SEARCH_NOTE)]
        notes.extend(mine)
        if notes_by_mode is not None:
            notes_by_mode[m] = mine
    return out, notes, skipped, not_applicable


def merge_notes(modes, notes_by_mode: dict) -> list:
    """The notes of modes estimated apart (two processes), in the order one process gives them: each mode's
    in ``modes``' order, a note given once."""
    return list(dict.fromkeys(n for m in modes for n in notes_by_mode.get(m, ())))


def run(req: Request, progress: bool = True, command: str = "", helper=None) -> dict:
    """Per mode: the estimate at ``req.batch`` and the largest batch under the budget.

    A mode that cannot be estimated does not lose the others: it is listed under ``skipped`` (mode ->
    reason) and left out of ``modes``; ``not_applicable`` marks those that do not apply to the model (a
    training step of a model without a parameter that requires grad). Raises :class:`ModelError` when
    the model cannot be built at all, or when no mode could be estimated (the first mode's reason).
    ``helper``: a :class:`nogradlab.estimate.split.Helper` estimating the training step in a second
    process (its document merged here; estimated here after all where it wrote none)."""
    from nogradlab.estimate import cudamodel

    what = req.build.module if isinstance(req.build, _ModuleBuilder) else req.build
    own = ownmodel.Model(what, (req.shape, req.dtype), name=req.build.__qualname__)
    structure = _structure(own, req)
    trainable = any(p.requires_grad for p in structure.parameters())
    bar = None
    if progress:
        import sys

        from tqdm.auto import tqdm

        bar = tqdm(total=2 * len(req.modes), desc=own.name, unit="step", file=sys.stderr)
    try:
        out, notes, skipped, not_applicable = _modes_here_and_there(own, req, trainable, bar, helper)
    finally:
        if bar is not None:
            bar.close()
    if not out and skipped and len(not_applicable) < len(skipped):
        first = next(m for m in skipped if m not in not_applicable)
        raise ModelError(f"no mode could be estimated; {first}: {skipped[first]}")
    prof = cudamodel.profile()
    ng = out.get("no_grad")
    doc = {
        "meta": {"tool": "nogradlab", "source": "estimate", "model": req.model, "name": own.name,
                 "input": "x".join(map(str, req.shape)), "dtype": str(req.dtype).replace("torch.", ""),
                 "gpu_bytes": req.budget, "allocator": req.allocator, "batch": req.batch,
                 "max_batch": req.max_batch, "device": "cuda" if torch.cuda.is_available() else
                 "cuda (virtual: no GPU here)", "gpu_profile": prof.name, "torch": torch.__version__,
                 "command": command},
        "modes": out,
        "no_grad_factor": {"over_grad": _factor(ng, out.get("grad")), "over_train": _factor(ng, out.get("train"))},
        "notes": notes,
    }
    if skipped:
        doc["skipped"] = skipped
        doc["not_applicable"] = not_applicable
    return doc


def _modes_here_and_there(own, req: Request, trainable: bool, bar, helper) -> tuple:
    """:func:`estimate_modes` of ``req.modes``, the helper's mode (if any) taken from the second process:
    ``(modes, notes, skipped, not_applicable)`` in ``req.modes``' order, as one process gives them."""
    kw = dict(trainable=trainable, allocator=req.allocator, batch=req.batch, max_batch=req.max_batch, bar=bar)
    there = helper.mode if helper is not None and helper.mode in req.modes else None
    by_mode = {}
    out, _, skipped, not_applicable = estimate_modes(own, [m for m in req.modes if m != there], req.budget,
                                                     notes_by_mode=by_mode, **kw)
    if there is None:
        return out, merge_notes(req.modes, by_mode), skipped, not_applicable
    if bar is not None:
        bar.set_postfix_str(f"{there}: in a second process")
    doc = helper.result()
    if doc is None:  # it wrote none (it failed, or was stopped): estimated here, as on one process
        o2, _, s2, na2 = estimate_modes(own, [there], req.budget, notes_by_mode=by_mode, **kw)
    else:
        o2, s2, na2 = doc["modes"], doc.get("skipped", {}), doc.get("not_applicable", [])
        by_mode[there] = list(doc.get("notes", []))
        if bar is not None:
            bar.update(2)
    out, skipped = {**out, **o2}, {**skipped, **s2}
    return ({m: out[m] for m in req.modes if m in out}, merge_notes(req.modes, by_mode),
            {m: skipped[m] for m in req.modes if m in skipped},
            [m for m in req.modes if m in set(not_applicable) | set(na2)])


def failed(doc: dict) -> bool:
    """Whether a mode asked for failed (not merely not applicable): the command then exits 2."""
    return any(m not in doc.get("not_applicable", []) for m in doc.get("skipped", {}))


def is_estimate_doc(doc) -> bool:
    """An earlier ``estimate --json`` file (the only kind it may overwrite)."""
    return (isinstance(doc, dict) and isinstance(doc.get("meta"), dict)
            and doc["meta"].get("tool") == "nogradlab" and doc["meta"].get("source") == "estimate"
            and isinstance(doc.get("modes"), dict))


def text(doc: dict) -> str:
    """The terminal table of a document from :func:`run`."""
    from nogradlab.core.format import bytes_ as fb, ratio

    meta = doc["meta"]
    b = meta["batch"]
    lines = [f"{meta['name']} ({meta['model']}), inputs {meta['input']} {meta['dtype']}, budget "
             f"{fb(meta['gpu_bytes'])} on {meta['device']}, {meta['gpu_profile']} modelled, "
             f"{meta['allocator']} allocator"]
    rows = [("mode", f"allocated @{b}", f"reserved @{b}", "largest batch")]
    low = []  # the table's own word on figures known to be low (not only a note at the end)
    for m, e in doc["modes"].items():
        lb = f"{e['largest_batch']}" + (" (at limit)" if e["at_limit"] else "")
        mark = ""
        if e.get("missed"):
            mark = " *"
            lb += " *"
            for x in e["missed"]:
                size = f"about {fb(x['bytes'])}" if x.get("bytes") else "an unknown amount"
                low.append(f"* {m}: low by {size} at batch {b} (more at larger batches; the largest batch may be "
                           f"smaller): {x['op']}: {x['why']}")
        rows.append((m, fb(e["allocated_peak_bytes"]) + mark, fb(e["reserved_peak_bytes"]) + mark, lb))
    # columns two spaces apart, each as wide as its widest cell: they never run together
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip())
    lines += low
    for m, why in doc.get("skipped", {}).items():
        lines.append(f"{m}: {why}" if why.startswith("not applicable") else f"{m}: not estimated: {why}")
    f = doc["no_grad_factor"]
    ng = doc["modes"].get("no_grad")
    for key, other in (("over_grad", "grad"), ("over_train", "train")):
        if f[key] is not None:
            bound = "at least " if ng["at_limit"] else ""
            cap = " (that mode hit max_batch: the factor may be smaller)" if doc["modes"][other]["at_limit"] else ""
            lines.append(f"no_grad fits {bound}{ratio(f[key])} the batch of {other}{cap}")
        elif ng is not None and other in doc["modes"]:
            lines.append(f"no_grad over {other}: n/a ({other} fits no batch under the budget)")
    if any(e["at_limit"] for e in doc["modes"].values()):
        lines.append(f"at limit: every batch up to max_batch={meta['max_batch']} fitted; the real largest "
                     "batch may be larger")
    lines += ["notes:"] + [f"  - {n}" for n in doc["notes"]]
    lines += [f"  - {m}'s largest batch: {e['search']}" for m, e in doc["modes"].items() if e.get("search")]
    return "\n".join(lines)
