"""quantize_weights.py: the int8 rule against a scalar transcription of PackedMatrix's (ties to
even, clamping, zero and partial blocks), the directory it writes (which tensors become I8 with
F32 scales, BF16, or stay as stored; config.json's weight_format; the tokenizer files), and its
refusals. tests/model/stored_int8_test.cc checks the C++ loader on its output: bitwise the logits
of the float model loaded with --weight_precision int8."""

import json
import os
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import quantize_weights  # noqa: E402
from linserve_ref import safetensors_io  # noqa: E402


def scalar_int8(w):
    """PackedMatrix::Pack's int8 rule, one weight at a time in float32 (packed_matrix.cc)."""
    out, n_in = w.shape
    blocks = -(-n_in // 32)
    q = np.zeros((out, n_in), dtype=np.int8)
    scales = np.zeros((out, blocks), dtype=np.float32)
    for r in range(out):
        for b in range(blocks):
            ks = range(32 * b, min(32 * b + 32, n_in))
            max_abs = np.float32(0)
            for k in ks:
                max_abs = max(max_abs, np.float32(abs(w[r, k])))
            scale = np.float32(max_abs / np.float32(127))
            scales[r, b] = scale
            for k in ks:
                v = np.float32(0) if scale == 0 else np.float32(w[r, k] / scale)
                q[r, k] = int(min(max(np.rint(v), -127), 127))
    return q, scales


def write_model(directory, config_extra=None):
    """A model directory with projection and other tensors (the converter reads no shapes from
    config.json, so a few named tensors suffice), F32 and BF16, and a tokenizer file."""
    os.makedirs(directory, exist_ok=True)
    g = torch.Generator().manual_seed(7)
    tensors = {
        "embed.weight": torch.randn(9, 40, generator=g),
        "layers.0.ln1.weight": torch.randn(40, generator=g),
        "layers.0.attn.q_proj.weight": torch.randn(5, 75, generator=g),
        "layers.0.attn.q_proj.bias": torch.randn(5, generator=g),
        "layers.0.conv.weight": torch.randn(4, 3, generator=g),
        "layers.0.conv.in_proj.weight": torch.randn(8, 40, generator=g),
        "layers.1.mlp.fc2.weight": torch.randn(40, 64, generator=g),
        "lm_head.weight": torch.randn(9, 40, generator=g).to(torch.bfloat16),
    }
    tensors["layers.0.attn.q_proj.weight"][1, 32:64] = 0  # an all-zero block
    safetensors_io.save_file(tensors, os.path.join(directory, "model.safetensors"),
                             {"format": "pt"})
    config = {"vocab_size": 9, "d_model": 40, **(config_extra or {})}
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write("{}")
    return tensors


class QuantizeInt8RuleTest(unittest.TestCase):
    def test_matches_the_scalar_rule_on_random_and_edge_values(self):
        rng = np.random.default_rng(3)
        w = rng.standard_normal((7, 75)).astype(np.float32) * np.float32(0.05)
        w[0, :32] = 0  # zero block: scale 0, q 0
        # Scale exactly 1 (max 127): halfway values round to even, -2.5 to -2.
        w[1, :8] = [127, 0.5, 1.5, 2.5, -2.5, -0.5, 126.5, -127]
        w[2, 64:] = 1e-30  # a partial block of tiny values: q = 127
        q, scales = quantize_weights.quantize_int8(w)
        q_ref, scales_ref = scalar_int8(w)
        np.testing.assert_array_equal(scales.view(np.uint32), scales_ref.view(np.uint32))
        np.testing.assert_array_equal(q, q_ref)
        self.assertEqual(list(q[1, :8]), [127, 0, 2, 2, -2, 0, 126, -127])
        self.assertEqual(scales.shape, (7, 3))
        self.assertTrue((q[0, :32] == 0).all() and scales[0, 0] == 0)
        self.assertTrue((q[2, 64:] == 127).all())


class ConvertTest(unittest.TestCase):
    def test_int8_directory(self):
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = os.path.join(tmp, "src"), os.path.join(tmp, "dst")
            original = write_model(src)
            self.assertEqual(quantize_weights.main(["--model", src, "--out", dst,
                                                    "--format", "int8"]), 0)
            tensors, metadata = safetensors_io.load_file(os.path.join(dst, "model.safetensors"))
            self.assertEqual(metadata, {"format": "pt"})
            projections = ["layers.0.attn.q_proj.weight", "layers.0.conv.in_proj.weight",
                           "layers.1.mlp.fc2.weight", "lm_head.weight"]
            self.assertEqual(set(tensors),
                             set(original) | {p + ".scales" for p in projections})
            for name in projections:
                w = original[name].to(torch.float32).numpy()
                q, scales = tensors[name], tensors[name + ".scales"]
                self.assertEqual(q.dtype, torch.int8, name)
                self.assertEqual(scales.dtype, torch.float32, name)
                self.assertEqual(list(scales.shape), [w.shape[0], -(-w.shape[1] // 32)], name)
                q_ref, scales_ref = scalar_int8(w)
                np.testing.assert_array_equal(q.numpy(), q_ref)
                np.testing.assert_array_equal(scales.numpy(), scales_ref)
                # Dequantized within half a step of the original.
                step = np.repeat(scales.numpy(), 32, axis=1)[:, :w.shape[1]]
                self.assertTrue((np.abs(q.numpy() * step - w) <= step / 2 + 1e-12).all(), name)
            for name in set(original) - set(projections):
                self.assertEqual(tensors[name].dtype, original[name].dtype, name)
                self.assertTrue(torch.equal(tensors[name], original[name]), name)
            with open(os.path.join(dst, "config.json"), encoding="utf-8") as f:
                config = json.load(f)
            self.assertEqual(config, {"vocab_size": 9, "d_model": 40,
                                      "weight_format": {"kind": "int8", "block": 32}})
            self.assertTrue(os.path.exists(os.path.join(dst, "tokenizer.json")))

    def test_bf16_directory(self):
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = os.path.join(tmp, "src"), os.path.join(tmp, "dst")
            original = write_model(src)
            self.assertEqual(quantize_weights.main(["--model", src, "--out", dst,
                                                    "--format", "bf16"]), 0)
            tensors, _ = safetensors_io.load_file(os.path.join(dst, "model.safetensors"))
            self.assertEqual(set(tensors), set(original))
            for name, t in original.items():
                if quantize_weights.is_projection(name):
                    self.assertEqual(tensors[name].dtype, torch.bfloat16, name)
                    self.assertTrue(torch.equal(tensors[name], t.to(torch.bfloat16)), name)
                else:
                    self.assertTrue(torch.equal(tensors[name], t), name)
            with open(os.path.join(dst, "config.json"), encoding="utf-8") as f:
                self.assertNotIn("weight_format", json.load(f))

    def test_refusals(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            write_model(src, {"weight_format": {"kind": "int8", "block": 32}})
            with self.assertRaisesRegex(quantize_weights.QuantizeError,
                                        "already declares weight_format"):
                quantize_weights.convert(src, os.path.join(tmp, "a"), "int8")
            src2 = os.path.join(tmp, "src2")
            write_model(src2)
            quantize_weights.convert(src2, os.path.join(tmp, "b"), "int8")
            with self.assertRaisesRegex(quantize_weights.QuantizeError, "exists"):
                quantize_weights.convert(src2, os.path.join(tmp, "b"), "int8")


if __name__ == "__main__":
    unittest.main()
