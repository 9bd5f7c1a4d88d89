"""An independent transcription of flash-linear-attention's Gated DeltaNet, DeltaNet, GLA and RetNet
language models (fla-org/flash-linear-attention at bc3b101 of 2026-08-22: fla/models/{gated_deltanet,
delta_net,gla,retnet}/{configuration,modeling}_*.py, fla/layers/{gated_deltanet,delta_net,gla,
multiscale_retention}.py, fla/modules' RMSNorm, FusedRMSNormGated, ShortConvolution, GatedMLP and
RotaryEmbedding's reference (rotary_embedding_ref), and the recurrences of
fla/ops/{gated_delta_rule,delta_rule,gla,retention}/naive.py (retention's is the parallel form)
with the fused kernels' in-kernel steps: the L2
norm of q and k (x / sqrt(Σx² + 1e-6)), β = sigmoid(b) (· 2 with allow_neg_eigval), for Gated
DeltaNet g = −exp(A_log) · softplus(a + dt_bias) and value head h reading q/k head
h // (num_v_heads // num_heads)) in plain PyTorch and in THEIR layout: module names and shapes are
those of their state_dict (model.layers.{i}.attn.q_conv1d.weight [key_dim, 1, conv_size], ...),
built from their config.json with their config classes' defaults. The recurrent state is returned
as their layers pass it to the kernels: Gated DeltaNet's with state_v_first
[B, num_v_heads, head_v_dim, head_k_dim], DeltaNet's [B, num_heads, head_k_dim, head_v_dim], GLA's
(state_v_first) [B, num_heads, head_v_dim, head_k_dim], RetNet's [B, num_heads, head_k_dim,
head_v_dim] with k turned by RoPE at its absolute position. DeltaNet is transcribed for its defaults
qk_activation "silu" and qk_norm "l2" only; GLA for feature_map None and num_kv_heads None (its
layer with gate_logit_normalizer 16 and gate_low_rank_dim 16, as GLABlock builds it: the config
does not carry them); RetNet for feature_map None and num_kv_heads None (its block passes neither
use_short_conv nor conv_size to the layer: fla's RetNet has no short convolutions).

`make_checkpoint` writes a random checkpoint of this model (config.json + model.safetensors or
pytorch_model.bin), the input of convert_fla.py's tests.
"""

import json
import os

import torch
import torch.nn.functional as F
from torch import nn

# GatedDeltaNetConfig.__init__'s defaults (those the model reads).
DEFAULTS = {
    "attn_mode": "chunk", "hidden_size": 2048, "expand_v": 2.0, "use_gate": True,
    "use_short_conv": True, "allow_neg_eigval": False, "conv_size": 4, "head_dim": 256,
    "num_heads": 6, "num_v_heads": None, "max_position_embeddings": 2048, "hidden_ratio": 4,
    "intermediate_size": None, "hidden_act": "swish", "num_hidden_layers": 21, "norm_eps": 1e-6,
    "attn": None, "use_cache": True, "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "initializer_range": 0.02, "fuse_norm": True,
    "fuse_swiglu": True, "fuse_cross_entropy": True, "fuse_linear_cross_entropy": False,
    "use_l2warp": False, "vocab_size": 32000, "attnres_block_size": None,
}


def small_config(**overrides):
    """fla-hub/gated_deltanet-1.3B's config.json scaled down: hidden 64, 3 layers, 2 q/k heads of
    16 with expand_v 2 (value heads of 32), vocab 2048 (the bundled SentencePiece model's)."""
    config = {
        "architectures": ["GatedDeltaNetForCausalLM"], "model_type": "gated_deltanet",
        "torch_dtype": "float32", "transformers_version": "4.53.3", "attn_mode": "chunk",
        "hidden_size": 64, "expand_v": 2, "use_gate": True, "use_short_conv": True,
        "conv_size": 4, "head_dim": 16, "num_heads": 2, "max_position_embeddings": 2048,
        "hidden_ratio": 4, "intermediate_size": None, "hidden_act": "swish",
        "num_hidden_layers": 3, "norm_eps": 1e-6, "attn": None, "use_cache": True,
        "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
        "initializer_range": 0.006, "fuse_norm": True, "fuse_swiglu": True,
        "fuse_cross_entropy": True, "vocab_size": 2048,
    }
    config.update(overrides)
    return config


# DeltaNetConfig.__init__'s defaults (those the model reads).
DELTA_NET_DEFAULTS = {
    "attn_mode": "chunk", "hidden_size": 2048, "expand_k": 1.0, "expand_v": 1.0,
    "use_gate": False, "use_short_conv": True, "allow_neg_eigval": False, "conv_size": 4,
    "use_beta": True, "use_output_norm": True, "num_heads": 16, "qk_norm": "l2",
    "qk_activation": "silu", "max_position_embeddings": 2048, "hidden_ratio": 4,
    "intermediate_size": None, "hidden_act": "swish", "num_hidden_layers": 24, "norm_eps": 1e-6,
    "attn": None, "use_cache": True, "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "initializer_range": 0.02, "fuse_norm": True,
    "fuse_swiglu": True, "fuse_cross_entropy": True, "fuse_linear_cross_entropy": False,
    "use_l2warp": False, "vocab_size": 32000, "attnres_block_size": None,
}


def small_delta_net_config(**overrides):
    """A DeltaNet config.json at the same scale: hidden 64, 3 layers, 4 heads (key and value
    dims 64: heads of 16), vocab 2048."""
    config = {
        "architectures": ["DeltaNetForCausalLM"], "model_type": "delta_net",
        "torch_dtype": "float32", "transformers_version": "4.53.3", "attn_mode": "chunk",
        "hidden_size": 64, "expand_k": 1, "expand_v": 1, "use_gate": False,
        "use_short_conv": True, "conv_size": 4, "use_beta": True, "use_output_norm": True,
        "num_heads": 4, "qk_norm": "l2", "qk_activation": "silu", "hidden_ratio": 4,
        "intermediate_size": None, "hidden_act": "swish", "num_hidden_layers": 3,
        "norm_eps": 1e-6, "attn": None, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False, "fuse_norm": True, "vocab_size": 2048,
    }
    config.update(overrides)
    return config


# GLAConfig.__init__'s defaults (those the model reads).
GLA_DEFAULTS = {
    "hidden_size": 2048, "expand_k": 0.5, "expand_v": 1.0, "hidden_ratio": 4,
    "intermediate_size": None, "num_hidden_layers": 24, "num_heads": 4, "num_kv_heads": None,
    "feature_map": None, "attn_mode": "chunk", "use_short_conv": False, "conv_size": 4,
    "use_output_gate": True, "clamp_min": None, "hidden_act": "swish",
    "max_position_embeddings": 2048, "elementwise_affine": True, "norm_eps": 1e-6,
    "use_gk": True, "use_gv": False, "attn": None, "use_cache": True, "pad_token_id": None,
    "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False, "initializer_range": 0.02,
    "fuse_norm": True, "fuse_swiglu": True, "fuse_cross_entropy": True,
    "fuse_linear_cross_entropy": False, "use_l2warp": False, "vocab_size": 32000,
    "attnres_block_size": None,
}


def small_gla_config(**overrides):
    """A GLA config.json in fla-hub/gla-1.3B-100B's shape scaled down: hidden 64, 3 layers, 4
    heads with expand_k 0.5 and expand_v 1 (q/k heads of 8, value heads of 16), vocab 2048."""
    config = {
        "architectures": ["GLAForCausalLM"], "model_type": "gla", "torch_dtype": "float32",
        "transformers_version": "4.53.3", "attn_mode": "chunk", "hidden_size": 64,
        "expand_k": 0.5, "expand_v": 1, "hidden_ratio": 4, "intermediate_size": None,
        "num_hidden_layers": 3, "num_heads": 4, "num_kv_heads": None, "feature_map": None,
        "use_short_conv": False, "conv_size": 4, "use_output_gate": True, "clamp_min": None,
        "hidden_act": "swish", "elementwise_affine": True, "norm_eps": 1e-6, "use_gk": True,
        "use_gv": False, "attn": None, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False, "fuse_norm": True, "vocab_size": 2048,
    }
    config.update(overrides)
    return config


# RetNetConfig.__init__'s defaults (those the model reads).
RETNET_DEFAULTS = {
    "attn_mode": "chunk", "hidden_size": 2048, "expand_k": 1.0, "expand_v": 2.0,
    "hidden_ratio": 2, "intermediate_size": None, "num_hidden_layers": 24, "num_heads": 8,
    "num_kv_heads": None, "feature_map": None, "hidden_act": "swish", "use_short_conv": False,
    "conv_size": 4, "use_output_gate": True, "max_position_embeddings": 2048,
    "elementwise_affine": True, "norm_eps": 1e-6, "attn": None, "use_cache": True,
    "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
    "initializer_range": 0.02, "fuse_norm": True, "fuse_swiglu": True,
    "fuse_cross_entropy": True, "fuse_linear_cross_entropy": False, "use_l2warp": False,
    "vocab_size": 32000, "attnres_block_size": None,
}


def small_retnet_config(**overrides):
    """A RetNet config.json in fla-hub/retnet-1.3B-100B's shape scaled down: hidden 64, 3 layers,
    4 heads with expand_k 1 and expand_v 2 (q/k heads of 16, value heads of 32), vocab 2048."""
    config = {
        "architectures": ["RetNetForCausalLM"], "model_type": "retnet", "torch_dtype": "float32",
        "transformers_version": "4.53.3", "attn_mode": "chunk", "hidden_size": 64,
        "expand_k": 1, "expand_v": 2, "hidden_ratio": 2, "intermediate_size": None,
        "num_hidden_layers": 3, "num_heads": 4, "num_kv_heads": None, "feature_map": None,
        "hidden_act": "swish", "use_short_conv": False, "conv_size": 4, "use_output_gate": True,
        "elementwise_affine": True, "norm_eps": 1e-6, "attn": None, "bos_token_id": 1,
        "eos_token_id": 2, "tie_word_embeddings": False, "fuse_norm": True, "vocab_size": 2048,
    }
    config.update(overrides)
    return config


# Mamba2Config.__init__'s defaults (those the model reads, and num_heads, which it computes).
MAMBA2_DEFAULTS = {
    "head_dim": 64, "vocab_size": 32000, "hidden_size": 2048, "state_size": 128,
    "num_hidden_layers": 48, "norm_eps": 1e-5, "pad_token_id": 0, "bos_token_id": 1,
    "eos_token_id": 2, "expand": 2, "conv_kernel": 4, "n_groups": 1, "use_bias": False,
    "use_conv_bias": True, "conv_init": None, "A_init_range": (1, 16), "D_has_hdim": False,
    "hidden_act": "silu", "initializer_range": 0.02, "residual_in_fp32": True, "dt_min": 0.001,
    "dt_max": 0.1, "dt_init_floor": 1e-4, "dt_limit": (0.0, float("inf")),
    "rescale_prenorm_residual": True, "use_cache": True, "rmsnorm": True,
    "norm_before_gate": False, "chunk_size": 256, "fuse_norm": True, "fuse_cross_entropy": True,
    "fuse_linear_cross_entropy": False, "use_l2warp": False, "tie_word_embeddings": False,
}


def small_mamba2_config(**overrides):
    """A Mamba-2 config.json in fla-hub/mamba2-1.3B-100B's shape scaled down: hidden 64, expand 2
    (d_inner 128), heads of 16 (8 heads), state 16, 2 groups, 3 layers, vocab 2048, chunks of 64,
    and fla's dt_limit [0, Infinity] (a bare Infinity in the JSON, as fla writes it)."""
    config = {
        "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "torch_dtype": "float32",
        "transformers_version": "4.53.3", "head_dim": 16, "vocab_size": 2048, "hidden_size": 64,
        "state_size": 16, "num_hidden_layers": 3, "norm_eps": 1e-5, "pad_token_id": 0,
        "bos_token_id": 1, "eos_token_id": 2, "expand": 2, "conv_kernel": 4, "n_groups": 2,
        "use_bias": False, "use_conv_bias": True, "conv_init": None, "A_init_range": [1, 16],
        "D_has_hdim": False, "hidden_act": "silu", "initializer_range": 0.02,
        "residual_in_fp32": True, "dt_min": 0.001, "dt_max": 0.1, "dt_init_floor": 1e-4,
        "dt_limit": [0.0, float("inf")], "rescale_prenorm_residual": True, "use_cache": True,
        "rmsnorm": True, "norm_before_gate": False, "chunk_size": 64, "fuse_norm": True,
        "tie_word_embeddings": False, "num_heads": 8,
    }
    config.update(overrides)
    if "num_heads" not in overrides:
        config["num_heads"] = int(config["expand"] * config["hidden_size"] / config["head_dim"])
    return config


_DEFAULTS_OF = {"gated_deltanet": DEFAULTS, "delta_net": DELTA_NET_DEFAULTS, "gla": GLA_DEFAULTS,
                "retnet": RETNET_DEFAULTS, "mamba2": MAMBA2_DEFAULTS}


def get(config, key):
    if key in config:
        return config[key]
    return _DEFAULTS_OF[config.get("model_type", "gated_deltanet")][key]


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class FusedRMSNormGated(RMSNorm):
    """activation 'swish': rmsnorm(x) · g · sigmoid(g)."""

    def forward(self, x, g):
        return super().forward(x) * g * torch.sigmoid(g)


class ShortConvolution(nn.Conv1d):
    """A depthwise causal convolution with silu: nn.Conv1d(D, D, K, groups=D, padding=K − 1) over
    [B, T, D], truncated to the sequence."""

    def __init__(self, hidden_size, kernel_size, bias):
        super().__init__(hidden_size, hidden_size, kernel_size, groups=hidden_size,
                         padding=kernel_size - 1, bias=bias)

    def forward(self, x):
        y = super().forward(x.transpose(1, 2))[..., :x.shape[1]]
        return F.silu(y).transpose(1, 2)


def l2norm(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale):
    """naive.py's loop. q, k [B, T, H, K], v [B, T, H, V], beta, g [B, T, H] -> o [B, T, H, V]
    and the final h [B, H, K, V]."""
    q, k, v, beta, g = (x.transpose(1, 2) for x in (q, k, v, beta, g))
    b, h_count, t_count, k_dim, v_dim = *k.shape, v.shape[-1]
    o = torch.zeros(b, h_count, t_count, v_dim, dtype=v.dtype)
    h = torch.zeros(b, h_count, k_dim, v_dim, dtype=v.dtype)
    q = q * scale
    for i in range(t_count):
        b_q, b_k, b_v = q[:, :, i], k[:, :, i], v[:, :, i].clone()
        h = h * g[:, :, i].exp()[..., None, None]
        b_v = b_v - (h * b_k[..., None]).sum(-2)
        b_v = b_v * beta[:, :, i][..., None]
        h = h + b_k.unsqueeze(-1) * b_v.unsqueeze(-2)
        o[:, :, i] = torch.einsum("bhd,bhdm->bhm", b_q, h)
    return o.transpose(1, 2), h


class GatedDeltaNet(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = get(config, "hidden_size")
        self.num_heads = get(config, "num_heads")
        self.num_v_heads = get(config, "num_v_heads") or self.num_heads
        self.head_k_dim = get(config, "head_dim")
        self.head_v_dim = int(self.head_k_dim * get(config, "expand_v"))
        self.key_dim = self.num_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.use_gate = get(config, "use_gate")
        self.allow_neg_eigval = get(config, "allow_neg_eigval")
        conv_size = get(config, "conv_size")
        eps = get(config, "norm_eps")
        self.q_proj = nn.Linear(d, self.key_dim, bias=False)
        self.k_proj = nn.Linear(d, self.key_dim, bias=False)
        self.v_proj = nn.Linear(d, self.value_dim, bias=False)
        self.a_proj = nn.Linear(d, self.num_v_heads, bias=False)
        self.b_proj = nn.Linear(d, self.num_v_heads, bias=False)
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.dt_bias = nn.Parameter(torch.zeros(self.num_v_heads))
        self.q_conv1d = ShortConvolution(self.key_dim, conv_size, False)
        self.k_conv1d = ShortConvolution(self.key_dim, conv_size, False)
        self.v_conv1d = ShortConvolution(self.value_dim, conv_size, False)
        if self.use_gate:
            self.g_proj = nn.Linear(d, self.value_dim, bias=False)
            self.o_norm = FusedRMSNormGated(self.head_v_dim, eps)
        else:
            self.o_norm = RMSNorm(self.head_v_dim, eps)
        self.o_proj = nn.Linear(self.value_dim, d, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_conv1d(self.q_proj(x)).view(b, t, self.num_heads, self.head_k_dim)
        k = self.k_conv1d(self.k_proj(x)).view(b, t, self.num_heads, self.head_k_dim)
        v = self.v_conv1d(self.v_proj(x)).view(b, t, self.num_v_heads, self.head_v_dim)
        group = self.num_v_heads // self.num_heads  # the kernels' i_h = i_hv // group
        q = q.repeat_interleave(group, dim=2)
        k = k.repeat_interleave(group, dim=2)
        beta = self.b_proj(x).sigmoid()
        if self.allow_neg_eigval:
            beta = beta * 2
        g = -self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)
        o, h = naive_recurrent_gated_delta_rule(l2norm(q), l2norm(k), v, beta, g,
                                                self.head_k_dim ** -0.5)
        if self.use_gate:
            o = self.o_norm(o, self.g_proj(x).view(b, t, self.num_v_heads, self.head_v_dim))
        else:
            o = self.o_norm(o)
        return self.o_proj(o.reshape(b, t, self.value_dim)), h.transpose(-1, -2)


def naive_delta_rule(q, k, v, beta, scale):
    """naive.py's delta_rule_recurrence. q, k [B, H, T, K], v [B, H, T, V], beta [B, H, T] ->
    o [B, H, T, V] and the final S [B, H, K, V]."""
    b, h_count, t_count, k_dim = q.shape
    o = torch.zeros_like(v)
    s = torch.zeros(b, h_count, k_dim, v.shape[-1], dtype=v.dtype)
    q = q * scale
    beta = beta[..., None]
    for i in range(t_count):
        _k, _q, _v = k[:, :, i], q[:, :, i], v[:, :, i].clone()
        _v = _v - (s * _k[..., None]).sum(-2)
        _v = _v * beta[:, :, i]
        s = s + _k.unsqueeze(-1) * _v.unsqueeze(-2)
        o[:, :, i] = torch.einsum("bhd,bhdm->bhm", _q, s)
    return o, s


class DeltaNet(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = get(config, "hidden_size")
        self.num_heads = get(config, "num_heads")
        self.key_dim = int(d * get(config, "expand_k"))
        self.value_dim = int(d * get(config, "expand_v"))
        self.head_k_dim = self.key_dim // self.num_heads
        self.head_v_dim = self.value_dim // self.num_heads
        self.use_beta = get(config, "use_beta")
        self.use_gate = get(config, "use_gate")
        self.allow_neg_eigval = get(config, "allow_neg_eigval")
        conv_size = get(config, "conv_size")
        eps = get(config, "norm_eps")
        self.q_proj = nn.Linear(d, self.key_dim, bias=False)
        self.k_proj = nn.Linear(d, self.key_dim, bias=False)
        self.v_proj = nn.Linear(d, self.value_dim, bias=False)
        if self.use_beta:
            self.b_proj = nn.Linear(d, self.num_heads, bias=False)
        self.q_conv1d = ShortConvolution(self.key_dim, conv_size, False)
        self.k_conv1d = ShortConvolution(self.key_dim, conv_size, False)
        self.v_conv1d = ShortConvolution(self.value_dim, conv_size, False)
        if self.use_gate:
            self.g_proj = nn.Linear(d, self.value_dim, bias=False)
            self.o_norm = FusedRMSNormGated(self.head_v_dim, eps)
        else:
            self.o_norm = RMSNorm(self.head_v_dim, eps)
        self.o_proj = nn.Linear(self.value_dim, d, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_conv1d(self.q_proj(x)).view(b, t, self.num_heads, self.head_k_dim)
        k = self.k_conv1d(self.k_proj(x)).view(b, t, self.num_heads, self.head_k_dim)
        v = self.v_conv1d(self.v_proj(x)).view(b, t, self.num_heads, self.head_v_dim)
        if self.use_beta:
            beta = self.b_proj(x).sigmoid()
        else:
            beta = torch.ones(b, t, self.num_heads, dtype=x.dtype)
        if self.allow_neg_eigval:
            beta = beta * 2.
        o, s = naive_delta_rule(l2norm(q).transpose(1, 2), l2norm(k).transpose(1, 2),
                                v.transpose(1, 2), beta.transpose(1, 2), self.head_k_dim ** -0.5)
        o = o.transpose(1, 2)
        if self.use_gate:
            o = self.o_norm(o, self.g_proj(x).view(b, t, self.num_heads, self.head_v_dim))
        else:
            o = self.o_norm(o)
        return self.o_proj(o.reshape(b, t, self.value_dim)), s


def naive_recurrent_gla(q, k, v, gk, scale):
    """naive.py's naive_recurrent_gla. q, k, gk [B, H, T, K], v [B, H, T, V] -> o [B, H, T, V]
    and the final h [B, H, K, V]."""
    b, h_count, t_count, k_dim = q.shape
    o = torch.zeros_like(v)
    h = torch.zeros(b, h_count, k_dim, v.shape[-1], dtype=v.dtype)
    for i in range(t_count):
        q_i = q[:, :, i] * scale
        kv_i = k[:, :, i][..., None] * v[:, :, i][..., None, :]
        h = h * gk[:, :, i].exp()[..., None] + kv_i
        o[:, :, i] = (q_i[..., None] * h).sum(-2)
    return o, h


class GatedLinearAttention(nn.Module):
    """fla/layers/gla.py's layer as GLABlock builds it (gate_logit_normalizer 16,
    gate_low_rank_dim 16, conv_bias false, gate_fn = hidden_act)."""

    def __init__(self, config):
        super().__init__()
        d = get(config, "hidden_size")
        self.num_heads = get(config, "num_heads")
        self.key_dim = int(d * get(config, "expand_k"))
        self.value_dim = int(d * get(config, "expand_v"))
        self.head_k_dim = self.key_dim // self.num_heads
        self.head_v_dim = self.value_dim // self.num_heads
        self.use_short_conv = get(config, "use_short_conv")
        self.use_output_gate = get(config, "use_output_gate")
        self.clamp_min = get(config, "clamp_min")
        self.gate_fn = {"swish": F.silu, "silu": F.silu}[get(config, "hidden_act")]
        conv_size = get(config, "conv_size")
        eps = get(config, "norm_eps")
        self.q_proj = nn.Linear(d, self.key_dim, bias=False)
        self.k_proj = nn.Linear(d, self.key_dim, bias=False)
        self.v_proj = nn.Linear(d, self.value_dim, bias=False)
        if self.use_output_gate:
            self.g_proj = nn.Linear(d, self.value_dim, bias=False)
        if self.use_short_conv:
            self.q_conv1d = ShortConvolution(self.key_dim, conv_size, False)
            self.k_conv1d = ShortConvolution(self.key_dim, conv_size, False)
            self.v_conv1d = ShortConvolution(self.value_dim, conv_size, False)
        self.gk_proj = nn.Sequential(nn.Linear(d, 16, bias=False),
                                     nn.Linear(16, self.key_dim, bias=True))
        self.o_proj = nn.Linear(self.value_dim, d, bias=False)
        self.fuse_norm_and_gate = (get(config, "hidden_act") == "swish" and get(config, "fuse_norm")
                                   and self.use_output_gate)
        norm = FusedRMSNormGated if self.fuse_norm_and_gate else RMSNorm
        if self.fuse_norm_and_gate:
            self.g_norm_swish_gate = norm(self.head_v_dim, eps)
        else:
            self.g_norm = norm(self.head_v_dim, eps)
        if not get(config, "elementwise_affine"):  # fla's norms without a weight: ones
            for module in self.modules():
                if isinstance(module, RMSNorm):
                    del module.weight
                    module.register_buffer("weight", torch.ones(self.head_v_dim),
                                           persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.use_short_conv:
            q, k, v = self.q_conv1d(q), self.k_conv1d(k), self.v_conv1d(v)
        gk = self.gk_proj(x)

        def heads(u, width):
            return u.view(b, t, self.num_heads, width).transpose(1, 2)

        gk = F.logsigmoid(heads(gk, self.head_k_dim)) / 16
        if self.clamp_min is not None:
            gk = torch.clamp_min(gk, self.clamp_min)
        o, h = naive_recurrent_gla(heads(q, self.head_k_dim), heads(k, self.head_k_dim),
                                   heads(v, self.head_v_dim), gk, self.head_k_dim ** -0.5)
        o = o.transpose(1, 2)  # [B, T, H, V]
        if self.use_output_gate:
            g = self.g_proj(x)
            if self.fuse_norm_and_gate:
                o = self.g_norm_swish_gate(o, g.view(b, t, self.num_heads, self.head_v_dim))
                o = o.reshape(b, t, self.value_dim)
            else:
                o = self.g_norm(o).reshape(b, t, self.value_dim) * self.gate_fn(g)
        else:
            o = self.g_norm(o).reshape(b, t, self.value_dim)
        return self.o_proj(o), h.transpose(-1, -2)


def rotary(x, base):
    """fla's RotaryEmbedding on x [B, T, H, D] from position 0 (rotary_embedding_ref, not
    interleaved): x · [cos, cos] + rotate_half(x) · [sin, sin] with angles t · inv_freq,
    inv_freq = 1 / base^(arange(0, D, 2) / D)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=x.dtype) / d))
    freqs = torch.outer(torch.arange(x.shape[1], dtype=x.dtype), inv_freq)  # [T, D/2]
    cos = torch.cat([freqs.cos(), freqs.cos()], -1)[None, :, None, :]
    sin = torch.cat([freqs.sin(), freqs.sin()], -1)[None, :, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


def naive_retention(q, k, v):
    """naive.py's naive_retention (the parallel form). q, k [B, H, T, K], v [B, H, T, V] ->
    o [B, H, T, V]."""
    _, n_heads, seq_len, d_head = q.shape
    s = (1 - q.new_tensor(2.).pow(-5. - q.new_tensor(range(n_heads)))).log2()
    n = q.new_tensor(range(seq_len))
    n = torch.exp2((n.unsqueeze(-1) - n) * s.view(-1, 1, 1)) * n.unsqueeze(-1).ge(n)
    s = torch.einsum('bhqd,bhkd,hqk->bhqk', q * d_head ** -0.5, k, n.to(q.dtype))
    return torch.einsum('bhqk,bhkd->bhqd', s, v)


class MultiScaleRetention(nn.Module):
    """fla/layers/multiscale_retention.py's layer as RetNetBlock builds it (gate_fn = hidden_act,
    no short convolutions, RotaryEmbedding(dim=head_k_dim) with its base 10000)."""

    def __init__(self, config):
        super().__init__()
        d = get(config, "hidden_size")
        self.num_heads = get(config, "num_heads")
        self.key_dim = int(d * get(config, "expand_k"))
        self.value_dim = int(d * get(config, "expand_v"))
        self.head_k_dim = self.key_dim // self.num_heads
        self.head_v_dim = self.value_dim // self.num_heads
        self.use_output_gate = get(config, "use_output_gate")
        self.gate_fn = {"swish": F.silu, "silu": F.silu}[get(config, "hidden_act")]
        eps = get(config, "norm_eps")
        self.q_proj = nn.Linear(d, self.key_dim, bias=False)
        self.k_proj = nn.Linear(d, self.key_dim, bias=False)
        self.v_proj = nn.Linear(d, self.value_dim, bias=False)
        if self.use_output_gate:
            self.g_proj = nn.Linear(d, self.value_dim, bias=False)
        self.o_proj = nn.Linear(self.value_dim, d, bias=False)
        self.fuse_norm_and_gate = (get(config, "hidden_act") == "swish" and get(config, "fuse_norm")
                                   and self.use_output_gate)
        if self.fuse_norm_and_gate:
            self.g_norm_swish_gate = FusedRMSNormGated(self.head_v_dim, eps)
        else:
            self.g_norm = RMSNorm(self.head_v_dim, eps)
        if not get(config, "elementwise_affine"):  # fla's norms without a weight: ones
            for module in self.modules():
                if isinstance(module, RMSNorm):
                    del module.weight
                    module.register_buffer("weight", torch.ones(self.head_v_dim),
                                           persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_k_dim)
        k = self.k_proj(x).view(b, t, self.num_heads, self.head_k_dim)
        q, k = rotary(q, 10000.0), rotary(k, 10000.0)
        v = self.v_proj(x).view(b, t, self.num_heads, self.head_v_dim)
        q, k, v = (u.transpose(1, 2) for u in (q, k, v))
        o = naive_retention(q, k, v).transpose(1, 2)  # [B, T, H, V]
        # The final recurrent state chunk_retention returns: Σ_s γ^(T−1−s) k_s v_sᵀ (k turned).
        gamma = 1 - 2.0 ** (-5.0 - torch.arange(self.num_heads, dtype=x.dtype))
        weight = gamma[:, None] ** torch.arange(t - 1, -1, -1, dtype=x.dtype)  # [H, T]
        h = torch.einsum("bhtk,bhtv,ht->bhkv", k, v, weight)
        if self.use_output_gate:
            g = self.g_proj(x)
            if self.fuse_norm_and_gate:
                o = self.g_norm_swish_gate(o, g.view(b, t, self.num_heads, self.head_v_dim))
                o = o.reshape(b, t, self.value_dim)
            else:
                o = self.g_norm(o).reshape(b, t, self.value_dim) * self.gate_fn(g)
        else:
            o = self.g_norm(o).reshape(b, t, self.value_dim)
        return self.o_proj(o), h


# The layer class of each model_type.
LAYERS = {"gated_deltanet": GatedDeltaNet, "delta_net": DeltaNet, "gla": GatedLinearAttention,
          "retnet": MultiScaleRetention}


class GatedMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = get(config, "hidden_size")
        inner = get(config, "intermediate_size")
        if inner is None:
            inner = int(d * (get(config, "hidden_ratio") or 4) * 2 / 3)
            inner = 256 * ((inner + 256 - 1) // 256)
        self.gate_proj = nn.Linear(d, inner, bias=False)
        self.up_proj = nn.Linear(d, inner, bias=False)
        self.down_proj = nn.Linear(inner, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """fla's block of these families (GatedDeltaNetBlock, DeltaNetBlock, GLABlock, RetNetBlock):
    pre-norm attn and mlp."""

    def __init__(self, config):
        super().__init__()
        eps = get(config, "norm_eps")
        self.attn_norm = RMSNorm(get(config, "hidden_size"), eps)
        self.attn = LAYERS[config.get("model_type", "gated_deltanet")](config)
        self.mlp_norm = RMSNorm(get(config, "hidden_size"), eps)
        self.mlp = GatedMLP(config)

    def forward(self, x):
        o, h = self.attn(self.attn_norm(x))
        x = x + o
        return x + self.mlp(self.mlp_norm(x)), h


class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = nn.Embedding(get(config, "vocab_size"), get(config, "hidden_size"))
        self.layers = nn.ModuleList(
            Block(config) for _ in range(get(config, "num_hidden_layers")))
        self.norm = RMSNorm(get(config, "hidden_size"), get(config, "norm_eps"))


class ForCausalLM(nn.Module):
    """GatedDeltaNetForCausalLM, DeltaNetForCausalLM, GLAForCausalLM or RetNetForCausalLM, as
    config["model_type"] says."""

    def __init__(self, config):
        super().__init__()
        self.model = Backbone(config)
        self.lm_head = nn.Linear(get(config, "hidden_size"), get(config, "vocab_size"),
                                 bias=False)
        if get(config, "tie_word_embeddings"):
            self.lm_head.weight = self.model.embeddings.weight

    def forward(self, input_ids):
        """input_ids [B, T] -> logits [B, T, V] and each layer's final recurrent state as the
        layer's kernel keeps it (module docstring)."""
        x = self.model.embeddings(input_ids)
        states = []
        for layer in self.model.layers:
            x, h = layer(x)
            states.append(h)
        return self.lm_head(self.model.norm(x)), states


def segment_sum(x):
    """fla/layers/mamba2.py's segment_sum: x [..., T] -> [..., T, T], Σ_{j<k≤i} x_k below the
    diagonal, −inf above it."""
    t = x.size(-1)
    x = x[..., None].expand(*x.size(), t)
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool), diagonal=-1)
    x = x.masked_fill(~mask, 0)
    out = torch.cumsum(x, dim=-2)
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool), diagonal=0)
    return out.masked_fill(~mask, -torch.inf)


def rms_norm_gated(x, weight, z, eps, group_size, norm_before_gate):
    """fla/modules/layernorm_gated.py's rms_norm_ref (no bias)."""
    if not norm_before_gate:
        x = x * F.silu(z)
    g = x.reshape(*x.shape[:-1], -1, group_size)
    rstd = 1 / torch.sqrt(g.square().mean(dim=-1, keepdim=True) + eps)
    out = (g * rstd).reshape(x.shape) * weight
    if norm_before_gate:
        out = out * F.silu(z)
    return out


class Mamba2(nn.Module):
    """fla/layers/mamba2.py's Mamba2 as Mamba2Block builds it, computing its torch_forward
    prefill path (the naive SSD by chunks of chunk_size, what fla runs without its CUDA kernels)
    in the model's dtype where that path upcasts to float32, and with B and C of head h from group
    h // (num_heads / n_groups), as its decode path and mamba_ssm's kernels read them: its naive
    prefill tiles them with repeat (group h % n_groups), which disagrees with both when there are
    several groups of several heads."""

    def __init__(self, config):
        super().__init__()
        d = get(config, "hidden_size")
        self.head_dim = get(config, "head_dim")
        self.intermediate_size = int(get(config, "expand") * d)
        self.num_heads = self.intermediate_size // self.head_dim
        self.n_groups = get(config, "n_groups")
        self.ssm_state_size = get(config, "state_size")
        self.chunk_size = get(config, "chunk_size")
        self.dt_limit = tuple(get(config, "dt_limit"))
        self.D_has_hdim = get(config, "D_has_hdim")
        self.rmsnorm = get(config, "rmsnorm")
        self.norm_before_gate = get(config, "norm_before_gate")
        self.norm_eps = get(config, "norm_eps")
        self.conv_dim = self.intermediate_size + 2 * self.n_groups * self.ssm_state_size
        k = get(config, "conv_kernel")
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, k, groups=self.conv_dim,
                                padding=k - 1, bias=get(config, "use_conv_bias"))
        self.in_proj = nn.Linear(d, self.intermediate_size + self.conv_dim + self.num_heads,
                                 bias=get(config, "use_bias"))
        self.dt_bias = nn.Parameter(torch.zeros(self.num_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_heads))
        if self.rmsnorm:
            self.norm = RMSNorm(self.intermediate_size, self.norm_eps)
        self.D = nn.Parameter(torch.ones(self.intermediate_size if self.D_has_hdim
                                         else self.num_heads))
        self.out_proj = nn.Linear(self.intermediate_size, d, bias=get(config, "use_bias"))

    def forward(self, x):
        b, t, _ = x.shape
        h, p, n, cs = self.num_heads, self.head_dim, self.ssm_state_size, self.chunk_size
        gate, xbc, dt = self.in_proj(x).split(
            [self.intermediate_size, self.conv_dim, self.num_heads], dim=-1)
        xbc = F.silu(self.conv1d(xbc.transpose(1, 2))[..., :t].transpose(1, 2))
        hs, B, C = torch.split(xbc, [self.intermediate_size, self.n_groups * n,
                                     self.n_groups * n], dim=-1)
        A = -torch.exp(self.A_log)
        dt = torch.clamp(F.softplus(dt + self.dt_bias), self.dt_limit[0], self.dt_limit[1])
        hs = hs.reshape(b, t, -1, p)
        B = B.reshape(b, t, -1, n).repeat_interleave(h // self.n_groups, dim=2)
        C = C.reshape(b, t, -1, n).repeat_interleave(h // self.n_groups, dim=2)
        pad = (cs - t % cs) % cs
        D = self.D.view(h, p) if self.D_has_hdim else self.D[:, None].expand(-1, p)

        def padded(u):  # [b, t, ...] -> [b, t + pad, ...]
            return torch.cat([u, u.new_zeros(b, pad, *u.shape[2:])], dim=1)

        def chunks(u):
            u = padded(u)
            return u.reshape(b, -1, cs, *u.shape[2:])

        D_residual = D * padded(hs)
        hs = hs * dt[..., None]
        A = A.to(hs.dtype) * dt
        hs, A, B, C = (chunks(u) for u in (hs, A, B, C))
        A = A.permute(0, 3, 1, 2)
        A_cumsum = torch.cumsum(A, dim=-1)
        L = torch.exp(segment_sum(A))
        G = (C[:, :, :, None, :, :] * B[:, :, None, :, :, :]).sum(dim=-1)
        M = (G[..., None] * L.permute(0, 2, 3, 4, 1)[..., None]).sum(dim=-1)
        Y_diag = (M[..., None] * hs[:, :, None]).sum(dim=3)
        decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
        B_decay = B * decay_states.permute(0, -2, -1, 1)[..., None]
        states = (B_decay[..., None, :] * hs[..., None]).sum(dim=2)
        states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
        decay_chunk = torch.exp(segment_sum(F.pad(A_cumsum[:, :, :, -1], (1, 0))))
        decay_chunk = decay_chunk.transpose(1, 3)
        new_states = (decay_chunk[..., None, None] * states[:, :, None, ...]).sum(dim=1)
        states, ssm_state = new_states[:, :-1], new_states[:, -1]
        state_decay_out = torch.exp(A_cumsum)
        C_times_states = C[..., None, :] * states[:, :, None, ...]
        Y_off = C_times_states.sum(-1) * state_decay_out.permute(0, 2, 3, 1)[..., None]
        y = (Y_diag + Y_off).reshape(b, -1, h, p) + D_residual
        y = y[:, :t].reshape(b, t, -1)
        if self.rmsnorm:
            y = rms_norm_gated(y, self.norm.weight, gate, self.norm_eps,
                               self.intermediate_size // self.n_groups, self.norm_before_gate)
        else:
            y = y * F.silu(gate)
        return self.out_proj(y), ssm_state  # the state [B, H, head_dim, state_size]


class Mamba2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm = RMSNorm(get(config, "hidden_size"), get(config, "norm_eps"))
        self.mixer = Mamba2(config)

    def forward(self, x):
        o, h = self.mixer(self.norm(x))
        return x + o, h


class Mamba2Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = nn.Embedding(get(config, "vocab_size"), get(config, "hidden_size"))
        self.layers = nn.ModuleList(
            Mamba2Block(config) for _ in range(get(config, "num_hidden_layers")))
        self.norm_f = RMSNorm(get(config, "hidden_size"), get(config, "norm_eps"))


class Mamba2ForCausalLM(nn.Module):
    """fla's Mamba2ForCausalLM: backbone.embeddings, backbone.layers.{i}.norm and .mixer,
    backbone.norm_f, lm_head."""

    def __init__(self, config):
        super().__init__()
        self.backbone = Mamba2Backbone(config)
        self.lm_head = nn.Linear(get(config, "hidden_size"), get(config, "vocab_size"),
                                 bias=False)
        if get(config, "tie_word_embeddings"):
            self.lm_head.weight = self.backbone.embeddings.weight

    def forward(self, input_ids):
        x = self.backbone.embeddings(input_ids)
        states = []
        for layer in self.backbone.layers:
            x, h = layer(x)
            states.append(h)
        return self.lm_head(self.backbone.norm_f(x)), states


def randomise(model, gen):
    """Weights far from their initial values, at a stable scale: norms 1 + N(0, 0.2²), A_log and
    dt_bias N(0, 0.5²), the embedding N(0, 1), every other matrix N(0, 1/fan_in) (a convolution's
    fan-in is its taps)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif name.endswith(("A_log", "dt_bias")):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif name == "model.embeddings.weight":
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64)
                        / p.shape[-1] ** 0.5)


def make_checkpoint(directory, config, seed, weights="model.safetensors", dtype=torch.float32):
    """Writes config.json and the weights of a random model of `config` (fla's state_dict keys,
    stored in `dtype`); returns the model in float64 with exactly the stored weights."""
    from linserve_ref import safetensors_io

    os.makedirs(directory, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        model = (Mamba2ForCausalLM if config.get("model_type") == "mamba2"
                 else ForCausalLM)(config).double()
    randomise(model, torch.Generator().manual_seed(seed))
    state = {k: v.to(dtype).contiguous() for k, v in model.state_dict().items()}
    if get(config, "tie_word_embeddings"):
        del state["lm_head.weight"]
    if config.get("model_type") == "mamba2":  # fla writes its dt_limit's inf as a bare Infinity
        config = {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    if weights == "model.safetensors":
        safetensors_io.save_file(state, os.path.join(directory, weights))
    else:
        torch.save(state, os.path.join(directory, weights))
    model.load_state_dict({k: v.double() for k, v in state.items()}, strict=False)
    return model


def greedy(model, ids, steps):
    """(the `steps` tokens fla's `model` picks greedily after `ids`, one forward of the whole
    sequence per token as fla's generate does without a cache; the smallest gap between a step's
    two best logits relative to its largest magnitude: a gap far above fp32 rounding means no pick
    is a tie that another backend's rounding could flip)."""
    tokens, gaps = [], []
    sequence = torch.tensor([list(ids)])
    with torch.no_grad():
        for _ in range(steps):
            logits = model(sequence)[0][0, -1]
            top = torch.topk(logits, 2).values
            gaps.append((top[0] - top[1]).item() / logits.abs().max().item())
            tokens.append(int(logits.argmax()))
            sequence = torch.cat([sequence, torch.tensor([[tokens[-1]]])], dim=1)
    return tokens, min(gaps)
