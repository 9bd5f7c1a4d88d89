#!/usr/bin/env python3
"""Tests of bench/gpu/compare_report.py (ctest: compare_report_test) on two hand-made gpu_bench
runs per build: rounds are listed in order, the speed-up is the baseline's median step over
ours (and ours over the baseline for prefill tokens/s), and a row without both builds is left
out. No GPU: the figures are the fixture's.
"""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare_report  # noqa: E402


def run(step_ms, prefill_tokens_per_s, extra_batch=None):
    decode = [{"label": "graphs", "batch": 1, "step_ms_median": step_ms},
              {"label": "no graphs", "batch": 1, "step_ms_median": 99.0}]
    if extra_batch:
        decode.append({"label": "graphs", "batch": extra_batch, "step_ms_median": 1.0})
    return {"device": "FAKE GPU", "shape": "based", "decode": decode,
            "prefill": [{"tokens": 2048, "tokens_per_s": prefill_tokens_per_s}]}


class CompareReportTest(unittest.TestCase):
    def test_table(self):
        runs = [("baseline", run(0.50, 1000)), ("ours", run(0.26, 1900, extra_batch=8)),
                ("baseline", run(0.54, 1100)), ("ours", run(0.24, 2100))]
        with tempfile.TemporaryDirectory() as tmp:
            args = ["compare_report.py"]
            for i, (who, data) in enumerate(runs):
                path = os.path.join(tmp, "%d.json" % i)
                with open(path, "w") as f:
                    json.dump(data, f)
                args.append("%s=%s" % (who, path))
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(compare_report.main(args), 0)
        text = out.getvalue()
        # Medians 0.52 and 0.25: 2.08×; the "no graphs" row is not a graphs row.
        self.assertIn("| based | 1 | 0.500 / 0.540 | 0.260 / 0.240 | 2.08× |", text)
        self.assertNotIn("99.000", text)
        # Batch 8 ran in one build only.
        self.assertNotIn("| based | 8 |", text)
        # Prefill: medians 2000 over 1050.
        self.assertIn("| based | 1000 / 1100 | 1900 / 2100 | 1.90× |", text)

    def test_usage(self):
        with redirect_stdout(io.StringIO()):
            self.assertEqual(compare_report.main(["compare_report.py", "other=x.json"]), 2)


if __name__ == "__main__":
    unittest.main()
