"""Output safety: where ``python -m nogradlab run`` may write, and how it replaces an earlier report.

The rules, checked before any notebook runs:

- ``run`` writes only into a folder it created or marked as its own. Its mark is a file named
  ``.nogradlab-build`` inside the folder (JSON: the run's id, its state, the top-level entries it wrote and,
  under ``files``, every path it wrote inside them). A folder that exists, is not empty and holds no such
  mark is refused, and so is a marked folder that now holds anything nogradlab did not write, at any depth
  (a "Save As" copy or ``.ipynb_checkpoints`` in ``notebooks/``): nothing in it is ever moved or deleted.
- The siblings ``<out>.partial`` (the build in progress) and ``<out>.failed`` (the last failed build) are
  treated the same way: removed or replaced only when they carry the mark.
- A run holds a lock (``filelock``'s native lock on ``.<out>.nogradlab-lock`` beside the folder: ``flock``
  on POSIX, ``msvcrt.locking`` on Windows) from the checks to the end; a second run into the same folder is
  refused at once. The operating system drops the lock when a process dies, however it dies.
- The output location is checked for writing (a probe file is created and removed) before any work.

Every problem found here raises :class:`OutputError` (the command line exits 2 with its message).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import filelock

__all__ = ["MARKER", "BUILD_ENTRIES", "lock_path", "OutputError", "OutputBusy", "Layout", "prepare", "read_mark", "write_mark",
           "is_ours", "Lock", "replace_dir", "remove_ours", "write_text_atomic", "check_file_target",
           "is_complete_doc", "check_not_partial_over_complete"]

MARKER = ".nogradlab-build"
_TOOL = "nogradlab"
# what a run writes at the top of its folder (a build in progress is marked with these from the start)
BUILD_ENTRIES = ("notebooks", "ledger.jsonl", "ledger.jsonl.timings", "claims.json", "report.html", "FAILED.txt")
# the run's own scratch folder (the run cache's pickles, one per shared measurement: nogradlab.claims.runcache),
# named only by the run, written only by its notebook kernels: vouched for whole, its files not listed one by one
SCRATCH_ENTRIES = ("ledger.jsonl.timings",)


def lock_path(out) -> Path:
    """The lock file of output folder ``out``: ``.<name>.nogradlab-lock`` beside it."""
    out = Path(out).expanduser().absolute()
    return out.with_name(f".{out.name}.nogradlab-lock")


class OutputError(Exception):
    """An output path nogradlab will not write to (checked before any work)."""


class OutputBusy(OutputError):
    """Another nogradlab run holds the output folder."""


def read_mark(folder: Path) -> "dict | None":
    """The mark in ``folder`` (a dict), or None when there is none or it is not ours."""
    try:
        mark = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) and mark.get("tool") == _TOOL else None


def write_mark(folder: Path, **fields) -> dict:
    """Write (atomically) the mark of ``folder``. ``entries`` (top-level names) defaults to what the folder
    holds now, and ``files`` (every path below those entries, relative, with ``/``) to what they hold now."""
    folder = Path(folder)
    mark = {"tool": _TOOL, **fields}
    mark.setdefault("entries", sorted(p.name for p in folder.iterdir() if p.name != MARKER))
    mark.setdefault("files", sorted(_below(folder, mark["entries"])))
    write_text_atomic(folder / MARKER, json.dumps(mark, indent=1) + "\n")
    return mark


def _below(folder: Path, entries) -> list:
    """Every path (files and folders, relative, ``/``-separated) inside the top-level folders ``entries`` of
    ``folder``; a link is listed, never followed."""
    found = []
    for name in entries:
        top = Path(folder) / name
        if top.is_symlink() or not top.is_dir():
            continue
        for root, dirs, files in os.walk(top):
            rel = Path(root).relative_to(folder).as_posix()
            found += [f"{rel}/{n}" for n in dirs + files]
    return found


def is_ours(folder: Path) -> bool:
    """True when ``folder`` carries the mark and holds nothing besides what the mark lists."""
    mark = read_mark(folder)
    if mark is None:
        return False
    return not _foreign(folder, mark)


# a temporary file of write_text_atomic's, left by a process killed mid-write: `.<name>.<pid>-<8 hex>.tmp`
_TMP = re.compile(r"^\.(?P<name>.+)\.\d+-[0-9a-f]{8}\.tmp$")


def _foreign(folder: Path, mark: dict) -> list:
    """What ``folder`` holds that its mark does not list, at any depth (relative paths): the top-level names
    against ``entries``, everything inside those folders against ``files``. A mark without ``files`` (written
    by an earlier nogradlab) vouches inside its folders only for the files its own claims.json names."""
    folder = Path(folder)
    listed = set(mark.get("entries") or ())

    def ours(rel: str, names: set) -> bool:
        head, _, base = rel.rpartition("/")
        tmp = _TMP.match(base)
        return rel in names or bool(tmp and (f"{head}/{tmp['name']}" if head else tmp["name"]) in names)

    foreign = [p.name for p in folder.iterdir() if p.name != MARKER and not ours(p.name, listed | {MARKER})]
    files = mark.get("files")
    files = set(files) if isinstance(files, list) and all(isinstance(f, str) for f in files) else _written(folder)
    files |= {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}  # their folders
    walk = (listed - set(SCRATCH_ENTRIES)) & {p.name for p in folder.iterdir()}
    foreign += [rel for rel in _below(folder, sorted(walk)) if not ours(rel, files)]
    return sorted(foreign)


def _written(folder: Path) -> set:
    """The files an earlier build's claims.json says its run wrote (the executed notebooks, their pages and
    kernel logs); empty when it cannot be read."""
    try:
        doc = json.loads((Path(folder) / "claims.json").read_text())
        records = doc["meta"]["notebooks"]
        return {r[k] for r in records for k in ("ipynb", "html", "kernel_log")
                if isinstance(r.get(k), str) and r[k].startswith("notebooks/") and ".." not in r[k]}
    except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError):
        return set()


def _names(items, n=4) -> str:
    items = list(items)
    shown = ", ".join(items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


def write_text_atomic(path: Path, text) -> Path:
    """Write ``text`` (str, or bytes written as they are) to ``path`` through a temporary file beside it,
    then rename it into place: an interrupted or failed write (a kill, a full disk) leaves the earlier
    file as it was and no temporary file behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return path


DEFAULT_OUT = "nogradlab-run"  # not build/: setuptools makes that one (pip wheel ., pip install .)


def _from_make() -> bool:
    return bool(os.environ.get("NOGRADLAB_FROM_MAKE"))  # the Makefile's `run` sets it


def _named(out) -> str:
    """The output folder as the person who started the run named it: ``OUT=...`` or ``--out ...``."""
    return f"OUT={str(out)!r}" if _from_make() else f"--out {str(out)!r}"


def _another() -> str:
    return "choose another folder (make run OUT=DIR)" if _from_make() else "choose another --out"


def _example(out) -> str:
    """A folder to try instead, never the one refused."""
    name = DEFAULT_OUT if Path(out).name != DEFAULT_OUT else DEFAULT_OUT + "-2"
    return f"make run OUT={name}" if _from_make() else f"--out {name}"


def _probe_writable(folder: Path, what: str) -> None:
    probe = folder / f".nogradlab-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OutputError(f"cannot write to {what} {str(folder)!r}: {e.strerror or e}; "
                          f"{_another()}, one you can write to") from None


@dataclass
class Layout:
    """The folders of one run into ``out``."""
    out: Path
    partial: Path
    failed: Path
    previous: Path
    lock: Path
    out_state: str  # "missing", "empty" or "ours"
    notes: list = field(default_factory=list)


def prepare(out, protect=()) -> Layout:
    """Check that a run may write into ``out`` and return its layout; raises :class:`OutputError`.

    ``protect``: folders the output must neither be nor contain (the notebooks, the reference results).
    Creates the missing parent folders of ``out`` (nothing else).
    """
    out = Path(out).expanduser().absolute()
    if out.parent == out:
        raise OutputError(f"{_named(out)} is a filesystem root; choose a folder of its own, e.g. {_example(out)}")
    for p in protect:
        p = Path(p).resolve()
        r = out.resolve()
        if p == r or r in p.parents:
            raise OutputError(f"{_named(out)} holds {str(p)!r}, which nogradlab reads; {_another()}")
    lay = Layout(out=out, partial=out.with_name(out.name + ".partial"), failed=out.with_name(out.name + ".failed"),
                 previous=out.with_name(out.name + ".previous"),
                 lock=lock_path(out), out_state="missing")
    if out.exists() or out.is_symlink():
        if out.is_symlink() or not out.is_dir():
            raise OutputError(f"{_named(out)} exists and is not a folder; {_another()}")
        entries = [p.name for p in out.iterdir()]
        mark = read_mark(out)
        if not entries:
            lay.out_state = "empty"
        elif mark is None:
            raise OutputError(
                f"{_named(out)} is not empty and was not made by nogradlab (it holds {_names(sorted(entries))}); "
                f"nothing in it was touched. Choose a new or empty folder, e.g. {_example(out)}")
        else:
            extra = _foreign(out, mark)
            if extra:
                raise OutputError(
                    f"{_named(out)} holds an earlier nogradlab report, but also {_names(extra)}, which "
                    f"nogradlab did not write; nothing was touched. Move those elsewhere or {_another()}")
            lay.out_state = "ours"
    for sib in (lay.partial, lay.failed, lay.previous):
        if (sib.exists() or sib.is_symlink()) and (sib.is_symlink() or not sib.is_dir() or not is_ours(sib)):
            raise OutputError(f"{str(sib)!r} exists and was not made by nogradlab (or holds files it did not "
                              f"write); nogradlab uses that name for its own builds. Move it away or choose "
                              f"another folder ({'make run OUT=DIR' if _from_make() else '--out'})")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create the folder {str(out.parent)!r}: {e.strerror or e}") from None
    _probe_writable(out.parent, "the folder")
    if lay.out_state != "missing":
        _probe_writable(out, "the output folder")
    return lay


class Lock:
    """An exclusive, non-blocking lock on ``path`` (created if needed, removed on release): ``filelock``'s
    native lock, which the operating system drops when the process dies, on POSIX and Windows alike. The
    file holds the holder's pid for the message a second run gets."""

    def __init__(self, path: Path, what: str):
        self.path, self.what, self._lock = Path(path), what, None

    def acquire(self) -> "Lock":
        lock = filelock.FileLock(str(self.path), timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            holder = ""
            try:
                with open(self.path, "rb") as f:
                    holder = f.read(200).decode(errors="replace").strip()
            except OSError:
                pass
            raise OutputBusy(f"another nogradlab run{f' ({holder})' if holder else ''} is writing to "
                             f"{self.what}; wait for it to finish or {_another()}") from None
        except OSError as e:
            raise OutputError(f"cannot lock {str(self.path)!r}: {e.strerror or e}") from None
        self._lock = lock
        try:  # who holds it (Windows locks the file's first byte: there this is skipped)
            with open(self.path, "r+b") as f:
                f.truncate(0)
                f.write(f"pid {os.getpid()}, since {time.strftime('%H:%M:%S')}".encode())
        except OSError:
            pass
        return self

    def release(self) -> None:
        if self._lock is None:
            return
        try:  # removed while still held: a run that opened the old file then sees it unlinked and retries
            self.path.unlink()
            removed = True
        except OSError:
            removed = False
        self._lock.release()
        self._lock = None
        if not removed:  # Windows: a file cannot be removed while open; never the next holder's (it is open)
            try:
                self.path.unlink()
            except OSError:
                pass

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def remove_ours(folder: Path) -> bool:
    """Delete ``folder`` only when it carries our mark and nothing else; returns whether it did."""
    folder = Path(folder)
    if folder.is_dir() and not folder.is_symlink() and is_ours(folder):
        shutil.rmtree(folder)
        return True
    return False


def replace_dir(src: Path, dst: Path, previous: Path) -> None:
    """Put the marked folder ``src`` at ``dst``. An earlier ``dst`` is moved to ``previous`` first and
    deleted only after the move succeeded, and only if it is ours (an empty folder is removed with rmdir)."""
    src, dst, previous = Path(src), Path(dst), Path(previous)
    if not is_ours(src):
        raise OutputError(f"internal: {str(src)!r} is not a nogradlab build")
    remove_ours(previous)
    if dst.exists():
        if dst.is_dir() and not any(dst.iterdir()):
            dst.rmdir()
        elif is_ours(dst):
            dst.rename(previous)
        else:
            raise OutputError(f"{str(dst)!r} now holds files nogradlab did not write; the new build was left "
                              f"in {str(src)!r}")
    src.rename(dst)
    remove_ours(previous)


def _is_claims_doc(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("meta"), dict) and "claims" in doc


def check_file_target(path, kind: str = "claims.json", ours=_is_claims_doc) -> Path:
    """Check, before any work, that a file may be written at ``path``: not a folder, its folder exists
    and is writable, and an existing file there is an earlier nogradlab ``kind`` (``ours(doc)`` of its
    JSON is true; never a user's file). Anything there that is not a regular file (a FIFO, a device,
    ``/dev/stdout``) is refused without being opened."""
    path = Path(path).expanduser().absolute()
    if path.is_dir():  # the example is a file name: ``kind`` when it is one ("claims.json"), else a .json
        example = kind if re.fullmatch(r"[\w.-]+\.json", kind) else "estimate.json"
        raise OutputError(f"{str(path)!r} is a folder; give a file name, e.g. {str(path / example)!r}")
    if not path.parent.is_dir():
        raise OutputError(f"the folder {str(path.parent)!r} does not exist; create it first")
    if path.exists() and not path.is_file():
        # a FIFO (reading it waits for a writer forever), /dev/stdout piped on, /dev/zero (read until memory
        # runs out): never read, never written; the file is written through a temporary file renamed into place
        raise OutputError(f"{str(path)!r} is not a regular file (a pipe, FIFO, socket or device); nothing was "
                          f"read or written. Give the name of a regular file")
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            mine = bool(ours(doc))
        except (OSError, ValueError, RecursionError):  # RecursionError: nested too deeply to be ours
            mine = False
        if not mine:
            raise OutputError(f"{str(path)!r} exists and is not a {kind} written by nogradlab; "
                              f"nothing was overwritten. Choose another file")
    _probe_writable(path.parent, "the folder")
    return path


def is_complete_doc(doc) -> bool:
    """True for a claims.json that has a verdict for every claim it lists and says it is complete."""
    return (_is_claims_doc(doc) and doc["meta"].get("complete") is True and isinstance(doc["claims"], list)
            and all(isinstance(c, dict) and c.get("verdict") is not None for c in doc["claims"]))


def check_not_partial_over_complete(path, partial: bool, flag: str = "--force",
                                    what: str = "this run's document is partial") -> None:
    """Refuse (:class:`OutputError`) to replace the complete claims.json at ``path`` with a ``partial``
    document (some claims only, or some without a verdict), unless the caller was given ``flag``. The
    existing file is read only when it is a regular file."""
    path = Path(path).expanduser().absolute()
    if not partial or not path.is_file():
        return
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return
    if is_complete_doc(old):
        raise OutputError(f"{str(path)!r} holds a complete claims.json ({len(old['claims'])} claims) and {what}, "
                          f"so it was left as it was. Write elsewhere, or pass {flag} to replace it")
