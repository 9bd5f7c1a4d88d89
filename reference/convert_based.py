#!/usr/bin/env python3
"""Converts a Based checkpoint (Hazy Research, e.g. hazyresearch/based-360m) into a linserve model
directory.

    convert_based.py --checkpoint SRC --out DST [--tokenizer DIR]

SRC holds the authors' config.json and pytorch_model.bin or model.safetensors (their
GPTLMHeadModel's state_dict, keys as from_pretrained_hf reads them: a leading "model." is
stripped and the training-metric entries are dropped; with tied embeddings, a file holding only
lm_head.weight, as safetensors conversions of a shared tensor do, is read too). DIR holds
GPT-2's tokenizer, vocab.json + merges.txt or tokenizer.json (the published checkpoints name
GPT-2's tokenizer instead of carrying it); without it the conversion is refused, since a model
directory without its tokenizer cannot be served. DST gets config.json (the "layers" schema, tokenizer "gpt2_bpe"),
model.safetensors (in the checkpoint's dtype when that is F32, F16 or BF16, else F32) and the
tokenizer files.

Mapping (per layer i; docs/model-format.md gives linserve's kinds):
  alt_mixer_2 layers, SlidingAttention -> sliding_window_attention (n_heads = n_head, head_dim =
      n_embd / n_head, window = window_size // 2 + 1 (flash-attn window_size=(w//2, 0)),
      rotary_dim = int(rotary_emb_fraction * head_dim), rope_base = rotary_emb_base); Wqkv
      "(three h d)" split into q/k/v_proj.
  alt_mixer layers, LinearAttention + TaylorExp -> taylor_linear_attention (eps: the config's,
      1e-12 by default; 1e-6 for parallel_implementation fla_parallel / fla_chunk, whose kernels
      use that constant whatever the config says).
  other layers, BaseConv -> short_conv (d_inner = expand_proj * n_embd / 2, kernel_size from the
      conv weight's shape, conv_bias iff the checkpoint has mixer.conv.conv.bias).
  norm1/norm2/ln_f -> rms_norm (rms_norm true) or layer_norm; GatedMlp (swiglu / glu / geglu) ->
      gated_mlp silu / sigmoid / gelu with d_ff = fc2's in_features.
  The embedding keeps its first vocab_size rows (the padding rows are never a token).
Everything else is refused with a message naming the key: unknown config keys, unknown
_target_s, options linserve does not compute (parallel_implementation "tk", interleaved or
xPos rotary, unscaled or layer-scaled attention, n_head_kv != n_head, post-norm, parallel
blocks, fused or non-"base" MLPs, position embeddings, different q/k/v and out biases, different
fc1 and fc2 biases), a tensor the mapping does not consume, a shape the config does not imply.
fixed_decay is accepted (with a note on stderr): the released mixers ignore the decay.
"""

import argparse
import math
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from linserve_ref.checkpoint import (ConvertError, Tensors, gpt2_tokenizer_files,  # noqa: E402
                                     read_checkpoint, write_model_dir)
from linserve_ref.config import ConfigError, normalize_config  # noqa: E402

CONV = "based.models.mixers.convolution.BaseConv"
LINEAR_ATTENTION = "based.models.mixers.linear_attention.LinearAttention"
TAYLOR = "based.models.mixers.linear_attention.TaylorExp"
SLIDING = "based.models.mixers.slide_attention.SlidingAttention"
CONFIG_TARGETS = ("based.models.gpt.GPT2MixerConfig",)

# GPT2Config's aliases (attribute_map).
ALIASES = {"hidden_size": "n_embd", "num_hidden_layers": "n_layer",
           "num_attention_heads": "n_head", "max_position_embeddings": "n_positions"}

# Keys that do not change what the model computes: training, dropout, kernel choice, HF
# bookkeeping (GPT2Config / PretrainedConfig fields).
IGNORED_KEYS = {
    "_target_", "_name_or_path", "architectures", "model_type", "transformers_version",
    "torch_dtype", "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_type",
    "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "initializer_range", "special_initializer", "use_weight_init", "use_cache",
    "use_flash_attn", "fused_bias_fc", "fused_dropout_add_ln", "residual_in_fp32",
    "reorder_and_upcast_attn", "bos_token_id", "eos_token_id", "pad_token_id", "n_ctx",
    "sequence_parallel", "mlp_checkpoint_lvl", "return_dict", "output_hidden_states",
    "output_attentions", "torchscript", "use_return_dict", "task_specific_params",
    "is_encoder_decoder", "is_decoder", "decay_const", "decay_denom",
    "ff_mult", "parallel_block_tied_norm",  # only read with mlp_type != "base" / parallel_block
}
# Keys read (and checked) below.
READ_KEYS = {
    "n_embd", "n_layer", "n_head", "n_inner", "vocab_size", "n_positions", "layer_norm_epsilon",
    "rms_norm", "activation_function", "mlp_fc1_bias", "mlp_fc2_bias", "qkv_proj_bias",
    "out_proj_bias", "rotary_emb_fraction", "rotary_emb_base", "rotary_emb_interleaved",
    "rotary_emb_scale_base", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
    "n_head_kv", "tie_word_embeddings", "pad_vocab_size_multiple", "prenorm", "parallel_block",
    "fused_mlp", "fused_dense_sqrelu_dense", "mlp_type",
    "alt_mixer_layers", "alt_mixer_2_layers", "mixer", "alt_mixer", "alt_mixer_2",
    "fixed_decay", "lm_head_bias", "word_embed_proj_dim", "head_dim", "attn_dwconv",
}
# Per mixer class, the keys of its config dict (the rest of its constructor's arguments are set
# by their create_mixer_cls / sliding_window_additions, or swallowed by **kwargs as noted).
MIXER_KEYS = {
    CONV: {"_target_", "l_max", "kernel_size", "kernel_sizes", "use_bias", "expand_proj",
           "use_cuda", "layer_idx"},
    LINEAR_ATTENTION: {"_target_", "l_max", "feature_map", "feature_dim", "head_dim",
                       "num_heads", "eps", "parallel_implementation", "layer_idx"},
    SLIDING: {"_target_", "window_size", "num_heads", "causal", "dropout", "softmax_scale",
              "checkpointing", "return_residual", "layer_idx", "use_flash_attn",
              "fused_bias_fc", "qkv_proj_bias", "out_proj_bias", "rotary_emb_dim",
              "rotary_emb_base", "rotary_emb_scale_base", "rotary_emb_interleaved",
              "num_heads_kv", "cross_attn"},
}
GATED = {"swiglu": "silu", "glu": "sigmoid", "geglu": "gelu"}

class _Reader:
    """The authors' config with GPT2Config's defaults and aliases."""

    DEFAULTS = {"n_inner": None, "layer_norm_epsilon": 1e-5, "rms_norm": False,
                "activation_function": "gelu_new", "mlp_fc1_bias": True, "mlp_fc2_bias": True,
                "qkv_proj_bias": True, "out_proj_bias": True, "rotary_emb_fraction": 0.0,
                "rotary_emb_base": 10000.0, "rotary_emb_interleaved": False,
                "rotary_emb_scale_base": None, "scale_attn_weights": True,
                "scale_attn_by_inverse_layer_idx": False, "n_head_kv": None,
                "tie_word_embeddings": True, "pad_vocab_size_multiple": 1, "prenorm": True,
                "parallel_block": False, "fused_mlp": False, "fused_dense_sqrelu_dense": False,
                "mlp_type": "base", "alt_mixer_layers": [], "alt_mixer_2_layers": [],
                "alt_mixer": None, "alt_mixer_2": None, "fixed_decay": False,
                "lm_head_bias": False, "word_embed_proj_dim": None, "n_positions": 1024,
                "attn_dwconv": False}

    def __init__(self, config):
        if not isinstance(config, dict):
            raise ConvertError("config.json must be a JSON object")
        self.config = {}
        for key, value in config.items():
            self.config[ALIASES.get(key, key)] = value
        # GPT2Config sets max_position_embeddings after n_positions: the alias wins.
        if "max_position_embeddings" in config:
            self.config["n_positions"] = config["max_position_embeddings"]
        for key in self.config:
            if key not in READ_KEYS and key not in IGNORED_KEYS:
                raise ConvertError(f"config.json: unknown key '{key}'")
        target = self.config.get("_target_", CONFIG_TARGETS[0])
        if target not in CONFIG_TARGETS:
            raise ConvertError(f"config.json: '_target_' = {target!r} is not {CONFIG_TARGETS}")

    def __getitem__(self, key):
        if key in self.config:
            return self.config[key]
        if key in self.DEFAULTS:
            return self.DEFAULTS[key]
        raise ConvertError(f"config.json: missing key '{key}'")

    def int(self, key, lo=1):
        value = self[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ConvertError(f"config.json: '{key}' = {value!r} must be an integer >= {lo}")
        return value

    def require(self, key, expected, why):
        if self[key] != expected:
            raise ConvertError(f"config.json: '{key}' = {self[key]!r} is not supported ({why})")


def _mixer_dict(cfg, key, target):
    value = cfg[key]
    if not isinstance(value, dict):
        raise ConvertError(f"config.json: '{key}' must be an object with a '_target_'")
    if value.get("_target_") != target:
        raise ConvertError(
            f"config.json: '{key}._target_' = {value.get('_target_')!r}; this converter "
            f"understands {target!r} there")
    for k in value:
        if k not in MIXER_KEYS[target]:
            raise ConvertError(f"config.json: unknown key '{key}.{k}'")
    return value


def _short_conv(cfg, t, i, d, out):
    m = _mixer_dict(cfg, "mixer", CONV)
    expand = m.get("expand_proj", 2)
    if not isinstance(expand, int) or isinstance(expand, bool) or expand < 1 or (expand * d) % 2:
        raise ConvertError(f"config.json: 'mixer.expand_proj' = {expand!r} must be a positive "
                           f"integer with expand_proj * n_embd even")
    di = expand * d // 2
    bias = m.get("use_bias", True)
    p = f"transformer.layers.{i}.mixer."
    conv_key = p + "conv.conv.weight"
    if not t.has(conv_key):
        raise ConvertError(f"checkpoint: missing tensor '{conv_key}'")
    kernel = t.tensors[conv_key].shape[-1]
    weight = t.take(conv_key, (di, 1, kernel))
    q = f"layers.{i}.conv."
    out[q + "in_proj.weight"] = t.take(p + "in_proj.weight", (2 * di, d))
    out[q + "out_proj.weight"] = t.take(p + "out_proj.weight", (d, di))
    if bias:
        out[q + "in_proj.bias"] = t.take(p + "in_proj.bias", (2 * di,))
        out[q + "out_proj.bias"] = t.take(p + "out_proj.bias", (d,))
    out[q + "weight"] = weight[:, 0, :]
    conv_bias = t.has(p + "conv.conv.bias")
    if conv_bias:
        out[q + "bias"] = t.take(p + "conv.conv.bias", (di,))
    return {"kind": "short_conv", "d_inner": di, "kernel_size": kernel, "bias": bias,
            "conv_bias": conv_bias}


def _taylor(cfg, t, i, d, out):
    m = _mixer_dict(cfg, "alt_mixer", LINEAR_ATTENTION)
    f = m.get("feature_dim", 16)
    h = m.get("num_heads", 16)
    dh = m.get("head_dim") or d // h
    fmap = m.get("feature_map")
    if not isinstance(fmap, dict) or fmap.get("_target_") != TAYLOR:
        raise ConvertError(f"config.json: 'alt_mixer.feature_map' = {fmap!r}; this converter "
                           f"understands {{'_target_': {TAYLOR!r}}}")
    extra = sorted(set(fmap) - {"_target_", "input_dim"})
    if extra:
        raise ConvertError(f"config.json: unknown key 'alt_mixer.feature_map.{extra[0]}'")
    if fmap.get("input_dim", f) != f:
        raise ConvertError(f"config.json: 'alt_mixer.feature_map.input_dim' = "
                           f"{fmap['input_dim']} must equal alt_mixer.feature_dim = {f}")
    impl = m.get("parallel_implementation", "quadratic")
    if impl not in ("quadratic", "linear", "fla_parallel", "fla_chunk"):
        raise ConvertError(
            f"config.json: 'alt_mixer.parallel_implementation' = {impl!r} is not supported "
            f"(\"tk\" adds an output norm the other implementations lack)")
    eps = 1e-6 if impl.startswith("fla") else m.get("eps", 1e-12)
    p = f"transformer.layers.{i}.mixer."
    q = f"layers.{i}.attn."
    out[q + "q_proj.weight"] = t.take(p + "proj_q.weight", (h * f, d))
    out[q + "k_proj.weight"] = t.take(p + "proj_k.weight", (h * f, d))
    out[q + "v_proj.weight"] = t.take(p + "proj_v.weight", (h * dh, d))
    out[q + "o_proj.weight"] = t.take(p + "out_proj.weight", (d, h * dh))
    return {"kind": "taylor_linear_attention", "n_heads": h, "feature_dim": f, "head_dim": dh,
            "eps": eps}


def _sliding(cfg, t, i, d, out):
    m = _mixer_dict(cfg, "alt_mixer_2", SLIDING)
    if m.get("cross_attn", False):
        raise ConvertError("config.json: 'alt_mixer_2.cross_attn' = true is not supported")
    h = cfg.int("n_head")
    dh = d // h
    # Their softmax scale and rotary width use config.head_dim where set, SlidingAttention's
    # heads n_embd / n_head: the two must agree.
    if cfg.config.get("head_dim", dh) != dh:
        raise ConvertError(f"config.json: 'head_dim' = {cfg['head_dim']} differs from "
                           f"n_embd / n_head = {dh}")
    w = m.get("window_size", 128)
    if not isinstance(w, int) or isinstance(w, bool) or w < 0:
        raise ConvertError(f"config.json: 'alt_mixer_2.window_size' = {w!r} must be an integer "
                           f">= 0")
    rotary_dim = int(cfg["rotary_emb_fraction"] * dh)
    if rotary_dim % 2:
        raise ConvertError(f"config.json: 'rotary_emb_fraction' = {cfg['rotary_emb_fraction']} "
                           f"gives an odd rotary dimension {rotary_dim}")
    base = float(cfg["rotary_emb_base"])
    bias = cfg["qkv_proj_bias"]
    p = f"transformer.layers.{i}.mixer."
    q = f"layers.{i}.attn."
    wqkv = t.take(p + "Wqkv.weight", (3 * h * dh, d))
    for j, name in enumerate(("q", "k", "v")):
        out[q + f"{name}_proj.weight"] = wqkv[j * h * dh:(j + 1) * h * dh]
    out[q + "o_proj.weight"] = t.take(p + "out_proj.weight", (d, h * dh))
    if bias:
        b = t.take(p + "Wqkv.bias", (3 * h * dh,))
        for j, name in enumerate(("q", "k", "v")):
            out[q + f"{name}_proj.bias"] = b[j * h * dh:(j + 1) * h * dh]
        out[q + "o_proj.bias"] = t.take(p + "out_proj.bias", (d,))
    if t.has(p + "rotary_emb.inv_freq"):
        stored = t.take(p + "rotary_emb.inv_freq", (rotary_dim // 2,))
        # flash-attn computes it in float32; the file may hold it rounded further.
        rtol = max(4 * torch.finfo(stored.dtype).eps, 1e-6)
        stored = stored.to(torch.float64)
        expected = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
        if not torch.allclose(stored, expected, rtol=rtol, atol=0.0):
            raise ConvertError(
                f"checkpoint: tensor '{p}rotary_emb.inv_freq' differs from rotary_emb_base "
                f"{base}'s frequencies (max relative error "
                f"{((stored - expected).abs() / expected).max().item():.2e})")
    return {"kind": "sliding_window_attention", "n_heads": h, "head_dim": dh,
            "window": w // 2 + 1, "rotary_dim": rotary_dim, "rope_base": base, "bias": bias}


def _norm(cfg, t, prefix, d, out, out_prefix):
    eps = float(cfg["layer_norm_epsilon"])
    out[out_prefix + "weight"] = t.take(prefix + "weight", (d,))
    if cfg["rms_norm"]:
        return {"kind": "rms_norm", "eps": eps}
    out[out_prefix + "bias"] = t.take(prefix + "bias", (d,))
    return {"kind": "layer_norm", "eps": eps}


def _mlp(cfg, t, i, d, out):
    p = f"transformer.layers.{i}.mlp."
    n_inner = cfg["n_inner"]
    hidden = n_inner if n_inner is not None else int(8 * d / 3)
    d_ff = (hidden + 255) // 256 * 256
    bias = cfg["mlp_fc1_bias"]
    q = f"layers.{i}.mlp."
    out[q + "fc1.weight"] = t.take(p + "fc1.weight", (2 * d_ff, d))
    out[q + "fc2.weight"] = t.take(p + "fc2.weight", (d, d_ff))
    if bias:
        out[q + "fc1.bias"] = t.take(p + "fc1.bias", (2 * d_ff,))
        out[q + "fc2.bias"] = t.take(p + "fc2.bias", (d,))
    return {"kind": "gated_mlp", "d_ff": d_ff, "activation": GATED[cfg["activation_function"]],
            "bias": bias}


def _check_options(cfg):
    """The options linserve's kinds do not compute, refused by key."""
    cfg.require("prenorm", True, "post-norm Based blocks")
    cfg.require("parallel_block", False, "parallel blocks")
    cfg.require("fused_mlp", False, "the fused MLP is not the gated MLP")
    cfg.require("fused_dense_sqrelu_dense", False, "squared-ReLU MLP")
    cfg.require("mlp_type", "base", "only GatedMlp's 'base' layout")
    cfg.require("rotary_emb_interleaved", False, "interleaved rotary embedding")
    cfg.require("rotary_emb_scale_base", None, "xPos rotary scaling")
    cfg.require("scale_attn_weights", True, "attention without the 1/sqrt(head_dim) scale")
    cfg.require("scale_attn_by_inverse_layer_idx", False, "attention scaled by layer index")
    cfg.require("lm_head_bias", False, "a bias on the output head")
    cfg.require("word_embed_proj_dim", None, "a projected embedding")
    cfg.require("attn_dwconv", False, "depthwise convolution in attention")
    if cfg["n_head_kv"] not in (None, cfg["n_head"]):
        raise ConvertError(f"config.json: 'n_head_kv' = {cfg['n_head_kv']} differs from n_head "
                           f"= {cfg['n_head']} (grouped-query attention is not supported)")
    if cfg["activation_function"] not in GATED:
        raise ConvertError(f"config.json: 'activation_function' = "
                           f"{cfg['activation_function']!r} is not one of {list(GATED)} (the "
                           f"gated MLPs)")
    if cfg["qkv_proj_bias"] != cfg["out_proj_bias"]:
        raise ConvertError(f"config.json: 'qkv_proj_bias' = {cfg['qkv_proj_bias']} differs from "
                           f"out_proj_bias = {cfg['out_proj_bias']}")
    if cfg["mlp_fc1_bias"] != cfg["mlp_fc2_bias"]:
        raise ConvertError(f"config.json: 'mlp_fc1_bias' = {cfg['mlp_fc1_bias']} differs from "
                           f"mlp_fc2_bias = {cfg['mlp_fc2_bias']}")
    if cfg["n_positions"] != 0:
        raise ConvertError(f"config.json: 'max_position_embeddings' (or 'n_positions') = "
                           f"{cfg['n_positions']}: position embeddings are not supported (Based "
                           f"uses none: 0)")


def convert(config, tensors, tokenizer_eos=-1):
    """The authors' config dict and state dict -> (linserve config, linserve tensors)."""
    cfg = _Reader(config)
    _check_options(cfg)
    d, n_layers, vocab = cfg.int("n_embd"), cfg.int("n_layer"), cfg.int("vocab_size")
    n_head = cfg.int("n_head")
    if d % n_head:
        raise ConvertError(f"config.json: 'n_embd' = {d} is not a multiple of n_head = {n_head}")
    multiple = cfg.int("pad_vocab_size_multiple")
    padded = math.ceil(vocab / multiple) * multiple
    tensors = {re.sub(r"^model\.", "", k): v for k, v in tensors.items() if "metrics" not in k}
    t = Tensors(tensors)
    out = {}
    tied = cfg["tie_word_embeddings"]
    embed_key = "transformer.embeddings.word_embeddings.weight"
    if t.has(embed_key) or not tied:
        embed = t.take(embed_key, (padded, d))
        if tied and t.has("lm_head.weight"):
            if not torch.equal(t.take("lm_head.weight", (padded, d)), embed):
                raise ConvertError("checkpoint: tensor 'lm_head.weight' differs from the "
                                   "embedding although tie_word_embeddings is true")
        elif not tied:
            out["lm_head.weight"] = t.take("lm_head.weight", (padded, d))[:vocab]
    else:
        # A safetensors file keeps one name of a shared tensor: the tied head's.
        embed = t.take("lm_head.weight", (padded, d))
    out["embed.weight"] = embed[:vocab]
    if cfg["fixed_decay"]:
        print("convert_based.py: config.json sets fixed_decay; the released BaseConv, "
              "LinearAttention and SlidingAttention ignore the decay, so the converted model "
              "computes without it", file=sys.stderr)
        if t.has("transformer.decay.decay"):
            t.take("transformer.decay.decay", (n_head,))
    alt, alt2 = cfg["alt_mixer_layers"], cfg["alt_mixer_2_layers"]
    if any(i in alt2 for i in range(n_layers)) and "rotary_emb_fraction" not in cfg.config:
        print("convert_based.py: config.json has no rotary_emb_fraction; as in the authors' code "
              "(default 0.0) the sliding-window layers get no rotary embedding (their training "
              "configs set 1)", file=sys.stderr)
    layers = []
    for i in range(n_layers):
        if i in alt2:
            mixer = _sliding(cfg, t, i, d, out)
        elif i in alt:
            mixer = _taylor(cfg, t, i, d, out)
        else:
            mixer = _short_conv(cfg, t, i, d, out)
        p = f"transformer.layers.{i}."
        norm = _norm(cfg, t, p + "norm1.", d, out, f"layers.{i}.ln1.")
        _norm(cfg, t, p + "norm2.", d, out, f"layers.{i}.ln2.")
        layers.append({"mixer": mixer, "norm": norm, "mlp": _mlp(cfg, t, i, d, out)})
    final = _norm(cfg, t, "transformer.ln_f.", d, out, "final_norm.")
    t.check_all_taken()
    linserve = {"architecture": "linear_transformer", "vocab_size": vocab, "d_model": d,
                "n_layers": n_layers, "norm": "pre", "position": "none",
                "tie_embeddings": bool(tied), "tokenizer": "gpt2_bpe", "bos_token_id": -1,
                "eos_token_id": tokenizer_eos, "layers": layers, "final_norm": final}
    try:
        linserve = normalize_config(linserve)
    except ConfigError as e:
        raise ConvertError(f"the converted config is out of linserve's range: {e}") from None
    return linserve, out


def tokenizer_files(directory):
    """GPT-2's tokenizer files in `directory`, the largest id they define and <|endoftext|>'s
    id (-1 if absent)."""
    found = gpt2_tokenizer_files(directory)
    if found is None:
        raise ConvertError(f"--tokenizer {directory}: holds neither vocab.json + merges.txt "
                           f"nor tokenizer.json")
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True,
                        help="the authors' directory: config.json + pytorch_model.bin or "
                             "model.safetensors")
    parser.add_argument("--out", required=True, help="the linserve model directory to write")
    parser.add_argument("--tokenizer",
                        help="GPT-2's vocab.json + merges.txt or tokenizer.json (required: the "
                             "checkpoints do not carry their tokenizer)")
    args = parser.parse_args(argv)
    try:
        if args.tokenizer is None:
            raise ConvertError(
                "--tokenizer DIR is required: the Based checkpoints use GPT-2's tokenizer "
                "without carrying it; pass a directory with GPT-2's vocab.json and merges.txt "
                "(or tokenizer.json)")
        files, max_id, eos = tokenizer_files(args.tokenizer)
        config, tensors = read_checkpoint(args.checkpoint)
        vocab = _Reader(config).int("vocab_size")
        if max_id >= vocab:
            raise ConvertError(f"--tokenizer {args.tokenizer}: defines id {max_id}, beyond the "
                               f"model's vocab_size {vocab}")
        linserve, out = convert(config, tensors, tokenizer_eos=eos)
        dtype = write_model_dir(linserve, out, tensors, args.out, files)
    except ConvertError as e:
        print(f"convert_based.py: {e}", file=sys.stderr)
        return 1
    print(f"convert_based.py: wrote {args.out} ({linserve['n_layers']} layers, d_model "
          f"{linserve['d_model']}, vocab {linserve['vocab_size']}, weights {dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
