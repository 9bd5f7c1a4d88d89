#!/usr/bin/env python3
"""Stores a linserve model directory's projection matrices quantized: a new model directory.

    quantize_weights.py --model SRC --out DST --format int8|bf16

SRC is a model directory (config.json, model.safetensors, tokenizer files) whose weights are
stored as floats (F32, F16 or BF16). The projection matrices are every Linear's weight
(attn.{q,k,v,o}_proj.weight, ffn.fc1/fc2.weight, mlp.fc1/fc2.weight, conv.in_proj/out_proj.weight)
and lm_head.weight: what the CPU backend packs. Every other tensor (embeddings, norms, biases,
conv taps, favor projections) is copied as stored. DST gets config.json, model.safetensors and
SRC's tokenizer files.

--format int8: each projection W [out, in] becomes
    <name>          I8  [out, in]            q, row-major
    <name>.scales   F32 [out, ceil(in / 32)] one scale per block of 32 inputs of each output
with the rule of the CPU backend's int8 (kernels/cpu/packed_matrix.h), bit for bit: over each
block scale = max|w| / 127 in fp32, q = round-half-even(w / scale) in fp32, clamped to
[-127, 127]; an all-zero block has scale 0 and q 0. config.json gets
"weight_format": {"kind": "int8", "block": 32}. Loading DST runs the same weights as loading SRC
with --weight_precision int8 (bitwise the same logits), without quantizing at load.

--format bf16: each projection becomes BF16 (rounded to nearest even); config.json is unchanged
(BF16 is one of the float dtypes every loader reads). Loading DST with --weight_precision bf16
runs the same weights as loading SRC with it.

Refused, with a message naming what: a SRC whose config already declares a weight_format, a
projection that is not a finite 2-D float tensor, an existing DST/model.safetensors.
"""

import argparse
import json
import os
import re
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from linserve_ref import safetensors_io  # noqa: E402

BLOCK = 32
TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json", "vocab.json", "merges.txt")
PROJECTION = re.compile(
    r"^(layers\.\d+\.(attn\.[qkvo]_proj|ffn\.fc[12]|mlp\.fc[12]|conv\.(in|out)_proj)|lm_head)"
    r"\.weight$")


class QuantizeError(ValueError):
    """A model directory this converter refuses."""


def is_projection(name):
    return PROJECTION.match(name) is not None


def quantize_int8(w):
    """w: float32 array [out, in]. Returns (q int8 [out, in], scales float32 [out, ceil(in/32)])."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    out, n_in = w.shape
    blocks = -(-n_in // BLOCK)
    padded = np.zeros((out, blocks * BLOCK), dtype=np.float32)
    padded[:, :n_in] = w
    padded = padded.reshape(out, blocks, BLOCK)
    scales = (np.abs(padded).max(axis=2) / np.float32(127.0)).astype(np.float32)
    safe = np.where(scales == 0, np.float32(1.0), scales)[:, :, None]
    v = np.where(scales[:, :, None] == 0, np.float32(0.0), padded / safe)
    q = np.clip(np.rint(v), -127, 127).astype(np.int8)
    return q.reshape(out, blocks * BLOCK)[:, :n_in].copy(), scales


def convert(src, dst, fmt):
    with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    if "weight_format" in config:
        raise QuantizeError(f"{src}/config.json already declares weight_format "
                            f"{json.dumps(config['weight_format'])}; convert the float model")
    tensors, metadata = safetensors_io.load_file(os.path.join(src, "model.safetensors"))
    out = {}
    for name, t in tensors.items():
        if not is_projection(name):
            out[name] = t
            continue
        if t.dim() != 2 or not t.is_floating_point():
            raise QuantizeError(f"tensor '{name}': a projection must be a 2-D float tensor, got "
                                f"{t.dtype} {list(t.shape)}")
        w = t.to(torch.float32)
        if not torch.isfinite(w).all():
            raise QuantizeError(f"tensor '{name}': weights must be finite")
        if fmt == "bf16":
            out[name] = w.to(torch.bfloat16)
        else:
            q, scales = quantize_int8(w.numpy())
            out[name] = torch.from_numpy(q)
            out[name + ".scales"] = torch.from_numpy(scales)
    if fmt == "int8":
        config["weight_format"] = {"kind": "int8", "block": BLOCK}
    os.makedirs(dst, exist_ok=True)
    weights_path = os.path.join(dst, "model.safetensors")
    if os.path.exists(weights_path):
        raise QuantizeError(f"{weights_path} exists; choose an empty --out")
    safetensors_io.save_file(out, weights_path, metadata)
    with open(os.path.join(dst, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the float model directory")
    parser.add_argument("--out", required=True, help="the model directory to write")
    parser.add_argument("--format", required=True, choices=("int8", "bf16"),
                        help="how to store the projection matrices")
    args = parser.parse_args(argv)
    try:
        convert(args.model, args.out, args.format)
    except (QuantizeError, safetensors_io.SafetensorsError, OSError) as e:
        print(f"quantize_weights.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
