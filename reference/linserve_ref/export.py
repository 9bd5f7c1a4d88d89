"""Model directories (docs/architecture.md §4): config.json + model.safetensors (+ tokenizer)."""

import json
import os
import shutil

import torch

from linserve_ref import safetensors_io
from linserve_ref.config import normalize_config
from linserve_ref.model import LinearTransformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.model"

WEIGHT_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


class ModelDirError(ValueError):
    """A model directory that cannot be written or read; the message names the file."""


def save_model_dir(model, directory, dtype="float32", tokenizer_model=None):
    """Writes `model` as a model directory, weights stored as `dtype`.

    tokenizer_model: path of the SentencePiece model to copy in as tokenizer.model; required
    exactly when the config's tokenizer is "sentencepiece".
    """
    if dtype not in WEIGHT_DTYPES:
        raise ModelDirError(f"weight dtype {dtype!r} is not one of {list(WEIGHT_DTYPES)}")
    cfg = normalize_config(model.config)
    if (cfg["tokenizer"] == "sentencepiece") != (tokenizer_model is not None):
        raise ModelDirError(
            f"tokenizer '{cfg['tokenizer']}' "
            f"{'needs' if cfg['tokenizer'] == 'sentencepiece' else 'takes no'} tokenizer_model")
    os.makedirs(directory, exist_ok=True)
    tensors = {name: t.detach().to(WEIGHT_DTYPES[dtype])
               for name, t in model.state_dict().items()}
    safetensors_io.save_file(tensors, os.path.join(directory, WEIGHTS_FILE))
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    tokenizer_path = os.path.join(directory, TOKENIZER_FILE)
    if tokenizer_model is not None:
        if os.path.abspath(tokenizer_model) != os.path.abspath(tokenizer_path):
            shutil.copyfile(tokenizer_model, tokenizer_path)
    elif os.path.exists(tokenizer_path):
        os.remove(tokenizer_path)


def load_config(directory):
    path = os.path.join(directory, CONFIG_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            return normalize_config(json.load(f))
    except (OSError, ValueError) as e:
        raise ModelDirError(f"{path}: {e}") from None


def load_model_dir(directory, dtype=torch.float32):
    """Reads a model directory into a LinearTransformer whose parameters are `dtype`.

    Every tensor the config implies must be present with its exact shape, and no other.
    """
    cfg = load_config(directory)
    path = os.path.join(directory, WEIGHTS_FILE)
    tensors, _ = safetensors_io.load_file(path)
    # Construction initialises parameters randomly; keep the caller's RNG stream untouched.
    with torch.random.fork_rng(devices=[]):
        model = LinearTransformer(cfg)
    expected = model.state_dict()
    missing = [k for k in expected if k not in tensors]
    unexpected = [k for k in tensors if k not in expected]
    if missing or unexpected:
        raise ModelDirError(f"{path}: missing tensors {missing}, unexpected tensors {unexpected}")
    for name, t in tensors.items():
        if not t.is_floating_point():
            raise ModelDirError(f"{path}: tensor '{name}' has dtype {t.dtype}; weights are floats")
        if tuple(t.shape) != tuple(expected[name].shape):
            raise ModelDirError(
                f"{path}: tensor '{name}' has shape {list(t.shape)}, config implies "
                f"{list(expected[name].shape)}")
    model.load_state_dict({k: v.to(torch.float32) for k, v in tensors.items()})
    return model.to(dtype)
