"""The retention mixer: RetNet's multi-scale retention (Sun et al. 2023) as flash-linear-attention's
MultiScaleRetention layer computes it (model/layers/retention.h has the formulas): a fixed decay
γ_h = 1 − 2^(−5−h) per head and RoPE on q and k, computed by gated_linear_attention.py's mixer with
the rotation kept in the state's frame."""

from linserve_ref.config import ConfigError
from linserve_ref.gated_linear_attention import GatedLinearAttentionMixer, state_floats
from linserve_ref.kind import Kind


def _make(d, p):
    return GatedLinearAttentionMixer(d, p, retention=True)


def _check(p, path):
    if p["head_k_dim"] % 2:
        raise ConfigError(f"config field '{path}.head_k_dim' = {p['head_k_dim']} must be even "
                          f"(RoPE turns pairs of dims)")


KIND = Kind(
    role="mixer",
    name="retention",
    params=(
        ("n_heads", "int", None, (1, 1024)),
        ("head_k_dim", "int", None, (2, 1024)),
        ("head_v_dim", "int", None, (1, 1024)),
        ("rope_base", "positive", 10000.0, None),
        ("use_short_conv", "bool", False, None),
        ("conv_size", "int", 4, (2, 64)),
        ("conv_bias", "bool", False, None),
        ("use_output_gate", "bool", True, None),
        ("norm_eps", "eps", 1e-5, (0.0, 1.0)),
    ),
    make=_make,
    state_floats=state_floats,
    check=_check,
)
