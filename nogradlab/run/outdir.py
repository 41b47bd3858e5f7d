"""Output safety: where ``python -m nogradlab run`` may write, and how it replaces an earlier report.

The rules, checked before any notebook runs:

- ``run`` writes only into a folder it created or marked as its own. Its mark is a file named
  ``.nogradlab-build`` inside the folder (JSON: the run's id, its state and the entries it wrote). A folder
  that exists, is not empty and holds no such mark is refused, and so is a marked folder that now holds
  entries nogradlab did not write: nothing in it is ever moved or deleted.
- The siblings ``<out>.partial`` (the build in progress) and ``<out>.failed`` (the last failed build) are
  treated the same way: removed or replaced only when they carry the mark.
- A run holds a lock (``flock`` on ``.<out>.nogradlab-lock`` beside the folder) from the checks to the end; a
  second run into the same folder is refused at once. The kernel drops the lock when a process dies, however
  it dies.
- The output location is checked for writing (a probe file is created and removed) before any work.

Every problem found here raises :class:`OutputError` (the command line exits 2 with its message).
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MARKER", "BUILD_ENTRIES", "lock_path", "OutputError", "OutputBusy", "Layout", "prepare", "read_mark", "write_mark",
           "is_ours", "Lock", "replace_dir", "remove_ours", "write_text_atomic", "check_file_target",
           "is_complete_doc", "check_not_partial_over_complete"]

MARKER = ".nogradlab-build"
_TOOL = "nogradlab"
# what a run writes at the top of its folder (a build in progress is marked with these from the start)
BUILD_ENTRIES = ("notebooks", "ledger.jsonl", "ledger.jsonl.timings", "claims.json", "report.html", "FAILED.txt")


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
    """Write (atomically) the mark of ``folder``; ``entries`` defaults to what the folder holds now."""
    folder = Path(folder)
    mark = {"tool": _TOOL, **fields}
    mark.setdefault("entries", sorted(p.name for p in folder.iterdir() if p.name != MARKER))
    write_text_atomic(folder / MARKER, json.dumps(mark, indent=1) + "\n")
    return mark


def is_ours(folder: Path) -> bool:
    """True when ``folder`` carries the mark and holds nothing besides what the mark lists."""
    mark = read_mark(folder)
    if mark is None:
        return False
    return not _foreign(folder, mark)


def _foreign(folder: Path, mark: dict) -> list:
    listed = set(mark.get("entries") or ())
    return sorted(p.name for p in Path(folder).iterdir() if p.name != MARKER and p.name not in listed)


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
    """An exclusive, non-blocking ``flock`` on ``path`` (created if needed, removed on release)."""

    def __init__(self, path: Path, what: str):
        self.path, self.what, self.fd = Path(path), what, None

    def acquire(self) -> "Lock":
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise OutputError(f"cannot create the lock file {str(self.path)!r}: {e.strerror or e}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = ""
                try:
                    holder = os.read(fd, 200).decode(errors="replace").strip()
                except OSError:
                    pass
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise OutputBusy(f"another nogradlab run{f' ({holder})' if holder else ''} is writing to "
                                     f"{self.what}; wait for it to finish or {_another()}") from None
                raise OutputError(f"cannot lock {str(self.path)!r}: {e.strerror or e}") from None
            try:  # the file may have been removed and re-created by a run that just finished
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, f"pid {os.getpid()}, since {time.strftime('%H:%M:%S')}".encode())
                self.fd = fd
                return self
            os.close(fd)
        raise OutputBusy(f"could not take the lock on {self.what}; another run is starting there")

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink()
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

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
    if path.is_dir():
        raise OutputError(f"{str(path)!r} is a folder; give a file name, e.g. {str(path / kind)!r}")
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
        except (OSError, ValueError):
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
