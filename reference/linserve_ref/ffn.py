"""The ffn MLP: fc2(act(fc1(x)))."""

import torch.nn.functional as F
from torch import nn

from linserve_ref.config import ACTIVATIONS
from linserve_ref.kind import Kind


def _activation(kind, x):
    if kind == "gelu":
        return F.gelu(x)
    if kind == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    return F.relu(x)


class FeedForward(nn.Module):
    """The ffn MLP; `p`: its parameters (config.layer_list's "mlp")."""

    prefix = "ffn"

    def __init__(self, d, p):
        super().__init__()
        self.activation = p["activation"]
        self.fc1 = nn.Linear(d, p["d_ff"], bias=p["bias"])
        self.fc2 = nn.Linear(p["d_ff"], d, bias=p["bias"])

    def forward(self, x):
        return self.fc2(_activation(self.activation, self.fc1(x)))


KIND = Kind(
    role="mlp",
    name="ffn",
    params=(
        ("d_ff", "int", None, (1, 1 << 20)),
        ("activation", "choice", "gelu", ACTIVATIONS),
        ("bias", "bool", True, None),
    ),
    make=FeedForward,
)
