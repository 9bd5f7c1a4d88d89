"""The gated_mlp MLP (the Based paper's GatedMlp): a = fc1(x) [2·d_ff];
y = fc2(a[:d_ff] ⊙ act(a[d_ff:])) — the first half is the value, the second the gate.
act: silu, gelu (exact erf) or sigmoid."""

import torch
import torch.nn.functional as F
from torch import nn

from linserve_ref.config import GATED_ACTIVATIONS
from linserve_ref.kind import Kind

_ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "sigmoid": torch.sigmoid}


class GatedMlp(nn.Module):
    """`p`: its parameters (config.layer_list's "mlp"). Tensors mlp.fc1, mlp.fc2."""

    prefix = "mlp"

    def __init__(self, d, p):
        super().__init__()
        self.d_ff = p["d_ff"]
        self.activation = _ACTIVATIONS[p["activation"]]
        self.fc1 = nn.Linear(d, 2 * self.d_ff, bias=p["bias"])
        self.fc2 = nn.Linear(self.d_ff, d, bias=p["bias"])

    def forward(self, x):
        value, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(value * self.activation(gate))


KIND = Kind(
    role="mlp",
    name="gated_mlp",
    params=(
        ("d_ff", "int", None, (1, 1 << 20)),
        ("activation", "choice", "silu", GATED_ACTIVATIONS),
        ("bias", "bool", False, None),
    ),
    make=GatedMlp,
)
