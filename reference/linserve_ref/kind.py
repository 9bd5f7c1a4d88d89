"""Kind: what the reference knows of one layer component kind, declared in the kind's own module
(linserve_ref/<file>.py, as model/layers/<file>.cc declares it for the server) and found by
kinds.py through the one list of kinds, model/layers/kind_list.inc."""

import dataclasses
from typing import Callable, Optional


@dataclasses.dataclass(frozen=True)
class Kind:
    role: str  # "mixer", "norm" or "mlp"
    name: str  # its "kind" in config.json
    # Its parameters in order as (name, type, default, range). Default None: required; "=name":
    # that parameter's value. Range: (lo, hi) for "int", (lo, hi) meaning (lo, hi] for "eps",
    # (lo, hi) meaning [lo, hi] for "number", the choices for "choice"; "positive": a finite
    # number > 0; "bool": none.
    params: tuple
    # make(d_model, p) -> the nn.Module of a component with parameters p (every one present).
    make: Callable
    # Mixers: floats of the state slice for parameters p.
    state_floats: Optional[Callable] = None
    # check(p, path) raises config.ConfigError for parameters valid alone but not together.
    check: Optional[Callable] = None
