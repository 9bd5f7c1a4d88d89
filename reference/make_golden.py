#!/usr/bin/env python3
"""Writes the golden data the C++ backends are tested against.

    make_golden.py --out DIR

DIR/case_NN/ is a model directory (byte tokenizer, random weights) plus expected.safetensors:
    tokens            I32 [T]        the input, T >= 72
    logits_parallel   F32 [T, V]     chunked forward (chunk_size from cases.json)
    logits_recurrent  F32 [T, V]     step by step
    final_state       F32 [n]        StateBlob layout after all T tokens
    final_position    I64 [1]        T
Both logits are computed in float64 from the weights as stored (f16/bf16 weights are widened
exactly), then rounded to float32. DIR/cases.json lists every case:
    {"cases": [{"name", "dtype", "chunk_size", "tokens", "config"}, ...]}

Deterministic: the same script writes the same bytes. Every value of every config variant appears
in at least one case (checked), and every case is checked to be well conditioned: a float32
evaluation of the reference stays within 1e-5 (relative to the largest logit) of float64, so the
C++ fp32 tolerance of 1e-4 is meaningful.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from linserve_ref import config as config_lib  # noqa: E402
from linserve_ref import export, safetensors_io  # noqa: E402
from linserve_ref.model import LinearTransformer, state_to_flat  # noqa: E402

SEED = 20200616  # arXiv 2006.16236
TOKENS = 80
CONDITIONING_TOLERANCE = 1e-5

# (overrides of the base config, weight dtype, chunk size)
CASES = [
    (dict(norm="pre", bias=True, activation="gelu", feature_map="elu_plus_one",
          position="sinusoidal", tie_embeddings=True), "float32", 16),
    (dict(norm="post", bias=True, activation="relu", feature_map="elu_plus_one",
          position="learned", max_position=96, tie_embeddings=False), "float32", 7),
    (dict(norm="pre", bias=False, activation="gelu_tanh", feature_map="relu",
          position="none", tie_embeddings=True), "float32", 1),
    (dict(norm="post", bias=False, activation="gelu", feature_map="exp",
          position="sinusoidal", tie_embeddings=False), "float16", 64),
    (dict(norm="pre", bias=True, activation="relu", feature_map="favor_plus", feature_dim=12,
          position="learned", max_position=128, tie_embeddings=True), "bfloat16", 9),
    (dict(norm="post", bias=True, activation="gelu_tanh", feature_map="favor_plus",
          feature_dim=24, position="none", tie_embeddings=False), "float32", 80),
    (dict(norm="pre", bias=True, activation="gelu", feature_map="exp", position="learned",
          max_position=80, tie_embeddings=False), "bfloat16", 32),
    # Odd d_model (3 heads x 5): the last sinusoidal component is a sine.
    (dict(d_model=15, n_heads=3, head_dim=5, d_ff=40, norm="pre", bias=False,
          activation="relu", feature_map="elu_plus_one", position="sinusoidal",
          tie_embeddings=False), "float16", 5),
    (dict(norm="post", bias=False, activation="gelu", feature_map="relu",
          position="sinusoidal", tie_embeddings=True), "bfloat16", 13),
    (dict(norm="pre", bias=True, activation="gelu_tanh", feature_map="exp", position="none",
          tie_embeddings=True, attention_eps=1e-3, layer_norm_eps=1e-3), "float32", 24),
    (dict(n_layers=3, n_heads=1, head_dim=16, norm="post", bias=True, activation="gelu",
          feature_map="elu_plus_one", position="none", tie_embeddings=True), "float32", 11),
    (dict(norm="pre", bias=True, activation="gelu", feature_map="favor_plus", feature_dim=4,
          position="sinusoidal", tie_embeddings=False), "float32", 40),
    # Exactly the 256 byte ids: no specials.
    (dict(vocab_size=256, bos_token_id=-1, eos_token_id=-1, norm="pre", bias=True,
          activation="relu", feature_map="relu", position="learned", max_position=200,
          tie_embeddings=True), "float16", 64),
    (dict(d_model=32, n_heads=8, head_dim=4, d_ff=48, norm="post", bias=False,
          activation="gelu_tanh", feature_map="elu_plus_one", position="learned",
          max_position=100, tie_embeddings=False), "bfloat16", 3),
]

BASE = dict(vocab_size=258, d_model=16, n_layers=2, n_heads=2, head_dim=8, d_ff=32,
            tokenizer="byte", bos_token_id=256, eos_token_id=257)


def _randomise(model, gen):
    """Weights far from their initial values so every parameter matters, at a stable scale."""
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if name.endswith("favor_projection"):
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif ".ln" in name or name.startswith("final_norm"):
                base = 1.0 if name.endswith(".weight") else 0.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif name in ("embed.weight", "pos_embed.weight"):
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                fan_in = p.shape[1]
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / fan_in ** 0.5)


def _run(model, tokens, chunk_size):
    with torch.no_grad():
        parallel, _ = model(tokens.unsqueeze(0), chunk_size=chunk_size)
        state = model.init_state(1)
        steps = []
        for t in tokens:
            logits, state = model.step(t.view(1), state)
            steps.append(logits[0])
    return parallel[0], torch.stack(steps), state


def make_case(directory, overrides, dtype, chunk_size, gen):
    cfg = config_lib.normalize_config({**BASE, **overrides})
    with torch.random.fork_rng(devices=[]):
        model = LinearTransformer(cfg).double()
    _randomise(model, gen)
    export.save_model_dir(model, directory, dtype=dtype)
    tokens = torch.randint(0, cfg["vocab_size"], (TOKENS,), generator=gen)
    if cfg["bos_token_id"] >= 0:
        tokens[0] = cfg["bos_token_id"]

    stored = export.load_model_dir(directory, dtype=torch.float64)
    parallel, recurrent, state = _run(stored, tokens, chunk_size)
    flat, position = state_to_flat(stored, state, 0)

    scale = recurrent.abs().max().item()
    agreement = (parallel - recurrent).abs().max().item() / scale
    if agreement > 1e-12:
        raise AssertionError(f"{directory}: parallel and recurrent forms differ by {agreement:g}")
    p32, r32, _ = _run(stored.float(), tokens, chunk_size)
    conditioning = max((p32 - parallel).abs().max().item(),
                       (r32 - recurrent).abs().max().item()) / scale
    if conditioning > CONDITIONING_TOLERANCE:
        raise AssertionError(
            f"{directory}: float32 evaluation is off by {conditioning:g} (relative) from "
            f"float64; the case is too ill-conditioned for a 1e-4 fp32 comparison")

    safetensors_io.save_file({
        "tokens": tokens.to(torch.int32),
        "logits_parallel": parallel.to(torch.float32),
        "logits_recurrent": recurrent.to(torch.float32),
        "final_state": flat,
        "final_position": torch.tensor([position], dtype=torch.int64),
    }, os.path.join(directory, "expected.safetensors"))
    return cfg, conditioning


def check_coverage(entries):
    """Every value of every variant field, and every weight dtype, appears in some case."""
    variants = {
        "norm": config_lib.NORMS, "activation": config_lib.ACTIVATIONS,
        "feature_map": config_lib.FEATURE_MAPS, "position": config_lib.POSITIONS,
        "bias": (True, False), "tie_embeddings": (True, False),
    }
    for field, values in variants.items():
        seen = {e["config"][field] for e in entries}
        missing = [v for v in values if v not in seen]
        if missing:
            raise AssertionError(f"golden cases never use {field} = {missing}")
    dtypes = {e["dtype"] for e in entries}
    if dtypes != set(export.WEIGHT_DTYPES):
        raise AssertionError(f"golden cases use weight dtypes {sorted(dtypes)} only")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory to write (created if absent)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(SEED)
    entries = []
    for i, (overrides, dtype, chunk_size) in enumerate(CASES):
        name = f"case_{i:02d}"
        cfg, conditioning = make_case(os.path.join(args.out, name), overrides, dtype, chunk_size,
                                      gen)
        entries.append(dict(name=name, dtype=dtype, chunk_size=chunk_size, tokens=TOKENS,
                            config=cfg))
        print(f"{name}: {dtype:8s} chunk {chunk_size:2d} fp32-vs-fp64 {conditioning:.1e}  "
              f"{cfg['norm']}/{cfg['feature_map']}/{cfg['position']}/{cfg['activation']}")
    check_coverage(entries)
    with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"cases": entries}, f, indent=2)
        f.write("\n")
    print(f"wrote {len(entries)} cases to {args.out}")


if __name__ == "__main__":
    main()
