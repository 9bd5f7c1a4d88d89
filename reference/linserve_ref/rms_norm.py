"""The rms_norm norm: y = x / sqrt(mean(x²) + eps) · weight, over d_model (no shift)."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight
