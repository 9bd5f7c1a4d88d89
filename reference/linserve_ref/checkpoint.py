"""What the converters of other projects' checkpoints share (convert_based.py, convert_fla.py):
reading a checkpoint directory (config.json + model.safetensors or pytorch_model.bin), taking
each of its tensors exactly once, finding a byte-level BPE tokenizer in GPT-2's files, and
writing the converted model directory."""

import json
import os
import shutil

import torch

from linserve_ref import export, safetensors_io
from linserve_ref.model import LinearTransformer

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


class ConvertError(ValueError):
    """The checkpoint holds something the converter does not understand; names the key."""


class Tensors:
    """The checkpoint's tensors; each one must be taken exactly once."""

    def __init__(self, tensors):
        self.tensors = tensors
        self.taken = set()

    def has(self, key):
        return key in self.tensors

    def take(self, key, shape):
        if key not in self.tensors:
            raise ConvertError(f"checkpoint: missing tensor '{key}'")
        t = self.tensors[key]
        if tuple(t.shape) != tuple(shape):
            raise ConvertError(
                f"checkpoint: tensor '{key}' has shape {list(t.shape)}, the config implies "
                f"{list(shape)}")
        self.taken.add(key)
        return t

    def check_all_taken(self):
        left = sorted(set(self.tensors) - self.taken)
        if left:
            raise ConvertError(f"checkpoint: tensor '{left[0]}' is not understood "
                               f"({len(left)} tensor(s) left unconverted)")


def read_checkpoint(src):
    """(config dict, tensors) of a checkpoint directory. config.json may hold the bare
    Infinity / NaN that Python's json writes (fla's Mamba-2 configs do)."""
    path = os.path.join(src, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise ConvertError(f"{path}: {e}") from None
    for name in WEIGHT_FILES:
        weights = os.path.join(src, name)
        if os.path.exists(weights):
            break
    else:
        raise ConvertError(f"{src}: neither {' nor '.join(WEIGHT_FILES)} is there")
    try:
        if name == "model.safetensors":
            tensors, _ = safetensors_io.load_file(weights)
        else:
            tensors = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 -- any failure to read is the file's fault
        raise ConvertError(f"{weights}: cannot be read: {e}") from None
    if not isinstance(tensors, dict) or not all(
            isinstance(v, torch.Tensor) for v in tensors.values()):
        raise ConvertError(f"{weights}: is not a state dict of tensors")
    return config, tensors


def gpt2_tokenizer_files(directory):
    """The GPT-2-format tokenizer files in `directory` (vocab.json + merges.txt, or
    tokenizer.json), the largest id they define and <|endoftext|>'s id (-1 if absent); None when
    the directory holds neither."""
    vocab_json = os.path.join(directory, "vocab.json")
    merges = os.path.join(directory, "merges.txt")
    tokenizer_json = os.path.join(directory, "tokenizer.json")
    try:
        if os.path.exists(vocab_json) and os.path.exists(merges):
            with open(vocab_json, encoding="utf-8") as f:
                vocab = json.load(f)
            files = [vocab_json, merges]
            if os.path.exists(tokenizer_json):
                files.append(tokenizer_json)
        elif os.path.exists(tokenizer_json):
            with open(tokenizer_json, encoding="utf-8") as f:
                data = json.load(f)
            vocab = dict(data["model"]["vocab"])
            vocab.update({a["content"]: a["id"] for a in data.get("added_tokens", [])})
            files = [tokenizer_json]
        else:
            return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConvertError(f"--tokenizer {directory}: cannot be read: {e}") from None
    if not isinstance(vocab, dict) or not vocab:
        raise ConvertError(f"--tokenizer {directory}: the vocabulary is empty or not an object")
    return files, max(vocab.values()), vocab.get("<|endoftext|>", -1)


def write_model_dir(linserve, out, source_tensors, directory, files=(), tokenizer_model=None):
    """Writes the converted model: config `linserve`, tensors `out` (stored in the source's dtype
    when all its floating tensors share one of F32, F16, BF16, else F32), and the tokenizer
    files copied in. Returns the dtype's name."""
    with torch.random.fork_rng(devices=[]):
        model = LinearTransformer(linserve)
    model.load_state_dict({k: v.to(torch.float32) for k, v in out.items()})
    dtypes = {v.dtype for v in source_tensors.values() if v.is_floating_point()}
    dtype = DTYPES.get(dtypes.pop(), "float32") if len(dtypes) == 1 else "float32"
    export.save_model_dir(model, directory, dtype=dtype, tokenizer_model=tokenizer_model)
    for f in files:
        shutil.copyfile(f, os.path.join(directory, os.path.basename(f)))
    return dtype
