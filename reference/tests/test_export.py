"""Model directories: save/load round trips for every weight dtype, and load-time checks."""

import json
import os
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from linserve_ref import export, safetensors_io  # noqa: E402
from linserve_ref.model import LinearTransformer  # noqa: E402

CONFIG = dict(vocab_size=258, d_model=16, n_layers=2, n_heads=2, head_dim=8, d_ff=24,
              feature_map="favor_plus", feature_dim=10, position="learned", max_position=32,
              tie_embeddings=False, norm="pre", bos_token_id=256, eos_token_id=257)


class ExportTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.model = LinearTransformer(CONFIG)
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        self.dir = tempfile.TemporaryDirectory()
        self.path = self.dir.name

    def tearDown(self):
        self.dir.cleanup()

    def test_round_trip_every_dtype(self):
        ids = torch.randint(0, 258, (1, 20))
        with torch.no_grad():
            reference, _ = self.model(ids)
        for name, dtype in export.WEIGHT_DTYPES.items():
            with self.subTest(dtype=name):
                export.save_model_dir(self.model, self.path, dtype=name)
                tensors, _ = safetensors_io.load_file(os.path.join(self.path, "model.safetensors"))
                self.assertEqual({t.dtype for t in tensors.values()}, {dtype})
                self.assertIn("layers.1.attn.favor_projection", tensors)
                self.assertIn("lm_head.weight", tensors)
                loaded = export.load_model_dir(self.path)
                self.assertEqual(loaded.config, self.model.config)
                for key, t in self.model.state_dict().items():
                    # Loading widens exactly what was stored.
                    self.assertTrue(torch.equal(loaded.state_dict()[key], t.to(dtype).float()), key)
                with torch.no_grad():
                    logits, _ = loaded(ids)
                tolerance = {"float32": 0.0, "float16": 1e-2, "bfloat16": 1e-1}[name]
                torch.testing.assert_close(logits, reference, rtol=0, atol=tolerance)

    def test_config_json_has_every_field(self):
        export.save_model_dir(self.model, self.path)
        with open(os.path.join(self.path, "config.json")) as f:
            written = json.load(f)
        self.assertEqual(written, self.model.config)
        self.assertFalse(os.path.exists(os.path.join(self.path, "tokenizer.model")))

    def test_tied_model_has_no_head_tensor(self):
        model = LinearTransformer({**CONFIG, "tie_embeddings": True, "norm": "post"})
        export.save_model_dir(model, self.path)
        tensors, _ = safetensors_io.load_file(os.path.join(self.path, "model.safetensors"))
        self.assertNotIn("lm_head.weight", tensors)
        self.assertNotIn("final_norm.weight", tensors)

    def test_load_rejects_missing_unexpected_and_misshapen_tensors(self):
        export.save_model_dir(self.model, self.path)
        weights = os.path.join(self.path, "model.safetensors")
        tensors, _ = safetensors_io.load_file(weights)
        broken = dict(tensors)
        del broken["layers.0.ln2.bias"]
        broken["layers.9.extra"] = torch.zeros(1)
        safetensors_io.save_file(broken, weights)
        with self.assertRaisesRegex(export.ModelDirError,
                                    r"missing tensors \['layers.0.ln2.bias'\], unexpected "
                                    r"tensors \['layers.9.extra'\]"):
            export.load_model_dir(self.path)
        broken = dict(tensors)
        broken["pos_embed.weight"] = torch.zeros(31, 16)
        safetensors_io.save_file(broken, weights)
        with self.assertRaisesRegex(export.ModelDirError,
                                    r"'pos_embed.weight' has shape \[31, 16\], config implies "
                                    r"\[32, 16\]"):
            export.load_model_dir(self.path)

    def test_load_rejects_bad_config(self):
        export.save_model_dir(self.model, self.path)
        with open(os.path.join(self.path, "config.json"), "w") as f:
            json.dump({**self.model.config, "n_heads": 3}, f)
        with self.assertRaisesRegex(export.ModelDirError, "config.json: .*'d_model' = 16"):
            export.load_model_dir(self.path)

    def test_tokenizer_model_required_for_sentencepiece_only(self):
        with self.assertRaisesRegex(export.ModelDirError, "tokenizer 'byte' takes no"):
            export.save_model_dir(self.model, self.path, tokenizer_model="x.model")
        sp = LinearTransformer({**CONFIG, "tokenizer": "sentencepiece"})
        with self.assertRaisesRegex(export.ModelDirError, "needs tokenizer_model"):
            export.save_model_dir(sp, self.path)
        source = os.path.join(self.path, "source.model")
        with open(source, "wb") as f:
            f.write(b"spm bytes")
        export.save_model_dir(sp, os.path.join(self.path, "sp"), tokenizer_model=source)
        with open(os.path.join(self.path, "sp", "tokenizer.model"), "rb") as f:
            self.assertEqual(f.read(), b"spm bytes")

    def test_unknown_dtype(self):
        with self.assertRaisesRegex(export.ModelDirError, "'float8'"):
            export.save_model_dir(self.model, self.path, dtype="float8")


if __name__ == "__main__":
    unittest.main()
