#!/usr/bin/env python3
"""Imports a model built with idiap/fast-transformers (the paper authors' library) into our format.

Accepted: the state dict of a TransformerEncoder or RecurrentTransformerEncoder whose layers use
"linear" or "causal-linear" attention (their post-norm TransformerEncoderLayer and
AttentionLayer / RecurrentAttentionLayer, their key names), plus a token embedding and an output
head, all in one state dict (as torch.save(model.state_dict()) writes for a module holding them).
Per layer i, under the encoder's prefix:

    layers.{i}.attention.{query,key,value,out}_projection -> layers.{i}.attn.{q,k,v,o}_proj
    layers.{i}.linear1 / linear2                          -> layers.{i}.ffn.fc1 / fc2
    layers.{i}.norm1 / norm2                              -> layers.{i}.ln1 / ln2
    layers.{i}.attention.inner_attention.feature_map.omega -> layers.{i}.attn.favor_projection
(weights and biases alike; omega only for Favor)

Their layer computes x = norm1(x + Attn(x)); y = norm2(x + linear2(act(linear1(x)))), which is our
"post" norm placement. Their attention is causal in RecurrentLinearAttention (registered as both
"linear" and "causal-linear") and CausalLinearAttention; a non-causal "linear" TransformerEncoder
has the same weights, and after conversion it runs causally, as their recurrent encoder does.

Feature maps: elu_feature_map (their default) -> elu_plus_one; an ActivationFunctionFeatureMap of
relu -> relu; Favor(stabilize=False) -> favor_plus. Favor computes, with x' = x·sqrt(softmax_temp)
and omega [Dh, m/2], φ(x) = [exp(omegaᵀx' − |x'|²/2), exp(−omegaᵀx' − |x'|²/2)] / sqrt(m); that is
our favor_plus with W = [omegaᵀ; −omegaᵀ] applied to x', so sqrt(softmax_temp) is folded into the
query and key projections. (Favor draws a new omega on every non-recurrent forward and at the start
of every recurrent sequence; the converted model keeps the omega stored in the state dict.)
Favor(stabilize=True) only rescales φ by a per-sequence constant, which cancels in the ratio except
against eps. RandomFourierFeatures (cos/sin, not positive) has no counterpart and is not offered.

Not representable, and rejected with the key named: a final normalisation layer (the builders'
final_normalization=True adds `norm.weight`; build with final_normalization=False or use the bare
TransformerEncoder, whose norm_layer defaults to None), different query and value dimensions, an
output head with a non-zero bias.
"""

import argparse
import math
import os
import re
import sys

import torch

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from linserve_ref import export  # noqa: E402
from linserve_ref.config import normalize_config  # noqa: E402
from linserve_ref.model import LinearTransformer  # noqa: E402

FEATURE_MAPS = {"elu": "elu_plus_one", "relu": "relu", "favor": "favor_plus"}

_LAYER_KEYS = {
    "attention.query_projection": "attn.q_proj",
    "attention.key_projection": "attn.k_proj",
    "attention.value_projection": "attn.v_proj",
    "attention.out_projection": "attn.o_proj",
    "linear1": "ffn.fc1",
    "linear2": "ffn.fc2",
    "norm1": "ln1",
    "norm2": "ln2",
}
_OMEGA = "attention.inner_attention.feature_map.omega"


class ConversionError(ValueError):
    """The state dict does not have the layout this converter imports."""


def _get(state, key):
    if key not in state:
        raise ConversionError(f"state dict has no '{key}'")
    return state[key]


def _take(state, key, used):
    used.add(key)
    return _get(state, key).detach().to(torch.float64)


def convert(state, n_heads, *, encoder_prefix="encoder.", embedding_key="embedding.weight",
            head_key="head.weight", head_bias_key=None, position="none",
            position_key=None, feature_map="elu", favor_softmax_temp=None, activation="relu",
            attention_eps=1e-6, layer_norm_eps=1e-5, tokenizer="byte", bos_token_id=-1,
            eos_token_id=-1):
    """Returns our LinearTransformer (float64) holding the weights of `state`.

    state: the whole state dict. The encoder's keys start with encoder_prefix; embedding_key is
    the token embedding [V, d]; head_key the output projection [V, d] (None: tied to the
    embedding), head_bias_key its bias, which must be zero. position: "none", "sinusoidal" (our
    formula, docs/architecture.md §4) or "learned" (position_key: the table [P, d]). feature_map,
    favor_softmax_temp (Favor's default 1/sqrt(Dh) when None), activation ("relu" | "gelu", their
    TransformerEncoderLayer's options) and the eps values are what the original model was built
    with. Every key of `state` must be used.
    """
    if feature_map not in FEATURE_MAPS:
        raise ConversionError(f"feature_map {feature_map!r} is not one of {list(FEATURE_MAPS)}")
    if activation not in ("relu", "gelu"):
        raise ConversionError(f"activation {activation!r} is not 'relu' or 'gelu'")
    used = set()
    layer_re = re.compile(re.escape(encoder_prefix) + r"layers\.(\d+)\.")
    indices = {int(m.group(1)) for k in state for m in [layer_re.match(k)] if m}
    n_layers = len(indices)
    if n_layers == 0 or indices != set(range(n_layers)):
        raise ConversionError(f"no layers 0..N-1 under '{encoder_prefix}layers.' "
                              f"(found {sorted(indices)})")
    if encoder_prefix + "norm.weight" in state:
        raise ConversionError(
            f"'{encoder_prefix}norm.weight': a final normalisation after post-norm layers has no "
            f"counterpart in our format (build the encoder with final_normalization=False)")
    embedding = _take(state, embedding_key, used)
    vocab, d_model = embedding.shape
    if d_model % n_heads:
        raise ConversionError(f"d_model {d_model} is not a multiple of n_heads {n_heads}")
    q_rows = _get(state, f"{encoder_prefix}layers.0.attention.query_projection.weight").shape[0]
    v_rows = _get(state, f"{encoder_prefix}layers.0.attention.value_projection.weight").shape[0]
    if q_rows != v_rows:
        raise ConversionError(f"query dimensions ({q_rows // n_heads}) differ from value "
                              f"dimensions ({v_rows // n_heads}); our heads have one head_dim")
    head_dim = q_rows // n_heads
    d_ff = _get(state, f"{encoder_prefix}layers.0.linear1.weight").shape[0]
    feature_dim = head_dim
    if feature_map == "favor":
        omega = _get(state, f"{encoder_prefix}layers.0.{_OMEGA}")
        if omega.shape[0] != head_dim:
            raise ConversionError(f"'{encoder_prefix}layers.0.{_OMEGA}' has {omega.shape[0]} "
                                  f"rows; the query dimensions are {head_dim}")
        feature_dim = 2 * omega.shape[1]
    max_position = 0
    if position == "learned":
        if position_key is None:
            raise ConversionError("position 'learned' needs position_key")
        max_position = _get(state, position_key).shape[0]
    cfg = normalize_config(dict(
        vocab_size=vocab, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        head_dim=head_dim, d_ff=d_ff, feature_dim=feature_dim, norm="post",
        activation=activation, feature_map=FEATURE_MAPS[feature_map], position=position,
        max_position=max_position, bias=True, tie_embeddings=head_key is None,
        attention_eps=attention_eps, layer_norm_eps=layer_norm_eps, tokenizer=tokenizer,
        bos_token_id=bos_token_id, eos_token_id=eos_token_id))

    out = {"embed.weight": embedding}
    if position == "learned":
        out["pos_embed.weight"] = _take(state, position_key, used)
    if head_key is not None:
        out["lm_head.weight"] = _take(state, head_key, used)
    if head_bias_key is not None:
        bias = _take(state, head_bias_key, used)
        if bias.abs().max() != 0:
            raise ConversionError(f"'{head_bias_key}': our output head has no bias, and this "
                                  f"one is not zero")
    scale = 1.0
    if feature_map == "favor":
        temp = 1.0 / math.sqrt(head_dim) if favor_softmax_temp is None else favor_softmax_temp
        scale = math.sqrt(temp)
    for i in range(n_layers):
        theirs = f"{encoder_prefix}layers.{i}."
        for their_name, our_name in _LAYER_KEYS.items():
            for suffix in ("weight", "bias"):
                t = _take(state, f"{theirs}{their_name}.{suffix}", used)
                if our_name in ("attn.q_proj", "attn.k_proj"):
                    t = t * scale
                out[f"layers.{i}.{our_name}.{suffix}"] = t
        if feature_map == "favor":
            omega = _take(state, theirs + _OMEGA, used)
            out[f"layers.{i}.attn.favor_projection"] = torch.cat([omega.t(), -omega.t()], dim=0)
    unused = sorted(set(state) - used)
    if unused:
        raise ConversionError(f"state dict keys not understood: {unused}")

    with torch.random.fork_rng(devices=[]):
        model = LinearTransformer(cfg).double()
    expected = model.state_dict()
    for name, t in out.items():
        if tuple(t.shape) != tuple(expected[name].shape):
            raise ConversionError(f"'{name}' would have shape {list(t.shape)}; the config "
                                  f"implies {list(expected[name].shape)}")
    model.load_state_dict(out)
    return model


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="torch.save()d state dict")
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--n-heads", type=int, required=True)
    p.add_argument("--encoder-prefix", default="encoder.")
    p.add_argument("--embedding-key", default="embedding.weight")
    p.add_argument("--head-key", default="head.weight", help="'' for a head tied to the embedding")
    p.add_argument("--head-bias-key", default=None)
    p.add_argument("--position", default="none", choices=("none", "sinusoidal", "learned"))
    p.add_argument("--position-key", default=None)
    p.add_argument("--feature-map", default="elu", choices=tuple(FEATURE_MAPS))
    p.add_argument("--favor-softmax-temp", type=float, default=None)
    p.add_argument("--activation", default="relu", choices=("relu", "gelu"))
    p.add_argument("--attention-eps", type=float, default=1e-6)
    p.add_argument("--layer-norm-eps", type=float, default=1e-5)
    p.add_argument("--tokenizer-model", default=None,
                   help="SentencePiece model of the original; default: byte tokenizer")
    p.add_argument("--bos-token-id", type=int, default=-1)
    p.add_argument("--eos-token-id", type=int, default=-1)
    p.add_argument("--dtype", default="float32", choices=tuple(export.WEIGHT_DTYPES))
    args = p.parse_args(argv)
    state = torch.load(args.checkpoint, map_location="cpu")
    try:
        model = convert(
            state, args.n_heads, encoder_prefix=args.encoder_prefix,
            embedding_key=args.embedding_key, head_key=args.head_key or None,
            head_bias_key=args.head_bias_key, position=args.position,
            position_key=args.position_key, feature_map=args.feature_map,
            favor_softmax_temp=args.favor_softmax_temp, activation=args.activation,
            attention_eps=args.attention_eps, layer_norm_eps=args.layer_norm_eps,
            tokenizer="sentencepiece" if args.tokenizer_model else "byte",
            bos_token_id=args.bos_token_id, eos_token_id=args.eos_token_id)
    except ValueError as e:
        raise SystemExit(f"{args.checkpoint}: {e}") from None
    export.save_model_dir(model, args.out, dtype=args.dtype, tokenizer_model=args.tokenizer_model)
    print(f"wrote {args.out}: {model.num_parameters():,} parameters")


if __name__ == "__main__":
    main()
