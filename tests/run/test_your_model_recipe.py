"""The recipe's time lines (nogradlab.run.yourmodel.recipe): the word (faster, slower, no clear difference)
is read from the unrounded 95 % interval, and the printed ends carry enough digits that a printed bound
never contradicts the word."""
from __future__ import annotations

import re

import pytest

from nogradlab.run import yourmodel


def _here(lo, hi, point):
    entry = {"over_grad": point, "over_grad_ci": [lo, hi]}
    return {"peak_bytes": {"train": 300, "grad": 200, "no_grad": 100, "inference_mode": 100},
            "batch": 2, "device": "cpu",
            "timing": {"modes": {"grad": {"over_grad": 1.0, "over_grad_ci": [1.0, 1.0]},
                                 "no_grad": entry, "inference_mode": entry}}}


def _time_line(lo, hi, point):
    lines = [ln for ln in yourmodel.recipe(None, _here(lo, hi, point), None) if ln.startswith("Time: `no_grad`")]
    assert len(lines) == 1
    return lines[0]


def _printed_interval(line):
    m = re.search(r"95 % CI \[([^,]+), ([^\]]+)\]", line)
    assert m, line
    return m.group(1), m.group(2)


@pytest.mark.parametrize("lo, hi, point, word", [
    (0.9534, 0.99996, 0.978, "faster than"),     # the upper end rounds to 1.000 at three decimals
    (1.00004, 1.05, 1.02, "slower than"),        # the lower end rounds to 1.000 at three decimals
    (0.9, 0.95, 0.93, "faster than"),
    (1.1, 1.2, 1.15, "slower than"),
    (0.95, 1.02, 0.98, "no clear difference"),
    (0.9999999999, 1.0000000001, 1.0, "no clear difference"),
])
def test_a_printed_bound_never_contradicts_the_word(lo, hi, point, word):
    line = _time_line(lo, hi, point)
    assert f": {word}" in line, line
    ends = _printed_interval(line)
    for text, value in zip(ends, (lo, hi)):
        if text.startswith("just "):  # beyond the digits printed: says on which side of 1 it lies
            assert ("below" in text) == (value < 1), line
            continue
        printed = float(text.rstrip("×"))
        if word == "faster than":
            assert printed < 1, line
        elif word == "slower than":
            assert printed > 1, line
        else:  # the interval holds 1: its lower end reads at most 1, its upper end at least 1
            assert printed <= 1 if value is lo else printed >= 1, line


def test_ordinary_intervals_keep_three_decimals():
    line = _time_line(0.9, 0.95, 0.93)
    assert "0.930× the grad forward's time" in line and "[0.900×, 0.950×]" in line, line


def test_the_recipe_checkpoints_a_block_by_what_recomputing_it_frees_not_a_batchnorm_alone():
    """Issue 40: the recipe advised checkpointing the BatchNorm layers, but checkpoint keeps the function's
    inputs (conv -> BN -> ReLU saved 4,300,800 B; with checkpoint(bn) 4,299,520 B). It now names the block
    whose recomputation frees the most: its saved bytes less its inputs'."""
    import torch
    from torch import nn

    from nogradlab.core.saved import saved_by_layer
    from nogradlab.run import yourmodel

    torch.manual_seed(0)
    block = lambda c: nn.Sequential(nn.Conv2d(c, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())  # noqa: E731
    model = nn.Sequential(block(3), block(16), nn.Flatten(), nn.Linear(16 * 8 * 8, 2)).train()
    x = torch.randn(4, 3, 8, 8)
    s = saved_by_layer(model, x)
    first = next(b for b in s.blocks if b["block"] == "0")
    inside = sum(r["saved_bytes"] for r in s.rows if r["layer"].startswith("0."))
    assert first["saved_bytes"] == inside and first["input_bytes"] == x.nbytes
    after = sum(r["saved_bytes"] for r in s.rows if not r["layer"].startswith("0"))  # blocks 1, 2, 3 ran after it
    assert first["after_bytes"] == after
    assert first["frees"] == max(0, min(inside, after) - x.nbytes) and first["has_batchnorm"]
    best = s.best_block()
    assert best["block"] in ("0", "1") and best["frees"] == max(b["frees"] for b in s.blocks)
    text = " ".join(yourmodel.recipe(s, None, None))
    assert f"`{best['block']}` (Sequential)" in text and "checkpoint" in text
    assert "running statistics a second time" in text
    assert "Checkpointing a `BatchNorm2d` alone would free little" in text


def test_the_recipe_says_need_weights_only_to_multihead_attention():
    import torch
    from torch import nn

    from nogradlab.core.saved import saved_by_layer
    from nogradlab.run import yourmodel

    class MyAttention(nn.Module):  # hand-written: no need_weights argument
        def forward(self, q):
            w = torch.softmax(q @ q.transpose(-1, -2), -1)
            return w @ q

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), MyAttention())
    text = " ".join(yourmodel.recipe(saved_by_layer(model, torch.randn(2, 16, 8)), None, None))
    assert "L x L" in text and "need_weights" not in text and "F.scaled_dot_product_attention" in text
    assert "log-sum-exp" in text and "O(L)" not in text


def test_the_recipe_names_every_layer_that_keeps_the_most():
    """ResNet-18's bn1 and relu keep 6.12 MiB each: the recipe named bn1 alone as 'the most in one layer'."""
    import torch
    from torch import nn

    from nogradlab.core.saved import saved_by_layer

    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.BatchNorm2d(8)).train()
    s = saved_by_layer(model, torch.randn(2, 3, 8, 8))
    most = max(r["saved_bytes"] for r in s.rows)
    assert [r["layer"] for r in s.rows if r["saved_bytes"] == most] == ["1", "2"]  # two batch norms, one size
    text = " ".join(yourmodel.recipe(s, None, None))
    assert "the layers that keep the most are `1` and `2`" in text and "in one layer" not in text


def test_a_block_that_is_nearly_the_whole_model_frees_nothing_and_the_figure_bounds_the_measured_gain():
    """The second reader (MobileNetV3-Small in notebook 10): the recipe named `features`, the whole trunk,
    as freeing 29.67 MiB; checkpointing it took nothing off the training step's peak (36.67 MiB both ways),
    since backward recomputes it while nothing else is freed. A block frees at most the lesser of what it
    saves and what is saved after it, less its inputs; the chosen block's figure is measured to hold."""
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    from nogradlab.core import memory
    from nogradlab.core.saved import saved_by_layer

    def conv(c, k):
        return nn.Sequential(nn.Conv2d(c, k, 3, padding=1), nn.BatchNorm2d(k), nn.ReLU())

    class Recomputed(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return checkpoint(self.inner, x, use_reentrant=False)

    torch.manual_seed(0)
    x = torch.randn(4, 3, 32, 32)
    net = nn.Sequential()
    net.add_module("features", nn.Sequential(conv(3, 16), conv(16, 16), conv(16, 16), conv(16, 16)))
    net.add_module("head", nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 2)))
    net.train()
    s = saved_by_layer(net, x)
    trunk = next(b for b in s.blocks if b["block"] == "features")
    assert trunk["saved_bytes"] > 0.9 * s.total_bytes and trunk["frees"] == 0
    best = s.best_block()
    assert best["block"].startswith("features.") and best["frees"] > 0

    def peak(name):
        parent, key = (net.features, name.split(".")[1]) if name else (None, None)
        inner = parent._modules[key] if name else None
        if name:
            parent._modules[key] = Recomputed(inner)

        def step():
            net(x).sum().backward()
            for p in net.parameters():
                p.grad = None
        try:
            return memory.measure(step, "cpu").peak_bytes
        finally:
            if name:
                parent._modules[key] = inner

    plain, with_ck = peak(None), peak(best["block"])
    gain = plain - with_ck
    assert 0 < gain <= best["frees"] * 1.02, (gain, best["frees"])


def test_the_recipe_asks_for_more_headroom_where_convolutions_got_no_workspace():
    from nogradlab.run import yourmodel

    mode = {"largest_batch": 100, "at_limit": False}
    doc = {"meta": {"gpu_bytes": 24 * 2**30, "gpu_profile": "NVIDIA H200"},
           "modes": {m: dict(mode) for m in ("grad", "no_grad", "inference_mode", "train")},
           "no_grad_factor": {"over_grad": 1.0}, "notes": []}
    plain = " ".join(yourmodel.recipe(None, None, doc))
    assert "keep 5-10 % headroom." in plain and "no workspace was counted" not in plain
    doc["notes"] = ["workspaces at the sizes NVIDIA H200 reported (cuDNN 91900): 0 convolution calls, 0 other calls; "
                    "32 convolution shapes are not in the table and were given no workspace (e.g. x): cuDNN may "
                    "take more there, so this estimate can be low by their workspaces"]
    text = " ".join(yourmodel.recipe(None, None, doc))
    assert "more where cuDNN runs the 32 convolution shapes no workspace was counted for" in text
    doc["notes"].append(doc["notes"][0].replace("32 convolution shapes", "64 convolution shapes"))  # the train step's
    text = " ".join(yourmodel.recipe(None, None, doc))
    assert "the 32 convolution shapes (64 in the training step) no workspace was counted for" in text
