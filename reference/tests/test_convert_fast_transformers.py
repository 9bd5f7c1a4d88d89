"""The fast-transformers converter: a state dict in their layout, with their key names, converts
to a model whose outputs are those of their encoder.

The classes below re-implement the layer math of idiap/fast-transformers from its source
(fast_transformers/transformers.py TransformerEncoderLayer, recurrent/transformers.py,
attention/attention_layer.py AttentionLayer, attention/causal_linear_attention.py,
recurrent/attention/self_attention/linear_attention.py, feature_maps/base.py elu_feature_map and
feature_maps/fourier_features.py Favor), with the same module names, so that state_dict() has
their keys. Dropout is omitted (evaluation mode).
"""

import contextlib
import io
import math
import os
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from linserve_ref import convert_fast_transformers as cft  # noqa: E402
from linserve_ref import export  # noqa: E402
from linserve_ref.model import sinusoidal_embedding  # noqa: E402


class EluFeatureMap(nn.Module):  # ActivationFunctionFeatureMap(elu(x) + 1)
    def forward(self, x):
        return F.elu(x) + 1


class ReluFeatureMap(nn.Module):  # ActivationFunctionFeatureMap(relu)
    def forward(self, x):
        return F.relu(x)


class Favor(nn.Module):
    def __init__(self, query_dimensions, n_dims, softmax_temp=None):
        super().__init__()
        self.n_dims = n_dims
        self.softmax_temp = 1 / math.sqrt(query_dimensions) if softmax_temp is None \
            else softmax_temp
        self.register_buffer("omega", torch.randn(query_dimensions, n_dims // 2))

    def forward(self, x):
        x = x * math.sqrt(self.softmax_temp)
        norm_x_squared = torch.einsum("...d,...d->...", x, x).unsqueeze(-1)
        u = x.unsqueeze(-2).matmul(self.omega).squeeze(-2)
        offset = norm_x_squared * 0.5 + 0.5 * math.log(self.n_dims)
        return torch.cat([torch.exp(u - offset), torch.exp(-u - offset)], dim=-1)


class CausalLinearAttention(nn.Module):
    """Their CausalLinearAttention (sequence) and RecurrentLinearAttention (step) in one."""

    def __init__(self, feature_map, eps=1e-6):
        super().__init__()
        self.feature_map = feature_map
        self.eps = eps

    def forward(self, queries, keys, values):  # [N, L, H, D]
        Q, K = self.feature_map(queries), self.feature_map(keys)
        Z = 1 / (torch.einsum("nlhi,nlhi->nlh", Q, K.cumsum(1)) + self.eps)
        L = Q.shape[1]
        A = torch.einsum("nlhd,nshd->nhls", Q, K) * torch.ones(L, L, dtype=Q.dtype).tril()
        V = torch.einsum("nhls,nshm->nlhm", A, values).contiguous()  # causal_dot_product
        return V * Z[:, :, :, None]

    def step(self, query, key, value, state):  # [N, H, D]
        Q, K = self.feature_map(query), self.feature_map(key)
        N, H, D = Q.shape
        M = value.shape[-1]
        Si, Zi = state if state is not None else (query.new_zeros((N, H, D, M)),
                                                  query.new_zeros((N, H, D)))
        Zi = Zi + K
        Si = Si + torch.einsum("nhd,nhm->nhdm", K, value)
        Z = 1. / (torch.einsum("nhd,nhd->nh", Q, Zi) + self.eps)
        return torch.einsum("nhd,nhdm,nh->nhm", Q, Si, Z), [Si, Zi]


class AttentionLayer(nn.Module):  # AttentionLayer / RecurrentAttentionLayer
    def __init__(self, attention, d_model, n_heads, d_keys, d_values):
        super().__init__()
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_values * n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)
        self.n_heads = n_heads

    def forward(self, x):
        N, L, _ = x.shape
        H = self.n_heads
        new_values = self.inner_attention(self.query_projection(x).view(N, L, H, -1),
                                          self.key_projection(x).view(N, L, H, -1),
                                          self.value_projection(x).view(N, L, H, -1))
        return self.out_projection(new_values.view(N, L, -1))

    def step(self, x, state):
        N, H = x.shape[0], self.n_heads
        new_value, state = self.inner_attention.step(
            self.query_projection(x).view(N, H, -1), self.key_projection(x).view(N, H, -1),
            self.value_projection(x).view(N, H, -1), state)
        return self.out_projection(new_value.view(N, -1)), state


class TransformerEncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff, activation):
        super().__init__()
        self.attention = attention
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.activation = F.relu if activation == "relu" else F.gelu

    def _ffn(self, x):
        y = x = self.norm1(x)
        y = self.activation(self.linear1(y))
        y = self.linear2(y)
        return self.norm2(x + y)

    def forward(self, x):
        return self._ffn(x + self.attention(x))

    def step(self, x, state):
        x2, state = self.attention.step(x, state)
        return self._ffn(x + x2), state


class TransformerEncoder(nn.Module):
    def __init__(self, layers, norm_layer=None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm_layer

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x if self.norm is None else self.norm(x)

    def step(self, x, state):
        state = state or [None] * len(self.layers)
        for i, layer in enumerate(self.layers):
            x, state[i] = layer.step(x, state[i])
        return (x if self.norm is None else self.norm(x)), state


class TheirLanguageModel(nn.Module):
    """An embedding, their encoder, an output head: what a user of their library writes."""

    def __init__(self, vocab=270, d_model=12, n_heads=3, n_layers=2, d_ff=20, feature="elu",
                 favor_dims=8, activation="relu", tied=False, position="none", head_bias=False,
                 d_values=None, final_norm=False, softmax_temp=None):
        super().__init__()
        dk = d_model // n_heads
        maps = {"elu": EluFeatureMap, "relu": ReluFeatureMap,
                "favor": lambda: Favor(dk, favor_dims, softmax_temp)}
        self.embedding = nn.Embedding(vocab, d_model)
        if position == "learned":
            self.positions = nn.Embedding(64, d_model)
        self.position = position
        self.encoder = TransformerEncoder(
            [TransformerEncoderLayer(
                AttentionLayer(CausalLinearAttention(maps[feature]()), d_model, n_heads, dk,
                               d_values or dk), d_model, d_ff, activation)
             for _ in range(n_layers)],
            nn.LayerNorm(d_model) if final_norm else None)
        self.tied = tied
        if not tied:
            self.head = nn.Linear(d_model, vocab, bias=head_bias)
        with torch.no_grad():
            for p in self.parameters():
                p.add_(0.2 * torch.randn_like(p))

    def _embed(self, ids, positions):
        x = self.embedding(ids)
        if self.position == "learned":
            x = x + self.positions(positions)
        elif self.position == "sinusoidal":  # the PyTorch tutorial's PositionalEncoding
            d = x.shape[-1]
            div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) *
                                 (-math.log(10000.0) / d))
            pe = torch.zeros(positions.shape + (d,), dtype=torch.float64)
            pe[..., 0::2] = torch.sin(positions.double()[..., None] * div_term)
            pe[..., 1::2] = torch.cos(positions.double()[..., None] * div_term)
            x = x + pe
        return x

    def _head(self, h):
        return h @ (self.embedding.weight if self.tied else self.head.weight).t() + (
            self.head.bias if not self.tied and self.head.bias is not None else 0)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1]).expand_as(ids)
        return self._head(self.encoder(self._embed(ids, positions)))

    def recurrent(self, ids):
        state, out = None, []
        for t in range(ids.shape[1]):
            h, state = self.encoder.step(self._embed(ids[:, t], torch.full_like(ids[:, t], t)),
                                         state)
            out.append(self._head(h))
        return torch.stack(out, dim=1)


def convert(theirs, **kwargs):
    kwargs.setdefault("n_heads", 3)
    if theirs.tied:
        kwargs.setdefault("head_key", None)
    return cft.convert(theirs.state_dict(), **kwargs)


class ConverterTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(7)
        self.ids = torch.randint(0, 270, (2, 23))

    def assert_same_outputs(self, theirs, ours):
        with torch.no_grad():
            expected = theirs(self.ids)
            torch.testing.assert_close(theirs.recurrent(self.ids), expected, rtol=1e-9, atol=1e-9)
            logits, _ = ours(self.ids, chunk_size=5)
            torch.testing.assert_close(logits, expected, rtol=1e-9, atol=1e-9)
            state = ours.init_state(2)
            for t in range(self.ids.shape[1]):
                step, state = ours.step(self.ids[:, t], state)
                torch.testing.assert_close(step, expected[:, t], rtol=1e-9, atol=1e-9)

    def test_elu_relu_untied(self):
        theirs = TheirLanguageModel().double()
        ours = convert(theirs)
        self.assertEqual(ours.config["norm"], "post")
        self.assertEqual(ours.config["feature_map"], "elu_plus_one")
        self.assertFalse(ours.config["tie_embeddings"])
        self.assert_same_outputs(theirs, ours)

    def test_favor_gelu_tied_sinusoidal(self):
        theirs = TheirLanguageModel(feature="favor", favor_dims=10, activation="gelu", tied=True,
                                    position="sinusoidal").double()
        ours = convert(theirs, feature_map="favor", activation="gelu", position="sinusoidal")
        self.assertEqual(ours.config["feature_dim"], 10)
        self.assert_same_outputs(theirs, ours)

    def test_favor_with_explicit_temperature(self):
        theirs = TheirLanguageModel(feature="favor", softmax_temp=0.3).double()
        ours = convert(theirs, feature_map="favor", favor_softmax_temp=0.3)
        self.assert_same_outputs(theirs, ours)
        wrong = convert(theirs, feature_map="favor")  # the default temperature: a different model
        with torch.no_grad():
            self.assertFalse(torch.allclose(wrong(self.ids)[0], theirs(self.ids), atol=1e-6))

    def test_relu_feature_map_learned_positions(self):
        theirs = TheirLanguageModel(feature="relu", position="learned").double()
        ours = convert(theirs, feature_map="relu", position="learned",
                       position_key="positions.weight")
        self.assert_same_outputs(theirs, ours)

    def test_zero_head_bias_is_accepted(self):
        theirs = TheirLanguageModel(head_bias=True).double()
        with torch.no_grad():
            theirs.head.bias.zero_()
        self.assert_same_outputs(theirs, convert(theirs, head_bias_key="head.bias"))

    def test_unrepresentable_layouts_are_rejected(self):
        cases = [
            (TheirLanguageModel(final_norm=True), {}, r"'encoder.norm.weight': a final normal"),
            (TheirLanguageModel(head_bias=True), dict(head_bias_key="head.bias"),
             "'head.bias': our output head has no bias"),
            (TheirLanguageModel(head_bias=True), {}, r"keys not understood: \['head.bias'\]"),
            (TheirLanguageModel(d_values=2), {}, "query dimensions .4. differ from value"),
            (TheirLanguageModel(), dict(encoder_prefix="model."), "no layers 0..N-1"),
            (TheirLanguageModel(), dict(feature_map="favor"),
             "no 'encoder.layers.0.attention.inner_attention.feature_map.omega'"),
            (TheirLanguageModel(), dict(n_heads=5), "d_model 12 is not a multiple of n_heads 5"),
            (TheirLanguageModel(), dict(feature_map="rff"), "'rff' is not one of"),
        ]
        for theirs, kwargs, message in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(cft.ConversionError, message):
                    convert(theirs, **kwargs)

    def test_command_line_writes_a_model_directory(self):
        theirs = TheirLanguageModel().double()
        with tempfile.TemporaryDirectory() as d:
            checkpoint = os.path.join(d, "ft.pt")
            torch.save(theirs.state_dict(), checkpoint)
            out = os.path.join(d, "model")
            with contextlib.redirect_stdout(io.StringIO()):
                cft.main(["--checkpoint", checkpoint, "--out", out, "--n-heads", "3",
                          "--bos-token-id", "256"])
            ours = export.load_model_dir(out, dtype=torch.float64)
        self.assertEqual(ours.config["bos_token_id"], 256)
        with torch.no_grad():
            logits, _ = ours(self.ids)
            torch.testing.assert_close(logits, theirs(self.ids), rtol=1e-5, atol=1e-5)


class PositionFormulaTest(unittest.TestCase):
    def test_tutorial_positional_encoding_is_ours(self):
        theirs = TheirLanguageModel(position="sinusoidal").double()
        positions = torch.arange(50)
        x = theirs._embed(torch.zeros(50, dtype=torch.long), positions) - theirs.embedding.weight[0]
        torch.testing.assert_close(x, sinusoidal_embedding(positions, 12, torch.float64))


if __name__ == "__main__":
    unittest.main()
