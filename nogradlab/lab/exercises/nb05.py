"""Notebook 05's exercises (memory and speed by workload). The reference solutions and their checks."""
from __future__ import annotations

import torch
import torch.nn as nn

from nogradlab.lab.exercises.registry import exercise


def _saved(fn, model, *inputs):
    """Bytes autograd saves for backward while fn() runs: distinct storages, the model's parameters and
    the inputs left out (the notebook's own `saved_for_backward`)."""
    from nogradlab.lab.diagrams import _saved_bytes

    return _saved_bytes(fn, {t.untyped_storage().data_ptr() for t in (*model.parameters(), *inputs)})


# ----------------------------------------------------------------------------- 05.1: predict, then run


def _linear_relu():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, 512), nn.ReLU())


def _truth_05_1() -> int:
    model, x = _linear_relu(), torch.randn(32, 512)
    return _saved(lambda: model(x), model)  # the input counted: the graph keeps it alive


_IN = 32 * 512 * 4  # one (32, 512) float32 activation
_W = 512 * 512 * 4  # the weight


@exercise("05.1", kind="predict", wrong=[
    (lambda: _IN, "the ReLU's output alone"),
    (lambda: _IN // 4, "one (32, 512) tensor in elements"),
    (lambda: 2 * _IN + _W, "weight"),
    (lambda: 0, "nothing"),
    (lambda: _IN // 4 * 2, "4 bytes"),
])
def linear_relu_bytes():
    return 2 * 32 * 512 * 4  # Linear keeps its input (for the weight's gradient), ReLU its output (the mask)


@linear_relu_bytes.judge
def _(a):
    try:
        a = int(a)
    except (TypeError, ValueError):
        return f"the answer is a number of bytes (an int), not a {type(a).__name__}"
    truth = _truth_05_1()
    if a == truth:
        return None
    if a == 0:
        return "nothing saved is what no_grad gives; with grad on both layers keep a tensor for backward"
    if a == _IN:  # one tensor's bytes: either of the two
        return (f"{a} bytes is one (32, 512) float32 tensor: the Linear's input alone, or the ReLU's output alone; "
                "backward needs both: the Linear keeps its input (for the weight's gradient) and the ReLU its "
                "output (to know where it was positive)")
    if a == _IN // 4:
        return (f"{a} is one (32, 512) tensor in elements, not bytes (a float32 element takes 4 bytes), and one "
                "tensor only: the Linear keeps its input and the ReLU its output")
    if a >= _W:
        return ("that counts the weight: it is a parameter, in memory in both modes, so it is not what "
                "no_grad saves (the exercise leaves it out)")
    if a * 4 == truth:
        return "that is elements, not bytes: a float32 element takes 4 bytes"
    return (f"{a} bytes is not it: count each tensor the two layers keep for backward "
            "(shape (32, 512), 4 bytes an element), the weight left out")


# ----------------------------------------------------------------------------- 05.2: write the counter


def saved_bytes(model, x):
    """Bytes autograd saves for backward in model(x): each storage once, parameters and x left out."""
    skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
    skip.add(x.untyped_storage().data_ptr())
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            storages[s.data_ptr()] = s.nbytes()
        return t.detach()

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(storages.values())


def _per_tensor(model, x):  # counts a storage each time it is saved
    skip = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    total = [0]

    def pack(t):
        if t.untyped_storage().data_ptr() not in skip:
            total[0] += t.untyped_storage().nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total[0]


def _with_params(model, x):  # counts the weights too
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(storages.values())


def _per_tensor_no_grad(model, x):
    total = [0]

    def pack(t):
        total[0] += t.untyped_storage().nbytes()
        return t.detach()

    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total[0]


class _Square(nn.Module):
    """h = lin(x); h * h: the product saves h twice (once per operand), one storage."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        h = self.lin(x)
        return h * h


@exercise("05.2", kind="code", wrong=[(_per_tensor, "twice"), (_with_params, "parameters"),
                                      (_per_tensor_no_grad, "no_grad")])
def _ref_05_2(model, x):
    return saved_bytes(model, x)


@_ref_05_2.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a function saved_bytes(model, x), not a {type(fn).__name__}"
    torch.manual_seed(0)
    sq, xs = _Square(), torch.randn(8, 16)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    got_sq, want_sq = fn(sq, xs), saved_bytes(sq, xs)
    got_mlp, want_mlp = fn(mlp, xs), saved_bytes(mlp, xs)
    for got in (got_sq, got_mlp):
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return f"saved_bytes returned a {type(got).__name__}; return a number of bytes"
    if got_sq == 0 and got_mlp == 0:
        return ("it counted nothing: did it run the model under no_grad (or not at all)? Saved tensors "
                "exist only with grad on: run model(x) inside the hooks with grad on")
    lin = nn.Linear(16, 16)  # keeps only its input for backward: nothing to count
    if fn(lin, xs) > 0:
        return ("it counted the parameters (or the input): they are in memory in both modes; leave out "
                "every storage of model.parameters() and of x (nn.Linear alone keeps nothing else)")
    if got_sq == 2 * want_sq:
        return ("h * h saves h twice, one storage: it counted that storage twice; key the count by "
                "t.untyped_storage().data_ptr() so each storage counts once")
    if got_mlp > want_mlp:
        return ("it counted the parameters (or the input): they are in memory in both modes; leave out "
                "every storage of model.parameters() and of x")
    if (got_sq, got_mlp) != (want_sq, want_mlp):
        return (f"on a two-layer MLP it gave {got_mlp} bytes where autograd saves {want_mlp}: count each "
                "tensor the pack hook of torch.autograd.graph.saved_tensors_hooks receives")
    return None
