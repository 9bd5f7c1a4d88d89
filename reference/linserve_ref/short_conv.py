"""The short_conv mixer (the Based paper's BaseConv): a = in_proj(x), u = a[:d_inner],
g = a[d_inner:]; a depthwise causal convolution of u over the last kernel_size tokens,

    c_t[c] = Σ_{j=0}^{K-1} weight[c][j] · u_{t-(K-1)+j}[c]  (+ bias[c])   (u before 0 is 0),

then y = out_proj(silu(c_t) ⊙ g). State slice: the last K−1 values of u, oldest first
((K−1) × d_inner; after token t row r holds u_{t-(K-2)+r})."""

import torch
import torch.nn.functional as F
from torch import nn

from linserve_ref.kind import Kind


class ShortConv(nn.Module):
    """`p`: its parameters (config.layer_list's "mixer"). Tensors: conv.in_proj, conv.weight
    [d_inner, K], conv.bias [d_inner] (with conv_bias), conv.out_proj."""

    prefix = "conv"

    def __init__(self, d, p):
        super().__init__()
        self.d_inner, self.kernel_size = p["d_inner"], p["kernel_size"]
        self.in_proj = nn.Linear(d, 2 * self.d_inner, bias=p["bias"])
        self.weight = nn.Parameter(torch.empty(self.d_inner, self.kernel_size))
        if p["conv_bias"]:
            self.bias = nn.Parameter(torch.empty(self.d_inner))
        else:
            self.register_parameter("bias", None)
        self.out_proj = nn.Linear(self.d_inner, d, bias=p["bias"])

    def init_state(self, batch_size, dtype, device):
        return (torch.zeros(batch_size, self.kernel_size - 1, self.d_inner, dtype=dtype,
                            device=device),)

    def _conv(self, history, t):
        """history [B, K-1+t, d_inner] -> c [B, t, d_inner]."""
        w = self.weight.to(history.dtype)
        c = sum(history[:, j:j + t] * w[:, j] for j in range(self.kernel_size))
        return c if self.bias is None else c + self.bias.to(history.dtype)

    def forward(self, x, state, positions, chunk_size):
        (past,) = state
        u, g = torch.split(self.in_proj(x).to(past.dtype), self.d_inner, dim=-1)
        outs = []
        for start in range(0, x.shape[1], chunk_size):
            uc = u[:, start:start + chunk_size]
            history = torch.cat([past, uc], dim=1)
            outs.append(self._conv(history, uc.shape[1]))
            past = history[:, history.shape[1] - (self.kernel_size - 1):]
        c = torch.cat(outs, dim=1)
        return self.out_proj((F.silu(c) * g).to(x.dtype)), (past,)

    def step(self, x, state, positions):
        (past,) = state
        u, g = torch.split(self.in_proj(x).to(past.dtype), self.d_inner, dim=-1)
        history = torch.cat([past, u.unsqueeze(1)], dim=1)
        c = self._conv(history, 1)[:, 0]
        return self.out_proj((F.silu(c) * g).to(x.dtype)), (history[:, 1:],)

    def flatten(self, state, b):
        return state[0][b].reshape(-1)

    def unflatten(self, flat):
        return (flat.reshape(1, self.kernel_size - 1, self.d_inner).clone(),)


KIND = Kind(
    role="mixer",
    name="short_conv",
    params=(
        ("d_inner", "int", None, (1, 1 << 20)),
        ("kernel_size", "int", 3, (2, 64)),
        ("bias", "bool", True, None),
        ("conv_bias", "bool", False, None),
    ),
    make=ShortConv,
    state_floats=lambda p: (p["kernel_size"] - 1) * p["d_inner"],
)
