"""Causal linear attention over given features, the one recurrence of every linear-attention
mixer kind (linear_attention, taylor_linear_attention):

    S += φ(k) vᵀ, z += φ(k)   (the current token first), then   y = φ(q)ᵀ S / (φ(q)ᵀ z + eps).

`chunked` is the parallel form: within a chunk the causal product is the masked matmul
(φ(Q)φ(K)ᵀ ⊙ tril) V, which is the defining quadratic form
y_t = Σ_{s≤t} (φ(q_t)·φ(k_s)) v_s / (φ(q_t)·Σ_{s≤t} φ(k_s) + eps); across chunks the carried (S, z)
supplies the past. `step` is the recurrence, one token.
"""

import torch


def chunked(qf, kf, v, s, z, eps, chunk_size):
    """qf, kf [B, H, T, F]; v [B, H, T, Dh]; s [B, H, F, Dh]; z [B, H, F] ->
    (y [B, H, T, Dh], s', z')."""
    t = qf.shape[2]
    outs = []
    for start in range(0, t, chunk_size):
        end = min(start + chunk_size, t)
        qc, kc, vc = qf[:, :, start:end], kf[:, :, start:end], v[:, :, start:end]
        mask = torch.ones(end - start, end - start, dtype=torch.bool, device=qf.device).tril()
        a = torch.matmul(qc, kc.transpose(-1, -2)).masked_fill(~mask, 0.0)
        num = torch.matmul(a, vc) + torch.matmul(qc, s)
        den = a.sum(dim=-1) + torch.matmul(qc, z.unsqueeze(-1)).squeeze(-1)
        outs.append(num / (den + eps).unsqueeze(-1))
        s = s + torch.matmul(kc.transpose(-1, -2), vc)
        z = z + kc.sum(dim=-2)
    return torch.cat(outs, dim=2), s, z


def step(qf, kf, v, s, z, eps):
    """qf, kf [B, H, F]; v [B, H, Dh] -> (y [B, H, Dh], s', z'): one token per row."""
    s = s + kf.unsqueeze(-1) * v.unsqueeze(-2)
    z = z + kf
    num = torch.matmul(qf.unsqueeze(-2), s).squeeze(-2)
    den = (qf * z).sum(dim=-1)
    return num / (den + eps).unsqueeze(-1), s, z


def flatten(s, z, b):
    """Row b of (S, z) as the state slice: per head, S (F × Dh, row-major) then z (F)."""
    return torch.cat([torch.cat([s[b, h].reshape(-1), z[b, h]]) for h in range(s.shape[1])])


def unflatten(flat, n_heads, features, head_dim):
    """Inverse of flatten: (S [1, H, F, Dh], z [1, H, F])."""
    part = flat.reshape(n_heads, features * head_dim + features)
    return (part[:, :features * head_dim].reshape(1, n_heads, features, head_dim).clone(),
            part[:, features * head_dim:].reshape(1, n_heads, features).clone())
