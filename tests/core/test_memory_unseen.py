"""What the storage probe cannot see by dispatch alone, and the cases where it read wrong without a word
(issue 41): weights used without calling their module, tensors made outside the dispatcher, tensors made
in a thread started before the probe."""
import torch
import torch.nn as nn

from nogradlab import memory

F32 = 4
E, HEADS, L, N = 16, 2, 5, 3


class _SelfAttention(nn.Module):
    """nn.MultiheadAttention on one input (q = k = v): its ``out_proj`` is never called, its weight is
    passed to ``F.multi_head_attention_forward``."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(E, HEADS, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


# Hand count of what autograd saves (float32): the input x (N*L*E), the packed in-projection q, k, v
# (3*N*L*E: SDPA saves the three views of one storage), SDPA's logsumexp (N*HEADS*L) and its output
# (N*L*E, also out_proj's input). Not out_proj.weight (E*E), a parameter, nor in_proj_weight.
MHA_SAVED = (N * L * E + 3 * N * L * E + N * HEADS * L + N * L * E) * F32


def test_weights_of_an_uncalled_submodule_are_not_saved_activations():
    torch.manual_seed(0)
    model = _SelfAttention()
    x = torch.randn(N, L, E, requires_grad=True)
    r = memory.measure(lambda: model(x))
    assert r.saved_bytes == MHA_SAVED  # read MHA_SAVED + E*E*4 (out_proj.weight) before
    assert r.saved_tensors == 4
    by = {m.name: m.saved_bytes for m in r.modules}
    assert by["mha"] == MHA_SAVED


def test_estimate_excludes_them_too():
    e = memory.estimate(_SelfAttention, N, mode="grad", inputs=(L, E))
    assert e.saved_bytes == MHA_SAVED
