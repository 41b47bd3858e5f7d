"""Small models that notebook 10 does not name, built by MODULE:FACTORY as `nogradlab estimate` takes them:
token inputs with a tuple output, two inputs with a dict output, explicit attention weights, and an operator
that fake tensors cannot run. Imported by tests/run/test_your_model.py and, through PYTHONPATH, by the notebook's
kernel."""
from __future__ import annotations

import torch
from torch import nn


class TinyEncoder(nn.Module):
    """Token ids -> (logits, hidden): an embedding, a 2-layer transformer encoder, a head."""

    def __init__(self, vocab=100, d=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        h = self.encoder(self.embed(ids))
        return self.head(h), h


def tiny_encoder():
    return TinyEncoder()


class TwoInputs(nn.Module):
    """(image, features) -> {"logits", "aux"}."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(8 + 16, 5)

    def forward(self, image, features):
        z = torch.cat([self.conv(image), self.mlp(features)], dim=1)
        return {"logits": self.head(z), "aux": z}


def two_inputs():
    return TwoInputs()


class SelfAttention(nn.Module):
    """Attention that returns its weights (need_weights=True): the L x L matrix is computed and saved."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x):
        out, weights = self.mha(x, x, x, need_weights=True)
        return out


def explicit_attention():
    return SelfAttention()


@torch.library.custom_op("nogradlab_tests::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    """A custom operator with autograd but no fake implementation: eager runs it, fake tensors cannot."""
    return x * 2


def _twice_backward(ctx, grad):
    return grad * 2


twice.register_autograd(_twice_backward)


class NoFake(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return twice(self.lin(x))


def no_fake():
    return NoFake()


def attention_not_in_a_second_process():
    """explicit_attention's model, except in ``nogradlab estimate``'s second process, which it fails (a
    test of the first process estimating the training step itself after all)."""
    import os

    if os.environ.get("NOGRADLAB_ESTIMATE_HELPER"):
        raise RuntimeError("refused in the second process (a test)")
    return explicit_attention()
