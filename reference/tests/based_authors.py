"""An independent transcription of the Based authors' model (HazyResearch/based:
based/models/gpt.py, block.py, mlp.py, mixers/{convolution,linear_attention,slide_attention}.py)
in plain PyTorch and in THEIR layout: module names and shapes are those of their state_dict
(transformer.layers.{i}.mixer.Wqkv, ...), built from their config.json the way their
create_mixer_cls / create_mlp_cls / create_block do. Only their parallel forward, the one that
defines the model: the quadratic LinearAttention, BaseConv through nn.Conv1d(padding=K−1)
truncated to the sequence, SlidingAttention as flash-attn computes it (causal, window_size =
(w // 2, 0): query i sees keys i − w//2 … i) written as a dense mask, with flash-attn's
non-interleaved rotary embedding, and GatedMlp's `y, gate = fc1(x).chunk(2)`.

`make_checkpoint` writes a random checkpoint of this model (config.json + pytorch_model.bin or
model.safetensors), the input of convert_based.py's tests.
"""

import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

CONV = "based.models.mixers.convolution.BaseConv"
LINEAR_ATTENTION = "based.models.mixers.linear_attention.LinearAttention"
TAYLOR = "based.models.mixers.linear_attention.TaylorExp"
SLIDING = "based.models.mixers.slide_attention.SlidingAttention"


def small_config(**overrides):
    """hazyresearch/based-360m's config.json scaled down: d 64, 6 layers (Taylor linear attention
    at 1 and 4, sliding window at 2 and 5, BaseConv elsewhere), vocab 300 padded to 304."""
    config = {
        "_name_or_path": "based-small", "model_type": "gpt2", "architectures": ["GPTLMHeadModel"],
        "n_embd": 64, "n_layer": 6, "n_head": 4, "n_inner": 128, "vocab_size": 300,
        "pad_vocab_size_multiple": 8, "layer_norm_epsilon": 1e-5, "rms_norm": True,
        "activation_function": "swiglu", "mlp_fc1_bias": False, "mlp_fc2_bias": False,
        "qkv_proj_bias": False, "out_proj_bias": False, "rotary_emb_fraction": 1,
        "max_position_embeddings": 0, "n_positions": 2048, "tie_word_embeddings": True,
        "scale_attn_by_inverse_layer_idx": False, "fused_mlp": False, "fused_bias_fc": True,
        "fused_dropout_add_ln": True, "residual_in_fp32": True, "special_initializer": True,
        "use_flash_attn": True, "attn_pdrop": 0, "embd_pdrop": 0, "resid_pdrop": 0,
        "reorder_and_upcast_attn": False, "bos_token_id": 50256, "eos_token_id": 50256,
        "alt_mixer_layers": [1, 4], "alt_mixer_2_layers": [2, 5],
        "mixer": {"_target_": CONV, "l_max": 2048, "use_bias": True, "expand_proj": 4,
                  "kernel_sizes": 3},
        "alt_mixer": {"_target_": LINEAR_ATTENTION, "l_max": 2048,
                      "feature_map": {"_target_": TAYLOR, "input_dim": 16},
                      "feature_dim": 16, "num_heads": 4, "parallel_implementation": "quadratic"},
        "alt_mixer_2": {"_target_": SLIDING, "window_size": 12, "num_heads": 4, "causal": True},
    }
    config.update(overrides)
    return config


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class ShortConvolution(nn.Module):
    def __init__(self, d, kernel_size, conv_bias):
        super().__init__()
        self.conv = nn.Conv1d(d, d, kernel_size, groups=d, padding=kernel_size - 1,
                              bias=conv_bias)

    def forward(self, x):
        return self.conv(x.transpose(1, 2))[..., :x.shape[1]].transpose(1, 2)


class BaseConv(nn.Module):
    def __init__(self, d, kernel_size=3, use_bias=True, expand_proj=2, use_cuda=False, **_):
        super().__init__()
        self.d_inner = expand_proj * d // 2
        self.in_proj = nn.Linear(d, expand_proj * d, bias=use_bias)
        self.out_proj = nn.Linear(self.d_inner, d, bias=use_bias)
        # ShortConvolution forces conv_bias when the CUDA kernel is used.
        self.conv = ShortConvolution(self.d_inner, kernel_size, conv_bias=use_cuda)

    def forward(self, u):
        u1, u2 = torch.split(self.in_proj(u), self.d_inner, dim=-1)
        return self.out_proj(F.silu(self.conv(u1)) * u2)


def taylor_exp(x):
    """TaylorExp.forward."""
    d = x.shape[-1]
    x2 = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(start_dim=-2) / math.sqrt(2)
    return torch.cat([x[..., :1] ** 0, x / math.sqrt(math.sqrt(d)), x2 / math.sqrt(d)], dim=-1)


class LinearAttention(nn.Module):
    def __init__(self, d, feature_dim=16, head_dim=None, num_heads=16, eps=1e-12, **_):
        super().__init__()
        self.num_heads, self.feature_dim, self.eps = num_heads, feature_dim, eps
        self.head_dim = d // num_heads if head_dim is None else head_dim
        self.proj_q = nn.Linear(d, feature_dim * num_heads, bias=False)
        self.proj_k = nn.Linear(d, feature_dim * num_heads, bias=False)
        self.proj_v = nn.Linear(d, num_heads * self.head_dim, bias=False)
        self.out_proj = nn.Linear(num_heads * self.head_dim, d, bias=False)

    def forward(self, x):
        b, l, _ = x.shape
        q = self.proj_q(x).view(b, l, self.num_heads, self.feature_dim).transpose(1, 2)
        k = self.proj_k(x).view(b, l, self.num_heads, self.feature_dim).transpose(1, 2)
        v = self.proj_v(x).view(b, l, self.num_heads, self.head_dim).transpose(1, 2)
        q, k = taylor_exp(q), taylor_exp(k)
        a = torch.tril(torch.einsum("bhnd,bhmd->bhnm", q, k))
        y = torch.einsum("bhnm,bhme->bhne", a, v)
        z = 1 / (torch.einsum("bhld,bhld->bhl", q, k.cumsum(2)) + self.eps)
        y = (y * z[..., None]).transpose(1, 2).reshape(b, l, -1)
        return self.out_proj(y)


class RotaryEmbedding(nn.Module):
    """flash_attn.layers.rotary.RotaryEmbedding, non-interleaved, no xPos."""

    def __init__(self, dim, base):
        super().__init__()
        self.dim = dim
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, x):
        """x [b, l, h, d]: rotate the first `dim` dims at positions 0 … l−1."""
        t = torch.arange(x.shape[1], dtype=torch.float64)
        freqs = torch.outer(t, self.inv_freq.to(torch.float64))
        cos, sin = torch.cos(freqs)[:, None].to(x.dtype), torch.sin(freqs)[:, None].to(x.dtype)
        x1, x2 = x[..., :self.dim // 2], x[..., self.dim // 2:self.dim]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, x[..., self.dim:]], dim=-1)


class SlidingAttention(nn.Module):
    def __init__(self, d, num_heads, qkv_proj_bias=True, out_proj_bias=True,
                 softmax_scale=None, rotary_emb_dim=0, rotary_emb_base=10000.0,
                 window_size=128, **_):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d // num_heads
        self.window = (window_size // 2, 0)
        self.softmax_scale = softmax_scale
        self.rotary_emb_dim = rotary_emb_dim
        if rotary_emb_dim > 0:
            self.rotary_emb = RotaryEmbedding(rotary_emb_dim, rotary_emb_base)
        self.Wqkv = nn.Linear(d, 3 * d, bias=qkv_proj_bias)
        self.out_proj = nn.Linear(d, d, bias=out_proj_bias)

    def forward(self, x):
        b, l, _ = x.shape
        qkv = self.Wqkv(x).view(b, l, 3, self.num_heads, self.head_dim)  # "(three h d)"
        q, k, v = qkv.unbind(dim=2)
        if self.rotary_emb_dim > 0:
            q, k = self.rotary_emb(q), self.rotary_emb(k)
        scale = self.softmax_scale if self.softmax_scale is not None else self.head_dim ** -0.5
        scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale
        i = torch.arange(l)[:, None]
        j = torch.arange(l)[None, :]
        visible = (j <= i + self.window[1]) & (j >= i - self.window[0])
        p = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        context = torch.einsum("bhij,bjhd->bihd", p, v).reshape(b, l, -1)
        return self.out_proj(context)


class GatedMlp(nn.Module):
    def __init__(self, d, hidden, activation, bias1, bias2, multiple_of=256):
        super().__init__()
        hidden = hidden if hidden is not None else int(8 * d / 3)
        hidden = (hidden + multiple_of - 1) // multiple_of * multiple_of
        self.activation = activation
        self.fc1 = nn.Linear(d, 2 * hidden, bias=bias1)
        self.fc2 = nn.Linear(hidden, d, bias=bias2)

    def forward(self, x):
        y, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(y * self.activation(gate))


class Block(nn.Module):
    def __init__(self, norm1, mixer, norm2, mlp):
        super().__init__()
        self.norm1, self.mixer, self.norm2, self.mlp = norm1, mixer, norm2, mlp

    def forward(self, x):
        h = x + self.mixer(self.norm1(x))
        return h + self.mlp(self.norm2(h))


def _mixer(config, i):
    d = config["n_embd"]
    if i in config.get("alt_mixer_2_layers", []):
        value = dict(config["alt_mixer_2"])
        head_dim = d // config["n_head"]
        value.update(num_heads=config["n_head"],
                     qkv_proj_bias=config.get("qkv_proj_bias", True),
                     out_proj_bias=config.get("out_proj_bias", True),
                     softmax_scale=head_dim ** -0.5,
                     rotary_emb_dim=int(config.get("rotary_emb_fraction", 0.0) * head_dim),
                     rotary_emb_base=config.get("rotary_emb_base", 10000.0))
        value.pop("causal", None)
        return SlidingAttention(d, **{k: v for k, v in value.items() if k != "_target_"})
    if i in config.get("alt_mixer_layers", []):
        value = config["alt_mixer"]
        return LinearAttention(d, **{k: v for k, v in value.items() if k != "_target_"})
    return BaseConv(d, **{k: v for k, v in config["mixer"].items() if k != "_target_"})


class AuthorsBased(nn.Module):
    """GPTLMHeadModel for the configurations above (pre-norm, RMSNorm, gated MLP)."""

    def __init__(self, config):
        super().__init__()
        d, eps = config["n_embd"], config.get("layer_norm_epsilon", 1e-5)
        multiple = config.get("pad_vocab_size_multiple", 1)
        vocab = math.ceil(config["vocab_size"] / multiple) * multiple
        activation = {"swiglu": F.silu, "glu": torch.sigmoid, "geglu": F.gelu}[
            config["activation_function"]]
        self.transformer = nn.Module()
        self.transformer.embeddings = nn.Module()
        self.transformer.embeddings.word_embeddings = nn.Embedding(vocab, d)
        def norm():
            return RMSNorm(d, eps) if config.get("rms_norm", False) else nn.LayerNorm(d, eps=eps)

        self.transformer.layers = nn.ModuleList(
            Block(norm(), _mixer(config, i), norm(),
                  GatedMlp(d, config.get("n_inner"), activation, config.get("mlp_fc1_bias", True),
                           config.get("mlp_fc2_bias", True)))
            for i in range(config["n_layer"]))
        self.transformer.ln_f = norm()
        self.lm_head = nn.Linear(d, vocab, bias=False)
        if config.get("tie_word_embeddings", True):
            self.lm_head.weight = self.transformer.embeddings.word_embeddings.weight

    def forward(self, ids):
        x = self.transformer.embeddings.word_embeddings(ids)
        for layer in self.transformer.layers:
            x = layer(x)
        return self.lm_head(self.transformer.ln_f(x))


def randomise(model, seed):
    """Every parameter random at a stable scale (norm weights around 1, biases small)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)
            if "norm" in name or name.startswith("transformer.ln_f"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif name.endswith("word_embeddings.weight"):
                p.copy_(noise)
            else:
                fan_in = p.shape[1] * (p.shape[2] if p.dim() == 3 else 1)
                p.copy_(noise / math.sqrt(fan_in))


def make_checkpoint(directory, config=None, seed=0, weights="pytorch_model.bin",
                    dtype=torch.float32, inv_freq=True, edit=None):
    """Writes config.json and `weights` (pytorch_model.bin or model.safetensors) of a random
    AuthorsBased; returns the model in float64. edit(state_dict) may change the saved tensors."""
    from linserve_ref import safetensors_io

    config = small_config() if config is None else config
    torch.manual_seed(seed)
    model = AuthorsBased(config).double()
    randomise(model, seed)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    state = {k: v.to(dtype).clone() for k, v in model.state_dict().items()}
    if not inv_freq:
        state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    if edit is not None:
        edit(state)
    if weights == "model.safetensors":
        safetensors_io.save_file(state, os.path.join(directory, weights))
    else:
        torch.save(state, os.path.join(directory, weights))
    return model
