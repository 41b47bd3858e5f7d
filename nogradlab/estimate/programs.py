"""Allocation programs, and other deterministic estimates, kept between processes (issue 38): a second
run answers at once.

A :class:`nogradlab.estimate.batch.Program` (a step's allocation trace at any batch) costs a few fake-tensor
traces to make (0.1-0.5 s each on a 2-core CPU for the full-size workloads). It is written to the user's
cache folder (``platformdirs.user_cache_dir("nogradlab")``, or ``NOGRADLAB_CACHE_DIR``; ``off`` keeps
nothing) as JSON, one file per step, keyed by the torch release, nogradlab's version and the code that
records traces (a hash of the package's estimate and model sources), and the step (the workload's name
and scale, the mode, the device, the transformer fast path's switch). The memory rows of the built-in
workloads (``nogradlab.estimate.sweep.estimate_row``) are kept the same way (:func:`remembered`). Your own
models are not kept (their structure is yours to change between runs).

An entry is trusted only whole: its magic and format, its key equal to the one asked for, its checksum
(SHA-256 of its payload) right, and its traces a line in the batch; anything else (a file cut short,
another release's entry, a hand-edited number) is ignored and the program made again. A file in the
folder that is not one of ours (no magic) is never overwritten.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile

import torch

__all__ = ["folder", "load", "save", "remembered", "MAGIC", "FORMAT"]

MAGIC = "nogradlab allocation program"
FORMAT = 3
ENV = "NOGRADLAB_CACHE_DIR"


def folder() -> "str | None":
    """Where programs are kept: ``$NOGRADLAB_CACHE_DIR/programs`` where set (``off`` or empty: nowhere),
    else the user's cache folder's ``programs``."""
    env = os.environ.get(ENV)
    if env is not None:
        if env.strip().lower() in ("", "off", "0", "none"):
            return None
        return os.path.join(env, "programs")
    import platformdirs

    return os.path.join(platformdirs.user_cache_dir("nogradlab"), "programs")


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """A hash of the sources that decide a trace: the estimate wing, the workloads, the modes and the
    workspace table (so an edit there makes earlier entries foreign)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    paths = []
    for sub in ("estimate", "core"):
        for dirpath, _, files in os.walk(os.path.join(root, sub)):
            paths += [os.path.join(dirpath, f) for f in files if f.endswith((".py", ".json"))]
    for path in sorted(paths):
        h.update(os.path.relpath(path, root).encode())
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("nogradlab")
    except Exception:  # noqa: BLE001 - a checkout without metadata
        return "unknown"


def _release() -> dict:
    try:
        import torchvision

        tv = torchvision.__version__
    except ImportError:  # pragma: no cover
        tv = None
    return {"torch": torch.__version__, "torchvision": tv, "nogradlab": _version(), "code": code_hash()}


def _key(workload, scale: str, mode: str, dev: str, fast) -> "dict | None":
    if not isinstance(workload, str):
        return None  # your own model: not kept
    return {**_release(), "workload": workload, "scale": scale, "mode": mode, "device": dev, "fast": fast}


def _path(key: dict, kind: str = "") -> "str | None":
    d = folder()
    if d is None:
        return None
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return os.path.join(d, f"{kind}{key['workload']}-{key['mode'].replace('+', '_')}-{digest}.json")


_HEAD = re.compile(rb'\A\s*\{\s*"magic"\s*:\s*"' + MAGIC.encode() + rb'"')  # how every entry starts


def _checksum(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _tuples(x):
    """JSON's lists back to the tuples a trace is made of (events and their keys)."""
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


def _events(x) -> list:
    if not isinstance(x, list):
        raise ValueError("not a trace")
    return [_tuples(e) for e in x]


def load(workload, scale: str, mode: str, dev: str, fast) -> "dict | None":
    """The kept program of this step as ``Program``'s fields (``source="cache"``), or None (none kept, not
    ours, or not to be trusted). The caller still checks that its traces are one line in the batch."""
    key = _key(workload, scale, mode, dev, fast)
    path = _path(key) if key is not None else None
    if path is None or not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
        if entry.get("magic") != MAGIC or entry.get("format") != FORMAT or entry.get("key") != key:
            return None
        payload = entry["payload"]
        if entry.get("sha256") != _checksum(payload):
            return None
        return dict(a=int(payload["a"]), ev_a=_events(payload["ev_a"]), b=int(payload["b"]),
                    ev_b=_events(payload["ev_b"]), checked=tuple(int(c) for c in payload["checked"]),
                    lowest=int(payload["lowest"]), notes=tuple(str(n) for n in payload["notes"]),
                    own={int(b): _events(ev) for b, ev in payload["own"]}, source="cache")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # cut short, hand-edited, not a trace: made again


def save(workload, scale: str, mode: str, dev: str, fast, prog) -> "str | None":
    """Keep ``prog``; returns the file written, or None (nothing kept: your own model, caching off, a
    folder that cannot be written, or a file there that is not ours)."""
    key = _key(workload, scale, mode, dev, fast)
    path = _path(key) if key is not None else None
    if path is None:
        return None
    payload = {"a": prog.a, "ev_a": prog.ev_a, "b": prog.b, "ev_b": prog.ev_b, "checked": list(prog.checked),
               "lowest": prog.lowest, "notes": list(prog.notes), "own": [[b, ev] for b, ev in sorted(prog.own.items())]}
    return _write(path, key, json.loads(json.dumps(payload)))  # the payload in the form it is read back in


def _write(path: str, key: dict, payload: dict) -> "str | None":
    """Write an entry whole (a temporary file renamed over it), unless the file there is not ours."""
    if os.path.exists(path):
        try:
            with open(path, "rb") as f:
                ours = _HEAD.match(f.read(200)) is not None  # ours, even cut short or rewritten by hand
        except OSError:
            ours = False
        if not ours:
            return None  # never overwrite what nogradlab did not write
    entry = {"magic": MAGIC, "format": FORMAT, "key": key, "sha256": _checksum(payload), "payload": payload}
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry, f, separators=(",", ":"))
        os.replace(tmp, path)  # whole or not at all, also beside another process writing the same entry
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)  # our own temporary file
        return None
    return path


def remembered(kind: str, fields: dict, compute):
    """``compute()``, a deterministic estimate's JSON-able result (lists come back as tuples), kept between
    processes under ``kind`` and ``fields`` (which must name ``workload`` and ``mode``; a string workload
    only) with the same rules as a program: keyed by the release and the code, checksummed, an entry
    that is damaged or foreign ignored and made again, a file that is not ours never overwritten."""
    key = {**_release(), "kind": kind, **fields}
    path = _path(key, kind + "-") if isinstance(fields.get("workload"), str) else None
    if path is not None and os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                entry = json.load(f)
            if (entry.get("magic") == MAGIC and entry.get("format") == FORMAT and entry.get("key") == key
                    and entry.get("sha256") == _checksum(entry["payload"])):
                return _tuples(entry["payload"]["value"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
    value = compute()
    if path is not None:
        _write(path, key, {"value": json.loads(json.dumps(value))})
    return value
