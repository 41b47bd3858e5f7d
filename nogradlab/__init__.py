"""nogradlab: what torch.no_grad really does, measured."""
__version__ = "0.1.0"


def load_ipython_extension(ipython):  # ``%load_ext nogradlab``: the %%memory and %%modes magics
    from .magics import load_ipython_extension as load
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
