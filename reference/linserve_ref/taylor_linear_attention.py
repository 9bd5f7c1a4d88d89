"""The taylor_linear_attention mixer (the Based paper's LinearAttention with its TaylorExp
feature map): per head, q and k are projected to feature_dim = d_f and mapped by

    φ(x) = [1, x / d_f^¼, vec(x xᵀ) / (√2 · √d_f)]     (vec row-major: index 1 + d_f + i·d_f + j)

to F = 1 + d_f + d_f² features, so that φ(q)·φ(k) = 1 + q·k/√d_f + (q·k)²/(2 d_f), the
second-order Taylor expansion of exp(q·k/√d_f); v has head_dim. Then the linear-attention
recurrence (linear_recurrence.py) with the configured eps. No biases. State slice: per head,
S (F × head_dim) then z (F)."""

import math

import torch
from torch import nn

from linserve_ref import linear_recurrence
from linserve_ref.config import taylor_features
from linserve_ref.kind import Kind


def taylor_feature_map(x):
    """φ of the last dimension of x (d_f) -> 1 + d_f + d_f² features."""
    d = x.shape[-1]
    second = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(start_dim=-2)
    return torch.cat([torch.ones_like(x[..., :1]), x / d ** 0.25,
                      second / (math.sqrt(2.0) * math.sqrt(d))], dim=-1)


class TaylorLinearAttention(nn.Module):
    """`p`: its parameters (config.layer_list's "mixer")."""

    prefix = "attn"

    def __init__(self, d, p):
        super().__init__()
        h, f, dh = p["n_heads"], p["feature_dim"], p["head_dim"]
        self.n_heads, self.feature_dim, self.head_dim = h, f, dh
        self.features = taylor_features(f)
        self.eps = p["eps"]
        self.q_proj = nn.Linear(d, h * f, bias=False)
        self.k_proj = nn.Linear(d, h * f, bias=False)
        self.v_proj = nn.Linear(d, h * dh, bias=False)
        self.o_proj = nn.Linear(h * dh, d, bias=False)

    def init_state(self, batch_size, dtype, device):
        shape = (batch_size, self.n_heads, self.features)
        return (torch.zeros(shape + (self.head_dim,), dtype=dtype, device=device),
                torch.zeros(shape, dtype=dtype, device=device))

    def _qkv(self, x, dtype):
        lead = x.shape[:-1]
        q = self.q_proj(x).view(lead + (self.n_heads, self.feature_dim)).to(dtype)
        k = self.k_proj(x).view(lead + (self.n_heads, self.feature_dim)).to(dtype)
        v = self.v_proj(x).view(lead + (self.n_heads, self.head_dim)).to(dtype)
        return taylor_feature_map(q), taylor_feature_map(k), v

    def forward(self, x, state, positions, chunk_size):
        s, z = state
        qf, kf, v = (a.transpose(1, 2) for a in self._qkv(x, s.dtype))
        y, s, z = linear_recurrence.chunked(qf, kf, v, s, z, self.eps, chunk_size)
        y = y.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1).to(x.dtype)
        return self.o_proj(y), (s, z)

    def step(self, x, state, positions):
        s, z = state
        y, s, z = linear_recurrence.step(*self._qkv(x, s.dtype), s, z, self.eps)
        return self.o_proj(y.reshape(x.shape[0], -1).to(x.dtype)), (s, z)

    def flatten(self, state, b):
        return linear_recurrence.flatten(*state, b)

    def unflatten(self, flat):
        return linear_recurrence.unflatten(flat, self.n_heads, self.features, self.head_dim)


KIND = Kind(
    role="mixer",
    name="taylor_linear_attention",
    params=(
        ("n_heads", "int", None, (1, 1024)),
        ("feature_dim", "int", None, (1, 64)),
        ("head_dim", "int", None, (1, 4096)),
        ("eps", "eps", 1e-12, (0.0, 1.0)),
    ),
    make=TaylorLinearAttention,
    state_floats=lambda p: p["n_heads"] * taylor_features(p["feature_dim"]) * (p["head_dim"] + 1),
)
