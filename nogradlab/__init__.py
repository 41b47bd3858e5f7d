"""nogradlab: what torch.no_grad really does, measured."""
__version__ = "0.1.0"


def load_ipython_extension(ipython):  # ``%load_ext nogradlab``: the %%memory and %%modes magics
    from .magics import load_ipython_extension as load
    load(ipython)
