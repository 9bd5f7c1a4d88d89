"""The rms_norm norm: y = x / sqrt(mean(x²) + eps) · weight, over d_model (no shift)."""

import torch
from torch import nn

from linserve_ref.kind import Kind


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


KIND = Kind(
    role="norm",
    name="rms_norm",
    params=(("eps", "eps", 1e-5, (0.0, 1.0)),),
    make=lambda d, p: RMSNorm(d, eps=p["eps"]),
)
