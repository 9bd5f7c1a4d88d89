#!/usr/bin/env python3
"""Converts a flash-linear-attention checkpoint (fla-org/flash-linear-attention's models, as
fla-hub publishes them) into a linserve model directory.

    convert_fla.py --checkpoint SRC --out DST [--tokenizer DIR]

SRC holds fla's config.json (a transformers PretrainedConfig; `model_type` names the family) and
model.safetensors or pytorch_model.bin (their ForCausalLM's state_dict). DIR holds the model's
tokenizer: tokenizer.model (the Llama/Mistral SentencePiece model fla-hub's checkpoints use;
config tokenizer "sentencepiece") or a byte-level BPE in GPT-2's files (vocab.json + merges.txt or
tokenizer.json, as GPT-NeoX's; "gpt2_bpe"). Without --tokenizer, SRC's own tokenizer files are
used; when SRC has none either, the model gets tokenizer "none" and serves token ids only (prompts
as ids, generations as ids: docs/model-format.md). DST gets config.json (the "layers" schema),
model.safetensors (in the checkpoint's dtype when that is F32, F16 or BF16, else F32) and the
tokenizer.

Families: `gated_deltanet` (fla's GatedDeltaNetForCausalLM), `delta_net` (DeltaNetForCausalLM),
`gla` (GLAForCausalLM), `retnet` (RetNetForCausalLM) and `mamba2` (Mamba2ForCausalLM) convert;
any other model_type is refused by name. Mapping (per layer i;
docs/model-format.md gives linserve's kinds):
  attn (GatedDeltaNet) -> gated_delta_net: n_heads = num_heads, n_v_heads = num_v_heads (or
      num_heads), head_k_dim = head_dim, head_v_dim = head_dim · expand_v (an integer),
      conv_size, use_gate, allow_neg_eigval, norm_eps (fla passes the model's norm_eps to the
      layer); conv_bias false (fla's model never sets it). The projections, A_log, dt_bias and
      o_norm keep their names; q/k/v_conv1d.weight [channels, 1, conv_size] lose the middle axis.
  attn (DeltaNet) -> delta_net: n_heads = num_heads, head_k_dim = hidden_size · expand_k /
      num_heads, head_v_dim = hidden_size · expand_v / num_heads (whole numbers), use_beta,
      use_gate, allow_neg_eigval, conv_size, norm_eps; qk_activation must be silu and qk_norm l2
      (fla's defaults, what delta_net computes); use_output_norm false is accepted with a note
      (fla's layer ignores it and always applies the norm).
  attn (GatedLinearAttention) -> gated_linear_attention: n_heads = num_heads, head_k_dim =
      hidden_size · expand_k / num_heads, head_v_dim = hidden_size · expand_v / num_heads (whole
      numbers), gate_low_rank_dim 16 and gate_logit_normalizer 16 (GLABlock leaves the layer's
      defaults), clamp_min (null: −1e4, no clamp in effect; below −1e4: −1e4, the same function),
      use_short_conv and conv_size, use_output_gate, norm_eps; conv_bias false. The output norm
      g_norm_swish_gate (fused) or g_norm becomes g_norm (ones without elementwise_affine: fla's
      norm then has no weight); feature_map must be null and num_kv_heads null or num_heads;
      use_gk / use_gv are ignored as fla's model ignores them.
  attn (MultiScaleRetention) -> retention: n_heads = num_heads, head_k_dim = hidden_size ·
      expand_k / num_heads (even), head_v_dim = hidden_size · expand_v / num_heads, rope_base
      10000 (the layer's RotaryEmbedding default), use_output_gate, norm_eps; the output norm as
      GLA's; feature_map null and num_kv_heads null or num_heads; use_short_conv and conv_size
      are accepted with a note when set, as RetNetBlock never passes them to its layer.
  attn_norm / mlp_norm / model.norm -> rms_norm (eps = norm_eps).
  Mamba-2 (backbone.*): backbone.layers.{i}.mixer -> mamba2 (n_heads = expand · hidden_size /
      head_dim, head_dim, state_size, n_groups, conv_size = conv_kernel, conv_bias =
      use_conv_bias, bias = use_bias, d_has_hdim = D_has_hdim, rmsnorm, norm_before_gate,
      dt_limit [min, max] with a max of Infinity (fla writes it bare in config.json) as 1e30,
      norm_eps; tensors under mamba., conv1d.weight without its middle axis), .norm -> ln1
      (rms_norm), no MLP (the MLP kind none), backbone.embeddings / norm_f -> embed / final_norm;
      keys that only initialise or choose kernels (A_init_range, dt_min/max/init_floor, conv_init,
      chunk_size, residual_in_fp32, rescale_prenorm_residual) are accepted and unused.
  mlp (GatedMLP, swish) -> gated_mlp silu without biases: fc1 = [up_proj; gate_proj] (value
      rows first), fc2 = down_proj; d_ff = intermediate_size, or fla's rule from hidden_ratio
      (256 · ceil(int(hidden_size · hidden_ratio · 2/3) / 256)).
  model.embeddings -> embed; lm_head -> lm_head (untied), or checked equal to the embedding (tied).
Refused, naming the key: unknown config keys, use_short_conv false (delta-rule families), hybrid
softmax-attention layers (`attn`), attention residuals (`attnres_block_size`), an MLP (and GLA
output gate) activation other than swish/silu, a non-finite A_log or dt_bias (the decay) or
gk_proj.1.bias (GLA's key gate) or A_log, dt_bias or D (Mamba-2), a clamp_min above 0, a
dt_limit that is not [min, max] with 0 <= min <= max, a hidden_act other than silu for Mamba-2, a
num_heads that disagrees with expand · hidden_size / head_dim, shapes the config does not imply,
and any tensor the mapping does not consume.
"""

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from linserve_ref.checkpoint import (ConvertError, Tensors, gpt2_tokenizer_files,  # noqa: E402
                                     read_checkpoint, write_model_dir)
from linserve_ref.config import ConfigError, normalize_config  # noqa: E402
from linserve_ref.gated_linear_attention import MIN_LOG_GATE  # noqa: E402


# GatedDeltaNetConfig's defaults for the keys read.
GDN_DEFAULTS = {
    "hidden_size": 2048, "expand_v": 2.0, "use_gate": True, "use_short_conv": True,
    "allow_neg_eigval": False, "conv_size": 4, "head_dim": 256, "num_heads": 6,
    "num_v_heads": None, "hidden_ratio": 4, "intermediate_size": None, "hidden_act": "swish",
    "num_hidden_layers": 21, "norm_eps": 1e-6, "attn": None, "bos_token_id": 1,
    "eos_token_id": 2, "tie_word_embeddings": False, "vocab_size": 32000,
    "attnres_block_size": None,
}
# DeltaNetConfig's defaults for the keys read.
DN_DEFAULTS = {
    "hidden_size": 2048, "expand_k": 1.0, "expand_v": 1.0, "use_gate": False,
    "use_short_conv": True, "allow_neg_eigval": False, "conv_size": 4, "use_beta": True,
    "use_output_norm": True, "num_heads": 16, "qk_norm": "l2", "qk_activation": "silu",
    "hidden_ratio": 4, "intermediate_size": None, "hidden_act": "swish",
    "num_hidden_layers": 24, "norm_eps": 1e-6, "attn": None, "bos_token_id": 1,
    "eos_token_id": 2, "tie_word_embeddings": False, "vocab_size": 32000,
    "attnres_block_size": None,
}
# GLAConfig's defaults for the keys read. use_gk and use_gv are GLAConfig's but its model never
# reads them (the layer always has the key gate and no value gate): they are accepted as any value.
GLA_DEFAULTS = {
    "hidden_size": 2048, "expand_k": 0.5, "expand_v": 1.0, "hidden_ratio": 4,
    "intermediate_size": None, "num_hidden_layers": 24, "num_heads": 4, "num_kv_heads": None,
    "feature_map": None, "use_short_conv": False, "conv_size": 4, "use_output_gate": True,
    "clamp_min": None, "hidden_act": "swish", "elementwise_affine": True, "norm_eps": 1e-6,
    "use_gk": True, "use_gv": False, "attn": None, "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "vocab_size": 32000, "attnres_block_size": None,
    "fuse_norm": True,
}
# RetNetConfig's defaults for the keys read. use_short_conv and conv_size are RetNetConfig's but
# RetNetBlock never passes them to its layer: fla's RetNet has no short convolutions.
RETNET_DEFAULTS = {
    "hidden_size": 2048, "expand_k": 1.0, "expand_v": 2.0, "hidden_ratio": 2,
    "intermediate_size": None, "num_hidden_layers": 24, "num_heads": 8, "num_kv_heads": None,
    "feature_map": None, "hidden_act": "swish", "use_short_conv": False, "conv_size": 4,
    "use_output_gate": True, "elementwise_affine": True, "norm_eps": 1e-6, "attn": None,
    "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False, "vocab_size": 32000,
    "attnres_block_size": None, "fuse_norm": True,
}
# Mamba2Config's defaults for the keys read.
MAMBA2_DEFAULTS = {
    "head_dim": 64, "vocab_size": 32000, "hidden_size": 2048, "state_size": 128,
    "num_hidden_layers": 48, "norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2,
    "expand": 2, "conv_kernel": 4, "n_groups": 1, "use_bias": False, "use_conv_bias": True,
    "D_has_hdim": False, "hidden_act": "silu", "dt_limit": [0.0, math.inf], "rmsnorm": True,
    "norm_before_gate": False, "tie_word_embeddings": False, "num_heads": None,
}
# Mamba2Config's keys that only initialise or schedule training, or choose kernels: the weights
# and the recurrence do not depend on them (residual_in_fp32: linserve's residual is fp32).
MAMBA2_IGNORED = {
    "conv_init", "A_init_range", "dt_min", "dt_max", "dt_init_floor", "rescale_prenorm_residual",
    "residual_in_fp32", "chunk_size",
}
# What linserve's mamba2 takes for fla's dt_limit ceiling of inf (model/layers/mamba2.h).
MAMBA2_NO_DT_CEILING = 1e30
# RotaryEmbedding's base in fla's retention layer (its default; the config has no key for it).
RETNET_ROPE_BASE = 10000.0
# GLA's layer arguments that GLABlock leaves at their defaults (its config has no key for them).
GLA_GATE_LOGIT_NORMALIZER = 16
GLA_GATE_LOW_RANK_DIM = 16
# Keys that do not change what the model computes: kernel choice (attn_mode: chunk and
# fused_recurrent compute the same recurrence), fused training paths, the loss, the position
# limit of training (the recurrence has none), HF bookkeeping.
IGNORED_KEYS = {
    "model_type", "architectures", "transformers_version", "torch_dtype", "_name_or_path",
    "attn_mode", "max_position_embeddings", "use_cache", "pad_token_id", "initializer_range",
    "fuse_norm", "fuse_swiglu", "fuse_cross_entropy", "fuse_linear_cross_entropy",
    "use_l2warp", "return_dict", "output_hidden_states", "output_attentions", "torchscript",
    "use_return_dict",
}


class _Reader:
    """fla's config with its class's defaults."""

    def __init__(self, config, defaults, ignored=()):
        self.config, self.defaults = config, defaults
        for key in config:
            if key not in defaults and key not in IGNORED_KEYS and key not in ignored:
                raise ConvertError(f"config.json: unknown key '{key}'")

    def __getitem__(self, key):
        return self.config[key] if key in self.config else self.defaults[key]

    def int(self, key, lo=1):
        value = self[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ConvertError(f"config.json: '{key}' = {value!r} must be an integer >= {lo}")
        return value

    def bool(self, key):
        value = self[key]
        if not isinstance(value, bool):
            raise ConvertError(f"config.json: '{key}' = {value!r} must be true or false")
        return value

    def number(self, key):
        value = self[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or value <= 0:
            raise ConvertError(f"config.json: '{key}' = {value!r} must be a finite number > 0")
        return float(value)

    def require(self, key, expected, why):
        if self[key] != expected:
            raise ConvertError(f"config.json: '{key}' = {self[key]!r} is not supported ({why})")


def _model_type(config):
    if not isinstance(config, dict):
        raise ConvertError("config.json must be a JSON object")
    model_type = config.get("model_type")
    if model_type in FAMILIES or model_type == "mamba2":
        return model_type
    raise ConvertError(f"config.json: 'model_type' = {model_type!r} is not an fla family this "
                       f"converter reads ({sorted(list(FAMILIES) + ['mamba2'])})")


def _dim(cfg, d, key):
    """int(d · cfg[key]), refused unless whole."""
    value = d * cfg.number(key)
    if value != int(value):
        raise ConvertError(f"config.json: '{key}' = {cfg[key]!r} times hidden_size {d} is not "
                           f"a whole dimension")
    return int(value)


def _take_attn(t, p, q, shapes, convs, taps, out):
    """The projections and vectors of `shapes` and the convolutions `convs` ([channels, 1, taps]
    to [channels, taps]) of a layer's attn: fla's prefix p, ours q."""
    for name, shape in shapes.items():
        out[q + name] = t.take(p + name, shape)
    for conv, channels in convs:
        name = f"{conv}_conv1d.weight"
        out[q + name] = t.take(p + name, (channels, 1, taps))[:, 0, :]


def _check_finite(out, q, p, names, what):
    """Refuses a tensor of `names` (ours under q, fla's under p) holding a non-finite value."""
    for name in names:
        bad = (~torch.isfinite(out[q + name])).nonzero()
        if len(bad):
            raise ConvertError(f"checkpoint: tensor '{p}{name}' holds "
                               f"{out[q + name][bad[0, 0]].item()} at [{bad[0, 0].item()}]; "
                               f"{what} must be finite")


def _require_short_conv(cfg):
    cfg.require("use_short_conv", True, "the delta-rule kinds have no layer without their short "
                "convolutions")


def _gdn_mixer(cfg, t, i, d, out):
    _require_short_conv(cfg)
    h, dk = cfg.int("num_heads"), cfg.int("head_dim")
    hv = cfg["num_v_heads"]
    hv = h if hv is None else cfg.int("num_v_heads")
    if hv % h:
        raise ConvertError(f"config.json: 'num_v_heads' = {hv} is not a multiple of num_heads "
                           f"= {h}")
    dv = dk * cfg.number("expand_v")
    if dv != int(dv):
        raise ConvertError(f"config.json: 'expand_v' = {cfg['expand_v']!r} times head_dim {dk} "
                           f"is not a whole head_v_dim")
    dv = int(dv)
    taps = cfg.int("conv_size", lo=2)
    kd, vd = h * dk, hv * dv
    p, q = f"model.layers.{i}.attn.", f"layers.{i}.attn."
    shapes = {"q_proj.weight": (kd, d), "k_proj.weight": (kd, d), "v_proj.weight": (vd, d),
              "a_proj.weight": (hv, d), "b_proj.weight": (hv, d), "A_log": (hv,),
              "dt_bias": (hv,), "o_norm.weight": (dv,), "o_proj.weight": (d, vd)}
    if cfg.bool("use_gate"):
        shapes["g_proj.weight"] = (vd, d)
    _take_attn(t, p, q, shapes, (("q", kd), ("k", kd), ("v", vd)), taps, out)
    # The decay: a NaN here would reach every later token.
    _check_finite(out, q, p, ("A_log", "dt_bias"), "the decay")
    return {"kind": "gated_delta_net", "n_heads": h, "n_v_heads": hv, "head_k_dim": dk,
            "head_v_dim": dv, "conv_size": taps, "conv_bias": False,
            "use_gate": cfg["use_gate"], "allow_neg_eigval": cfg.bool("allow_neg_eigval"),
            "norm_eps": cfg.number("norm_eps")}


def _dn_mixer(cfg, t, i, d, out):
    _require_short_conv(cfg)
    cfg.require("qk_activation", "silu", "delta_net computes fla's default silu feature map")
    cfg.require("qk_norm", "l2", "delta_net computes fla's default L2 norm of q and k")
    h = cfg.int("num_heads")
    kd, vd = _dim(cfg, d, "expand_k"), _dim(cfg, d, "expand_v")
    for key, dim in (("expand_k", kd), ("expand_v", vd)):
        if dim % h:
            raise ConvertError(f"config.json: 'num_heads' = {h} does not divide the {dim} "
                               f"channels that '{key}' gives")
    if not cfg.bool("use_output_norm"):
        print("convert_fla.py: config.json sets use_output_norm false; fla's DeltaNet layer takes "
              "the flag but always applies its output norm, and so does the converted model",
              file=sys.stderr)
    taps = cfg.int("conv_size", lo=2)
    p, q = f"model.layers.{i}.attn.", f"layers.{i}.attn."
    shapes = {"q_proj.weight": (kd, d), "k_proj.weight": (kd, d), "v_proj.weight": (vd, d),
              "o_norm.weight": (vd // h,), "o_proj.weight": (d, vd)}
    if cfg.bool("use_beta"):
        shapes["b_proj.weight"] = (h, d)
    if cfg.bool("use_gate"):
        shapes["g_proj.weight"] = (vd, d)
    _take_attn(t, p, q, shapes, (("q", kd), ("k", kd), ("v", vd)), taps, out)
    return {"kind": "delta_net", "n_heads": h, "head_k_dim": kd // h, "head_v_dim": vd // h,
            "conv_size": taps, "conv_bias": False, "use_beta": cfg["use_beta"],
            "use_gate": cfg["use_gate"], "allow_neg_eigval": cfg.bool("allow_neg_eigval"),
            "norm_eps": cfg.number("norm_eps")}


def _gla_heads(cfg, d, kind):
    """(heads, key_dim, value_dim) of a GLA or RetNet layer, refusing what `kind` does not
    compute: a feature map, shared k/v heads, widths that do not split into the heads."""
    cfg.require("feature_map", None, f"{kind} computes fla's default: no feature map on q and k")
    h = cfg.int("num_heads")
    if cfg["num_kv_heads"] is not None and cfg.int("num_kv_heads") != h:
        raise ConvertError(f"config.json: 'num_kv_heads' = {cfg['num_kv_heads']} is not "
                           f"supported ({kind} has one k/v head per head, num_heads = {h})")
    kd, vd = _dim(cfg, d, "expand_k"), _dim(cfg, d, "expand_v")
    for key, dim in (("expand_k", kd), ("expand_v", vd)):
        if dim % h:
            raise ConvertError(f"config.json: 'num_heads' = {h} does not divide the {dim} "
                               f"channels that '{key}' gives")
    return h, kd, vd


def _take_output_norm(cfg, t, p, q, dv, use_gate, out):
    """fla's output norm of GLA and RetNet: FusedRMSNormGated (swish, fuse_norm, with the gate) or
    RMSNorm then the gate, the same function; its weight as g_norm, or ones without
    elementwise_affine (fla's norm then has no weight)."""
    fused = cfg["hidden_act"] == "swish" and cfg.bool("fuse_norm") and use_gate
    norm = "g_norm_swish_gate.weight" if fused else "g_norm.weight"
    if cfg.bool("elementwise_affine"):
        out[q + "g_norm.weight"] = t.take(p + norm, (dv,))
    else:
        out[q + "g_norm.weight"] = torch.ones(dv, dtype=out[q + "q_proj.weight"].dtype)


def _retnet_mixer(cfg, t, i, d, out):
    h, kd, vd = _gla_heads(cfg, d, "retention")
    if (kd // h) % 2:
        raise ConvertError(f"config.json: the head_k_dim {kd // h} that 'expand_k' and "
                           f"'num_heads' give is odd (RoPE turns pairs of dims)")
    if cfg.bool("use_short_conv"):
        print("convert_fla.py: config.json sets use_short_conv true; fla's RetNet block does not "
              "pass it to its layer, which has no short convolutions, nor has the converted model",
              file=sys.stderr)
    use_gate = cfg.bool("use_output_gate")
    p, q = f"model.layers.{i}.attn.", f"layers.{i}.attn."
    shapes = {"q_proj.weight": (kd, d), "k_proj.weight": (kd, d), "v_proj.weight": (vd, d),
              "o_proj.weight": (d, vd)}
    if use_gate:
        shapes["g_proj.weight"] = (vd, d)
    _take_attn(t, p, q, shapes, (), 4, out)
    _take_output_norm(cfg, t, p, q, vd // h, use_gate, out)
    return {"kind": "retention", "n_heads": h, "head_k_dim": kd // h, "head_v_dim": vd // h,
            "rope_base": RETNET_ROPE_BASE, "use_short_conv": False, "conv_size": 4,
            "conv_bias": False, "use_output_gate": use_gate, "norm_eps": cfg.number("norm_eps")}


def _gla_mixer(cfg, t, i, d, out):
    h, kd, vd = _gla_heads(cfg, d, "gated_linear_attention")
    clamp = cfg["clamp_min"]
    if clamp is not None:
        if isinstance(clamp, bool) or not isinstance(clamp, (int, float)) or \
                not clamp <= 0 or math.isnan(clamp):
            raise ConvertError(f"config.json: 'clamp_min' = {clamp!r} must be a number <= 0 or "
                               f"null (a floor above 0 would let the state grow)")
    # Below −1e4 a floor changes nothing: e^−1e4 is 0 as e^gk is for every gk below it.
    clamp = MIN_LOG_GATE if clamp is None else max(float(clamp), MIN_LOG_GATE)
    use_conv, use_gate = cfg.bool("use_short_conv"), cfg.bool("use_output_gate")
    rank = GLA_GATE_LOW_RANK_DIM
    p, q = f"model.layers.{i}.attn.", f"layers.{i}.attn."
    shapes = {"q_proj.weight": (kd, d), "k_proj.weight": (kd, d), "v_proj.weight": (vd, d),
              "gk_proj.0.weight": (rank, d), "gk_proj.1.weight": (kd, rank),
              "gk_proj.1.bias": (kd,), "o_proj.weight": (d, vd)}
    if use_gate:
        shapes["g_proj.weight"] = (vd, d)
    taps = cfg.int("conv_size", lo=2) if use_conv else 4
    convs = (("q", kd), ("k", kd), ("v", vd)) if use_conv else ()
    _take_attn(t, p, q, shapes, convs, taps, out)
    # The key gate: a NaN here would reach every later token.
    _check_finite(out, q, p, ("gk_proj.1.bias",), "the key gate")
    _take_output_norm(cfg, t, p, q, vd // h, use_gate, out)
    return {"kind": "gated_linear_attention", "n_heads": h, "head_k_dim": kd // h,
            "head_v_dim": vd // h, "gate_low_rank_dim": rank,
            "gate_logit_normalizer": float(GLA_GATE_LOGIT_NORMALIZER), "clamp_min": clamp,
            "use_short_conv": use_conv, "conv_size": taps, "conv_bias": False,
            "use_output_gate": use_gate, "norm_eps": cfg.number("norm_eps")}


# Per model_type: its config class's defaults and the mapping of one layer's attn.
FAMILIES = {"gated_deltanet": (GDN_DEFAULTS, _gdn_mixer), "delta_net": (DN_DEFAULTS, _dn_mixer),
            "gla": (GLA_DEFAULTS, _gla_mixer), "retnet": (RETNET_DEFAULTS, _retnet_mixer)}


def _mlp(cfg, t, i, d, out):
    inner = cfg["intermediate_size"]
    if inner is None:
        ratio = cfg.number("hidden_ratio") if cfg["hidden_ratio"] is not None else 4
        inner = int(d * ratio * 2 / 3)
        inner = 256 * ((inner + 256 - 1) // 256)
    else:
        inner = cfg.int("intermediate_size")
    p, q = f"model.layers.{i}.mlp.", f"layers.{i}.mlp."
    up = t.take(p + "up_proj.weight", (inner, d))
    gate = t.take(p + "gate_proj.weight", (inner, d))
    out[q + "fc1.weight"] = torch.cat([up, gate])
    out[q + "fc2.weight"] = t.take(p + "down_proj.weight", (d, inner))
    return {"kind": "gated_mlp", "d_ff": inner, "activation": "silu", "bias": False}


def _norm(cfg, t, key, d, out, name):
    out[name] = t.take(key, (d,))
    return {"kind": "rms_norm", "eps": cfg.number("norm_eps")}


def _mamba2_mixer(cfg, t, i, d, out):
    cfg.require("hidden_act", "silu", "mamba2's convolution and gate are silu")
    di = _dim(cfg, d, "expand")
    p_dim, n = cfg.int("head_dim"), cfg.int("state_size")
    if di % p_dim:
        raise ConvertError(f"config.json: 'head_dim' = {p_dim} does not divide the {di} channels "
                           f"that 'expand' gives")
    h = di // p_dim
    if cfg["num_heads"] is not None and cfg.int("num_heads") != h:
        raise ConvertError(f"config.json: 'num_heads' = {cfg['num_heads']} is not expand · "
                           f"hidden_size / head_dim = {h}")
    g = cfg.int("n_groups")
    if h % g:
        raise ConvertError(f"config.json: 'n_groups' = {g} does not divide the {h} heads")
    limit = cfg["dt_limit"]
    if not isinstance(limit, (list, tuple)) or len(limit) != 2 or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v)
            for v in limit) or not 0 <= limit[0] <= limit[1] or math.isinf(limit[0]):
        raise ConvertError(f"config.json: 'dt_limit' = {limit!r} must be [min, max] with "
                           f"0 <= min <= max, min finite (max may be Infinity)")
    taps = cfg.int("conv_kernel", lo=2)
    conv_dim = di + 2 * g * n
    bias, conv_bias = cfg.bool("use_bias"), cfg.bool("use_conv_bias")
    p, q = f"backbone.layers.{i}.mixer.", f"layers.{i}.mamba."
    shapes = {"in_proj.weight": (di + conv_dim + h, d), "dt_bias": (h,), "A_log": (h,),
              "D": (di if cfg.bool("D_has_hdim") else h,), "out_proj.weight": (d, di)}
    if bias:
        shapes["in_proj.bias"] = (di + conv_dim + h,)
        shapes["out_proj.bias"] = (d,)
    if conv_bias:
        shapes["conv1d.bias"] = (conv_dim,)
    if cfg.bool("rmsnorm"):
        shapes["norm.weight"] = (di,)
    for name, shape in shapes.items():
        out[q + name] = t.take(p + name, shape)
    out[q + "conv1d.weight"] = t.take(p + "conv1d.weight", (conv_dim, 1, taps))[:, 0, :]
    # The decay and the skip: a NaN here would reach every later token.
    _check_finite(out, q, p, ("A_log", "dt_bias", "D"), "the decay and the skip")
    return {"kind": "mamba2", "n_heads": h, "head_dim": p_dim, "state_size": n, "n_groups": g,
            "conv_size": taps, "conv_bias": conv_bias, "bias": bias,
            "d_has_hdim": cfg["D_has_hdim"], "rmsnorm": cfg["rmsnorm"],
            "norm_before_gate": cfg.bool("norm_before_gate"),
            "dt_limit_min": float(limit[0]),
            "dt_limit_max": min(float(limit[1]), MAMBA2_NO_DT_CEILING),
            "norm_eps": cfg.number("norm_eps")}


def _convert_mamba2(config, tensors, tokenizer):
    """fla's Mamba2ForCausalLM: backbone.embeddings, per layer backbone.layers.{i}.norm (→ ln1,
    rms_norm) and .mixer (→ mamba2) with the MLP kind none, backbone.norm_f, lm_head."""
    cfg = _Reader(config, MAMBA2_DEFAULTS, MAMBA2_IGNORED)
    d, n_layers = cfg.int("hidden_size"), cfg.int("num_hidden_layers")
    vocab = cfg.int("vocab_size")
    t = Tensors(tensors)
    out = {}
    _embed_and_head(cfg, t, "backbone.embeddings.weight", vocab, d, out)
    layers = []
    for i in range(n_layers):
        mixer = _mamba2_mixer(cfg, t, i, d, out)
        norm = _norm(cfg, t, f"backbone.layers.{i}.norm.weight", d, out, f"layers.{i}.ln1.weight")
        layers.append({"mixer": mixer, "norm": norm, "mlp": {"kind": "none"}})
    final = _norm(cfg, t, "backbone.norm_f.weight", d, out, "final_norm.weight")
    return _finish(cfg, t, vocab, d, n_layers, layers, final, tokenizer), out


def _embed_and_head(cfg, t, embed_key, vocab, d, out):
    """The embedding, and the LM head: untied, or checked equal to the embedding."""
    tied = cfg.bool("tie_word_embeddings")
    embed = t.take(embed_key, (vocab, d))
    if tied and t.has("lm_head.weight"):
        if not torch.equal(t.take("lm_head.weight", (vocab, d)), embed):
            raise ConvertError("checkpoint: tensor 'lm_head.weight' differs from the embedding "
                               "although tie_word_embeddings is true")
    elif not tied:
        out["lm_head.weight"] = t.take("lm_head.weight", (vocab, d))
    out["embed.weight"] = embed


def _finish(cfg, t, vocab, d, n_layers, layers, final, tokenizer):
    """linserve's config of these layers, once every tensor is taken."""
    t.check_all_taken()
    special = {}
    for key in ("bos_token_id", "eos_token_id"):
        value = cfg[key]
        special[key] = -1 if value is None else cfg.int(key, lo=0)
    linserve = {"architecture": "linear_transformer", "vocab_size": vocab, "d_model": d,
                "n_layers": n_layers, "norm": "pre", "position": "none",
                "tie_embeddings": cfg.bool("tie_word_embeddings"), "tokenizer": tokenizer,
                **special, "layers": layers, "final_norm": final}
    try:
        return normalize_config(linserve)
    except ConfigError as e:
        raise ConvertError(f"the converted config is out of linserve's range: {e}") from None


def convert(config, tensors, tokenizer="sentencepiece"):
    """fla's config dict and state dict -> (linserve config, linserve tensors)."""
    if _model_type(config) == "mamba2":
        return _convert_mamba2(config, tensors, tokenizer)
    defaults, mixer_of = FAMILIES[_model_type(config)]
    cfg = _Reader(config, defaults)
    cfg.require("attn", None, "hybrid models with softmax-attention layers")
    cfg.require("attnres_block_size", None, "attention residuals")
    if cfg["hidden_act"] not in ("swish", "silu"):
        raise ConvertError(f"config.json: 'hidden_act' = {cfg['hidden_act']!r} is not swish or "
                           f"silu (the SwiGLU MLP gated_mlp computes)")
    d, n_layers = cfg.int("hidden_size"), cfg.int("num_hidden_layers")
    vocab = cfg.int("vocab_size")
    t = Tensors(tensors)
    out = {}
    _embed_and_head(cfg, t, "model.embeddings.weight", vocab, d, out)
    layers = []
    for i in range(n_layers):
        mixer = mixer_of(cfg, t, i, d, out)
        p = f"model.layers.{i}."
        norm = _norm(cfg, t, p + "attn_norm.weight", d, out, f"layers.{i}.ln1.weight")
        _norm(cfg, t, p + "mlp_norm.weight", d, out, f"layers.{i}.ln2.weight")
        layers.append({"mixer": mixer, "norm": norm, "mlp": _mlp(cfg, t, i, d, out)})
    final = _norm(cfg, t, "model.norm.weight", d, out, "final_norm.weight")
    return _finish(cfg, t, vocab, d, n_layers, layers, final, tokenizer), out


def find_tokenizer(directory):
    """(config tokenizer, files to copy, SentencePiece model or None, largest id) of the
    tokenizer in `directory`, or None when there is none."""
    model = os.path.join(directory, "tokenizer.model")
    if os.path.exists(model):
        try:
            import sentencepiece  # noqa: PLC0415 -- only a SentencePiece tokenizer needs it

            pieces = sentencepiece.SentencePieceProcessor(model_file=model).get_piece_size()
        except Exception as e:  # noqa: BLE001 -- any failure to read is the file's fault
            raise ConvertError(f"{model}: not a SentencePiece model: {e}") from None
        return "sentencepiece", [], model, pieces - 1
    found = gpt2_tokenizer_files(directory)
    if found is None:
        return None
    files, max_id, _ = found
    return "gpt2_bpe", files, None, max_id


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True,
                        help="fla's directory: config.json + model.safetensors or "
                             "pytorch_model.bin")
    parser.add_argument("--out", required=True, help="the linserve model directory to write")
    parser.add_argument("--tokenizer",
                        help="tokenizer.model (SentencePiece), or GPT-2-format vocab.json + "
                             "merges.txt or tokenizer.json. Default: the checkpoint's own, or "
                             "none (token ids only) when it has none")
    args = parser.parse_args(argv)
    try:
        where = args.tokenizer if args.tokenizer is not None else args.checkpoint
        found = find_tokenizer(where)
        if found is None and args.tokenizer is not None:
            raise ConvertError(
                f"--tokenizer {where}: holds no tokenizer (tokenizer.model, vocab.json + "
                f"merges.txt or tokenizer.json)")
        if found is None:
            print(f"convert_fla.py: note: {where} holds no tokenizer (tokenizer.model, vocab.json "
                  f"+ merges.txt or tokenizer.json): the model gets tokenizer \"none\" and serves "
                  f"token ids; pass --tokenizer DIR for text", file=sys.stderr)
            found = ("none", [], None, -1)
        kind, files, sp_model, max_id = found
        config, tensors = read_checkpoint(args.checkpoint)
        linserve, out = convert(config, tensors, tokenizer=kind)
        if max_id >= linserve["vocab_size"]:
            raise ConvertError(f"{where}: the tokenizer defines id {max_id}, beyond the model's "
                               f"vocab_size {linserve['vocab_size']}")
        dtype = write_model_dir(linserve, out, tensors, args.out, files, tokenizer_model=sp_model)
    except ConvertError as e:
        print(f"convert_fla.py: {e}", file=sys.stderr)
        return 1
    print(f"convert_fla.py: wrote {args.out} ({linserve['n_layers']} layers, d_model "
          f"{linserve['d_model']}, vocab {linserve['vocab_size']}, weights {dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
