"""``nogradlab estimate`` on two processes: the training step's searches in a second one.

An unseen model's four modes cost about four traces each, and the training step's are the longest (on
the 2-core EPYC, swin_t: 1.1 s a trace against 0.3-0.4 s a forward one; 4.4 s of the 9.4 s the modes
take). The traces are Python under one lock, so one process cannot share them over two CPUs; two processes
can. :func:`start` launches ``python -m nogradlab estimate ... --modes train --json FILE`` before the first
process has imported torch (both load it at once, on two CPUs), the first process estimates the other
modes meanwhile, and :meth:`Helper.result` hands back the second one's document for
:func:`nogradlab.estimate.cli.run` to merge. The answers are the same as on one process: each mode's
search is its own (the merged document equals the one-process document, tested), only the wall time
changes.

Two processes only where they help and fit (:func:`plan`): the model given as ``MODULE:FACTORY`` (a
function or a module built in Python cannot be handed over), the training step and another mode asked,
two CPUs this process may use (the scheduler's affinity and the cgroup's quota) and
:data:`MIN_HEADROOM` of memory free (the second process loads torch again: on Binder's 2 GB it would
not fit beside a kernel). ``--processes 1`` keeps to one process. Imports no torch.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

from nogradlab.core import resources

__all__ = ["PROCESSES", "MIN_HEADROOM", "MODE", "HELPER_ENV", "check_processes", "plan", "start", "Helper"]

PROCESSES = ("auto", "1", "2")
#: memory that must be free for a second process: it loads torch (0.3-0.4 GB anonymous with the CUDA wheel)
#: and traces the training step (swin_t's: 0.86 GB of RSS at its peak)
MIN_HEADROOM = 2 * 2 ** 30
#: the mode the second process estimates: the longest
MODE = "train"
#: set in the second process (its own modes are never split again)
HELPER_ENV = "NOGRADLAB_ESTIMATE_HELPER"


def check_processes(value) -> str:
    """``--processes``: auto, 1 or 2 (``ValueError`` naming them otherwise)."""
    text = str(value).strip().lower()
    if text not in PROCESSES:
        raise ValueError(f"--processes must be one of {', '.join(PROCESSES)}; got {value!r}")
    return text


def plan(model, modes, processes: str = "auto", *, cpus=None, headroom=None) -> "str | None":
    """Why the modes stay on one process (a short reason), or None when :data:`MODE` goes to a second one.
    ``cpus`` and ``headroom`` (bytes) are for tests; by default this machine's."""
    processes = check_processes(processes)
    names = [m.strip() for m in str(modes).split(",") if m.strip()]
    if processes == "1":
        return "--processes 1"
    if os.environ.get(HELPER_ENV):
        return "this is the second process"
    if not isinstance(model, str):
        return "the model is not given as MODULE:FACTORY"
    if MODE not in names or len(set(names)) < 2:
        return f"{MODE} and another mode are not both asked for"
    if processes == "2":
        return None
    cpus = resources.cpu_budget() if cpus is None else cpus
    if cpus < 2:
        return f"this process may use {cpus} CPU"
    headroom = resources.memory_headroom() if headroom is None else headroom
    if headroom is not None and headroom < MIN_HEADROOM:
        return f"{headroom / 2 ** 30:.1f} GiB of memory free (a second process needs {MIN_HEADROOM / 2 ** 30:.0f})"
    return None


def _child_path() -> str:
    """PYTHONPATH for the second process: this one's import path where it is not the interpreter's own
    (a model importable here is importable there: a test folder, a notebook's folder added to sys.path)."""
    own = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    keep = [p for p in sys.path if p and os.path.isdir(p)
            and not any(os.path.realpath(p).startswith(o + os.sep) or os.path.realpath(p) == o for o in own)]
    earlier = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(list(dict.fromkeys(keep)) + ([earlier] if earlier else []))


class Helper:
    """The second process and its folder (made here, removed by :meth:`close`, nothing else in it)."""

    def __init__(self, argv: list):
        self.folder = tempfile.mkdtemp(prefix="nogradlab-estimate-")
        self.json = os.path.join(self.folder, "train.json")
        self._err = open(os.path.join(self.folder, "stderr.txt"), "w+b")  # noqa: SIM115 - closed in close()
        env = dict(os.environ, **{HELPER_ENV: "1", "PYTHONPATH": _child_path()})
        self.proc = subprocess.Popen([sys.executable, "-m", "nogradlab", "estimate", *argv, "--modes", MODE,
                                      "--processes", "1", "--no-progress", "--json", self.json],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err,
                                     env=env)
        self.error = ""
        self.mode = MODE

    def result(self) -> "dict | None":
        """The second process's document once it has ended, or None when it wrote none (then
        :attr:`error` holds the end of what it printed): the caller estimates the mode itself."""
        try:
            rc = self.proc.wait()
        finally:
            self.close(kill=False)
        return self._doc(rc)

    def _doc(self, rc) -> "dict | None":
        try:
            with open(self.json) as f:
                doc = json.load(f)
            if isinstance(doc, dict) and isinstance(doc.get("modes"), dict):
                return doc
            self.error = f"the second process wrote no estimate (exit {rc})"
        except (OSError, ValueError) as e:
            self.error = f"the second process wrote no estimate (exit {rc}: {self.error or e})"
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
        return None

    def close(self, kill: bool = True) -> None:
        """Stop the second process (when ``kill``) and keep the end of what it printed."""
        if kill and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._err.closed:
            with contextlib.suppress(OSError):
                self._err.seek(0)
                self.error = self._err.read()[-600:].decode(errors="replace").strip()
            self._err.close()
        if kill:
            shutil.rmtree(self.folder, ignore_errors=True)


def start(args_model: str, argv: list, modes: str, processes: str = "auto") -> "Helper | None":
    """The second process started for ``argv`` (the command's arguments but ``--modes``, ``--json`` and
    ``--processes``), or None where :func:`plan` keeps to one process."""
    if plan(args_model, modes, processes) is not None:
        return None
    return Helper(argv)
