"""nogradlab: what torch.no_grad really does, measured."""
__version__ = "0.1.0"
