"""The gated_delta_net mixer: Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024) as
flash-linear-attention's GatedDeltaNet layer computes it (model/layers/gated_delta_net.h has the
formulas). Per token: short causal convolutions with silu on q, k and v; per value head the
L2-normalised q (scaled by head_k_dim^-1/2) and k, β = sigmoid(b_proj(x)) (· 2 with
allow_neg_eigval), g = −exp(A_log) · softplus(a_proj(x) + dt_bias), and

    S ← exp(g) S;  u = β (v − Sᵀk);  S ← S + k uᵀ;  o = Sᵀq;

o through an RMSNorm per head with weight o_norm, times silu(g_proj(x)) with use_gate; o_proj.
The definition is the recurrence: `forward` runs it token by token whatever the chunk size (the
C++ prefill does too). State slice: per value head S (head_k_dim × head_v_dim), then the last
conv_size − 1 inputs of q | k | v before their convolutions, oldest first."""

import torch
import torch.nn.functional as F
from torch import nn

from linserve_ref.config import ConfigError
from linserve_ref.kind import Kind

L2_EPS = 1e-6  # fla's l2norm: x / sqrt(Σ x² + eps)


class _Conv(nn.Module):
    """A depthwise causal convolution's parameters: weight [channels, taps] (fla's Conv1d weight
    [channels, 1, taps] without its middle axis), bias [channels] or none."""

    def __init__(self, channels, taps, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, taps))
        if bias:
            self.bias = nn.Parameter(torch.empty(channels))
        else:
            self.register_parameter("bias", None)


class _Scale(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))


class GatedDeltaNet(nn.Module):
    """`p`: its parameters (config.layer_list's "mixer"). Tensors under attn.: q/k/v/a/b_proj,
    g_proj (use_gate), A_log, dt_bias, q/k/v_conv1d, o_norm, o_proj; no projection biases."""

    prefix = "attn"

    def __init__(self, d, p):
        super().__init__()
        self.h, self.hv = p["n_heads"], p["n_v_heads"]
        self.dk, self.dv = p["head_k_dim"], p["head_v_dim"]
        self.taps = p["conv_size"]
        self.use_gate, self.neg = p["use_gate"], p["allow_neg_eigval"]
        self.norm_eps = p["norm_eps"]
        kd, vd = self.h * self.dk, self.hv * self.dv
        self.key_dim, self.value_dim = kd, vd
        self.q_proj = nn.Linear(d, kd, bias=False)
        self.k_proj = nn.Linear(d, kd, bias=False)
        self.v_proj = nn.Linear(d, vd, bias=False)
        self.a_proj = nn.Linear(d, self.hv, bias=False)
        self.b_proj = nn.Linear(d, self.hv, bias=False)
        if self.use_gate:
            self.g_proj = nn.Linear(d, vd, bias=False)
        self.A_log = nn.Parameter(torch.zeros(self.hv))
        self.dt_bias = nn.Parameter(torch.zeros(self.hv))
        self.q_conv1d = _Conv(kd, self.taps, p["conv_bias"])
        self.k_conv1d = _Conv(kd, self.taps, p["conv_bias"])
        self.v_conv1d = _Conv(vd, self.taps, p["conv_bias"])
        self.o_norm = _Scale(self.dv)
        self.o_proj = nn.Linear(vd, d, bias=False)

    def init_state(self, batch_size, dtype, device):
        """S [B, HV, K, V] and the convolutions' history [B, taps − 1, 2·key_dim + value_dim]."""
        return (torch.zeros(batch_size, self.hv, self.dk, self.dv, dtype=dtype, device=device),
                torch.zeros(batch_size, self.taps - 1, 2 * self.key_dim + self.value_dim,
                            dtype=dtype, device=device))

    def _conv(self, history, x):
        """history [B, taps − 1, C], x [B, C] -> silu(conv) [B, C] and the next history."""
        window = torch.cat([history, x.unsqueeze(1)], dim=1)  # [B, taps, C]
        convs = (self.q_conv1d, self.k_conv1d, self.v_conv1d)
        w = torch.cat([c.weight for c in convs]).to(x.dtype)  # [C, taps]
        y = (window * w.t().unsqueeze(0)).sum(dim=1)
        if convs[0].bias is not None:
            y = y + torch.cat([c.bias for c in convs]).to(x.dtype)
        return F.silu(y), window[:, 1:]

    def _token(self, x, s, history):
        """One token per row: x [B, d] -> o [B, value_dim] (before o_proj), S', history'."""
        dt = s.dtype
        b_rows = x.shape[0]
        raw = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1).to(dt)
        qkv, history = self._conv(history, raw)
        q, k, v = torch.split(qkv, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.view(b_rows, self.h, self.dk)
        k = k.view(b_rows, self.h, self.dk)
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + L2_EPS) * self.dk ** -0.5
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + L2_EPS)
        group = self.hv // self.h
        q = q.repeat_interleave(group, dim=1)  # value head vh reads q/k head vh // group
        k = k.repeat_interleave(group, dim=1)
        v = v.view(b_rows, self.hv, self.dv)
        beta = torch.sigmoid(self.b_proj(x).to(dt))
        if self.neg:
            beta = beta * 2
        g = -torch.exp(self.A_log.to(dt)) * F.softplus(self.a_proj(x).to(dt) + self.dt_bias.to(dt))
        s = s * torch.exp(g)[..., None, None]
        kv = torch.einsum("bhkv,bhk->bhv", s, k)
        u = beta[..., None] * (v - kv)
        s = s + k[..., :, None] * u[..., None, :]
        o = torch.einsum("bhkv,bhk->bhv", s, q)
        o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + self.norm_eps)
        o = o * self.o_norm.weight.to(dt)
        if self.use_gate:
            o = o * F.silu(self.g_proj(x).to(dt).view(b_rows, self.hv, self.dv))
        return o.reshape(b_rows, self.value_dim), s, history

    def forward(self, x, state, positions, chunk_size):
        s, history = state
        outs = []
        for t in range(x.shape[1]):
            o, s, history = self._token(x[:, t], s, history)
            outs.append(o)
        o = torch.stack(outs, dim=1)
        return self.o_proj(o.to(x.dtype)), (s, history)

    def step(self, x, state, positions):
        o, s, history = self._token(x, *state)
        return self.o_proj(o.to(x.dtype)), (s, history)

    def flatten(self, state, b):
        return torch.cat([state[0][b].reshape(-1), state[1][b].reshape(-1)])

    def unflatten(self, flat):
        n = self.hv * self.dk * self.dv
        return (flat[:n].reshape(1, self.hv, self.dk, self.dv).clone(),
                flat[n:].reshape(1, self.taps - 1, -1).clone())


def _check(p, path):
    if p["n_v_heads"] % p["n_heads"] != 0:
        raise ConfigError(
            f"config field '{path}.n_v_heads' = {p['n_v_heads']} must be a multiple of n_heads "
            f"= {p['n_heads']}")


KIND = Kind(
    role="mixer",
    name="gated_delta_net",
    params=(
        ("n_heads", "int", None, (1, 1024)),
        ("n_v_heads", "int", "=n_heads", (1, 1024)),
        ("head_k_dim", "int", None, (1, 1024)),
        ("head_v_dim", "int", None, (1, 1024)),
        ("conv_size", "int", 4, (2, 64)),
        ("conv_bias", "bool", False, None),
        ("use_gate", "bool", True, None),
        ("allow_neg_eigval", "bool", False, None),
        ("norm_eps", "eps", 1e-5, (0.0, 1.0)),
    ),
    make=GatedDeltaNet,
    state_floats=lambda p: (p["n_v_heads"] * p["head_k_dim"] * p["head_v_dim"]
                            + (p["conv_size"] - 1)
                            * (2 * p["n_heads"] * p["head_k_dim"]
                               + p["n_v_heads"] * p["head_v_dim"])),
    check=_check,
)
