"""The reference model: the chunked parallel form and the recurrence agree, for every variant."""

import itertools
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from linserve_ref import config as config_lib  # noqa: E402
from linserve_ref.model import (LinearTransformer, sinusoidal_embedding,  # noqa: E402
                                state_from_flat, state_to_flat)

BASE = dict(vocab_size=260, d_model=12, n_layers=2, n_heads=3, head_dim=4, d_ff=20,
            max_position=0, bos_token_id=256, eos_token_id=257)


def make_model(**overrides):
    cfg = {**BASE, **overrides}
    if cfg.get("position") == "learned":
        cfg["max_position"] = 64
    if cfg.get("feature_map") == "favor_plus":
        cfg.setdefault("feature_dim", 7)
    model = LinearTransformer(cfg).double()
    with torch.no_grad():  # move every parameter off its initial value so each one matters
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def recurrent_logits(model, ids, state=None):
    state = model.init_state(ids.shape[0]) if state is None else state
    out = []
    for t in range(ids.shape[1]):
        logits, state = model.step(ids[:, t], state)
        out.append(logits)
    return torch.stack(out, dim=1), state


class ParallelVsRecurrentTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(1)
        torch.set_num_threads(1)

    def assert_same_state(self, a, b):
        self.assertTrue(torch.equal(a.position, b.position))
        for (sa, za), (sb, zb) in zip(a.layers, b.layers):
            torch.testing.assert_close(sa, sb, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(za, zb, rtol=1e-10, atol=1e-12)

    def test_every_variant_and_chunk_size(self):
        combos = itertools.product(config_lib.NORMS, config_lib.FEATURE_MAPS,
                                   config_lib.POSITIONS)
        for i, (norm, fmap, position) in enumerate(combos):
            overrides = dict(norm=norm, feature_map=fmap, position=position,
                             activation=config_lib.ACTIVATIONS[i % 3], bias=i % 2 == 0,
                             tie_embeddings=i % 4 < 2)
            with self.subTest(**overrides):
                model = make_model(**overrides)
                ids = torch.randint(0, BASE["vocab_size"], (2, 37))
                with torch.no_grad():
                    expected, expected_state = recurrent_logits(model, ids)
                    for chunk in (1, 4, 16, 37, 64, None):
                        logits, state = model(ids, chunk_size=chunk)
                        torch.testing.assert_close(logits, expected, rtol=1e-9, atol=1e-10)
                        self.assert_same_state(state, expected_state)

    def test_forward_continues_from_a_state(self):
        model = make_model(position="sinusoidal")
        ids = torch.randint(0, BASE["vocab_size"], (1, 30))
        with torch.no_grad():
            whole, whole_state = model(ids, chunk_size=8)
            first, state = model(ids[:, :11], chunk_size=3)
            second, state = model(ids[:, 11:], state=state, chunk_size=5)
        torch.testing.assert_close(torch.cat([first, second], dim=1), whole)
        self.assertEqual(int(state.position[0]), 30)
        self.assert_same_state(state, whole_state)

    def test_start_position_shifts_sinusoidal_positions(self):
        model = make_model(position="sinusoidal")
        ids = torch.randint(0, BASE["vocab_size"], (1, 5))
        with torch.no_grad():
            at_zero, _ = model(ids)
            at_100, state = model(ids, state=model.init_state(1, position=100))
            stepped, _ = recurrent_logits(model, ids, model.init_state(1, position=100))
        self.assertFalse(torch.allclose(at_zero, at_100))
        torch.testing.assert_close(at_100, stepped)
        self.assertEqual(int(state.position[0]), 105)

    def test_position_none_is_shift_invariant(self):
        model = make_model(position="none")
        ids = torch.randint(0, BASE["vocab_size"], (1, 5))
        with torch.no_grad():
            a, _ = model(ids)
            b, _ = model(ids, state=model.init_state(1, position=1000))
        torch.testing.assert_close(a, b)

    def test_learned_positions_beyond_table_are_rejected(self):
        model = make_model(position="learned")
        with self.assertRaisesRegex(ValueError, "max_position = 64"):
            model(torch.zeros(1, 65, dtype=torch.long))

    def test_float32_state_for_reduced_precision_weights(self):
        model = make_model().to(torch.bfloat16)
        state = model.init_state(2)
        self.assertEqual(state.layers[0][0].dtype, torch.float32)
        _, state = model.step(torch.tensor([1, 2]), state)
        self.assertEqual(state.layers[1][1].dtype, torch.float32)

    def test_flat_state_layout(self):
        model = make_model(feature_map="favor_plus")
        ids = torch.randint(0, BASE["vocab_size"], (2, 9))
        with torch.no_grad():
            _, state = model(ids)
        flat, position = state_to_flat(model, state, 1)
        self.assertEqual(position, 9)
        self.assertEqual(flat.numel(), config_lib.state_floats_per_slot(model.config))
        f, dh = 7, BASE["head_dim"]
        per_head = f * dh + f
        # Layer 1, head 2: S row-major then z.
        block = flat[(1 * 3 + 2) * per_head:(1 * 3 + 3) * per_head]
        torch.testing.assert_close(block[:f * dh].view(f, dh), state.layers[1][0][1, 2].float())
        torch.testing.assert_close(block[f * dh:], state.layers[1][1][1, 2].float())
        back = state_from_flat(model, flat, position)
        torch.testing.assert_close(back.layers[1][0][0], state.layers[1][0][1], rtol=1e-6,
                                   atol=1e-6)
        with self.assertRaisesRegex(ValueError, "needs"):
            state_from_flat(model, flat[:-1], position)


class SemanticsTest(unittest.TestCase):
    """Spot checks of docs/architecture.md §4 written independently of model.py's code paths."""

    def test_sinusoidal_formula(self):
        pe = sinusoidal_embedding(torch.tensor([3, 70000]), 5, torch.float64)
        for row, p in enumerate((3, 70000)):
            for j in range(5):
                angle = p / 10000 ** (2 * (j // 2) / 5)
                expected = torch.sin(torch.tensor(angle, dtype=torch.float64)) if j % 2 == 0 \
                    else torch.cos(torch.tensor(angle, dtype=torch.float64))
                self.assertAlmostEqual(pe[row, j].item(), expected.item(), places=12)

    def test_single_layer_by_hand(self):
        torch.manual_seed(3)
        model = make_model(n_layers=1, n_heads=1, head_dim=12, feature_map="elu_plus_one",
                           norm="post", position="none", activation="relu", bias=True)
        ids = torch.randint(0, BASE["vocab_size"], (1, 6))
        layer = model.layers[0]
        with torch.no_grad():
            x = model.embed(ids[0])
            q, k, v = (lin(x) for lin in (layer.attn.q_proj, layer.attn.k_proj, layer.attn.v_proj))
            phi = lambda u: torch.where(u > 0, u + 1, torch.exp(u))  # noqa: E731
            rows = []
            for t in range(6):
                s = sum(torch.outer(phi(k[i]), v[i]) for i in range(t + 1))
                z = sum(phi(k[i]) for i in range(t + 1))
                rows.append(phi(q[t]) @ s / (phi(q[t]) @ z + 1e-6))
            h = layer.ln1(x + layer.attn.o_proj(torch.stack(rows)))
            y = layer.ln2(h + layer.ffn.fc2(torch.relu(layer.ffn.fc1(h))))
            expected = y @ model.lm_head.weight.t() if hasattr(model, "lm_head") \
                else y @ model.embed.weight.t()
            logits, _ = model(ids, chunk_size=4)
        torch.testing.assert_close(logits[0], expected)

    def test_exp_feature_map_subtracts_the_max(self):
        from linserve_ref.linear_attention import feature_map
        x = torch.tensor([[1000.0, 999.0]], dtype=torch.float64)
        phi = feature_map("exp", x)
        torch.testing.assert_close(phi, torch.tensor([[1.0, torch.exp(torch.tensor(-1.0))]],
                                                     dtype=torch.float64))

    def test_favor_plus_formula(self):
        from linserve_ref.linear_attention import feature_map
        w = torch.randn(5, 3, dtype=torch.float64)
        x = torch.randn(3, dtype=torch.float64)
        expected = torch.exp(w @ x - x.dot(x) / 2) / 5 ** 0.5
        torch.testing.assert_close(feature_map("favor_plus", x, w), expected)


class ConfigTest(unittest.TestCase):
    def test_defaults_filled(self):
        cfg = config_lib.normalize_config(dict(vocab_size=300, d_model=8, n_layers=1,
                                               n_heads=2, head_dim=4, d_ff=16))
        self.assertEqual(cfg["feature_dim"], 4)
        self.assertEqual(cfg["position"], "sinusoidal")
        self.assertEqual(list(cfg), list(config_lib.FIELDS))

    def test_errors_name_field_and_limit(self):
        good = dict(vocab_size=300, d_model=8, n_layers=1, n_heads=2, head_dim=4, d_ff=16)
        cases = [
            (dict(extra=1), "unknown field"),
            (dict(vocab_size=None), "'vocab_size' must be an integer"),
            (dict(n_layers=0), r"'n_layers' = 0 is outside \[1, 1024\]"),
            (dict(d_model=9), "'d_model' = 9 must equal n_heads"),
            (dict(norm="middle"), "'norm'"),
            (dict(feature_dim=5), "'feature_dim' = 5 must equal head_dim"),
            (dict(position="learned"), r"'max_position' = 0 is outside \[1, 16777216\]"),
            (dict(max_position=5), "'max_position' = 5 must be 0"),
            (dict(attention_eps=0.0), r"'attention_eps' = 0.0 is outside \(0, 1\]"),
            (dict(bias=1), "'bias' must be true or false"),
            (dict(vocab_size=200), "'vocab_size' = 200 must be >= 256"),
            (dict(eos_token_id=300), r"'eos_token_id' = 300 is outside \[-1, 299\]"),
            (dict(architecture="gpt"), "'architecture'"),
        ]
        for change, message in cases:
            with self.subTest(change=change):
                with self.assertRaisesRegex(config_lib.ConfigError, message):
                    config_lib.normalize_config({**good, **change})
        with self.assertRaisesRegex(config_lib.ConfigError, "missing required"):
            config_lib.normalize_config(dict(vocab_size=300))


if __name__ == "__main__":
    unittest.main()
