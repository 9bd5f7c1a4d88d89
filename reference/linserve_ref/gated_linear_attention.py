"""The gated_linear_attention mixer: Gated Linear Attention (Yang, Wang, Shen, Panda & Kim 2024) as
flash-linear-attention's GatedLinearAttention layer computes it (model/layers/
gated_linear_attention.h has the formulas): q, k, v projected (through silu short convolutions
with use_short_conv), the key gate gk = max(logsigmoid(gk_proj(x)) / gate_logit_normalizer,
clamp_min) per key channel from a low-rank projection, and per head

    S ← diag(exp(gk)) S + k vᵀ;  o = Sᵀ q / sqrt(head_k_dim);

o through an RMSNorm per head with weight g_norm, times silu(g_proj(x)) with use_output_gate;
o_proj. `step` is that recurrence; `forward` computes the same chunk by chunk: with b = cumsum(gk)
within a chunk, o_i = (q_i ⊙ exp(b_i)) S + Σ_{j≤i} (Σ_c q_ic k_jc exp(b_ic − b_jc)) v_j and
S ← diag(exp(b_last)) S + Σ_j (k_j ⊙ exp(b_last − b_j)) v_jᵀ — every exponent ≤ 0. State slice: per
head S (head_k_dim × head_v_dim), then with use_short_conv the last conv_size − 1 inputs of
q | k | v before their convolutions, oldest first.

The mixer also computes retention.py's kind (RetNet): no gk_proj, gk = log γ_h = log(1 − 2^(−5−h))
on every channel of head h, and RoPE kept in the state's frame: each token turns S by −θ_c on the
pairs (c, c + head_k_dim/2) (θ_c = rope_base^(−2c/head_k_dim)) before the decay, S ← γ R_−1 S +
k vᵀ, so o = Sᵀq is RoPE's (R_t q_t)·(R_s k_s) sum with no position kept. In a chunk, token i's
scores use R_i q_i and R_j k_j, the carried S is read by R_(i+1) q_i, and S leaves as
γ^n R_−n S + Σ_j γ^(n−1−j) (R_(j−n+1) k_j) v_jᵀ."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from linserve_ref.delta_rule import ConvParams, Scale
from linserve_ref.kind import Kind

MIN_LOG_GATE = -1e4  # the clamp_min default: no clamp in effect (e^-1e4 is 0)


def state_floats(p):
    """Floats of the state slice of a layer with parameters p."""
    kd, vd = p["n_heads"] * p["head_k_dim"], p["n_heads"] * p["head_v_dim"]
    history = (p["conv_size"] - 1) * (2 * kd + vd) if p["use_short_conv"] else 0
    return p["n_heads"] * p["head_k_dim"] * p["head_v_dim"] + history


class GatedLinearAttentionMixer(nn.Module):
    """A GLA layer. `p`: its parameters (config.layer_list's "mixer"). Tensors under attn.:
    q/k/v_proj, gk_proj.0 [rank, d] and gk_proj.1 [key_dim, rank] with its bias, g_proj
    (use_output_gate), q/k/v_conv1d (use_short_conv), g_norm, o_proj."""

    prefix = "attn"

    def __init__(self, d, p, retention=False):
        super().__init__()
        self.h, self.dk, self.dv = p["n_heads"], p["head_k_dim"], p["head_v_dim"]
        self.retention = retention
        if retention:
            self.rope_base = p["rope_base"]
        else:
            self.rank = p["gate_low_rank_dim"]
            self.normalizer, self.clamp_min = p["gate_logit_normalizer"], p["clamp_min"]
        self.use_conv, self.taps = p["use_short_conv"], p["conv_size"]
        self.use_gate, self.norm_eps = p["use_output_gate"], p["norm_eps"]
        kd, vd = self.h * self.dk, self.h * self.dv
        self.key_dim, self.value_dim = kd, vd
        self.q_proj = nn.Linear(d, kd, bias=False)
        self.k_proj = nn.Linear(d, kd, bias=False)
        self.v_proj = nn.Linear(d, vd, bias=False)
        if not retention:
            self.gk_proj = nn.Sequential(nn.Linear(d, self.rank, bias=False),
                                         nn.Linear(self.rank, kd, bias=True))
        if self.use_gate:
            self.g_proj = nn.Linear(d, vd, bias=False)
        if self.use_conv:
            self.q_conv1d = ConvParams(kd, self.taps, p["conv_bias"])
            self.k_conv1d = ConvParams(kd, self.taps, p["conv_bias"])
            self.v_conv1d = ConvParams(vd, self.taps, p["conv_bias"])
        self.g_norm = Scale(self.dv)
        self.o_proj = nn.Linear(vd, d, bias=False)

    def reset_kind_parameters(self):
        """fla's initialisation of what the model-wide init leaves (fla/layers/gla.py): the
        convolutions nn.Conv1d's U(−1/√taps, 1/√taps), their biases 0; gk_proj.1's bias 0 as the
        model's _init_weights zeroes every Linear bias; g_norm 1."""
        with torch.no_grad():
            if not self.retention:
                nn.init.zeros_(self.gk_proj[1].bias)
            if self.use_conv:
                for conv in (self.q_conv1d, self.k_conv1d, self.v_conv1d):
                    bound = 1.0 / math.sqrt(self.taps)
                    nn.init.uniform_(conv.weight, -bound, bound)
                    if conv.bias is not None:
                        nn.init.zeros_(conv.bias)
            nn.init.ones_(self.g_norm.weight)

    def init_state(self, batch_size, dtype, device):
        """S [B, H, K, V] and (with use_short_conv) the convolutions' history
        [B, taps − 1, 2·key_dim + value_dim]."""
        channels = 2 * self.key_dim + self.value_dim if self.use_conv else 0
        return (torch.zeros(batch_size, self.h, self.dk, self.dv, dtype=dtype, device=device),
                torch.zeros(batch_size, self.taps - 1 if self.use_conv else 0, channels,
                            dtype=dtype, device=device))

    def _inputs(self, x, history):
        """x [B, T, d] -> q (scaled), k, gk [B, H, T, K], v [B, H, T, V], and the next history."""
        dt = history.dtype
        b_rows, t = x.shape[0], x.shape[1]
        raw = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1).to(dt)
        if self.use_conv:
            window = torch.cat([history, raw], dim=1)
            convs = (self.q_conv1d, self.k_conv1d, self.v_conv1d)
            w = torch.cat([c.weight for c in convs]).to(dt)  # [C, taps]
            y = sum(window[:, j:j + t] * w[:, j] for j in range(self.taps))
            if convs[0].bias is not None:
                y = y + torch.cat([c.bias for c in convs]).to(dt)
            raw, history = F.silu(y), window[:, window.shape[1] - (self.taps - 1):]
        q, k, v = torch.split(raw, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        if self.retention:
            gamma = torch.log1p(-torch.exp2(-5.0 - torch.arange(self.h, dtype=torch.float64)))
            gk = gamma.to(dt).repeat_interleave(self.dk).expand(b_rows, t, self.key_dim)
        else:
            gk = F.logsigmoid(self.gk_proj(x).to(dt)) / self.normalizer
            gk = torch.clamp_min(gk, self.clamp_min)

        def heads(u, width):
            return u.reshape(b_rows, t, self.h, width).transpose(1, 2)

        return (heads(q, self.dk) * self.dk ** -0.5, heads(k, self.dk), heads(gk, self.dk),
                heads(v, self.dv), history)

    def _output(self, o, x):
        """o [B, H, T, V] -> o_proj's input [B, T, value_dim] (the gated RMSNorm)."""
        dt = o.dtype
        o = o.transpose(1, 2)
        o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + self.norm_eps)
        o = o * self.g_norm.weight.to(dt)
        if self.use_gate:
            o = o * F.silu(self.g_proj(x).to(dt).view(o.shape))
        return o.reshape(o.shape[0], o.shape[1], self.value_dim)

    def forward(self, x, state, positions, chunk_size):
        s, history = state
        q, k, gk, v, history = self._inputs(x, history)
        outs = []
        for start in range(0, x.shape[1], chunk_size):
            c = slice(start, start + chunk_size)
            o, s = _chunk(q[:, :, c], k[:, :, c], gk[:, :, c], v[:, :, c], s, self._theta())
            outs.append(o)
        o = torch.cat(outs, dim=2)
        return self.o_proj(self._output(o, x).to(x.dtype)), (s, history)

    def step(self, x, state, positions):
        s, history = state
        q, k, gk, v, history = self._inputs(x.unsqueeze(1), history)
        q, k, gk, v = q[:, :, 0], k[:, :, 0], gk[:, :, 0], v[:, :, 0]
        theta = self._theta()
        if theta is not None:
            s = _turn(s, torch.tensor(-1.0, dtype=torch.float64), theta, dim=-2)
        s = s * torch.exp(gk)[..., None] + k[..., :, None] * v[..., None, :]
        o = torch.einsum("bhkv,bhk->bhv", s, q)
        return self.o_proj(self._output(o.unsqueeze(2), x.unsqueeze(1))[:, 0].to(x.dtype)), \
            (s, history)

    def _theta(self):
        """RoPE's θ_c for the head_k_dim/2 pairs (retention), else None."""
        if not self.retention:
            return None
        c = torch.arange(self.dk // 2, dtype=torch.float64)
        return self.rope_base ** (-2.0 * c / self.dk)

    def flatten(self, state, b):
        return torch.cat([state[0][b].reshape(-1), state[1][b].reshape(-1)])

    def unflatten(self, flat):
        n = self.h * self.dk * self.dv
        channels = 2 * self.key_dim + self.value_dim if self.use_conv else 0
        return (flat[:n].reshape(1, self.h, self.dk, self.dv).clone(),
                flat[n:].reshape(1, self.taps - 1 if self.use_conv else 0, channels).clone())


def _turn(x, m, theta, dim=-1):
    """x turned by R_m along `dim` (K wide): pairs (c, c + K/2) by m · θ_c; m a scalar tensor or
    one per position of dim −2 (x [..., C, K] with m [C])."""
    angle = (m[..., None] if m.dim() else m) * theta  # [C, K/2] or [K/2]
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    if dim == -2:  # the state's rows
        cos, sin = cos[..., None], sin[..., None]
    x1, x2 = torch.chunk(x, 2, dim=dim)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=dim)


def _chunk(q, k, gk, v, s, theta=None):
    """One chunk in the chunked form (module docstring): q, k, gk [B, H, C, K], v [B, H, C, V],
    s [B, H, K, V] -> o [B, H, C, V] and the state after the chunk. With theta, RoPE's turns in the
    state's frame (retention)."""
    c = q.shape[2]
    q_in = q
    if theta is not None:
        i = torch.arange(c, dtype=torch.float64)
        q, k = _turn(q, i, theta), _turn(k, i, theta)
        q_in = _turn(q_in, i + 1, theta)
    b = gk.cumsum(2)
    lower = torch.tril(torch.ones(c, c, dtype=torch.bool, device=q.device))
    # exp(b_i − b_j) on and below the diagonal only (above it the exponent is positive).
    diff = (b[:, :, :, None, :] - b[:, :, None, :, :]).masked_fill(~lower[..., None], float("-inf"))
    scores = torch.einsum("bhic,bhjc,bhijc->bhij", q, k, torch.exp(diff))
    o = (q_in * torch.exp(b)) @ s + scores @ v
    last = b[:, :, -1:]
    if theta is not None:
        s = _turn(s, torch.tensor(float(-c), dtype=torch.float64), theta, dim=-2)
        k = _turn(k, torch.tensor(float(1 - c), dtype=torch.float64), theta)
    s = s * torch.exp(last).transpose(-1, -2) + (k * torch.exp(last - b)).transpose(-1, -2) @ v
    return o, s


def _make(d, p):
    return GatedLinearAttentionMixer(d, p)


KIND = Kind(
    role="mixer",
    name="gated_linear_attention",
    params=(
        ("n_heads", "int", None, (1, 1024)),
        ("head_k_dim", "int", None, (1, 1024)),
        ("head_v_dim", "int", None, (1, 1024)),
        ("gate_low_rank_dim", "int", 16, (1, 1024)),
        ("gate_logit_normalizer", "number", 16.0, (1.0, 1e6)),
        ("clamp_min", "number", MIN_LOG_GATE, (MIN_LOG_GATE, 0.0)),
        ("use_short_conv", "bool", False, None),
        ("conv_size", "int", 4, (2, 64)),
        ("conv_bias", "bool", False, None),
        ("use_output_gate", "bool", True, None),
        ("norm_eps", "eps", 1e-5, (0.0, 1.0)),
    ),
    make=_make,
    state_floats=state_floats,
)
