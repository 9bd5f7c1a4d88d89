"""The MQAR generator (linserve_ref/mqar.py): shapes, that every query repeats an earlier key
and its target is that key's value, determinism, the power law, refusals; the accuracy helpers;
mqar.py end to end on a tiny run."""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import mqar as mqar_script  # noqa: E402
from linserve_ref import mqar  # noqa: E402


def make(seed=7, n=50, seq_len=32, pairs=4, vocab=64, power_a=0.01):
    return mqar.generate(n, seq_len, pairs, vocab, torch.Generator().manual_seed(seed), power_a)


class GenerateTest(unittest.TestCase):
    def test_shapes_and_ranges(self):
        inputs, targets = make()
        self.assertEqual(inputs.shape, (50, 32))
        self.assertEqual(targets.shape, (50, 32))
        self.assertEqual((inputs.dtype, targets.dtype), (torch.int64, torch.int64))
        self.assertTrue(((inputs >= 0) & (inputs < 64)).all())
        self.assertTrue(((targets == mqar.IGNORE) | ((targets >= 32) & (targets < 64))).all())
        self.assertTrue(((targets != mqar.IGNORE).sum(dim=1) == 4).all())

    def test_queries_repeat_earlier_keys_and_target_their_values(self):
        inputs, targets = make()
        for row_in, row_t in zip(inputs, targets):
            keys, values = row_in[0:8:2], row_in[1:8:2]
            self.assertEqual(len(set(keys.tolist())), 4)
            self.assertTrue(((keys >= 1) & (keys < 32)).all())
            self.assertTrue(((values >= 32) & (values < 64)).all())
            self.assertEqual(len(set(values.tolist())), 4)
            self.assertTrue((row_t[:8] == mqar.IGNORE).all())
            positions = (row_t != mqar.IGNORE).nonzero().flatten()
            self.assertTrue((positions % 2 == 0).all())
            queried = row_in[positions]
            self.assertEqual(sorted(queried.tolist()), sorted(keys.tolist()))
            for p, key in zip(positions.tolist(), queried.tolist()):
                pair = keys.tolist().index(key)
                self.assertLess(2 * pair, p)
                self.assertEqual(row_t[p].item(), values[pair].item())

    def test_deterministic_for_a_seed(self):
        a, b, c = make(seed=3), make(seed=3), make(seed=4)
        self.assertTrue(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]))
        self.assertFalse(torch.equal(a[0], c[0]))

    def test_power_law_favours_short_gaps(self):
        p = mqar.power_law(12, 0.01)
        self.assertAlmostEqual(p.sum().item(), 1.0, places=12)
        self.assertTrue((p[:-1] > p[1:]).all())
        self.assertAlmostEqual((p[0] / p[1]).item(), 2.0 ** 0.99, places=12)
        self.assertTrue(torch.allclose(mqar.power_law(5, 1.0), torch.full((5,), 0.2,
                                                                          dtype=torch.float64)))
        inputs, targets = make(n=400, seq_len=128, pairs=2)
        first = (targets != mqar.IGNORE).int().argmax(dim=1)
        self.assertGreater((first < 4 + 2 * 10).float().mean().item(), 0.5)

    def test_refusals_name_the_limit(self):
        gen = torch.Generator()
        for args, message in [((10, 31, 4, 64), "seq_len = 31 must be even"),
                              ((10, 32, 9, 64), r"num_kv_pairs = 9 must be in \[1, "),
                              ((10, 32, 0, 64), "num_kv_pairs = 0"),
                              ((10, 32, 4, 8), "vocab_size = 8 has fewer than")]:
            with self.subTest(args=args), self.assertRaisesRegex(ValueError, message):
                mqar.generate(*args, gen)
        with self.assertRaisesRegex(ValueError, "power_a = 0.0 is outside"):
            mqar.generate(10, 32, 4, 64, gen, power_a=0.0)


class AccuracyTest(unittest.TestCase):
    def test_correct_and_key_distances(self):
        inputs, targets = make(n=3)
        logits = torch.zeros(3, 32, 64)
        rows, cols = (targets != mqar.IGNORE).nonzero(as_tuple=True)
        logits[rows, cols, targets[rows, cols]] = 1.0
        logits[0, cols[0], 0] = 2.0  # the first query of row 0 is wrong
        hits = mqar.correct(logits, targets)
        self.assertEqual(hits.tolist(), [False] + [True] * 11)
        distance = mqar.key_distances(inputs, targets, 4)
        for q, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
            key_position = inputs[r, :8].tolist().index(inputs[r, c].item())
            self.assertEqual(distance[q].item(), c - key_position)
        self.assertTrue((distance > 0).all())


class ScriptTest(unittest.TestCase):
    def test_tiny_run_reports_both_models(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.json")
            with contextlib.redirect_stdout(io.StringIO()):
                mqar_script.main(["--steps", "2", "--d-model", "16", "--seq-len", "16",
                                  "--kv-pairs", "2", "--vocab", "32", "--window", "3",
                                  "--test-examples", "8", "--batch-size", "4", "--json", out])
            with open(out) as f:
                rows = json.load(f)["results"]
        self.assertEqual([r["model"] for r in rows], ["linear", "based"])
        self.assertEqual(rows[0]["layers"], ["linear_attention"] * 4)
        self.assertEqual(rows[1]["layers"], ["short_conv", "taylor_linear_attention",
                                             "sliding_window_attention", "short_conv"])
        for r in rows:
            self.assertEqual(r["queries"], 16)
            self.assertEqual(r["queries_within_window"] + r["queries_beyond_window"], 16)
            self.assertTrue(0.0 <= r["accuracy"] <= 1.0)


if __name__ == "__main__":
    unittest.main()
