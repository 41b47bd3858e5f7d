"""How long your own model's estimate takes: a 1-billion-parameter decoder-only transformer (built
fake: nothing is allocated) at batch 1, and its largest-batch search under 24 GiB, per mode, on a
virtual CUDA device. The targets (issue 20, a 2-core CPU): the estimate at batch 1 in 10 s or less,
the search in 30 s or less. Printed, never asserted (they scale with the machine).

    python benchmarks/own_model.py [--modes no_grad,train] [--gpu 24GiB] [--seq 512]
"""
from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

from nogradlab import batch, memory, ownmodel
from nogradlab.estimate_cmd import MODES, parse_bytes


class Decoder(nn.Module):
    """Token embedding, ``layers`` nn.TransformerDecoderLayer blocks (causal self-attention; the
    cross-attention reads the embedded sequence itself), a vocabulary head."""

    def __init__(self, vocab=32000, d=2048, heads=16, layers=14, ffn=8192, seq=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.layers = nn.ModuleList(nn.TransformerDecoderLayer(d, heads, ffn, dropout=0.0, batch_first=True)
                                    for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos[:, :t]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device)
        mem = x
        for layer in self.layers:
            x = layer(x, mem, tgt_mask=mask, memory_mask=mask, tgt_is_causal=True, memory_is_causal=True)
        return self.head(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default="no_grad,train")
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
