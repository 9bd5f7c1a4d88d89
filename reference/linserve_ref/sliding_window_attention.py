"""The sliding_window_attention mixer (the Based paper's SlidingAttention): softmax attention of
each query over the last `window` tokens, itself included, with rotary embeddings (GPT-NeoX /
flash-attn non-interleaved) on the first rotary_dim dims of each q and k head:

    scores_ts = RoPE_t(q_t) · RoPE_s(k_s) / sqrt(head_dim)   for t − window < s ≤ t.

The parallel form (`forward`) is that definition at absolute positions. The recurrent form
(`step`) is what the C++ backend does: scores depend only on t − s, so the state keeps keys
before RoPE and rotates each by its distance, RoPE_t(q)·RoPE_s(k) = q · RoPE_{s−t}(k).

State slice: a ring of R = window − 1 past tokens, then two counters. Ring entry r holds, per
head h, k (before RoPE) then v, each head_dim floats (entry r at r·H·2·hd, head h at +h·2·hd);
`count` = the entries holding a token (0 … R), `next` = the entry the next token is written to
(0 … R−1; 0 when R = 0), both stored as floats. A step attends over the `count` stored tokens and
the current one, then writes the current (k, v) into ring[next], next = (next + 1) % R,
count = min(count + 1, R).
"""

import math

import torch
from torch import nn

from linserve_ref.config import ConfigError
from linserve_ref.kind import Kind


def rope_angles(positions, rotary_dim, base):
    """cos, sin [..., rotary_dim / 2] of positions · inv_freq, inv_freq[i] = base^(−2i/rotary_dim),
    in float64."""
    i = torch.arange(rotary_dim // 2, dtype=torch.float64)
    inv_freq = torch.pow(torch.tensor(base, dtype=torch.float64), -2.0 * i / rotary_dim)
    angle = positions.to(torch.float64).unsqueeze(-1) * inv_freq
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x, cos, sin):
    """x [..., head_dim]; cos, sin broadcastable to [..., rotary_dim / 2]: the pairs
    (x[i], x[i + r/2]) rotated, the dims beyond rotary_dim unchanged."""
    half = cos.shape[-1]
    a, b, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], dim=-1)


class SlidingWindowAttention(nn.Module):
    """`p`: its parameters (config.layer_list's "mixer")."""

    prefix = "attn"

    def __init__(self, d, p):
        super().__init__()
        h, dh = p["n_heads"], p["head_dim"]
        self.n_heads, self.head_dim, self.window = h, dh, p["window"]
        self.ring = self.window - 1
        self.rotary_dim, self.rope_base = p["rotary_dim"], p["rope_base"]
        self.q_proj = nn.Linear(d, h * dh, bias=p["bias"])
        self.k_proj = nn.Linear(d, h * dh, bias=p["bias"])
        self.v_proj = nn.Linear(d, h * dh, bias=p["bias"])
        self.o_proj = nn.Linear(h * dh, d, bias=p["bias"])

    def init_state(self, batch_size, dtype, device):
        """(ring k [B, R, H, hd], ring v [B, R, H, hd], count [B], next [B]) (counters int64)."""
        ring = (batch_size, self.ring, self.n_heads, self.head_dim)
        return (torch.zeros(ring, dtype=dtype, device=device),
                torch.zeros(ring, dtype=dtype, device=device),
                torch.zeros(batch_size, dtype=torch.int64, device=device),
                torch.zeros(batch_size, dtype=torch.int64, device=device))

    def _qkv(self, x, dtype):
        shape = x.shape[:-1] + (self.n_heads, self.head_dim)
        return tuple(proj(x).view(shape).to(dtype)
                     for proj in (self.q_proj, self.k_proj, self.v_proj))

    def _past(self, state, b):
        """Row b's stored tokens, oldest first: (k [c, H, hd], v [c, H, hd])."""
        ring_k, ring_v, count, nxt = state
        c, n = int(count[b]), int(nxt[b])
        order = [(n + i) % self.ring for i in range(c)] if c == self.ring else list(range(c))
        return ring_k[b, order], ring_v[b, order]

    def _write(self, state, b, k, v):
        """Writes k, v [T, H, hd] into row b's ring in place, as T steps would."""
        if self.ring == 0:
            return
        ring_k, ring_v, count, nxt = state
        t, n = k.shape[0], int(nxt[b])
        for j in range(max(0, t - self.ring), t):
            ring_k[b, (n + j) % self.ring] = k[j]
            ring_v[b, (n + j) % self.ring] = v[j]
        count[b] = min(int(count[b]) + t, self.ring)
        nxt[b] = (n + t) % self.ring

    def _ordered(self, state):
        """Every row's stored tokens, oldest first: (k [B, R, H, hd], v [B, R, H, hd],
        valid [B, R]); entry i of a row holds a token iff i < its count."""
        ring_k, ring_v, count, nxt = state
        i = torch.arange(self.ring, device=count.device)
        full = (count == self.ring).unsqueeze(1)
        order = torch.where(full, (nxt.unsqueeze(1) + i) % max(1, self.ring), i)
        rows = torch.arange(count.shape[0], device=count.device).unsqueeze(1)
        return ring_k[rows, order], ring_v[rows, order], i < count.unsqueeze(1)

    def _written(self, state, k, v):
        """The state after every row consumed k, v [B, t, H, hd], as t steps would leave it."""
        ring_k, ring_v, count, nxt = state
        t = k.shape[1]
        if self.ring == 0:
            return state
        j = torch.arange(max(0, t - self.ring), t, device=count.device)
        slots = (nxt.unsqueeze(1) + j) % self.ring
        rows = torch.arange(count.shape[0], device=count.device).unsqueeze(1)
        ring_k, ring_v = ring_k.clone(), ring_v.clone()
        ring_k[rows, slots] = k[:, j]
        ring_v[rows, slots] = v[:, j]
        return ring_k, ring_v, torch.clamp(count + t, max=self.ring), (nxt + t) % self.ring

    def forward(self, x, state, positions, chunk_size):
        """The defining form over each chunk, all rows at once: dense causal attention over the
        stored tokens and the chunk's, masked to the window, at absolute positions."""
        q, k, v = self._qkv(x, state[0].dtype)
        outs = []
        for start in range(0, x.shape[1], chunk_size):
            end = min(start + chunk_size, x.shape[1])
            past_k, past_v, valid = self._ordered(state)
            count = state[2]
            pos_q = positions[:, start:end]                                       # [B, t]
            pos_past = (pos_q[:, :1] - count.unsqueeze(1) +
                        torch.arange(self.ring, device=count.device))             # [B, R]
            pos_k = torch.cat([pos_past, pos_q], dim=1)                           # [B, R + t]
            keys = torch.cat([past_k, k[:, start:end]], dim=1)
            values = torch.cat([past_v, v[:, start:end]], dim=1)
            cos_q, sin_q = rope_angles(pos_q, self.rotary_dim, self.rope_base)
            cos_k, sin_k = rope_angles(pos_k, self.rotary_dim, self.rope_base)
            rq = apply_rope(q[:, start:end], cos_q.to(q.dtype).unsqueeze(-2),
                            sin_q.to(q.dtype).unsqueeze(-2))
            rk = apply_rope(keys, cos_k.to(q.dtype).unsqueeze(-2), sin_k.to(q.dtype).unsqueeze(-2))
            scores = torch.einsum("bthd,bshd->bhts", rq, rk) / math.sqrt(self.head_dim)
            dist = pos_q.unsqueeze(2) - pos_k.unsqueeze(1)                        # [B, t, R + t]
            stored = torch.cat([valid, torch.ones_like(pos_q, dtype=torch.bool)], dim=1)
            visible = (dist >= 0) & (dist < self.window) & stored.unsqueeze(1)
            p = torch.softmax(scores.masked_fill(~visible.unsqueeze(1), float("-inf")), dim=-1)
            outs.append(torch.einsum("bhts,bshd->bthd", p, values))
            state = self._written(state, k[:, start:end], v[:, start:end])
        y = torch.cat(outs, dim=1).reshape(x.shape[0], x.shape[1], -1).to(x.dtype)
        return self.o_proj(y), state

    def step(self, x, state, positions):
        """One token per row: the stored keys rotated by minus their distance, the current key
        at distance 0, softmax, then the ring write."""
        q, k, v = self._qkv(x, state[0].dtype)
        state = tuple(s.clone() for s in state)
        out = torch.empty_like(q)
        for b in range(x.shape[0]):
            past_k, past_v = self._past(state, b)
            c = past_k.shape[0]
            distance = torch.arange(c, 0, -1)  # oldest first: c, c − 1, …, 1
            cos, sin = rope_angles(-distance, self.rotary_dim, self.rope_base)
            rotated = apply_rope(past_k, cos.to(q.dtype).unsqueeze(1), sin.to(q.dtype).unsqueeze(1))
            keys = torch.cat([rotated, k[b].unsqueeze(0)])       # [c + 1, H, hd]
            values = torch.cat([past_v, v[b].unsqueeze(0)])
            scores = torch.einsum("hd,shd->hs", q[b], keys) / math.sqrt(self.head_dim)
            out[b] = torch.einsum("hs,shd->hd", torch.softmax(scores, dim=-1), values)
            self._write(state, b, k[b].unsqueeze(0), v[b].unsqueeze(0))
        return self.o_proj(out.reshape(x.shape[0], -1).to(x.dtype)), state

    def flatten(self, state, b):
        ring_k, ring_v, count, nxt = state
        ring = torch.stack([ring_k[b], ring_v[b]], dim=2).reshape(-1)  # [R, H, 2, hd]
        counters = torch.tensor([float(count[b]), float(nxt[b])], dtype=ring.dtype)
        return torch.cat([ring, counters])

    def unflatten(self, flat):
        ring = flat[:-2].reshape(1, self.ring, self.n_heads, 2, self.head_dim)
        return (ring[:, :, :, 0].clone(), ring[:, :, :, 1].clone(),
                flat[-2:-1].to(torch.int64), flat[-1:].to(torch.int64))


def _check(p, path):
    if p["rotary_dim"] > p["head_dim"] or p["rotary_dim"] % 2:
        raise ConfigError(
            f"config field '{path}.rotary_dim' = {p['rotary_dim']} must be even and at most "
            f"head_dim = {p['head_dim']}")


KIND = Kind(
    role="mixer",
    name="sliding_window_attention",
    params=(
        ("n_heads", "int", None, (1, 1024)),
        ("head_dim", "int", None, (1, 4096)),
        ("window", "int", None, (1, 65536)),
        ("rotary_dim", "int", "=head_dim", (0, 4096)),
        ("rope_base", "positive", 10000.0, None),
        ("bias", "bool", False, None),
    ),
    make=SlidingWindowAttention,
    state_floats=lambda p: (p["window"] - 1) * p["n_heads"] * 2 * p["head_dim"] + 2,
    check=_check,
)
