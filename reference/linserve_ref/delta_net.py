"""The delta_net mixer: DeltaNet (Yang et al. 2024) as flash-linear-attention's DeltaNet layer
computes it with its default qk_activation silu and qk_norm l2 (model/layers/delta_net.h has the
formulas): the delta rule without a decay, β from b_proj with use_beta (else 1), one value head
per q/k head, computed by delta_rule.py's mixer."""

from linserve_ref.delta_rule import DeltaRuleMixer, state_floats
from linserve_ref.kind import Kind


def _make(d, p):
    return DeltaRuleMixer(d, {**p, "n_v_heads": p["n_heads"]}, decay=False)


KIND = Kind(
    role="mixer",
    name="delta_net",
    params=(
        ("n_heads", "int", None, (1, 1024)),
        ("head_k_dim", "int", None, (1, 1024)),
        ("head_v_dim", "int", None, (1, 1024)),
        ("conv_size", "int", 4, (2, 64)),
        ("conv_bias", "bool", False, None),
        ("use_beta", "bool", True, None),
        ("use_gate", "bool", False, None),
        ("allow_neg_eigval", "bool", False, None),
        ("norm_eps", "eps", 1e-5, (0.0, 1.0)),
    ),
    make=_make,
    state_floats=lambda p: state_floats({**p, "n_v_heads": p["n_heads"]}),
)
