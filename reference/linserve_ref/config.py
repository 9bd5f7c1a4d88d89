"""config.json for a linserve model: the fields of model/format/config.h's ModelConfig, checked.

`normalize_config` is the one place the reference reads a config: it fills the defaults the C++
struct documents, rejects unknown keys and out-of-range values (naming the field and the limit),
and returns a plain dict with every field present, which is also what `export` writes.
"""

import numbers

ARCHITECTURE = "linear_transformer"

NORMS = ("pre", "post")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
FEATURE_MAPS = ("elu_plus_one", "relu", "exp", "favor_plus")
POSITIONS = ("learned", "sinusoidal", "none")
TOKENIZERS = ("byte", "sentencepiece")

# Byte tokenizer: ids 0..255 are the bytes, ids >= 256 are specials.
BYTE_VOCAB = 256

# Field order of config.json (the order of ModelConfig's members).
FIELDS = (
    "architecture", "vocab_size", "d_model", "n_layers", "n_heads", "head_dim", "d_ff",
    "feature_dim", "norm", "activation", "feature_map", "position", "max_position", "bias",
    "tie_embeddings", "attention_eps", "layer_norm_eps", "tokenizer", "bos_token_id",
    "eos_token_id",
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


def normalize_config(config):
    """Returns a complete, checked copy of `config` (a dict as read from config.json)."""
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a JSON object, got {type(config).__name__}")
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
    """ModelConfig::StateFloatsPerSlot(): n_layers * n_heads * feature_dim * (head_dim + 1)."""
    return (config["n_layers"] * config["n_heads"] * config["feature_dim"] *
            (config["head_dim"] + 1))
