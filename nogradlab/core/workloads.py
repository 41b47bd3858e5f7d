"""The four model classes the article measures, each at three sizes.

    wl = workloads.get("unet", "tiny")
    model = wl.build("cpu")
    x = wl.make_input(wl.default_batch)
    loss = wl.loss(model(x), wl.make_target(wl.default_batch))

The workloads (``names()``):

* ``"resnet50"``: torchvision's ResNet-50 image classifier (random init, 1000 classes); the same
  architecture at every scale, only the image size changes.
* ``"transformer_base"``: a BERT-base-shaped ``nn.TransformerEncoder`` stack that takes float
  embeddings of shape (batch, seq_len, d_model) and returns the same shape.
* ``"unet"``: a U-Net (``UNet`` below). The article's table calls this row a "recurrent CNN
  (U-Net-style)", but a U-Net is a convolutional encoder-decoder with skip connections; nothing in
  it is recurrent.
* ``"mlp"``: two linear layers with a ReLU between, on flattened single-channel images.

Each comes in ``SCALES``: ``"tiny"`` (a forward pass in well under a second on a laptop CPU, for
tests and quick demos), ``"small"`` (in between) and ``"full"`` (the sizes the article quotes, meant
for a GPU).
``resolve_scale`` turns ``"auto"`` into a scale that fits the device.
"""
from __future__ import annotations

import contextlib
import numbers
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["names", "SCALES", "SCALE_CHOICES", "get", "resolve_scale", "Workload", "UNet"]

SCALES = ("tiny", "small", "full")
SCALE_CHOICES = ("auto",) + SCALES


class _DoubleConv(nn.Sequential):
    """(Conv3x3 - BatchNorm - ReLU) twice; keeps the spatial size."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(
            nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )


class UNet(nn.Module):
    """A plain U-Net: a convolutional encoder-decoder with skip connections (not recurrent).

    The encoder is ``depth + 1`` double-conv blocks with ``base * 2**i`` channels, separated by
    2x2 max-pooling; the decoder upsamples with 2x2 transposed convolutions, concatenates the
    matching encoder output and applies a double-conv; a 1x1 convolution gives ``out_channels``
    logits per pixel. Height and width must be divisible by ``2**depth``.
    """

    def __init__(self, in_channels: int = 3, out_channels: int = 1, base: int = 64, depth: int = 4):
        super().__init__()
        widths = [base * 2 ** i for i in range(depth + 1)]
        self.depth = depth
        self.down = nn.ModuleList([_DoubleConv(in_channels, widths[0])])
        self.down.extend(_DoubleConv(widths[i], widths[i + 1]) for i in range(depth))
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ModuleList(nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2)
                                for i in reversed(range(depth)))
        self.up_conv = nn.ModuleList(_DoubleConv(2 * widths[i], widths[i])
                                     for i in reversed(range(depth)))
        self.head = nn.Conv2d(widths[0], out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            if i > 0:
                x = self.pool(x)
            x = block(x)
            skips.append(x)
        skips.pop()  # the bottleneck output is x itself
        for up, conv in zip(self.up, self.up_conv):
            x = conv(torch.cat([skips.pop(), up(x)], dim=1))
        return self.head(x)


# Size knobs per workload and scale; ``default_batch`` is the batch the article's figures use.
_PARAMS = {
    "resnet50": {
        "tiny": dict(image_size=64, num_classes=1000, default_batch=2),
        "small": dict(image_size=128, num_classes=1000, default_batch=8),
        "full": dict(image_size=224, num_classes=1000, default_batch=32),
    },
    "transformer_base": {
        "tiny": dict(num_layers=2, d_model=128, nhead=4, dim_feedforward=512, seq_len=32,
                     default_batch=2),
        "small": dict(num_layers=6, d_model=384, nhead=6, dim_feedforward=1536, seq_len=128,
                      default_batch=4),
        "full": dict(num_layers=12, d_model=768, nhead=12, dim_feedforward=3072, seq_len=512,
                     default_batch=16),
    },
    "unet": {
        "tiny": dict(base=8, depth=3, image_size=64, default_batch=2),
        "small": dict(base=16, depth=4, image_size=128, default_batch=4),
        "full": dict(base=64, depth=4, image_size=224, default_batch=16),
    },
    "mlp": {
        "tiny": dict(image_size=28, in_features=784, hidden=256, num_classes=10, default_batch=16),
        "small": dict(image_size=28, in_features=784, hidden=1024, num_classes=10, default_batch=64),
        "full": dict(image_size=64, in_features=4096, hidden=8192, num_classes=1000,
                     default_batch=256),
    },
}


def names() -> tuple[str, ...]:
    """The workload names, in the article's order."""
    return tuple(_PARAMS)


#: the largest batch nogradlab computes with: the byte counts of a step at that batch stay well inside
#: int64 for every workload (the largest, transformer_base at full scale, needs about 0.9 GB per sample
#: in a training step: 2**30 samples make 2**60 bytes), so nothing wraps around or overflows in torch
MAX_BATCH = 2 ** 30


def check_batch(batch, name: str = "batch") -> int:
    """``batch`` as an int; ``ValueError`` unless it is a positive integer (bools refused) no larger
    than :data:`MAX_BATCH`."""
    if isinstance(batch, bool) or not isinstance(batch, numbers.Integral) or batch <= 0:
        raise ValueError(f"{name} must be a positive integer, got {batch!r}")
    if batch > MAX_BATCH:
        raise ValueError(f"{name} {batch} is beyond the byte arithmetic of an estimate (int64); the largest "
                         f"supported batch is {MAX_BATCH} (2**30)")
    return int(batch)


@contextlib.contextmanager
def _default_dtype(dtype: "torch.dtype | None"):
    """Set torch's (process-wide) default dtype inside the block (``None``: leave it as it is)."""
    if dtype is None:
        yield
        return
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _transformer_encoder(p: dict) -> nn.TransformerEncoder:
    """``nn.TransformerEncoder(nn.TransformerEncoderLayer(...), num_layers)`` with the layers built
    one by one instead of deep-copied from the first: deep-copying fake tensors gives them a new
    FakeTensorMode (so ``FakeTensorMode`` forwards would fail), and the copies would all start
    with the same weights."""
    layers = [nn.TransformerEncoderLayer(p["d_model"], p["nhead"], p["dim_feedforward"],
                                         dropout=0.1, batch_first=True)
              for _ in range(p["num_layers"])]
    model = nn.TransformerEncoder(layers[0], 0, enable_nested_tensor=False)  # 0: no copies made
    model.layers = nn.ModuleList(layers)
    model.num_layers = len(layers)
    return model


@dataclass(frozen=True)
class Workload:
    """One model class at one scale: how to build it, feed it and score it.

    ``input_shape`` is the shape of one sample (without the batch dimension); ``params`` holds the
    size knobs at this scale (image size, layers, widths, ...).
    """

    name: str
    scale: str
    description: str
    default_batch: int
    input_shape: tuple[int, ...]
    params: dict = field(default_factory=dict, compare=False)

    @property
    def key(self) -> tuple:
        """What makes this workload this one, hashable: ``(name, scale, size knobs)`` (a sequence length
        changed by ``with_seq_len`` included). Resolve a name once (:func:`get`) and key caches on this."""
        return (self.name, self.scale, tuple(sorted(self.params.items())))

    def build(self, device="cpu", dtype: torch.dtype = torch.float32) -> nn.Module:
        """A freshly initialised model in train mode, created directly on ``device`` in ``dtype``.

        Parameters are created under ``with torch.device(device)`` and torch's default dtype set
        to ``dtype`` (restored afterwards) rather than converted with ``.to()``, so this also works
        inside ``FakeTensorMode`` for a device this machine does not have (fake parameters cannot
        be converted in place). The initialisation is deterministic given the caller's
        ``torch.manual_seed``.
        """
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
        p = self.params
        with torch.device(device), _default_dtype(dtype):
            if self.name == "resnet50":
                import torchvision

                return torchvision.models.resnet50(weights=None, num_classes=p["num_classes"])
            if self.name == "transformer_base":
                return _transformer_encoder(p)
            if self.name == "unet":
                return UNet(in_channels=3, out_channels=1, base=p["base"], depth=p["depth"])
            return nn.Sequential(nn.Flatten(), nn.Linear(p["in_features"], p["hidden"]),
                                 nn.ReLU(), nn.Linear(p["hidden"], p["num_classes"]))

    def make_input(self, batch: int, device="cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A random input batch of shape ``(batch, *input_shape)``: images for the CNNs and the
        MLP, float token embeddings for the transformer."""
        batch = check_batch(batch)
        return torch.randn((batch, *self.input_shape), device=device, dtype=dtype)

    def make_target(self, batch: int, device="cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A random target for ``loss``: class labels (int64) for the classifiers, a 0/1 mask of
        the output's shape for the U-Net, a float tensor of the output's shape for the transformer.
        ``dtype`` applies to the float targets only."""
        batch = check_batch(batch)
        p = self.params
        if self.name in ("resnet50", "mlp"):
            return torch.randint(0, p["num_classes"], (batch,), device=device)
        if self.name == "unet":
            size = p["image_size"]
            return torch.randint(0, 2, (batch, 1, size, size), device=device).to(dtype)
        return torch.randn((batch, *self.input_shape), device=device, dtype=dtype)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Scalar training loss (computed in float32): cross-entropy for the classifiers,
        BCE-with-logits for the U-Net's mask, MSE for the transformer."""
        output = output.float()
        if self.name in ("resnet50", "mlp"):
            return F.cross_entropy(output, target)
        if self.name == "unet":
            return F.binary_cross_entropy_with_logits(output, target.float())
        return F.mse_loss(output, target.float())


def _describe(name: str, p: dict) -> tuple[str, tuple[int, ...]]:
    """One-line description and per-sample input shape of ``name`` with size knobs ``p``."""
    if name == "resnet50":
        s = p["image_size"]
        return (f"ResNet-50 image classifier (torchvision, random init, {p['num_classes']} classes) "
                f"on 3x{s}x{s} images", (3, s, s))
    if name == "transformer_base":
        return (f"Transformer encoder, {p['num_layers']} layers, d_model {p['d_model']}, "
                f"{p['nhead']} heads, feed-forward {p['dim_feedforward']}, on "
                f"{p['seq_len']}x{p['d_model']} token embeddings", (p["seq_len"], p["d_model"]))
    if name == "unet":
        s = p["image_size"]
        return (f"U-Net (convolutional encoder-decoder with skips, not recurrent), base width "
                f"{p['base']}, depth {p['depth']}, 3x{s}x{s} images to 1x{s}x{s} mask logits",
                (3, s, s))
    s = p["image_size"]
    return (f"MLP {p['in_features']}->{p['hidden']}->{p['num_classes']} (two linear layers, ReLU) "
            f"on flattened 1x{s}x{s} images", (1, s, s))


def get(name: str, scale: str = "tiny") -> Workload:
    """The workload ``name`` (one of ``names()``) at ``scale`` (one of ``SCALES``).

    Raises ``ValueError`` naming the allowed values for an unknown name or scale; nothing is
    built here. Use ``resolve_scale`` first to turn ``"auto"`` into a scale.
    """
    if not isinstance(name, str) or name not in _PARAMS:
        raise ValueError(f"unknown workload {name!r}; allowed: {', '.join(names())}")
    if not isinstance(scale, str) or scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(SCALES)} "
                         "(use resolve_scale for 'auto')")
    params = dict(_PARAMS[name][scale])
    default_batch = params.pop("default_batch")
    description, input_shape = _describe(name, params)
    return Workload(name=name, scale=scale, description=description, default_batch=default_batch,
                    input_shape=input_shape, params=params)


def resolve_scale(scale: str, device="cpu") -> str:
    """Turn ``scale`` into one of ``SCALES``: ``"auto"`` gives ``"full"`` on CUDA and ``"tiny"``
    elsewhere (CPU, MPS); the three scales are returned unchanged; anything else raises
    ``ValueError`` listing ``auto, tiny, small, full``."""
    if scale == "auto":
        return "full" if torch.device(device).type == "cuda" else "tiny"
    if scale in SCALES:
        return scale
    raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(SCALE_CHOICES)}")
