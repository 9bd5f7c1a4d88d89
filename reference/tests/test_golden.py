"""make_golden.py: complete, well-formed and byte-for-byte deterministic golden data."""

import contextlib
import copy
import filecmp
import io
import json
import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import make_golden  # noqa: E402
from linserve_ref import config as config_lib  # noqa: E402
from linserve_ref import export, safetensors_io  # noqa: E402
from linserve_ref import kinds as linserve_kinds  # noqa: E402


class GoldenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dirs = [tempfile.TemporaryDirectory() for _ in range(2)]
        for d in cls.dirs:
            with contextlib.redirect_stdout(io.StringIO()):
                make_golden.main(["--out", d.name])
        cls.out = cls.dirs[0].name
        with open(os.path.join(cls.out, "cases.json")) as f:
            cls.cases = json.load(f)["cases"]

    @classmethod
    def tearDownClass(cls):
        for d in cls.dirs:
            d.cleanup()

    def test_at_least_twelve_cases_covering_every_variant(self):
        self.assertGreaterEqual(len(self.cases), 12)
        make_golden.check_coverage(self.cases)
        with self.assertRaisesRegex(AssertionError, "never use feature_map"):
            make_golden.check_coverage(
                [c for c in self.cases if c["config"].get("feature_map") != "favor_plus"])

    def test_based_cases_cover_every_kind(self):
        based = [c for c in self.cases if "layers" in c["config"]]
        self.assertGreaterEqual(len(based), 6)
        kinds = [{layer["mixer"]["kind"] for layer in c["config"]["layers"]} for c in based]
        for kind in ("short_conv", "taylor_linear_attention", "sliding_window_attention",
                     "gated_delta_net", "delta_net"):
            self.assertIn({kind}, kinds)  # the kind alone in a model
        every = len(linserve_kinds.by_role("mixer"))
        with self.assertRaisesRegex(AssertionError, "mixes every mixer kind"):
            make_golden.check_based_coverage([c for c, k in zip(based, kinds) if len(k) < every])
        whole = copy.deepcopy(based)
        for c in whole:
            for layer in c["config"]["layers"]:
                if "window" in layer["mixer"]:
                    layer["mixer"]["window"] = c["tokens"]
        with self.assertRaisesRegex(AssertionError, "window"):
            make_golden.check_based_coverage(whole)

    def test_expected_tensors(self):
        for case in self.cases:
            with self.subTest(case=case["name"]):
                directory = os.path.join(self.out, case["name"])
                self.assertEqual(export.load_config(directory), case["config"])
                got, _ = safetensors_io.load_file(os.path.join(directory, "expected.safetensors"))
                t, v = case["tokens"], case["config"]["vocab_size"]
                self.assertGreaterEqual(t, 72)
                self.assertEqual(got["tokens"].dtype, torch.int32)
                self.assertEqual(tuple(got["tokens"].shape), (t,))
                self.assertEqual(tuple(got["logits_parallel"].shape), (t, v))
                self.assertEqual(tuple(got["logits_recurrent"].shape), (t, v))
                self.assertEqual(got["final_state"].numel(),
                                 config_lib.state_floats_per_slot(case["config"]))
                self.assertEqual(got["final_position"].tolist(), [t])
                torch.testing.assert_close(got["logits_parallel"], got["logits_recurrent"])
                # Weights are stored in the case's dtype.
                weights, _ = safetensors_io.load_file(os.path.join(directory, "model.safetensors"))
                self.assertEqual({w.dtype for w in weights.values()},
                                 {export.WEIGHT_DTYPES[case["dtype"]]})

    def test_deterministic(self):
        a, b = (d.name for d in self.dirs)
        for case in self.cases:
            for name in ("config.json", "model.safetensors", "expected.safetensors"):
                self.assertTrue(filecmp.cmp(os.path.join(a, case["name"], name),
                                            os.path.join(b, case["name"], name), shallow=False))


if __name__ == "__main__":
    unittest.main()
