"""config.json for a linserve model: the fields of model/format/config.h's ModelConfig, checked.

`normalize_config` is the one place the reference reads a config: it fills the defaults the C++
struct documents, rejects unknown keys and out-of-range values (naming the field and the limit),
and returns a plain dict with every field present, which is also what `export` writes.

A model is a list of layers (docs/model-format.md): either the single-block fields (n_heads,
head_dim, d_ff, ...) describe n_layers identical layers, or "layers" gives each layer's mixer,
norm and mlp as {"kind": ..., params}. `layer_list` returns the layers either way, each
component with every parameter present; `final_norm` the final norm.
"""

import numbers

ARCHITECTURE = "linear_transformer"

NORMS = ("pre", "post")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
FEATURE_MAPS = ("elu_plus_one", "relu", "exp", "favor_plus")
POSITIONS = ("learned", "sinusoidal", "none")
TOKENIZERS = ("byte", "sentencepiece", "gpt2_bpe", "none")
GATED_ACTIVATIONS = ("silu", "gelu", "sigmoid")

# Byte tokenizer: ids 0..255 are the bytes, ids >= 256 are specials.
BYTE_VOCAB = 256

# Field order of config.json (the order of ModelConfig's members).
FIELDS = (
    "architecture", "vocab_size", "d_model", "n_layers", "n_heads", "head_dim", "d_ff",
    "feature_dim", "norm", "activation", "feature_map", "position", "max_position", "bias",
    "tie_embeddings", "attention_eps", "layer_norm_eps", "tokenizer", "bos_token_id",
    "eos_token_id",
)

# Field order of a config.json with "layers".
LAYERED_FIELDS = (
    "architecture", "vocab_size", "d_model", "n_layers", "norm", "position", "max_position",
    "tie_embeddings", "tokenizer", "bos_token_id", "eos_token_id", "layers", "final_norm",
)

# The fields "layers" replaces.
SINGLE_BLOCK_FIELDS = (
    "n_heads", "head_dim", "d_ff", "feature_dim", "activation", "feature_map", "bias",
    "attention_eps", "layer_norm_eps",
)

_REQUIRED = ("vocab_size", "d_model", "n_layers", "n_heads", "head_dim", "d_ff")

# Defaults of ModelConfig's initialisers; feature_dim defaults to head_dim (resolved below).
_DEFAULTS = {
    "architecture": ARCHITECTURE,
    "norm": "pre",
    "activation": "gelu",
    "feature_map": "elu_plus_one",
    "position": "sinusoidal",
    "max_position": 0,
    "bias": True,
    "tie_embeddings": True,
    "attention_eps": 1e-6,
    "layer_norm_eps": 1e-5,
    "tokenizer": "byte",
    "bos_token_id": -1,
    "eos_token_id": -1,
}

_INT_RANGES = {
    "vocab_size": (1, 1 << 20),
    "d_model": (1, 65536),
    "n_layers": (1, 1024),
    "n_heads": (1, 1024),
    "head_dim": (1, 4096),
    "d_ff": (1, 1 << 20),
    "feature_dim": (1, 16384),
}

_CHOICES = {
    "norm": NORMS,
    "activation": ACTIVATIONS,
    "feature_map": FEATURE_MAPS,
    "position": POSITIONS,
    "tokenizer": TOKENIZERS,
}


class ConfigError(ValueError):
    """A config.json field is missing, unknown, of the wrong type or out of range."""


def _int(config, key, lo, hi):
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"config field '{key}' must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"config field '{key}' = {value} is outside [{lo}, {hi}]")
    return int(value)


def _eps(config, key):
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"config field '{key}' must be a number, got {value!r}")
    if not 0.0 < value <= 1.0:
        raise ConfigError(f"config field '{key}' = {value} is outside (0, 1]")
    return float(value)


def _positive(config, key):
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"config field '{key}' must be a number, got {value!r}")
    if not 0.0 < value < float("inf"):
        raise ConfigError(f"config field '{key}' = {value} must be a finite number > 0")
    return float(value)


def _number(config, key, lo, hi):
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"config field '{key}' must be a number, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"config field '{key}' = {value} is outside [{lo}, {hi}]")
    return float(value)


def _component(value, role, path):
    """A layer component {"kind": ..., params} at `path`, checked and completed."""
    if not isinstance(value, dict):
        raise ConfigError(f"config field '{path}' must be an object naming its kind")
    from linserve_ref import kinds  # its kinds' modules import this one
    declared = kinds.by_role(role)
    kind = value.get("kind")
    if kind not in declared:
        raise ConfigError(
            f"config field '{path}.kind' = {kind!r}; must be one of {list(declared)}")
    params = declared[kind].params
    unknown = sorted(set(value) - {"kind"} - {p[0] for p in params})
    if unknown:
        raise ConfigError(f"config has unknown field(s) {[f'{path}.{k}' for k in unknown]}")
    out = {"kind": kind}
    for name, kind_of, default, limits in params:
        if name in value:
            out[name] = value[name]
        elif default is None:
            raise ConfigError(f"config is missing required field '{path}.{name}'")
        elif isinstance(default, str) and default.startswith("="):
            out[name] = out[default[1:]]
        else:
            out[name] = default
        key = f"{path}.{name}"
        if kind_of == "int":
            out[name] = _int({key: out[name]}, key, *limits)
        elif kind_of == "eps":
            out[name] = _eps({key: out[name]}, key)
        elif kind_of == "choice" and out[name] not in limits:
            raise ConfigError(
                f"config field '{key}' = {out[name]!r}; must be one of {list(limits)}")
        elif kind_of == "bool" and not isinstance(out[name], bool):
            raise ConfigError(f"config field '{key}' must be true or false, got {out[name]!r}")
        elif kind_of == "positive":
            out[name] = _positive({key: out[name]}, key)
        elif kind_of == "number":
            out[name] = _number({key: out[name]}, key, *limits)
    if declared[kind].check is not None:
        declared[kind].check(out, path)
    return out


def _normalize_layered(config):
    unknown = sorted(set(config) - set(LAYERED_FIELDS))
    if unknown:
        raise ConfigError(
            f"config has unknown field(s) {unknown} beside 'layers'; allowed: "
            f"{list(LAYERED_FIELDS)} (the single-block fields belong in each layer)")
    layers = config["layers"]
    if not isinstance(layers, list) or not 1 <= len(layers) <= 1024:
        raise ConfigError("config field 'layers' must be an array of 1 to 1024 layer objects")
    out_layers = []
    for i, layer in enumerate(layers):
        path = f"layers[{i}]"
        if not isinstance(layer, dict):
            raise ConfigError(f"config field '{path}' must be an object")
        unknown = sorted(set(layer) - {"mixer", "norm", "mlp"})
        if unknown:
            raise ConfigError(f"config has unknown field(s) {[f'{path}.{k}' for k in unknown]}")
        out_layers.append({role: _component(layer.get(role), role, f"{path}.{role}")
                           for role in ("mixer", "norm", "mlp")})
    if config.get("n_layers", len(layers)) != len(layers):
        raise ConfigError(
            f"config field 'n_layers' = {config['n_layers']} must equal the number of layers "
            f"({len(layers)})")
    final = config.get("final_norm", out_layers[-1]["norm"])
    # The single-block checks of the global fields, on a stand-in single block.
    stand_in = {k: v for k, v in config.items() if k not in ("layers", "final_norm")}
    stand_in.update(n_layers=len(layers), n_heads=1, head_dim=config.get("d_model"), d_ff=1)
    out = normalize_config(stand_in)
    out = {k: out[k] for k in LAYERED_FIELDS if k in out}
    out["layers"] = out_layers
    out["final_norm"] = _component(final, "norm", "final_norm")
    return out


def layer_list(config):
    """The layers of a normalized config: [{"mixer": {...}, "norm": {...}, "mlp": {...}}]."""
    if "layers" in config:
        return config["layers"]
    c = config
    layer = {
        "mixer": {"kind": "linear_attention", "n_heads": c["n_heads"], "head_dim": c["head_dim"],
                  "feature_dim": c["feature_dim"], "feature_map": c["feature_map"],
                  "eps": c["attention_eps"], "bias": c["bias"]},
        "norm": {"kind": "layer_norm", "eps": c["layer_norm_eps"]},
        "mlp": {"kind": "ffn", "d_ff": c["d_ff"], "activation": c["activation"],
                "bias": c["bias"]},
    }
    return [layer] * c["n_layers"]


def final_norm(config):
    """The final norm of a normalized config (pre-norm models)."""
    if "final_norm" in config:
        return config["final_norm"]
    return {"kind": "layer_norm", "eps": config["layer_norm_eps"]}


def taylor_features(feature_dim):
    """F of the Taylor feature map: 1 + d_f + d_f² (273 for d_f = 16)."""
    return 1 + feature_dim + feature_dim * feature_dim


def mixer_state_floats(mixer):
    """Floats of one mixer's state slice (model/layers/: its kind's state_floats)."""
    from linserve_ref import kinds  # its kinds' modules import this one
    return kinds.find("mixer", mixer["kind"]).state_floats(mixer)


def normalize_config(config):
    """Returns a complete, checked copy of `config` (a dict as read from config.json)."""
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a JSON object, got {type(config).__name__}")
    if "layers" in config:
        return _normalize_layered(config)
    unknown = sorted(set(config) - set(FIELDS))
    if unknown:
        raise ConfigError(f"config has unknown field(s) {unknown}; allowed: {list(FIELDS)}")
    missing = [k for k in _REQUIRED if k not in config]
    if missing:
        raise ConfigError(f"config is missing required field(s) {missing}")
    out = dict(_DEFAULTS)
    out.update(config)
    if out["architecture"] != ARCHITECTURE:
        raise ConfigError(
            f"config field 'architecture' = {out['architecture']!r}; must be '{ARCHITECTURE}'")
    if out.get("feature_dim") is None:
        out["feature_dim"] = out["head_dim"]
    for key, (lo, hi) in _INT_RANGES.items():
        out[key] = _int(out, key, lo, hi)
    for key, choices in _CHOICES.items():
        if out[key] not in choices:
            raise ConfigError(
                f"config field '{key}' = {out[key]!r}; must be one of {list(choices)}")
    for key in ("bias", "tie_embeddings"):
        if not isinstance(out[key], bool):
            raise ConfigError(f"config field '{key}' must be true or false, got {out[key]!r}")
    for key in ("attention_eps", "layer_norm_eps"):
        out[key] = _eps(out, key)
    if out["d_model"] != out["n_heads"] * out["head_dim"]:
        raise ConfigError(
            f"config field 'd_model' = {out['d_model']} must equal n_heads * head_dim = "
            f"{out['n_heads']} * {out['head_dim']}")
    if out["feature_map"] != "favor_plus" and out["feature_dim"] != out["head_dim"]:
        raise ConfigError(
            f"config field 'feature_dim' = {out['feature_dim']} must equal head_dim = "
            f"{out['head_dim']} for feature_map '{out['feature_map']}'")
    if out["position"] == "learned":
        out["max_position"] = _int(out, "max_position", 1, 1 << 24)
    elif _int(out, "max_position", 0, 1 << 24) != 0:
        raise ConfigError(
            f"config field 'max_position' = {out['max_position']} must be 0 unless position "
            f"is 'learned'")
    if out["tokenizer"] == "byte" and out["vocab_size"] < BYTE_VOCAB:
        raise ConfigError(
            f"config field 'vocab_size' = {out['vocab_size']} must be >= {BYTE_VOCAB} for the "
            f"byte tokenizer")
    for key in ("bos_token_id", "eos_token_id"):
        _int(out, key, -1, out["vocab_size"] - 1)
    return {k: out[k] for k in FIELDS}


def state_floats_per_slot(config):
    """ModelConfig::StateFloatsPerSlot(): the sum of the layers' mixer slices."""
    return sum(mixer_state_floats(layer["mixer"])
               for layer in layer_list(normalize_config(config)))
