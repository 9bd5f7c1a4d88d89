"""The layer list in the reference: "layers" configs (docs/model-format.md) build the same model
as the single-block schema they equal, refuse what the C++ parser refuses, and lay out the
state as the layers' slices concatenated."""

import json
import os
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from linserve_ref import config as config_lib  # noqa: E402
from linserve_ref.export import load_model_dir, save_model_dir  # noqa: E402
from linserve_ref.model import (LinearTransformer, state_from_flat,  # noqa: E402
                                state_to_flat)

SINGLE = dict(vocab_size=260, d_model=12, n_layers=2, n_heads=3, head_dim=4, d_ff=20)


def layer(n_heads, head_dim, **mixer):
    return {"mixer": {"kind": "linear_attention", "n_heads": n_heads, "head_dim": head_dim,
                      **mixer},
            "norm": {"kind": "layer_norm"},
            "mlp": {"kind": "ffn", "d_ff": 20}}


def layered(*layers, **fields):
    return {"vocab_size": 260, "d_model": 12, "layers": list(layers), **fields}


class LayerConfigTest(unittest.TestCase):
    def test_single_block_is_a_list_of_identical_layers(self):
        cfg = config_lib.normalize_config(SINGLE)
        layers = config_lib.layer_list(cfg)
        self.assertEqual(len(layers), 2)
        self.assertEqual(layers[0]["mixer"]["feature_dim"], 4)
        self.assertEqual(layers[0]["mlp"]["activation"], "gelu")
        self.assertEqual(config_lib.state_floats_per_slot(cfg), 2 * 3 * 4 * 5)

    def test_layers_equal_to_the_single_block_give_the_same_model(self):
        single = LinearTransformer(SINGLE).double()
        listed = LinearTransformer(layered(layer(3, 4), layer(3, 4))).double()
        self.assertEqual({k: v.shape for k, v in single.state_dict().items()},
                         {k: v.shape for k, v in listed.state_dict().items()})
        listed.load_state_dict(single.state_dict())
        ids = torch.randint(0, 260, (2, 9))
        a, sa = single(ids, chunk_size=4)
        b, sb = listed(ids, chunk_size=4)
        self.assertTrue(torch.equal(a, b))
        self.assertTrue(torch.equal(state_to_flat(single, sa, 1)[0],
                                    state_to_flat(listed, sb, 1)[0]))

    def test_different_layers_agree_in_both_forms_and_flatten(self):
        cfg = layered(layer(3, 4), layer(1, 6, feature_map="favor_plus", feature_dim=5),
                      layer(2, 2, bias=False), final_norm={"kind": "layer_norm", "eps": 1e-4})
        model = LinearTransformer(cfg).double()
        ids = torch.randint(0, 260, (1, 7))
        parallel, state = model(ids, chunk_size=3)
        rec_state = model.init_state(1)
        for t in range(ids.shape[1]):
            logits, rec_state = model.step(ids[:, t], rec_state)
        torch.testing.assert_close(logits, parallel[:, -1])
        flat, position = state_to_flat(model, state, 0)
        self.assertEqual(flat.numel(), 3 * 4 * 5 + 1 * 5 * 7 + 2 * 2 * 3)
        self.assertEqual(flat.numel(), config_lib.state_floats_per_slot(model.config))
        back = state_from_flat(model, flat, position)
        self.assertTrue(torch.equal(state_to_flat(model, back, 0)[0], flat))

    def test_export_round_trips_a_layer_list(self):
        model = LinearTransformer(layered(layer(3, 4), layer(2, 6)))
        with tempfile.TemporaryDirectory() as d:
            save_model_dir(model, d)
            with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
                written = json.load(f)
            self.assertEqual(written["layers"][1]["mixer"]["n_heads"], 2)
            self.assertNotIn("n_heads", written)
            back = load_model_dir(d)
        self.assertEqual(back.config, model.config)

    def test_refusals_name_the_field(self):
        cases = [
            (layered(layer(3, 4), {**layer(3, 4), "mixer": {"kind": "softmax"}}),
             "layers[1].mixer.kind"),
            (layered({**layer(3, 4), "mixer": {**layer(3, 4)["mixer"], "window": 3}}),
             "layers[0].mixer.window"),
            (layered(layer(0, 4)), "layers[0].mixer.n_heads"),
            (layered(layer(3, 4, feature_dim=3)), "layers[0].mixer.feature_dim"),
            (layered(layer(3, 4), n_heads=3), "n_heads"),
            (layered(layer(3, 4), n_layers=2), "n_layers"),
        ]
        for cfg, field in cases:
            with self.subTest(field=field):
                with self.assertRaisesRegex(config_lib.ConfigError, field.replace("[", r"\[")):
                    config_lib.normalize_config(cfg)


if __name__ == "__main__":
    unittest.main()
