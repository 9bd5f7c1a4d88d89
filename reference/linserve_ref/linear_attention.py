"""The linear_attention mixer: causal multi-head linear attention with the feature map φ
(docs/architecture.md §4.3-§4.4). Per head, S += φ(k)vᵀ and z += φ(k), output
φ(q)ᵀS / (φ(q)ᵀz + eps); the chunked form and the recurrence are linear_recurrence.py's. State
slice: per head S (feature_dim × head_dim) then z (feature_dim)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from linserve_ref import linear_recurrence
from linserve_ref.config import FEATURE_MAPS, ConfigError
from linserve_ref.kind import Kind


def feature_map(kind, x, favor_projection=None):
    """φ applied to the last dimension of x (head_dim) -> feature_dim."""
    if kind == "elu_plus_one":
        return F.elu(x) + 1.0
    if kind == "relu":
        return F.relu(x)
    if kind == "exp":
        return torch.exp(x - x.amax(dim=-1, keepdim=True))
    if kind == "favor_plus":
        m = favor_projection.shape[0]
        wx = torch.matmul(x, favor_projection.to(x.dtype).t())
        return torch.exp(wx - 0.5 * (x * x).sum(dim=-1, keepdim=True)) / math.sqrt(m)
    raise ValueError(f"unknown feature_map {kind!r}")


class LinearAttention(nn.Module):
    """The linear_attention mixer: causal multi-head linear attention; parameters q/k/v/o_proj
    (+ favor_projection). `p`: its parameters (config.layer_list's "mixer")."""

    prefix = "attn"

    def __init__(self, d, p):
        super().__init__()
        h, dh, f = p["n_heads"], p["head_dim"], p["feature_dim"]
        self.n_heads, self.head_dim, self.feature_dim = h, dh, f
        self.kind = p["feature_map"]
        self.eps = p["eps"]
        self.q_proj = nn.Linear(d, h * dh, bias=p["bias"])
        self.k_proj = nn.Linear(d, h * dh, bias=p["bias"])
        self.v_proj = nn.Linear(d, h * dh, bias=p["bias"])
        self.o_proj = nn.Linear(h * dh, d, bias=p["bias"])
        if self.kind == "favor_plus":
            # Random features, fixed at creation (not trained); stored in the model file.
            self.register_buffer("favor_projection", torch.randn(f, dh))
        else:
            self.favor_projection = None

    def init_state(self, batch_size, dtype, device):
        """The zero slice: S [B, H, F, Dh] and z [B, H, F]."""
        shape = (batch_size, self.n_heads, self.feature_dim)
        return (torch.zeros(shape + (self.head_dim,), dtype=dtype, device=device),
                torch.zeros(shape, dtype=dtype, device=device))

    def _qkv(self, x, state_dtype):
        """x [..., d] -> φ(q), φ(k) [..., H, F] and v [..., H, Dh], all in state_dtype."""
        shape = x.shape[:-1] + (self.n_heads, self.head_dim)
        q = self.q_proj(x).view(shape).to(state_dtype)
        k = self.k_proj(x).view(shape).to(state_dtype)
        v = self.v_proj(x).view(shape).to(state_dtype)
        return (feature_map(self.kind, q, self.favor_projection),
                feature_map(self.kind, k, self.favor_projection), v)

    def forward(self, x, state, positions, chunk_size):
        """x [B, T, d]; state (S, z) -> (out [B, T, d], (S', z'))."""
        s, z = state
        qf, kf, v = (a.transpose(1, 2) for a in self._qkv(x, s.dtype))  # [B, H, T, *]
        o, s, z = linear_recurrence.chunked(qf, kf, v, s, z, self.eps, chunk_size)
        o = o.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1).to(x.dtype)
        return self.o_proj(o), (s, z)

    def step(self, x, state, positions):
        """x [B, d] -> (out [B, d], (S', z')): one token per row."""
        s, z = state
        o, s, z = linear_recurrence.step(*self._qkv(x, s.dtype), s, z, self.eps)
        return self.o_proj(o.reshape(x.shape[0], -1).to(x.dtype)), (s, z)

    def flatten(self, state, b):
        return linear_recurrence.flatten(*state, b)

    def unflatten(self, flat):
        return linear_recurrence.unflatten(flat, self.n_heads, self.feature_dim, self.head_dim)


def _check(p, path):
    if p["feature_map"] != "favor_plus" and p["feature_dim"] != p["head_dim"]:
        raise ConfigError(
            f"config field '{path}.feature_dim' = {p['feature_dim']} must equal head_dim = "
            f"{p['head_dim']} for feature_map '{p['feature_map']}'")


KIND = Kind(
    role="mixer",
    name="linear_attention",
    params=(
        ("n_heads", "int", None, (1, 1024)),
        ("head_dim", "int", None, (1, 4096)),
        ("feature_dim", "int", "=head_dim", (1, 16384)),
        ("feature_map", "choice", "elu_plus_one", FEATURE_MAPS),
        ("eps", "eps", 1e-6, (0.0, 1.0)),
        ("bias", "bool", True, None),
    ),
    make=LinearAttention,
    state_floats=lambda p: p["n_heads"] * p["feature_dim"] * (p["head_dim"] + 1),
    check=_check,
)
