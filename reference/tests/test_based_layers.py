"""The Based layer kinds in the reference (rms_norm, gated_mlp, short_conv,
taylor_linear_attention, sliding_window_attention): the parallel form equals the recurrent one in
outputs and final state, per kind and for a whole based-shaped model; a chunked prefill from a
mid-sequence state leaves the recurrent state; each kind against a direct formula; the state
layout; config refusals naming the field."""

import math
import os
import sys
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from based_shapes import based_config, based_pattern, conv, layer, swa, taylor  # noqa: E402
from linserve_ref import config as config_lib  # noqa: E402
from linserve_ref.model import (LinearTransformer, state_from_flat,  # noqa: E402
                                state_to_flat)
from linserve_ref.taylor_linear_attention import taylor_feature_map  # noqa: E402

TIGHT = dict(rtol=1e-10, atol=1e-12)


def make_model(cfg, seed=0):
    torch.manual_seed(seed)
    model = LinearTransformer(cfg).double()
    with torch.no_grad():  # every parameter off its initial value, at a stable scale
        for name, p in model.named_parameters():
            if p.dim() == 2 and name != "embed.weight":
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
            else:
                p.add_(0.3 * torch.randn_like(p))
    return model


def recurrent(model, ids, state=None):
    state = model.init_state(ids.shape[0]) if state is None else state
    out = []
    for t in range(ids.shape[1]):
        logits, state = model.step(ids[:, t], state)
        out.append(logits)
    return torch.stack(out, dim=1), state


def flat(model, state, b=0):
    return state_to_flat(model, state, b)[0].double()


class ParallelEqualsRecurrentTest(unittest.TestCase):
    def setUp(self):
        torch.set_num_threads(1)

    def check(self, model, length, chunks=(None, 1, 3, 7), batch=2):
        ids = torch.randint(0, model.config["vocab_size"], (batch, length),
                            generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            expected, rec_state = recurrent(model, ids)
            for chunk in chunks:
                with self.subTest(length=length, chunk=chunk):
                    logits, state = model(ids, chunk_size=chunk)
                    torch.testing.assert_close(logits, expected, **TIGHT)
                    for b in range(batch):
                        torch.testing.assert_close(flat(model, state, b),
                                                   flat(model, rec_state, b), **TIGHT)

    def test_each_kind_alone(self):
        mixers = {
            "short_conv": conv(kernel_size=4, conv_bias=True),
            "short_conv_no_bias": conv(d_inner=8, kernel_size=2, bias=False),
            "taylor": taylor(n_heads=3, feature_dim=3, head_dim=5, eps=1e-6),
            "swa": swa(window=4, rotary_dim=4, bias=True),
            "swa_no_rope": swa(window=3, rotary_dim=0),
            "swa_window_1": swa(window=1),
        }
        for name, mixer in mixers.items():
            with self.subTest(kind=name):
                self.check(make_model(based_config([mixer])), 11)

    def test_gated_mlp_activations_and_bias(self):
        for activation in config_lib.GATED_ACTIVATIONS:
            cfg = based_config([conv()])
            cfg["layers"] = [layer(conv(), activation=activation, mlp_bias=True)]
            with self.subTest(activation=activation):
                self.check(make_model(cfg), 6, chunks=(None, 2))

    def test_sliding_window_below_at_and_above_the_window(self):
        model = make_model(based_config([swa(window=6)]))
        for length in (3, 5, 6, 7, 15):
            self.check(model, length, chunks=(None, 2, 6))

    def test_based_shaped_model(self):
        model = make_model(based_config(based_pattern(7, window=4)))
        self.check(model, 13)

    def test_chunked_prefill_from_a_mid_sequence_state(self):
        model = make_model(based_config(based_pattern(6, window=5)))
        ids = torch.randint(0, 300, (1, 17), generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            expected, rec_state = recurrent(model, ids)
            for split in (1, 4, 9):
                _, mid = recurrent(model, ids[:, :split])
                for chunk in (None, 2, 5):
                    with self.subTest(split=split, chunk=chunk):
                        logits, state = model(ids[:, split:], state=mid, chunk_size=chunk)
                        torch.testing.assert_close(logits, expected[:, split:], **TIGHT)
                        torch.testing.assert_close(flat(model, state), flat(model, rec_state),
                                                   **TIGHT)
            # And from a state that went through the flat layout (an exported session).
            _, mid = model(ids[:, :9])
            vector, position = state_to_flat(model, mid, 0)
            restored = state_from_flat(model, vector.double(), position)
            logits, _ = model(ids[:, 9:], state=restored, chunk_size=3)
            torch.testing.assert_close(logits, expected[:, 9:], rtol=1e-6, atol=1e-6)


class FormulaTest(unittest.TestCase):
    def test_taylor_feature_map(self):
        x = torch.tensor([0.3, -1.2], dtype=torch.float64)
        d = 2
        expected = torch.tensor([1.0, 0.3 / d ** 0.25, -1.2 / d ** 0.25,
                                 0.09 / 2.0, -0.36 / 2.0, -0.36 / 2.0, 1.44 / 2.0],
                                dtype=torch.float64)
        torch.testing.assert_close(taylor_feature_map(x), expected)
        y = torch.randn(16, dtype=torch.float64)
        z = torch.randn(16, dtype=torch.float64)
        dot = y @ z
        self.assertEqual(taylor_feature_map(y).numel(), 273)
        self.assertAlmostEqual((taylor_feature_map(y) @ taylor_feature_map(z)).item(),
                               (1 + dot / 4 + dot ** 2 / 32).item(), places=10)

    def test_rms_norm_and_gated_mlp(self):
        model = make_model(based_config([conv()]))
        block = model.layers[0]
        x = torch.randn(5, 16, dtype=torch.float64)
        rms = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * block.ln1.weight
        torch.testing.assert_close(block.ln1(x), rms)
        a = x @ block.mlp.fc1.weight.t()
        torch.testing.assert_close(block.mlp(x), (a[:, :24] * F.silu(a[:, 24:]))
                                   @ block.mlp.fc2.weight.t())

    def test_short_conv_by_hand(self):
        model = make_model(based_config([conv(d_inner=4, kernel_size=3, conv_bias=True)]))
        mixer = model.layers[0].conv
        x = torch.randn(1, 6, 16, dtype=torch.float64)
        a = mixer.in_proj(x)[0]
        u, g = a[:, :4], a[:, 4:]
        rows = []
        for t in range(6):
            c = mixer.bias.clone()
            for j in range(3):
                if t - 2 + j >= 0:
                    c = c + mixer.weight[:, j] * u[t - 2 + j]
            rows.append(F.silu(c) * g[t])
        out, (past,) = mixer(x, mixer.init_state(1, torch.float64, "cpu"), None, 6)
        torch.testing.assert_close(out[0], mixer.out_proj(torch.stack(rows)))
        torch.testing.assert_close(past[0], u[4:])  # the last K − 1 = 2 values, oldest first

    def test_sliding_window_against_dense_attention(self):
        """Complex-number RoPE at absolute positions and an explicit window mask."""
        h, dh, rot, window = 2, 6, 4, 3
        model = make_model(based_config([swa(n_heads=h, head_dim=dh, window=window,
                                             rotary_dim=rot, rope_base=500.0)]))
        mixer = model.layers[0].attn
        t = 8
        x = torch.randn(1, t, 16, dtype=torch.float64)
        q, k, v = (p(x)[0].view(t, h, dh) for p in (mixer.q_proj, mixer.k_proj, mixer.v_proj))
        freq = 500.0 ** (-2.0 * torch.arange(rot // 2, dtype=torch.float64) / rot)

        def rope(a, pos):
            z = torch.complex(a[..., :rot // 2], a[..., rot // 2:rot])
            z = z * torch.exp(1j * pos * freq)
            return torch.cat([z.real, z.imag, a[..., rot:]], dim=-1)

        out = torch.zeros(t, h, dh, dtype=torch.float64)
        for i in range(t):
            for head in range(h):
                keys = range(max(0, i - window + 1), i + 1)
                s = torch.stack([rope(q[i, head], i) @ rope(k[j, head], j) for j in keys])
                p = torch.softmax(s / math.sqrt(dh), dim=0)
                out[i, head] = sum(pj * v[j, head] for pj, j in zip(p, keys))
        expected = mixer.o_proj(out.reshape(t, h * dh))
        got, _ = mixer(x, mixer.init_state(1, torch.float64, "cpu"),
                       torch.arange(t).unsqueeze(0), t)
        torch.testing.assert_close(got[0], expected)


class StateLayoutTest(unittest.TestCase):
    def test_sizes_and_ring_counters(self):
        model = make_model(based_config([conv(d_inner=6, kernel_size=4), taylor(),
                                         swa(n_heads=2, head_dim=3, window=4, rotary_dim=2)]))
        self.assertEqual(config_lib.state_floats_per_slot(model.config),
                         3 * 6 + 2 * 21 * 9 + 3 * 2 * 2 * 3 + 2)
        for length, count, nxt in ((0, 0, 0), (2, 2, 2), (3, 3, 0), (7, 3, 1)):
            ids = torch.arange(length).view(1, length) % 300
            with torch.no_grad():
                state = model.init_state(1)
                if length:
                    _, state = model(ids, chunk_size=2)
            vector, position = state_to_flat(model, state, 0)
            with self.subTest(length=length):
                self.assertEqual(vector.numel(), config_lib.state_floats_per_slot(model.config))
                self.assertEqual(vector[-2:].tolist(), [count, nxt])
                self.assertEqual(position, length)
                if length == 0:
                    self.assertFalse(vector.any())
                if length == 7:
                    # Ring entry 0 holds token 6 (written last, next = 1): its k before RoPE.
                    attn = model.layers[2].attn
                    x = self.hidden_before(model, ids, 2)[0, 6]
                    k = attn.k_proj(x).view(2, 3)
                    ring = vector[-2 - 3 * 2 * 2 * 3:-2].view(3, 2, 2, 3)
                    torch.testing.assert_close(ring[0, :, 0].double(), k, rtol=1e-6, atol=1e-6)
                back = state_from_flat(model, vector, position)
                self.assertTrue(torch.equal(state_to_flat(model, back, 0)[0], vector))

    @staticmethod
    def hidden_before(model, ids, index):
        """The normed input of layer `index`'s mixer."""
        with torch.no_grad():
            x = model.embed(ids)
            state = model.init_state(1)
            positions = torch.arange(ids.shape[1]).unsqueeze(0)
            for block, mixer_state in zip(model.layers[:index], state.layers):
                x, _ = block(x, mixer_state, positions, ids.shape[1])
            return model.layers[index].ln1(x)


class ConfigTest(unittest.TestCase):
    def test_defaults(self):
        cfg = config_lib.normalize_config(based_config([conv(), taylor(), swa()]))
        c, t, s = (layer["mixer"] for layer in cfg["layers"])
        self.assertEqual((c["kernel_size"], c["bias"], c["conv_bias"]), (3, True, False))
        self.assertEqual(t["eps"], 1e-12)
        self.assertEqual((s["rotary_dim"], s["rope_base"], s["bias"]), (8, 10000.0, False))
        mlp = cfg["layers"][0]["mlp"]
        self.assertEqual((mlp["activation"], mlp["bias"]), ("silu", False))
        self.assertEqual(cfg["layers"][0]["norm"], {"kind": "rms_norm", "eps": 1e-5})

    def test_refusals_name_the_field(self):
        cases = [
            ([conv(kernel_size=1)], "layers[0].mixer.kernel_size"),
            ([conv(kernel_size=65)], "layers[0].mixer.kernel_size"),
            ([conv(), conv(d_inner=0)], "layers[1].mixer.d_inner"),
            ([taylor(feature_dim=65)], "layers[0].mixer.feature_dim"),
            ([taylor(eps=0.0)], "layers[0].mixer.eps"),
            ([taylor(window=3)], "layers[0].mixer.window"),
            ([swa(window=0)], "layers[0].mixer.window"),
            ([swa(window=65537)], "layers[0].mixer.window"),
            ([conv(), swa(rotary_dim=3)], "layers[1].mixer.rotary_dim"),
            ([swa(rotary_dim=10)], "layers[0].mixer.rotary_dim"),
            ([swa(rope_base=0.0)], "layers[0].mixer.rope_base"),
            ([swa(rope_base=float("inf"))], "layers[0].mixer.rope_base"),
            ([swa(bias="yes")], "layers[0].mixer.bias"),
        ]
        for mixers, field in cases:
            with self.subTest(field=field, mixers=mixers):
                with self.assertRaisesRegex(config_lib.ConfigError, field.replace("[", r"\[")):
                    config_lib.normalize_config(based_config(mixers))
        cfg = based_config([conv()])
        cfg["layers"][0]["mlp"]["activation"] = "relu"
        with self.assertRaisesRegex(config_lib.ConfigError, r"layers\[0\]\.mlp\.activation"):
            config_lib.normalize_config(cfg)
        cfg = based_config([conv()])
        cfg["layers"][0]["norm"]["eps"] = 2.0
        with self.assertRaisesRegex(config_lib.ConfigError, r"layers\[0\]\.norm\.eps"):
            config_lib.normalize_config(cfg)


if __name__ == "__main__":
    unittest.main()
