"""The mamba2 mixer: Mamba-2's SSD layer (Dao & Gu 2024) as flash-linear-attention's Mamba2 layer
computes it (model/layers/mamba2.h has the formulas): z | xBC | dt = in_proj(x); x | B | C =
silu(conv(xBC)); per head dt = clamp(softplus(dt + dt_bias), dt_limit_min, dt_limit_max) and

    S ← exp(−exp(A_log) · dt) S + B (dt x)ᵀ;  y = Sᵀ C + D ⊙ x

(B and C of the head's group), then the grouped gated RMSNorm and out_proj. In linear attention's
terms that is gated_linear_attention.py's recurrence with k = B, q = C (unscaled), v = dt · x and
one log gate for every channel, so `forward` runs that module's chunked form and `step` the
recurrence. The log decay has the floor −1e4 (a NaN taken as it). State slice: per head S
(state_size × head_dim), then the last conv_size − 1 rows of x | B | C before the convolution,
oldest first."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from linserve_ref.config import ConfigError
from linserve_ref.delta_rule import ConvParams, Scale
from linserve_ref.gated_linear_attention import _chunk
from linserve_ref.kind import Kind

MIN_LOG_DECAY = -1e4


def _dims(p):
    di = p["n_heads"] * p["head_dim"]
    gn = p["n_groups"] * p["state_size"]
    return di, gn, di + 2 * gn


def state_floats(p):
    _, _, conv = _dims(p)
    return p["n_heads"] * p["state_size"] * p["head_dim"] + (p["conv_size"] - 1) * conv


class Mamba2Mixer(nn.Module):
    """A Mamba-2 layer. Tensors under mamba.: in_proj (+ bias), conv1d [conv_dim, conv_size]
    (+ bias), dt_bias, A_log, D, norm (with rmsnorm), out_proj (+ bias)."""

    prefix = "mamba"

    def __init__(self, d, p):
        super().__init__()
        self.h, self.pd, self.n = p["n_heads"], p["head_dim"], p["state_size"]
        self.g, self.taps = p["n_groups"], p["conv_size"]
        self.di, self.gn, self.conv_dim = _dims(p)
        self.d_has_hdim, self.rmsnorm = p["d_has_hdim"], p["rmsnorm"]
        self.norm_before_gate, self.norm_eps = p["norm_before_gate"], p["norm_eps"]
        self.dt_lo, self.dt_hi = p["dt_limit_min"], p["dt_limit_max"]
        self.in_proj = nn.Linear(d, self.di + self.conv_dim + self.h, bias=p["bias"])
        self.conv1d = ConvParams(self.conv_dim, self.taps, p["conv_bias"])
        self.dt_bias = nn.Parameter(torch.zeros(self.h))
        self.A_log = nn.Parameter(torch.zeros(self.h))
        self.D = nn.Parameter(torch.ones(self.di if self.d_has_hdim else self.h))
        if self.rmsnorm:
            self.norm = Scale(self.di)
        self.out_proj = nn.Linear(self.di, d, bias=p["bias"])

    def reset_kind_parameters(self):
        """fla's initialisation (fla/layers/mamba2.py): dt log-uniform in [0.001, 0.1] (at least
        1e-4), dt_bias = softplus⁻¹(dt); A = U(1, 16), A_log = log A; D = 1; the convolution
        nn.Conv1d's U(−1/√taps, 1/√taps), its bias 0; the norm 1."""
        with torch.no_grad():
            dt = torch.exp(torch.rand_like(self.dt_bias) * (math.log(0.1) - math.log(0.001))
                           + math.log(0.001)).clamp(min=1e-4)
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
            self.A_log.copy_(torch.log(torch.empty_like(self.A_log).uniform_(1, 16)))
            nn.init.ones_(self.D)
            bound = 1.0 / math.sqrt(self.taps)
            nn.init.uniform_(self.conv1d.weight, -bound, bound)
            if self.conv1d.bias is not None:
                nn.init.zeros_(self.conv1d.bias)
            if self.rmsnorm:
                nn.init.ones_(self.norm.weight)

    def init_state(self, batch_size, dtype, device):
        """S [B, H, N, P] and the convolution's history [B, taps − 1, conv_dim]."""
        return (torch.zeros(batch_size, self.h, self.n, self.pd, dtype=dtype, device=device),
                torch.zeros(batch_size, self.taps - 1, self.conv_dim, dtype=dtype,
                            device=device))

    def _inputs(self, u, history):
        """u [B, T, d] -> q (C), k (B), gk [B, H, T, N], v (dt · x), x [B, H, T, P], z
        [B, T, d_inner] and the next history."""
        dt_ = history.dtype
        b_rows, t = u.shape[0], u.shape[1]
        proj = self.in_proj(u).to(dt_)
        z, xbc, dt_raw = torch.split(proj, [self.di, self.conv_dim, self.h], dim=-1)
        window = torch.cat([history, xbc], dim=1)
        w = self.conv1d.weight.to(dt_)
        y = sum(window[:, j:j + t] * w[:, j] for j in range(self.taps))
        if self.conv1d.bias is not None:
            y = y + self.conv1d.bias.to(dt_)
        history = window[:, window.shape[1] - (self.taps - 1):]
        x, b, c = torch.split(F.silu(y), [self.di, self.gn, self.gn], dim=-1)
        dt = torch.clamp(F.softplus(dt_raw + self.dt_bias.to(dt_)), self.dt_lo, self.dt_hi)
        g = -torch.exp(self.A_log.to(dt_)) * dt  # [B, T, H]
        g = torch.where(g >= MIN_LOG_DECAY, g, torch.full_like(g, MIN_LOG_DECAY))

        def per_head(groups):  # [B, T, G·N] -> [B, H, T, N]
            per_group = groups.reshape(b_rows, t, self.g, self.n)
            return per_group.repeat_interleave(self.h // self.g, dim=2).transpose(1, 2)

        x = x.reshape(b_rows, t, self.h, self.pd).transpose(1, 2)
        v = x * dt.transpose(1, 2)[..., None]
        gk = g.transpose(1, 2)[..., None].expand(b_rows, self.h, t, self.n)
        return per_head(c), per_head(b), gk, v, x, z, history

    def _output(self, o, x, z):
        """o (Sᵀ C), x [B, H, T, P], z [B, T, d_inner] -> out_proj's input."""
        d = self.D.to(o.dtype)
        d = d.view(self.h, self.pd) if self.d_has_hdim else d.view(self.h, 1)
        y = (o + d[None, :, None, :] * x).transpose(1, 2).reshape(z.shape)
        gate = F.silu(z)
        if not self.rmsnorm:
            return y * gate
        if not self.norm_before_gate:
            y = y * gate
        grouped = y.reshape(*y.shape[:-1], self.g, self.di // self.g)
        grouped = grouped / torch.sqrt((grouped * grouped).mean(-1, keepdim=True) + self.norm_eps)
        y = grouped.reshape(y.shape) * self.norm.weight.to(y.dtype)
        return y * gate if self.norm_before_gate else y

    def forward(self, u, state, positions, chunk_size):
        s, history = state
        q, k, gk, v, x, z, history = self._inputs(u, history)
        outs = []
        for start in range(0, u.shape[1], chunk_size):
            c = slice(start, start + chunk_size)
            o, s = _chunk(q[:, :, c], k[:, :, c], gk[:, :, c], v[:, :, c], s)
            outs.append(o)
        o = torch.cat(outs, dim=2)
        return self.out_proj(self._output(o, x, z).to(u.dtype)), (s, history)

    def step(self, u, state, positions):
        s, history = state
        q, k, gk, v, x, z, history = self._inputs(u.unsqueeze(1), history)
        q, k, gk, v = q[:, :, 0], k[:, :, 0], gk[:, :, 0], v[:, :, 0]
        s = s * torch.exp(gk)[..., None] + k[..., :, None] * v[..., None, :]
        o = torch.einsum("bhnp,bhn->bhp", s, q)
        return self.out_proj(self._output(o.unsqueeze(2), x, z)[:, 0].to(u.dtype)), (s, history)

    def flatten(self, state, b):
        return torch.cat([state[0][b].reshape(-1), state[1][b].reshape(-1)])

    def unflatten(self, flat):
        n = self.h * self.n * self.pd
        return (flat[:n].reshape(1, self.h, self.n, self.pd).clone(),
                flat[n:].reshape(1, self.taps - 1, self.conv_dim).clone())


def _check(p, path):
    if p["n_heads"] % p["n_groups"]:
        raise ConfigError(f"config field '{path}.n_groups' = {p['n_groups']} must divide "
                          f"n_heads = {p['n_heads']}")
    if p["dt_limit_min"] > p["dt_limit_max"]:
        raise ConfigError(f"config field '{path}.dt_limit_max' = {p['dt_limit_max']} must be at "
                          f"least dt_limit_min = {p['dt_limit_min']}")


KIND = Kind(
    role="mixer",
    name="mamba2",
    params=(
        ("n_heads", "int", None, (1, 1024)),
        ("head_dim", "int", None, (1, 1024)),
        ("state_size", "int", None, (1, 1024)),
        ("n_groups", "int", 1, (1, 1024)),
        ("conv_size", "int", 4, (2, 64)),
        ("conv_bias", "bool", True, None),
        ("bias", "bool", False, None),
        ("d_has_hdim", "bool", False, None),
        ("rmsnorm", "bool", True, None),
        ("norm_before_gate", "bool", False, None),
        ("dt_limit_min", "number", 0.0, (0.0, 1e30)),
        ("dt_limit_max", "number", 1e30, (0.0, 1e30)),
        ("norm_eps", "eps", 1e-5, (0.0, 1.0)),
    ),
    make=lambda d, p: Mamba2Mixer(d, p),
    state_floats=state_floats,
    check=_check,
)
