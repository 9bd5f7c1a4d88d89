"""models/shakespeare-linear: what issue 3 promises about the bundled model, checked.

    test_bundled_model.py [--generate-bin PATH/linserve-generate] [unittest args]

With --generate-bin, linserve-generate must write exactly what generate.py writes for the same
prompt, seed and sampling flags (without it that test is skipped, saying so).
"""

import os
import sys
import unittest

import torch

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import bundled_checks  # noqa: E402
import train_tokenizer  # noqa: E402
from linserve_ref import corpus, export  # noqa: E402
from linserve_ref.text_tokenizer import load_tokenizer  # noqa: E402

MODEL_DIR = os.path.join(corpus.REPO_ROOT, "models", "shakespeare-linear")
# evaluate.py --json output for the fixed slice quoted in MODEL_CARD.md.
SLICE_RESULTS = os.path.join(HERE, "bundled_model_slice.json")
GENERATE_BIN = None


class BundledModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.model = export.load_model_dir(MODEL_DIR)
        cls.model.eval()
        cls.tokenizer = load_tokenizer(cls.model.config, MODEL_DIR)

    def test_shape_and_size(self):
        cfg = self.model.config
        self.assertTrue(4_000_000 <= self.model.num_parameters() <= 8_000_000)
        self.assertEqual((cfg["norm"], cfg["feature_map"], cfg["tokenizer"]),
                         ("pre", "elu_plus_one", "sentencepiece"))
        self.assertTrue(1000 <= cfg["vocab_size"] <= 4000)
        self.assertLessEqual(os.path.getsize(os.path.join(MODEL_DIR, "model.safetensors")),
                             32 << 20)
        for name in ("config.json", "model.safetensors", "tokenizer.model", "MODEL_CARD.md"):
            self.assertTrue(os.path.exists(os.path.join(MODEL_DIR, name)), name)

    def test_tokenizer_is_reproducible_from_the_training_split(self):
        train_text, _ = corpus.split(corpus.read_text(corpus.DEFAULT_CORPUS))
        with open(os.path.join(MODEL_DIR, "tokenizer.model"), "rb") as f:
            shipped = f.read()
        self.assertEqual(train_tokenizer.train(train_text, self.model.config["vocab_size"]),
                         shipped)

    def test_validation_loss_of_the_fixed_slice(self):
        bundled_checks.check_fixed_slice(self, self.model, self.tokenizer, SLICE_RESULTS,
                                         at_most=1.8)

    def test_reference_and_linserve_generate_write_the_same_text(self):
        bundled_checks.check_generate_writes_the_reference_text(
            self, self.model, self.tokenizer, MODEL_DIR, GENERATE_BIN,
            [("ROMEO:\n", 1, dict(temperature=0.8, top_k=50)),
             ("First Citizen:\n", 2, dict(temperature=0)),
             ("KING HENRY", 3, dict(temperature=1.0, top_p=0.9))])


if __name__ == "__main__":
    bundled_checks.main(sys.modules[__name__])
