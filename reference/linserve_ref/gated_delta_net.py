"""The gated_delta_net mixer: Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024) as
flash-linear-attention's GatedDeltaNet layer computes it (model/layers/gated_delta_net.h has the
formulas): the delta rule with a data-dependent decay per value head and β from b_proj, computed
by delta_rule.py's mixer."""

from linserve_ref.config import ConfigError
from linserve_ref.delta_rule import DeltaRuleMixer, state_floats
from linserve_ref.kind import Kind


def _make(d, p):
    return DeltaRuleMixer(d, {**p, "use_beta": True}, decay=True)


def _check(p, path):
    if p["n_v_heads"] % p["n_heads"] != 0:
        raise ConfigError(
            f"config field '{path}.n_v_heads' = {p['n_v_heads']} must be a multiple of n_heads "
            f"= {p['n_heads']}")


KIND = Kind(
    role="mixer",
    name="gated_delta_net",
    params=(
        ("n_heads", "int", None, (1, 1024)),
        ("n_v_heads", "int", "=n_heads", (1, 1024)),
        ("head_k_dim", "int", None, (1, 1024)),
        ("head_v_dim", "int", None, (1, 1024)),
        ("conv_size", "int", 4, (2, 64)),
        ("conv_bias", "bool", False, None),
        ("use_gate", "bool", True, None),
        ("allow_neg_eigval", "bool", False, None),
        ("norm_eps", "eps", 1e-5, (0.0, 1.0)),
    ),
    make=_make,
    state_floats=state_floats,
    check=_check,
)
