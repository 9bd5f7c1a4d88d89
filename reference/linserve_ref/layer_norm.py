"""The layer_norm norm: torch's LayerNorm over d_model (weight and bias)."""

from torch import nn

from linserve_ref.kind import Kind

KIND = Kind(
    role="norm",
    name="layer_norm",
    params=(("eps", "eps", 1e-5, (0.0, 1.0)),),
    make=lambda d, p: nn.LayerNorm(d, eps=p["eps"]),
)
