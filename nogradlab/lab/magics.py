"""IPython cell magics: a cell's memory, and a cell under several gradient modes.

    %load_ext nogradlab

    %%memory
    y = model(x)          # prints peak, saved-for-backward and retained bytes of the cell

    %%modes grad no_grad inference_mode --rounds 10 --min-run-time 0.3
    y = model(x)          # runs the cell under each mode: one table of time and memory per mode

The cell runs in the notebook's namespace (its assignments stay), through IPython's own input
transformations. Memory comes from :func:`nogradlab.memory.measure`, time from
:func:`nogradlab.timing.compare` (warm-up, interleaved rounds, speedup over the first mode with a
paired signed-rank CI), both orchestrated by :func:`nogradlab.widgets.measure_modes`. Bad arguments
(an unknown mode, a non-positive count) raise ``UsageError`` naming what is allowed, before the
cell runs.
"""
from __future__ import annotations

import linecache
import os
import types

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from nogradlab.core import device as _device
from nogradlab.core import memory as _memory
from nogradlab.core import modes as _modes

__all__ = ["NogradMagics", "load_ipython_extension"]


def _positive(kind, name):
    def convert(text):
        try:
            v = kind(text)
        except ValueError:
            raise UsageError(f"{name} must be a positive {kind.__name__}, got {text!r}") from None
        if not 0 < v < float("inf"):  # NaN and inf too: a run that never ends, a time that means nothing
            raise UsageError(f"{name} must be a positive, finite {kind.__name__}, got {text!r}")
        return v
    return convert


def _parse(magic, line):
    try:
        return parse_argstring(magic, line)
    except SystemExit as e:  # argparse gives up on some errors with SystemExit
        raise UsageError(f"bad arguments {line!r}: {e}") from None


def _check_device(name):
    if name is None:
        return None
    try:
        return _device.resolve(name)
    except (ValueError, RuntimeError, TypeError) as e:
        raise UsageError(str(e)) from None


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # nogradlab/, every wing
# torch's wrappers between an operator and a TorchDispatchMode (the storage tracker)
_DISPATCH_GLUE = (os.path.join("torch", "_compile.py"), os.path.join("torch", "_dynamo", ""),
                  os.path.join("torch", "_ops.py"))


def _user_traceback(tb, filename: str):
    """The traceback from the user's cell on, without the probes' own frames: the frames of the
    cell (``filename``) and of what it called, cut where nogradlab's instrumentation (and torch's
    dispatch glue leading into it) begins. None when the error did not come from the cell."""
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    start = next((i for i, t in enumerate(frames) if t.tb_frame.f_code.co_filename == filename),
                 None)
    if start is None:
        return None
    kept = []
    for t in frames[start:]:
        name = os.path.abspath(t.tb_frame.f_code.co_filename)
        if name.startswith(_PACKAGE + os.sep):
            break  # the memory tracker under the user's call: instrumentation, not their code
        kept.append(t)
    while len(kept) > 1 and any(g in kept[-1].tb_frame.f_code.co_filename
                                for g in _DISPATCH_GLUE):
        kept.pop()
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


@magics_class
class NogradMagics(Magics):
    """``%%memory`` and ``%%modes``."""

    def _code(self, cell: str, header: str = ""):
        """The cell, transformed as IPython would (so ``%`` lines and ``!`` work), compiled under
        a file name registered in ``linecache`` (as IPython does for every cell), so that a
        traceback shows the user's source lines. ``header``, the ``%%magic`` line, keeps the line
        numbers those of the cell as the user sees it. Returns (code, file name)."""
        source = self.shell.transform_cell(cell)
        shown = f"{header}\n{source}" if header else source
        number = getattr(self.shell, "execution_count", 0)
        try:
            name = self.shell.compile.cache(shown, number, raw_code=shown)
        except TypeError:  # IPython 7: cache(code, number)
            name = self.shell.compile.cache(shown, number)
        except Exception:  # noqa: BLE001 - a shell without IPython's caching compiler
            name = f"<nogradlab-cell-{abs(hash(shown))}>"
            linecache.cache[name] = (len(shown), None, shown.splitlines(True), name)
        return compile(("\n" if header else "") + source, name, "exec"), name

    def _runner(self, cell: str, header: str = ""):
        code, self._filename = self._code(cell, header)
        ns = self.shell.user_ns

        def run():
            exec(code, ns)  # noqa: S102 - the user's own cell, in the user's namespace
        return run

    def _users_error(self, e: BaseException):
        """``e`` with a traceback that starts at the user's cell (see :func:`_user_traceback`),
        or None when it did not come from the cell."""
        tb = _user_traceback(e.__traceback__, getattr(self, "_filename", None))
        return None if tb is None else e.with_traceback(tb)

    @magic_arguments()
    @argument("--device", "-d", default=None,
              help="device the cell computes on (cpu, cuda, cuda:N, mps): on CUDA the caching "
                   "allocator's counters are read; default: track tensor storages on any device")
    @argument("--method", "-m", default="auto", choices=_memory.METHODS,
              help="memory probe: storage (tensor storages), allocator (CUDA), auto")
    @argument("--out", "-o", default=None,
              help="store the MemoryReport in this variable of the notebook")
    @cell_magic
    def memory(self, line, cell):
        """Run the cell once and print its memory: peak (above what was live before the cell),
        saved for backward (distinct storages autograd kept) and retained (still alive after the
        cell, e.g. in the variables it assigned and their graphs)."""
        args = _parse(self.memory, line)
        dev = _check_device(args.device)
        if args.method == "allocator" and (dev is None or dev.type != "cuda"):
            raise UsageError("--method allocator needs --device cuda; allowed methods: "
                             f"{', '.join(_memory.METHODS)}")
        run = self._runner(cell, f"%%memory {line}".rstrip())
        __tracebackhide__ = True  # noqa: F841 - IPython hides this frame in tracebacks
        try:
            report = _memory.measure(run, dev, method=args.method, label="cell")
        except Exception as e:
            err = self._users_error(e)
            if err is None:
                raise
            raise err  # noqa: B904 - err is e itself, re-raised with a traceback from the user's cell
        rows = [("peak", report.peak_bytes), ("saved for backward", report.saved_bytes),
                ("retained", report.retained_bytes)]
        print(f"cell memory [{report.method} on {report.device}]")
        for name, n in rows:
            print(f"  {name:<19} {_memory.format_bytes(n):>12}")
        print(f"  ({report.saved_tensors} storages saved for backward)")
        for note in report.notes:
            print(f"  note: {note}")
        if args.out:
            self.shell.user_ns[args.out] = report

    @magic_arguments()
    @argument("modes", nargs="*", metavar="MODE",
              help=f"gradient modes to compare, first is the baseline (default: "
                   f"{' '.join(_modes.names())}); allowed: {', '.join(_modes.names())}, and "
                   "autocast settings such as no_grad+bf16")
    @argument("--rounds", "-r", type=_positive(int, "--rounds"), default=10,
              help="interleaved timing rounds (at least 2)")
    @argument("--min-run-time", "-t", type=_positive(float, "--min-run-time"), default=0.3,
              help="timed seconds per mode in total")
    @argument("--warmup", "-w", type=int, default=2, help="untimed calls per mode first")
    @argument("--device", "-d", default=None,
              help="device the cell computes on, for synchronizing the clock and the memory probe")
    @argument("--no-memory", action="store_true", help="time only")
    @argument("--out", "-o", default=None,
              help="store the result (nogradlab.widgets.ModesResult) in this variable")
    @cell_magic
    def modes(self, line, cell):
        """Run the cell under each gradient mode: memory once per mode, then time in interleaved
        rounds after a warm-up; print one table with the speedup over the first mode and its CI.
        The cell runs many times: assignments it makes keep the values of its last run."""
        from nogradlab.lab.widgets import measure_modes

        args = _parse(self.modes, line)
        names = args.modes or list(_modes.names())
        for m in names:
            try:
                s = _modes.parse(m)
            except ValueError:
                raise UsageError(f"unknown mode {m!r}; allowed: {', '.join(_modes.names())} "
                                 "(optionally with +bf16 or +fp16)") from None
            if s.train is not None:
                raise UsageError(f"mode {m!r} sets train/eval, which needs a model; call "
                                 "model.train() or model.eval() in the cell instead. Allowed: "
                                 f"{', '.join(_modes.names())}")
        if len(set(names)) != len(names):
            raise UsageError(f"modes repeat: {' '.join(names)}")
        if args.rounds < 2:
            raise UsageError(f"--rounds must be at least 2, got {args.rounds}")
        if args.warmup < 0:
            raise UsageError(f"--warmup must be 0 or more, got {args.warmup}")
        dev = _check_device(args.device)
        run = self._runner(cell, f"%%modes {line}".rstrip())
        __tracebackhide__ = True  # noqa: F841 - IPython hides this frame in tracebacks
        try:
            result = measure_modes(run, names, dev, memory=not args.no_memory,
                                   rounds=args.rounds, min_run_time=args.min_run_time,
                                   warmup=args.warmup, title=f"cell under {len(names)} modes")
        except Exception as e:
            err = self._users_error(e)
            if err is None:
                raise
            raise err  # noqa: B904 - err is e itself, re-raised with a traceback from the user's cell
        print(result)
        if args.out:
            self.shell.user_ns[args.out] = result


def load_ipython_extension(ipython) -> None:
    """``%load_ext nogradlab`` (or ``nogradlab.magics``): register ``%%memory`` and ``%%modes``."""
    ipython.register_magics(NogradMagics)
