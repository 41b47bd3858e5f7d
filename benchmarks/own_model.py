"""How long your own model's estimate takes: a 1-billion-parameter decoder-only transformer (built
fake: nothing is allocated) at batch 1, and its largest-batch search under 24 GiB, per mode, on a
virtual CUDA device. The targets (issue 20, a 2-core CPU): the estimate at batch 1 in 10 s or less,
the search in 30 s or less. Printed, never asserted (they scale with the machine).

    python benchmarks/own_model.py [--modes grad,no_grad,inference_mode,train] [--gpu 24GiB] [--seq 512]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from nogradlab import batch, memory, ownmodel  # noqa: E402
from nogradlab.estimate_cmd import MODES, parse_bytes  # noqa: E402
from test_own_model import TinyDecoder  # noqa: E402


def Decoder(seq=512):
    """1.07 B parameters: the tests' decoder-only transformer (token embedding,
    nn.TransformerDecoderLayer blocks with causal self-attention, a vocabulary head) at d_model 2048,
    16 heads, 14 layers, feed-forward 8192, a 32000-token vocabulary."""
    return TinyDecoder(vocab=32000, d=2048, heads=16, layers=14, seq=seq, ffn=8192, dropout=0.0, bias=False)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default="grad,no_grad,inference_mode,train")
    p.add_argument("--gpu", default="24GiB")
    p.add_argument("--seq", type=int, default=512)
    args = p.parse_args()
    budget = parse_bytes(args.gpu)
    seq = args.seq

    def build():
        return Decoder(seq=seq)

    with torch.device("meta"):
        n = sum(t.numel() for t in build().parameters())
    own = ownmodel.Model(build, ((seq,), torch.int64), name="Decoder")
    print(f"model: decoder-only transformer, {n / 1e9:.3f} B parameters, sequence {seq}; torch "
          f"{torch.__version__}, {os.cpu_count()} CPUs, {torch.get_num_threads()} threads")
    print(f"{'mode':<16}{'estimate @1':>12}{'reserved @1':>14}{'search':>10}{'largest batch':>15}{'trials':>8}")
    for m in args.modes.split(","):
        setting = batch._SETTINGS[MODES[m]]
        kw = dict(step="train") if setting is None else dict(mode=setting)
        t0 = time.perf_counter()
        r = memory.estimate(own, 1, "cuda", **kw)
        t1 = time.perf_counter()
        b = batch.largest_batch(own, MODES[m], budget, "cuda", method="estimate")
        t2 = time.perf_counter()
        lb = f"{b.batch}" + (" (at limit)" if b.at_limit else "")
        print(f"{m:<16}{t1 - t0:>10.1f} s{memory.format_bytes(r.reserved_bytes):>14}{t2 - t1:>8.1f} s"
              f"{lb:>15}{len(b.trials):>8}")
    print("targets on a 2-core CPU: estimate @1 <= 10 s, search <= 30 s (not asserted anywhere)")


if __name__ == "__main__":
    main()
