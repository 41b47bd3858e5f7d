"""nogradlab: what torch.no_grad really does, measured.

The package has five wings, each importing only the wings before it (a layers contract in
pyproject.toml, checked by ``make lint``)::

    core      probes: device, modes, workloads, settings, ownmodel, memory measured, timing, format, session
    estimate  GPU memory without a GPU: fake-tensor estimate, cudamodel, allocator, batch, sweep, cli
    lab       what a notebook touches: notebook, plots, diagrams, widgets, magics, serving, exercises
    claims    the ledger: registry, rules, evidence, run cache, one module per notebook's claims
    run       the collection executed and reported: runner, report, outdir, schema, yourmodel

The names the notebooks use stay where they were: ``from nogradlab import memory, plots, claims``
and ``import nogradlab.notebook`` work, lazily (``import nogradlab`` imports no wing), each giving
the wing's own module object (:data:`_ALIASES`).
"""
import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"

#: the package's flat names -> their module in a wing. The learner's face (the notebooks' imports) and
#: the earlier layout's module paths, which old notebooks, scripts and Colab copies still import.
_ALIASES = {
    # the learner's face
    "exercises": "lab.exercises", "notebook": "lab.notebook", "plots": "lab.plots", "diagrams": "lab.diagrams",
    "memory": "lab.memory", "widgets": "lab.widgets", "serving": "lab.serving", "magics": "lab.magics",
    "allocator": "estimate.allocator", "yourmodel": "run.yourmodel",
    # the earlier flat layout
    "device": "core.device", "modes": "core.modes", "workloads": "core.workloads", "ownmodel": "core.ownmodel",
    "timing": "core.timing", "pipeline": "core.pipeline", "links": "core.links", "show": "core.format",
    "cudamodel": "estimate.cudamodel", "batch": "estimate.batch", "estimate_cmd": "estimate.cli",
    "runner": "run.runner", "report": "run.report", "outdir": "run.outdir",
}


def _target(fullname: str) -> "str | None":
    """``nogradlab.<alias>[.sub]`` -> the wing's module name, or None for any other name."""
    head, _, rest = fullname.partition(".")
    if head != __name__ or not rest:
        return None
    first, _, sub = rest.partition(".")
    if first not in _ALIASES:
        return None
    return f"{__name__}.{_ALIASES[first]}" + (f".{sub}" if sub else "")


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import nogradlab.notebook`` gives ``nogradlab.lab.notebook`` itself (one module object, so
    state and monkeypatches are shared), its own ``__name__`` and ``__spec__`` kept."""

    def find_spec(self, fullname, path=None, target=None):
        real = _target(fullname)
        if real is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=False)

    def create_module(self, spec):
        module = importlib.import_module(_target(spec.name))
        spec.loader_state = module.__spec__  # the import machinery sets the alias's spec on it next
        return module

    def exec_module(self, module):
        spec = module.__spec__
        if spec is not None and spec.loader is self:
            module.__spec__ = spec.loader_state


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())


def __getattr__(name: str):
    """``nogradlab.plots`` and ``from nogradlab import plots``: imported on first use."""
    if name in _ALIASES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_ALIASES))


def load_ipython_extension(ipython):  # ``%load_ext nogradlab``: the %%memory and %%modes magics
    from nogradlab.lab.magics import load_ipython_extension as load
    load(ipython)


_NEEDS = ("torch", "torchvision", "matplotlib", "pandas", "ipywidgets", "tqdm")
_URL = "https://github.com/nogradlab/nogradlab"


def check_dependencies() -> None:
    """Raise ImportError naming the one ``%pip install`` line to run when a dependency is missing
    (quiet otherwise): the notebooks' setup cell calls it."""
    import importlib.util
    import pathlib

    missing = [m for m in _NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        root = pathlib.Path(__file__).resolve().parents[1]
        how = (f"%pip install -q -e '{root}'" if (root / "pyproject.toml").is_file()
               else f"%pip install -q 'nogradlab @ git+{_URL}'")
        raise ImportError(f"nogradlab needs {', '.join(missing)}, which this kernel cannot import. Paste this "
                          f"line into a new cell, run it, restart the kernel, then run this notebook from the "
                          f"top:\n{how}\n(or, in a terminal in the repository: `make lab`)")
