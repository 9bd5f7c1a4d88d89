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

The cases are the single-block models (CASES, every value of every single-block variant) and
then the layer-list models of the other kinds (BASED_CASES: each kind alone in a small model, and
mixed models with every kind; sliding windows shorter than the case so the ring wraps). Configs
of the latter carry "layers".

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
from linserve_ref import export, kinds, safetensors_io  # noqa: E402
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

BASED_BASE = dict(vocab_size=258, d_model=16, norm="pre", position="none", tie_embeddings=True,
                  tokenizer="byte", bos_token_id=256, eos_token_id=257,
                  final_norm={"kind": "rms_norm"})


def _conv(**p):
    return {"kind": "short_conv", "d_inner": 24, **p}


def _taylor(**p):
    return {"kind": "taylor_linear_attention", "n_heads": 2, "feature_dim": 4, "head_dim": 8, **p}


def _swa(window, **p):
    return {"kind": "sliding_window_attention", "n_heads": 2, "head_dim": 8, "window": window,
            **p}


def _linear(**p):
    return {"kind": "linear_attention", "n_heads": 2, "head_dim": 8, **p}


def _gdn(**p):
    return {"kind": "gated_delta_net", "n_heads": 2, "head_k_dim": 8, "head_v_dim": 8, **p}


def _dn(**p):
    return {"kind": "delta_net", "n_heads": 2, "head_k_dim": 8, "head_v_dim": 8, **p}


def _gla(**p):
    return {"kind": "gated_linear_attention", "n_heads": 2, "head_k_dim": 8, "head_v_dim": 8,
            "gate_low_rank_dim": 4, **p}


def _ret(**p):
    return {"kind": "retention", "n_heads": 2, "head_k_dim": 8, "head_v_dim": 8, **p}


def _mamba(**p):
    return {"kind": "mamba2", "n_heads": 4, "head_dim": 4, "state_size": 8, **p}


def _layer(mixer, activation="silu", bias=False, norm="rms_norm", mlp="gated_mlp"):
    if mlp == "ffn":
        mlp_spec = {"kind": "ffn", "d_ff": 32}
    elif mlp == "none":
        mlp_spec = {"kind": "none"}
    else:
        mlp_spec = {"kind": "gated_mlp", "d_ff": 24, "activation": activation, "bias": bias}
    return {"mixer": mixer, "norm": {"kind": norm}, "mlp": mlp_spec}


# (layers, overrides of BASED_BASE, weight dtype, chunk size)
BASED_CASES = [
    ([_layer(_conv()), _layer(_conv())], {}, "float32", 16),
    ([_layer(_conv(kernel_size=4, conv_bias=True, bias=False), "gelu", True),
      _layer(_conv(d_inner=8, kernel_size=2), "sigmoid")], {}, "bfloat16", 5),
    ([_layer(_taylor()), _layer(_taylor(n_heads=3, head_dim=5, eps=1e-6))], {}, "float32", 9),
    ([_layer(_taylor(n_heads=1, feature_dim=16, head_dim=16))], {}, "float16", 64),
    ([_layer(_swa(7)), _layer(_swa(7))], {}, "float32", 3),
    ([_layer(_swa(1, bias=True), "gelu", True), _layer(_swa(33, rotary_dim=4, rope_base=500.0)),
      _layer(_swa(80, rotary_dim=0))], {}, "bfloat16", 32),
    ([_layer(_conv()), _layer(_taylor()), _layer(_swa(9)), _layer(_conv(kernel_size=5)),
      _layer(_linear(), norm="layer_norm", mlp="ffn"), _layer(_swa(16, rotary_dim=6), "sigmoid"),
      _layer(_gdn(head_v_dim=12)), _layer(_dn()), _layer(_gla(use_short_conv=True)),
      _layer(_ret()), _layer(_mamba(), mlp="none")],
     {}, "float32", 11),
    ([_layer(_swa(5, rotary_dim=2)), _layer(_conv(conv_bias=True)), _layer(_taylor(eps=1e-3))],
     dict(norm="post", tie_embeddings=False), "float16", 7),
    ([_layer(_gdn()), _layer(_gdn(n_v_heads=4, head_v_dim=6, conv_bias=True, use_gate=False,
                                  allow_neg_eigval=True, conv_size=3))],
     dict(tie_embeddings=False), "float32", 16),
    ([_layer(_gdn(n_heads=1, n_v_heads=3, head_k_dim=16, conv_size=2, norm_eps=1e-3)),
      _layer(_gdn(conv_size=5, conv_bias=True), "gelu", True)], {}, "bfloat16", 7),
    ([_layer(_dn()), _layer(_dn(n_heads=1, head_k_dim=16, head_v_dim=12, use_beta=False,
                                use_gate=True, conv_bias=True, conv_size=2))],
     dict(tie_embeddings=False), "float32", 16),
    ([_layer(_dn(allow_neg_eigval=True, norm_eps=1e-3)), _layer(_dn(head_k_dim=4), "gelu")],
     {}, "float16", 9),
    # A strong gate (normaliser 1) and one that the clamp binds; chunks of 40 hold blocks of 16
    # and a partial one.
    ([_layer(_gla(gate_logit_normalizer=1.0)),
      _layer(_gla(n_heads=1, head_k_dim=16, head_v_dim=12, gate_logit_normalizer=1.0,
                  clamp_min=-0.3, use_output_gate=False))],
     dict(tie_embeddings=False), "float32", 40),
    ([_layer(_gla(use_short_conv=True, conv_bias=True, conv_size=3, norm_eps=1e-3)),
      _layer(_gla(gate_low_rank_dim=16, head_v_dim=4), "gelu")], {}, "bfloat16", 7),
    # Four heads: decays from 1 − 2^−5 to 1 − 2^−8; a base that turns fast; chunks of 64 (the
    # longest turn the backends' tables hold) and 5.
    ([_layer(_ret(n_heads=4, head_k_dim=4, head_v_dim=6, rope_base=100.0)),
      _layer(_ret(use_output_gate=False, use_short_conv=True, conv_bias=True, conv_size=3))],
     dict(tie_embeddings=False), "float32", 64),
    ([_layer(_ret(head_k_dim=16, norm_eps=1e-3)), _layer(_ret(use_short_conv=True), "gelu")],
     {}, "float16", 5),
    # Mamba's block (no MLP): two groups, D per channel, the norm before the gate, a dt ceiling
    # that binds; then no norm at all, biases, one group; post-norm with an MLP after.
    ([_layer(_mamba(n_groups=2, d_has_hdim=True, norm_before_gate=True, dt_limit_max=0.5,
                    conv_size=3), mlp="none"),
      _layer(_mamba(rmsnorm=False, bias=True, conv_bias=False, dt_limit_min=0.01), mlp="none")],
     dict(tie_embeddings=False), "float32", 16),
    ([_layer(_mamba(head_dim=6, state_size=4, norm_eps=1e-3)),
      _layer(_mamba(n_groups=4), mlp="none")], dict(norm="post"), "bfloat16", 7),
]


def _randomise(model, gen):
    """Weights far from their initial values so every parameter matters, at a stable scale."""
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if name.endswith("favor_projection"):
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif ".ln" in name or name.startswith("final_norm"):
                base = 1.0 if name.endswith(".weight") else 0.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif name.endswith("norm.weight"):  # the delta-rule kinds' o_norm
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif name.endswith(".D"):  # mamba2's skip
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif name.endswith((".A_log", ".dt_bias")):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
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


def make_case(directory, config, dtype, chunk_size, gen):
    cfg = config_lib.normalize_config(config)
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
    check_based_coverage([e for e in entries if "layers" in e["config"]])
    entries = [e for e in entries if "layers" not in e["config"]]
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


def check_based_coverage(entries):
    """Every Based kind and each of its variants appears in some layer-list case, a sliding
    window shorter than the case (the ring wraps), and one model mixes every mixer kind."""
    if not any({layer["mixer"]["kind"] for layer in e["config"]["layers"]}
               == set(kinds.by_role("mixer")) for e in entries):
        raise AssertionError("no Based golden case mixes every mixer kind")
    mixers = [layer["mixer"] for e in entries for layer in e["config"]["layers"]]
    mlps = [layer["mlp"] for e in entries for layer in e["config"]["layers"]]
    swa = [m for m in mixers if m["kind"] == "sliding_window_attention"]
    seen = {
        "mixer kind": {m["kind"] for m in mixers},
        "norm kind": {layer["norm"]["kind"] for e in entries for layer in e["config"]["layers"]},
        "gated_mlp activation": {m["activation"] for m in mlps if m["kind"] == "gated_mlp"},
        "gated_mlp bias": {m["bias"] for m in mlps if m["kind"] == "gated_mlp"},
        "short_conv conv_bias": {m["conv_bias"] for m in mixers if m["kind"] == "short_conv"},
        "short_conv bias": {m["bias"] for m in mixers if m["kind"] == "short_conv"},
        "sliding_window_attention rotary": {
            "none" if m["rotary_dim"] == 0 else "full" if m["rotary_dim"] == m["head_dim"]
            else "partial" for m in swa},
        "sliding_window_attention window": {
            "1" if layer["mixer"]["window"] == 1
            else "wraps" if layer["mixer"]["window"] < e["tokens"] else "whole"
            for e in entries for layer in e["config"]["layers"]
            if layer["mixer"]["kind"] == "sliding_window_attention"},
        "norm": {e["config"]["norm"] for e in entries},
        **{f"gated_delta_net {flag}": {m[flag] for m in mixers if m["kind"] == "gated_delta_net"}
           for flag in ("use_gate", "conv_bias", "allow_neg_eigval")},
        "gated_delta_net value heads per q/k head": {
            "1" if m["n_v_heads"] == m["n_heads"] else "several"
            for m in mixers if m["kind"] == "gated_delta_net"},
        **{f"delta_net {flag}": {m[flag] for m in mixers if m["kind"] == "delta_net"}
           for flag in ("use_beta", "use_gate", "conv_bias", "allow_neg_eigval")},
        **{f"gated_linear_attention {flag}": {
            m[flag] for m in mixers if m["kind"] == "gated_linear_attention"}
           for flag in ("use_short_conv", "conv_bias", "use_output_gate")},
        "gated_linear_attention clamp": {
            "none" if m["clamp_min"] == -1e4 else "binding"
            for m in mixers if m["kind"] == "gated_linear_attention"},
        **{f"retention {flag}": {m[flag] for m in mixers if m["kind"] == "retention"}
           for flag in ("use_short_conv", "conv_bias", "use_output_gate")},
        **{f"mamba2 {flag}": {m[flag] for m in mixers if m["kind"] == "mamba2"}
           for flag in ("conv_bias", "bias", "d_has_hdim", "rmsnorm", "norm_before_gate")},
        "mamba2 groups": {"1" if m["n_groups"] == 1 else "several"
                          for m in mixers if m["kind"] == "mamba2"},
        "mlp kind": {m["kind"] for m in mlps},
    }
    wanted = {
        "mixer kind": set(kinds.by_role("mixer")),
        "norm kind": set(kinds.by_role("norm")),
        "gated_mlp activation": set(config_lib.GATED_ACTIVATIONS),
        "gated_mlp bias": {True, False},
        "short_conv conv_bias": {True, False},
        "short_conv bias": {True, False},
        "sliding_window_attention rotary": {"none", "full", "partial"},
        "sliding_window_attention window": {"1", "wraps"},
        "norm": set(config_lib.NORMS),
        **{f"gated_delta_net {flag}": {True, False}
           for flag in ("use_gate", "conv_bias", "allow_neg_eigval")},
        "gated_delta_net value heads per q/k head": {"1", "several"},
        **{f"delta_net {flag}": {True, False}
           for flag in ("use_beta", "use_gate", "conv_bias", "allow_neg_eigval")},
        **{f"gated_linear_attention {flag}": {True, False}
           for flag in ("use_short_conv", "conv_bias", "use_output_gate")},
        "gated_linear_attention clamp": {"none", "binding"},
        **{f"retention {flag}": {True, False}
           for flag in ("use_short_conv", "conv_bias", "use_output_gate")},
        **{f"mamba2 {flag}": {True, False}
           for flag in ("conv_bias", "bias", "d_has_hdim", "rmsnorm", "norm_before_gate")},
        "mamba2 groups": {"1", "several"},
        "mlp kind": set(kinds.by_role("mlp")),
    }
    for what, values in wanted.items():
        missing = sorted(map(str, values - seen[what]))
        if missing:
            raise AssertionError(f"Based golden cases never use {what} {missing}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory to write (created if absent)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(SEED)
    entries = []
    configs = [({**BASE, **overrides}, dtype, chunk) for overrides, dtype, chunk in CASES]
    configs += [({**BASED_BASE, **overrides, "layers": layers}, dtype, chunk)
                for layers, overrides, dtype, chunk in BASED_CASES]
    for i, (config, dtype, chunk_size) in enumerate(configs):
        name = f"case_{i:02d}"
        cfg, conditioning = make_case(os.path.join(args.out, name), config, dtype, chunk_size,
                                      gen)
        entries.append(dict(name=name, dtype=dtype, chunk_size=chunk_size, tokens=TOKENS,
                            config=cfg))
        if "layers" in cfg:
            what = " ".join(layer["mixer"]["kind"] for layer in cfg["layers"])
        else:
            what = f"{cfg['feature_map']}/{cfg['position']}/{cfg['activation']}"
        print(f"{name}: {dtype:8s} chunk {chunk_size:2d} fp32-vs-fp64 {conditioning:.1e}  "
              f"{cfg['norm']} {what}")
    check_coverage(entries)
    with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"cases": entries}, f, indent=2)
        f.write("\n")
    print(f"wrote {len(entries)} cases to {args.out}")


if __name__ == "__main__":
    main()
