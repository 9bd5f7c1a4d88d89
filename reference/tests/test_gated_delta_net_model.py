"""models/shakespeare-gated-delta-net: what its MODEL_CARD.md states, checked: six
gated_delta_net layers, a parameter count and file size comparable to shakespeare-linear's, the
same tokenizer, and the validation loss of the fixed slice recorded in
reference/gated_delta_net_model_slice.json.

    test_gated_delta_net_model.py [--generate-bin PATH/linserve-generate] [unittest args]

With --generate-bin, linserve-generate (the C++ CPU backend) must write exactly what generate.py
writes for the same prompt, seed and sampling flags."""

import json
import os
import sys
import unittest

import torch

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import bundled_checks  # noqa: E402
from linserve_ref import corpus, export  # noqa: E402
from linserve_ref.config import state_floats_per_slot  # noqa: E402
from linserve_ref.text_tokenizer import load_tokenizer  # noqa: E402

MODELS = os.path.join(corpus.REPO_ROOT, "models")
MODEL_DIR = os.path.join(MODELS, "shakespeare-gated-delta-net")
# evaluate.py --json output for the fixed slice quoted in MODEL_CARD.md.
SLICE_RESULTS = os.path.join(HERE, "gated_delta_net_model_slice.json")
GENERATE_BIN = None


class GatedDeltaNetModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.model = export.load_model_dir(MODEL_DIR)
        cls.model.eval()
        cls.tokenizer = load_tokenizer(cls.model.config, MODEL_DIR)

    def test_layers_size_and_files(self):
        cfg = self.model.config
        self.assertEqual([layer["mixer"]["kind"] for layer in cfg["layers"]],
                         ["gated_delta_net"] * 6)
        with open(os.path.join(HERE, "layers", "shakespeare_gated_delta_net.json")) as f:
            self.assertEqual(cfg["layers"], json.load(f)["layers"])
        self.assertEqual(self.model.num_parameters(), 5_274_660)
        self.assertEqual(state_floats_per_slot(cfg), 161_280)
        self.assertLessEqual(os.path.getsize(os.path.join(MODEL_DIR, "model.safetensors")),
                             32 << 20)
        for name in ("config.json", "model.safetensors", "tokenizer.model",
                     "chat_template.json", "MODEL_CARD.md"):
            self.assertTrue(os.path.exists(os.path.join(MODEL_DIR, name)), name)
        for name in ("tokenizer.model", "chat_template.json"):
            with open(os.path.join(MODEL_DIR, name), "rb") as a, \
                    open(os.path.join(MODELS, "shakespeare-linear", name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_fixed_slice_loss_is_the_recorded_one(self):
        bundled_checks.check_fixed_slice(self, self.model, self.tokenizer, SLICE_RESULTS,
                                         "models/shakespeare-gated-delta-net")

    def test_reference_and_linserve_generate_write_the_same_text(self):
        bundled_checks.check_generate_writes_the_reference_text(
            self, self.model, self.tokenizer, MODEL_DIR, GENERATE_BIN,
            [("ROMEO:\n", 1, dict(temperature=0.8, top_k=50)),
             ("First Citizen:\n", 2, dict(temperature=0)),
             ("KING HENRY", 3, dict(temperature=0))])


if __name__ == "__main__":
    bundled_checks.main(sys.modules[__name__])
