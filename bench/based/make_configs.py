#!/usr/bin/env python3
"""Writes bench/based/based-360m.json and based-1b.json: linserve's config.json for the shapes of
Hazy Research's based-360m and based-1b, produced by reference/convert_based.py's own mapping.

    python3 bench/based/make_configs.py            (writes both files)
    python3 bench/based/make_configs.py --check    (exit 1 when a file differs from the mapping)

The authors' configs are transcribed from their training configs
(HazyResearch/based: train/configs/experiment/reference/based-360m.yaml and based-1b.yaml, keys
as GPT2MixerConfig stores them; l_max and the datamodule fields do not reach the model). Their
checkpoints are not here, so convert() runs over tensors on torch's "meta" device: the shapes the
authors' GPTLMHeadModel state dict has for that config, no data. convert() checks every shape
and option as it does for a real checkpoint; its linserve config is written with sorted keys.
Both reference configs use window_size 256, which the mapping turns into window 129.
"""

import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "reference"))

import convert_based  # noqa: E402

COMMON = {
    "_target_": "based.models.gpt.GPT2MixerConfig",
    "vocab_size": 50257, "pad_vocab_size_multiple": 8, "n_head": 16, "rms_norm": True,
    "fused_mlp": False, "mlp_fc1_bias": False, "mlp_fc2_bias": False, "out_proj_bias": False,
    "qkv_proj_bias": False, "activation_function": "swiglu", "rotary_emb_fraction": 1,
    "max_position_embeddings": 0, "scale_attn_by_inverse_layer_idx": False,
    "special_initializer": True, "residual_in_fp32": True, "use_flash_attn": True,
    "fused_bias_fc": True, "fused_dropout_add_ln": True, "reorder_and_upcast_attn": False,
    "attn_pdrop": 0, "embd_pdrop": 0, "resid_pdrop": 0,
    "mixer": {"_target_": convert_based.CONV, "use_bias": True, "expand_proj": 4,
              "kernel_sizes": 3},
    "alt_mixer_2": {"_target_": convert_based.SLIDING, "window_size": 256, "num_heads": 16,
                    "causal": True},
}

AUTHORS = {
    "based-360m": dict(
        COMMON, n_embd=1024, n_layer=27, n_inner=2048,
        alt_mixer_layers=[1, 6, 11, 16, 21], alt_mixer_2_layers=[2, 7, 12, 17, 22],
        alt_mixer={"_target_": convert_based.LINEAR_ATTENTION,
                   "feature_map": {"_target_": convert_based.TAYLOR, "input_dim": 16},
                   "feature_dim": 16, "num_heads": 16,
                   "parallel_implementation": "fla_parallel"}),
    "based-1b": dict(
        COMMON, n_embd=1792, n_layer=36, n_inner=3584, fixed_decay=True, decay_const=-3,
        decay_denom=False,
        alt_mixer_layers=[1, 6, 11, 16, 21, 27, 33], alt_mixer_2_layers=[2, 7, 12, 17, 22, 28, 34],
        alt_mixer={"_target_": convert_based.LINEAR_ATTENTION,
                   "feature_map": {"_target_": convert_based.TAYLOR, "input_dim": 16},
                   "feature_dim": 16, "num_heads": 16}),
}


def state_dict_shapes(cfg):
    """The authors' GPTLMHeadModel state dict for `cfg`, as shapes."""
    d, h = cfg["n_embd"], cfg["n_head"]
    padded = -(-cfg["vocab_size"] // cfg["pad_vocab_size_multiple"]) * cfg["pad_vocab_size_multiple"]
    d_ff = (cfg["n_inner"] + 255) // 256 * 256
    shapes = {"transformer.embeddings.word_embeddings.weight": (padded, d),
              "transformer.ln_f.weight": (d,)}
    for i in range(cfg["n_layer"]):
        p = f"transformer.layers.{i}."
        shapes[p + "norm1.weight"] = (d,)
        shapes[p + "norm2.weight"] = (d,)
        shapes[p + "mlp.fc1.weight"] = (2 * d_ff, d)
        shapes[p + "mlp.fc2.weight"] = (d, d_ff)
        m = p + "mixer."
        if i in cfg["alt_mixer_2_layers"]:
            shapes[m + "Wqkv.weight"] = (3 * d, d)
            shapes[m + "out_proj.weight"] = (d, d)
        elif i in cfg["alt_mixer_layers"]:
            a = cfg["alt_mixer"]
            shapes[m + "proj_q.weight"] = (a["num_heads"] * a["feature_dim"], d)
            shapes[m + "proj_k.weight"] = (a["num_heads"] * a["feature_dim"], d)
            shapes[m + "proj_v.weight"] = (d, d)
            shapes[m + "out_proj.weight"] = (d, d)
        else:
            di = cfg["mixer"]["expand_proj"] * d // 2
            shapes[m + "in_proj.weight"] = (2 * di, d)
            shapes[m + "in_proj.bias"] = (2 * di,)
            shapes[m + "out_proj.weight"] = (d, di)
            shapes[m + "out_proj.bias"] = (d,)
            shapes[m + "conv.conv.weight"] = (di, 1, 3)
    return shapes


def config_text(cfg):
    tensors = {k: torch.empty(s, device="meta") for k, s in state_dict_shapes(cfg).items()}
    config, _ = convert_based.convert(cfg, tensors, tokenizer_eos=50256)
    return json.dumps(config, indent=1, sort_keys=True) + "\n"


def main(argv):
    check = argv == ["--check"]
    if argv and not check:
        print("usage: make_configs.py [--check]", file=sys.stderr)
        return 2
    stale = 0
    for name, cfg in AUTHORS.items():
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.json")
        text = config_text(cfg)
        if check:
            with open(path) as f:
                if f.read() != text:
                    print(f"{path} differs from convert_based.py's mapping of the authors' "
                          f"config: rerun bench/based/make_configs.py", file=sys.stderr)
                    stale += 1
        else:
            with open(path, "w") as f:
                f.write(text)
            print(f"wrote {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
