"""The delta-rule mixer both delta-rule kinds run (gated_delta_net.py, delta_net.py; the C++
side's model/layers/delta_rule_shape.h): short causal convolutions with silu on q, k and v; per
value head the L2-normalised q (scaled by head_k_dim^-1/2) and k, β = sigmoid(b_proj(x)) with
use_beta (else 1; · 2 with allow_neg_eigval), with the decay g = −exp(A_log) ·
softplus(a_proj(x) + dt_bias) (else 0), and

    S ← exp(g) S;  u = β (v − Sᵀk);  S ← S + k uᵀ;  o = Sᵀq;

o through an RMSNorm per head with weight o_norm, times silu(g_proj(x)) with use_gate; o_proj.
`step` is that recurrence; `forward` computes the same chunk by chunk in the WY form (Yang et al.,
"Parallelizing Linear Transformers with the Delta Rule over Sequence Length", with the decay as
in the Gated DeltaNet paper): within a chunk of C tokens with b = cumsum(g), Γ_ij = exp(b_i − b_j),
T = (I + strict_lower(diag(β) K Kᵀ ⊙ Γ))⁻¹, W = T (K ⊙ β exp(b)), U = T (V ⊙ β); from the state S
before the chunk, u = U − W S, o = (Q ⊙ exp(b)) S + (Q Kᵀ ⊙ Γ ⊙ lower) u, and
S ← exp(b_last) S + (K ⊙ exp(b_last − b))ᵀ u. State slice: per value head S (head_k_dim ×
head_v_dim), then the last conv_size − 1 inputs of q | k | v before their convolutions, oldest
first."""

import math

import torch
import torch.nn.functional as F
from torch import nn

L2_EPS = 1e-6  # fla's l2norm: x / sqrt(Σ x² + eps)


def state_floats(p):
    """Floats of the state slice of a layer with parameters p (n_v_heads given)."""
    return (p["n_v_heads"] * p["head_k_dim"] * p["head_v_dim"]
            + (p["conv_size"] - 1) * (2 * p["n_heads"] * p["head_k_dim"]
                                      + p["n_v_heads"] * p["head_v_dim"]))


class ConvParams(nn.Module):
    """A depthwise causal convolution's parameters: weight [channels, taps] (fla's Conv1d weight
    [channels, 1, taps] without its middle axis), bias [channels] or none."""

    def __init__(self, channels, taps, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, taps))
        if bias:
            self.bias = nn.Parameter(torch.empty(channels))
        else:
            self.register_parameter("bias", None)


class Scale(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))


class DeltaRuleMixer(nn.Module):
    """A delta-rule layer. `p`: its parameters (config.layer_list's "mixer": n_heads,
    n_v_heads, head_k_dim, head_v_dim, conv_size, conv_bias, use_beta, use_gate,
    allow_neg_eigval, norm_eps); `decay`: whether S decays (a_proj, A_log, dt_bias). Tensors under
    attn.: q/k/v_proj, a_proj (decay), b_proj (use_beta), g_proj (use_gate), A_log and dt_bias
    (decay), q/k/v_conv1d, o_norm, o_proj; no projection biases."""

    prefix = "attn"

    def __init__(self, d, p, decay):
        super().__init__()
        self.decay, self.use_beta = decay, p["use_beta"]
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
        if decay:
            self.a_proj = nn.Linear(d, self.hv, bias=False)
        if self.use_beta:
            self.b_proj = nn.Linear(d, self.hv, bias=False)
        if self.use_gate:
            self.g_proj = nn.Linear(d, vd, bias=False)
        if decay:
            self.A_log = nn.Parameter(torch.zeros(self.hv))
            self.dt_bias = nn.Parameter(torch.zeros(self.hv))
        self.q_conv1d = ConvParams(kd, self.taps, p["conv_bias"])
        self.k_conv1d = ConvParams(kd, self.taps, p["conv_bias"])
        self.v_conv1d = ConvParams(vd, self.taps, p["conv_bias"])
        self.o_norm = Scale(self.dv)
        self.o_proj = nn.Linear(vd, d, bias=False)

    def reset_kind_parameters(self):
        """fla's initialisation (fla/layers/gated_deltanet.py, delta_net.py): with the decay,
        A = U(0, 16), A_log = log A, dt log-uniform in [0.001, 0.1] (at least 1e-4),
        dt_bias = softplus⁻¹(dt); the convolutions nn.Conv1d's U(−1/√taps, 1/√taps), their
        biases 0; o_norm 1."""
        with torch.no_grad():
            if self.decay:
                self.A_log.copy_(torch.log(torch.empty_like(self.A_log).uniform_(0, 16)))
                dt = torch.exp(torch.rand_like(self.dt_bias) * (math.log(0.1) - math.log(0.001))
                               + math.log(0.001)).clamp(min=1e-4)
                self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
            for conv in (self.q_conv1d, self.k_conv1d, self.v_conv1d):
                bound = 1.0 / math.sqrt(self.taps)
                nn.init.uniform_(conv.weight, -bound, bound)
                if conv.bias is not None:
                    nn.init.zeros_(conv.bias)
            nn.init.ones_(self.o_norm.weight)

    def init_state(self, batch_size, dtype, device):
        """S [B, HV, K, V] and the convolutions' history [B, taps − 1, 2·key_dim + value_dim]."""
        return (torch.zeros(batch_size, self.hv, self.dk, self.dv, dtype=dtype, device=device),
                torch.zeros(batch_size, self.taps - 1, 2 * self.key_dim + self.value_dim,
                            dtype=dtype, device=device))

    def _conv(self, history, raw):
        """history [B, taps − 1, C], raw [B, T, C] -> silu(conv) [B, T, C] and the next history."""
        t = raw.shape[1]
        window = torch.cat([history, raw], dim=1)  # [B, taps − 1 + T, C]
        convs = (self.q_conv1d, self.k_conv1d, self.v_conv1d)
        w = torch.cat([c.weight for c in convs]).to(raw.dtype)  # [C, taps]
        y = sum(window[:, j:j + t] * w[:, j] for j in range(self.taps))
        if convs[0].bias is not None:
            y = y + torch.cat([c.bias for c in convs]).to(raw.dtype)
        return F.silu(y), window[:, window.shape[1] - (self.taps - 1):]

    def _inputs(self, x, history):
        """x [B, T, d] -> per value head q̂, k̂ [B, HV, T, K], v [B, HV, T, V], β and g
        [B, HV, T], and the next history."""
        dt = history.dtype
        b_rows, t = x.shape[0], x.shape[1]
        raw = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1).to(dt)
        qkv, history = self._conv(history, raw)
        q, k, v = torch.split(qkv, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.view(b_rows, t, self.h, self.dk)
        k = k.view(b_rows, t, self.h, self.dk)
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + L2_EPS) * self.dk ** -0.5
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + L2_EPS)
        group = self.hv // self.h
        q = q.repeat_interleave(group, dim=2)  # value head vh reads q/k head vh // group
        k = k.repeat_interleave(group, dim=2)
        v = v.view(b_rows, t, self.hv, self.dv)
        if self.use_beta:
            beta = torch.sigmoid(self.b_proj(x).to(dt))
        else:
            beta = torch.ones(b_rows, t, self.hv, dtype=dt, device=x.device)
        if self.neg:
            beta = beta * 2
        if self.decay:
            g = -torch.exp(self.A_log.to(dt)) * F.softplus(self.a_proj(x).to(dt)
                                                           + self.dt_bias.to(dt))
        else:
            g = torch.zeros(b_rows, t, self.hv, dtype=dt, device=x.device)
        return (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), beta.transpose(1, 2),
                g.transpose(1, 2), history)

    def _output(self, o, x):
        """o [B, T, HV, V] -> o_proj's input [B, T, value_dim] (the gated RMSNorm)."""
        dt = o.dtype
        o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + self.norm_eps)
        o = o * self.o_norm.weight.to(dt)
        if self.use_gate:
            o = o * F.silu(self.g_proj(x).to(dt).view(o.shape))
        return o.reshape(o.shape[0], o.shape[1], self.value_dim)

    def forward(self, x, state, positions, chunk_size):
        s, history = state
        q, k, v, beta, g, history = self._inputs(x, history)
        outs = []
        for start in range(0, x.shape[1], chunk_size):
            c = slice(start, start + chunk_size)
            o, s = _wy_chunk(q[:, :, c], k[:, :, c], v[:, :, c], beta[:, :, c], g[:, :, c], s)
            outs.append(o)
        o = torch.cat(outs, dim=2).transpose(1, 2)  # [B, T, HV, V]
        return self.o_proj(self._output(o, x).to(x.dtype)), (s, history)

    def step(self, x, state, positions):
        s, history = state
        q, k, v, beta, g, history = self._inputs(x.unsqueeze(1), history)
        q, k, v, beta, g = q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[:, :, 0], g[:, :, 0]
        s = s * torch.exp(g)[..., None, None]
        u = beta[..., None] * (v - torch.einsum("bhkv,bhk->bhv", s, k))
        s = s + k[..., :, None] * u[..., None, :]
        o = torch.einsum("bhkv,bhk->bhv", s, q)
        return self.o_proj(self._output(o.unsqueeze(1), x.unsqueeze(1))[:, 0].to(x.dtype)), \
            (s, history)

    def flatten(self, state, b):
        return torch.cat([state[0][b].reshape(-1), state[1][b].reshape(-1)])

    def unflatten(self, flat):
        n = self.hv * self.dk * self.dv
        return (flat[:n].reshape(1, self.hv, self.dk, self.dv).clone(),
                flat[n:].reshape(1, self.taps - 1, -1).clone())


def _wy_chunk(q, k, v, beta, g, s):
    """One chunk in the WY form (module docstring): q, k [B, H, C, K], v [B, H, C, V], beta, g
    [B, H, C], s [B, H, K, V] -> o [B, H, C, V] and the state after the chunk."""
    c = q.shape[2]
    b = g.cumsum(-1)
    ones = torch.ones(c, c, dtype=torch.bool, device=q.device)
    strict, lower = torch.tril(ones, -1), torch.tril(ones)
    # Γ on and below the diagonal only: above it b_i − b_j > 0 grows without bound (and its
    # gradient would be inf · 0).
    gamma = torch.exp((b[..., :, None] - b[..., None, :]).masked_fill(~lower, float("-inf")))
    kb = k * beta[..., None]
    eye = torch.eye(c, dtype=q.dtype, device=q.device)
    system = eye + ((kb @ k.transpose(-1, -2)) * gamma).masked_fill(~strict, 0)
    w = torch.linalg.solve_triangular(system, kb * torch.exp(b)[..., None], upper=False)
    u = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False) - w @ s
    scores = ((q @ k.transpose(-1, -2)) * gamma).masked_fill(~lower, 0)
    o = (q * torch.exp(b)[..., None]) @ s + scores @ u
    last = b[..., -1:]
    s = s * torch.exp(last)[..., None] + (k * torch.exp(last - b)[..., None]).transpose(-1, -2) @ u
    return o, s
