"""Command line: ``python -m nogradlab run`` (the executable article), ``python -m nogradlab claims`` and
``python -m nogradlab estimate`` (your own model's GPU memory, without a GPU).

    python -m nogradlab --version
    python -m nogradlab run    [--device auto] [--scale auto] [--out nogradlab-run] [--notebooks DIR] [--results DIR]
    python -m nogradlab claims [--device auto] [--scale auto] [--json FILE] [--ids C01,C02] [--seed 0] [--force]
    python -m nogradlab estimate MODULE:FACTORY --input 3x224x224 [--dtype float32] --gpu 24GiB
                       [--modes grad,no_grad,inference_mode,train] [--allocator native|expandable_segments]
                       [--batch N] [--json FILE] [--processes auto|1|2]

``run`` executes every notebook (notebooks/NN_*.ipynb) with papermill and writes ``<out>/report.html``,
``<out>/claims.json`` and the executed notebooks with their HTML; ``claims`` runs the claim checks
alone and prints the verdict table. Both exit 0 only when every claim asked for got a verdict (and,
for ``run``, every notebook ran); 2 on bad arguments or an output path they may not use (checked before
any work: see ``nogradlab.outdir``); 130 when interrupted (Ctrl-C or SIGTERM). ``meta.complete`` means
every claim: ``claims --json`` never replaces a complete claims.json with a partial one (``--ids``, or a
check that failed) unless given ``--force``. The reference columns (``results/*/claims.json``) are read and
judged by today's rules before any check or notebook: a value in them that is no measurement reads "needs
re-measuring", an unreadable file is skipped with a warning (``nogradlab.runner.references``).
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    from nogradlab import __version__

    p = argparse.ArgumentParser(prog="python -m nogradlab",
                                description="What torch.no_grad really does: the article's claims, measured.")
    p.add_argument("--version", action="version", version=f"nogradlab {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{run,claims,estimate}")

    def common(sp):
        sp.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default auto)")
        sp.add_argument("--scale", default="auto",
                        help="auto, tiny, small or full (default auto: full on CUDA, tiny elsewhere)")
        sp.add_argument("--no-progress", action="store_true",
                        help="no progress bar (there is none anyway where standard error is not a terminal)")

    r = sub.add_parser("run", help="execute every notebook and write the report")
    common(r)
    r.add_argument("--out", default="nogradlab-run", help="output folder (default nogradlab-run)")
    r.add_argument("--notebooks", default=None, help="folder of NN_*.ipynb notebooks to run (default: the collection's own, a nogradlab checkout's notebooks/; never another project's unasked)")
    r.add_argument("--results", default=None,
                   help="folder of reference runs, <machine>/claims.json (default results/)")
    c = sub.add_parser("claims", help="run the claim checks alone and print the verdict table")
    common(c)
    c.add_argument("--json", default=None, metavar="FILE", help="also write the results as claims.json here")
    c.add_argument("--ids", default=None, help="comma-separated claim ids (default all), e.g. C01,C02")
    c.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    c.add_argument("--results", default=None,
                   help="folder of reference runs (<machine>/claims.json) shown beside the verdicts and judged by "
                        "today's rules (default: ./results when it exists, else the reference runs installed with "
                        "the package; --no-results for none)")
    c.add_argument("--no-results", action="store_true", help="show no reference columns")
    c.add_argument("--force", action="store_true",
                   help="let --json replace a complete claims.json with a partial one (--ids, or a check failed)")
    e = sub.add_parser("estimate", help="your own model: GPU memory per mode, the largest batch and the "
                                        "no_grad factor, on a virtual CUDA device (no GPU needed)")
    e.add_argument("model", metavar="MODULE:FACTORY",
                   help="an importable callable returning an nn.Module, e.g. torchvision.models:resnet101 "
                        "(called with weights=None when it takes that keyword)")
    e.add_argument("--input", required=True, help="one sample's shape, e.g. 3x224x224")
    e.add_argument("--dtype", default="float32",
                   help="the inputs' dtype (a floating dtype is the model's too; default float32)")
    e.add_argument("--gpu", default="24GiB", help="the memory budget, e.g. 24GiB or 80GB (default 24GiB)")
    e.add_argument("--modes", default="grad,no_grad,inference_mode,train",
                   help="comma-separated: grad, no_grad, inference_mode, train (default all four)")
    e.add_argument("--allocator", default="native", help="native or expandable_segments (default native)")
    e.add_argument("--batch", type=int, default=1, help="the batch of the peaks shown (default 1)")
    e.add_argument("--json", default=None, metavar="FILE", help="also write the results here")
    e.add_argument("--processes", default="auto",
                   help="auto, 1 or 2: the training step's searches in a second process (default auto: where two "
                        "CPUs and 2 GiB are free, the model is MODULE:FACTORY and train and another mode are asked)")
    e.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none anyway where standard error is not a terminal)")
    return p


def _progress(args) -> bool:
    """A progress bar only on a terminal: one drawn into a log (CI, ``> run.log``) is a wall of carriage returns."""
    if args.no_progress:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _Loading:
    """Ctrl-C while the modules load: noted, and acted on once they have loaded (:meth:`loaded`). A
    KeyboardInterrupt raised inside an import can leave a module half-imported where a library catches it
    (seen: numpy without ``minimum``, then a traceback from matplotlib), so none is raised there."""

    def __init__(self):
        import signal
        import threading

        self.hits = 0
        self._signal = signal
        self.active = (threading.current_thread() is threading.main_thread()
                       and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        if self.active:
            signal.signal(signal.SIGINT, self._note)

    def _note(self, signum, frame):
        self.hits += 1

    def restore(self):
        """Ctrl-C raises KeyboardInterrupt again."""
        if self.active:
            self._signal.signal(self._signal.SIGINT, self._signal.default_int_handler)
            self.active = False

    def loaded(self):
        """The modules are loaded: Ctrl-C raises KeyboardInterrupt again, at once if it was pressed meanwhile."""
        self.restore()
        if self.hits:
            raise KeyboardInterrupt


_FREEZE_REGISTERED = False


def _freeze_at_exit() -> None:
    """At exit, before Python's last collections: :func:`gc.freeze`. Those collections walk every object
    torch and torchvision made, to free nothing the exit would not free anyway (after ``import torch,
    torchvision`` 0.78 s on the 2-core EPYC, 0.15 s frozen; after an estimate about 1 s); every file the
    command writes is written and closed by then."""
    global _FREEZE_REGISTERED
    if not _FREEZE_REGISTERED:
        import atexit
        import gc

        atexit.register(gc.freeze)
        _FREEZE_REGISTERED = True


def main(argv=None) -> int:
    """The command line; returns the exit status. Ctrl-C at any moment, while the modules load included,
    prints one line ("interrupted") and returns 130, never a traceback."""
    _freeze_at_exit()
    loading = _Loading()
    try:
        return _main(argv, loading)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        loading.restore()  # a path that ended before the modules loaded (bad arguments): the handler back


def _main(argv=None, loading: "_Loading | None" = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    command = "python -m nogradlab " + " ".join(shlex.quote(a) for a in argv)
    if args.cmd == "estimate":
        return _estimate(args, command, loading)
    # loaded here, while a Ctrl-C waits for them (_Loading); the steps below import them again, at no cost
    from nogradlab.core import settings  # noqa: F401
    from nogradlab.run import outdir, report, runner  # noqa: F401

    if loading is not None:
        loading.loaded()

    try:  # bad input fails here, before any work, naming what is allowed
        settings, ids = _checked(args)
    except (ValueError, RuntimeError, TypeError, FileNotFoundError, outdir.OutputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    refs = []
    if args.cmd == "claims" and not args.no_results:
        refs = _references(args)
        if refs is None:
            return 1
    color = report.color_default(sys.stdout)
    try:
        if args.cmd == "run":
            return _run(args, settings, command, color)
        return _claims_command(args, settings, ids, refs, command, color)
    except outdir.OutputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        from nogradlab import claims as _claims

        if not isinstance(e, _claims.JudgeError):
            raise
        # strict mode only (runner.references): run judges the references before its first notebook
        print(f"error: judging the reference runs failed ({' '.join(str(e).split())[:300]})", file=sys.stderr)
        return 1


def _checked(args) -> tuple:
    """``run``'s and ``claims``' arguments checked before any work: ``(settings, ids)``, the settings
    (device, scale, seed) resolved here once for the whole command (:func:`nogradlab.core.settings.resolve`)
    and the claim ids asked for (None: all). A bad one raises, naming what is allowed."""
    from nogradlab.core import settings as _settings
    from nogradlab.run import outdir, runner

    ids = None
    if args.cmd == "claims":
        settings = _settings.resolve(args.device, args.scale, args.seed, seed_name="--seed")
        ids = runner.parse_ids(args.ids)
        from nogradlab import claims as _claims

        _claims.ledger_path()
    else:
        settings = _settings.resolve(args.device, args.scale)
    if args.cmd == "run":
        runner.discover(runner.notebooks_dir(args.notebooks))
    elif args.json:
        outdir.check_file_target(args.json)
        if not args.force:  # claims --ids over a complete document: refused before any check
            outdir.check_not_partial_over_complete(args.json, ids is not None and set(ids) != set(_claims.ids()),
                                                   what=f"this run checks {len(ids or ())} of {len(_claims.ids())} claims")
    return settings, ids


def _references(args) -> "list | None":
    """``claims``' reference columns, judged before any check: one that today's judges cannot read shows
    "needs re-measuring" (or is skipped with a warning), never crashes the command after its checks.
    None (the error printed) when judging them failed in strict mode (``runner.references``)."""
    from nogradlab.run import runner

    try:
        return runner.references(args.results or runner.default_dir("results"), explicit=bool(args.results))
    except Exception as e:  # noqa: BLE001 - strict mode only (runner.references): a bug, found before any work
        print(f"error: judging the reference runs failed ({type(e).__name__}: {' '.join(str(e).split())[:300]})",
              file=sys.stderr)
        return None


def _run(args, settings, command: str, color: bool) -> int:
    """``run``: every notebook executed and the report written; its table printed and where the report is."""
    from nogradlab.run import report, runner

    outcome = runner.run(out=args.out, notebooks=args.notebooks, results=args.results,
                         progress=_progress(args), command=command, settings=settings)
    print(report.terminal_table(outcome.doc, outcome.refs, color=color))
    meta = outcome.doc["meta"]
    if outcome.ok:
        print(f"report: {(outcome.path / 'report.html').resolve()}")
        return 0
    skipped = [n["name"] for n in meta["notebooks"] if n["status"] == "not run"]
    why = [outcome.reason or "incomplete"] + \
          ([f"{len(skipped)} notebook(s) not run"] if skipped else [])
    print("FAILED: " + "; ".join(why) + ".", file=sys.stderr)
    if (outcome.path / "report.html").exists():
        print(f"failed build: {(outcome.path / 'report.html').resolve()}", file=sys.stderr)
    else:
        print(f"failed build (incomplete): {outcome.path.resolve()}", file=sys.stderr)
    if (Path(args.out) / "report.html").exists():
        print(f"the earlier report in {args.out}/ was left as it was", file=sys.stderr)
    return 130 if meta.get("interrupted") else 1


def _claims_command(args, settings, ids, refs, command: str, color: bool) -> int:
    """``claims``: the checks run with ``settings``, the verdict table printed, and ``--json`` written."""
    from nogradlab.run import outdir, report, runner

    doc = runner.check_claims(ids, progress=_progress(args), command=command, settings=settings)
    print(report.terminal_table(doc, refs, color=color))
    if args.json:
        try:
            outdir.check_file_target(args.json)  # again: the file may have changed during the checks
            if not args.force:
                outdir.check_not_partial_over_complete(args.json, not doc["meta"]["complete"],
                                                       what="this run's document is partial (a check failed)")
            report.validate(doc)
            outdir.write_text_atomic(Path(args.json).absolute(), report.dumps(doc))
        except (OSError, outdir.OutputError) as e:
            print(f"error: could not write {args.json}: {e}", file=sys.stderr)
            return 1
        print(f"claims.json: {Path(args.json).resolve()}")
    # 0 when every claim asked for got a verdict (complete means every claim: --ids never is)
    ok = not doc["meta"].get("interrupted") and all(c["verdict"] is not None for c in doc["claims"])
    return 0 if ok else 1


def _estimate(args, command: str, loading: "_Loading | None" = None) -> int:
    from nogradlab.estimate import split

    try:
        processes = split.check_processes(args.processes)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # the training step's second process starts before this one loads torch: both load it at once
    argv = [args.model, "--input", args.input, "--dtype", args.dtype, "--gpu", args.gpu,
            "--allocator", args.allocator, "--batch", str(args.batch)]
    helper = split.start(args.model, argv, args.modes, processes)
    try:
        return _estimate_here(args, command, loading, helper)
    finally:
        if helper is not None:
            helper.close()


def _estimate_here(args, command: str, loading, helper) -> int:
    from nogradlab.estimate import cli as estimate_cmd
    from nogradlab.run import outdir

    if loading is not None:
        loading.loaded()

    try:  # bad input fails here, before any work, naming what is allowed
        req = estimate_cmd.check(args.model, args.input, args.dtype, args.gpu, args.modes, args.allocator,
                                 args.batch)
        if args.json:
            outdir.check_file_target(args.json, "JSON file of estimate --json", ours=estimate_cmd.is_estimate_doc)
    except (ValueError, outdir.OutputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        doc = estimate_cmd.run(req, progress=_progress(args), command=command, helper=helper)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BaseException as e:  # noqa: BLE001 - a model that cannot be estimated: one line, no traceback
        print(f"error: {estimate_cmd.one_line(e)}", file=sys.stderr)
        return 2
    print(estimate_cmd.text(doc))
    if args.json:
        import json

        try:
            outdir.check_file_target(args.json, "JSON file of estimate --json", ours=estimate_cmd.is_estimate_doc)
            outdir.write_text_atomic(Path(args.json).absolute(), json.dumps(doc, indent=1) + "\n")
        except (OSError, outdir.OutputError) as e:
            print(f"error: could not write {args.json}: {e}", file=sys.stderr)
            return 1
        print(f"estimate JSON: {Path(args.json).resolve()}")
    return 2 if estimate_cmd.failed(doc) else 0


if __name__ == "__main__":
    sys.exit(main())
