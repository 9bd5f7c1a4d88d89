#!/usr/bin/env python3
"""Tests of bench/gpu/serving_report.py (ctest: serving_report_test) on hand-made inputs of one
served call: served / engine per point with its target, the 16 + 1024-token point, the engine
thread's µs per step by phase from two /metrics scrapes (the window's sums over its steps), and
the SMs' median busy share from `nvidia-smi dmon -s u` (header lines and malformed rows skipped).
No GPU: the figures are the fixture's.
"""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import serving_report  # noqa: E402


def scrape(steps, emit_s, collect_s):
    lines = ["# TYPE linserve_engine_phase_seconds histogram"]
    for phase in serving_report.PHASES:
        seconds = {"emit": emit_s, "collect": collect_s}.get(phase, 0.0)
        lines.append('linserve_engine_phase_seconds_bucket{phase="%s",le="+Inf"} %d'
                     % (phase, steps))
        lines.append('linserve_engine_phase_seconds_sum{phase="%s"} %g' % (phase, seconds))
        lines.append('linserve_engine_phase_seconds_count{phase="%s"} %d' % (phase, steps))
    return "\n".join(lines) + "\n"


DMON = """# gpu    sm   mem   enc   dec   jpg   ofa
# Idx     %     %     %     %     %     %
    0    91    40     0     0     0     0
    0    95    41     0     0     0     0
    0     -     -     -     -     -     -
    0    80    38     0     0     0     0
"""


def loadtest(tokens_per_s):
    return {"output_tokens_per_second": tokens_per_s,
            "time_to_first_token_ms": {"p50": 1.0, "p99": 2.0},
            "inter_token_latency_ms": {"p50": 0.5, "p99": 0.9},
            "total": {"requests": 10, "errors": 0}}


class ServingReportTest(unittest.TestCase):
    def test_phases_per_step(self):
        per_step, steps = serving_report.phases_per_step(scrape(100, 0.1, 0.2),
                                                         scrape(1100, 0.6, 1.2))
        self.assertEqual(steps, 1000)
        self.assertAlmostEqual(per_step["emit"], 500.0)
        self.assertAlmostEqual(per_step["collect"], 1000.0)
        self.assertEqual(per_step["inbox"], 0.0)
        self.assertEqual(serving_report.phases_per_step(scrape(5, 0, 0), scrape(5, 0, 0)),
                         ({}, 0))

    def test_sm_busy(self):
        self.assertEqual(serving_report.sm_busy(DMON), 91.0)
        self.assertIsNone(serving_report.sm_busy("# gpu sm\n# Idx %\n"))

    def test_report(self):
        with tempfile.TemporaryDirectory() as tmp:
            def write(name, content):
                path = os.path.join(tmp, name)
                with open(path, "w") as f:
                    f.write(content if isinstance(content, str) else json.dumps(content))
                return path
            engine = write("engine.json", {"decode": [{"batch": 256, "tokens_per_s": 200000.0}]})
            served = write("256.json", loadtest(180000.0))
            long_run = write("256_long.json", loadtest(150000.0))
            before = write("before.txt", scrape(100, 0.1, 0.2))
            after = write("after.txt", scrape(1100, 0.6, 1.2))
            dmon = write("dmon.txt", DMON)
            sys.argv = ["serving_report.py", "--engine", engine, "--greedy", "256=" + served,
                        "--long", "256=" + long_run, "--phases", "256=%s,%s" % (before, after),
                        "--dmon", "256=" + dmon, "--gpu", "FAKE GPU"]
            out = io.StringIO()
            with redirect_stdout(out):
                serving_report.main()
        text = out.getvalue()
        self.assertIn("| 256 | 180,000 | 200,000 | 90.0% |", text)
        self.assertIn("- 256: 90.0% of the engine alone (greedy) against 85%: **met**.", text)
        self.assertIn("| 256, 16 + 1024 tokens | 150,000 | 200,000 | 75.0% |", text)
        self.assertIn("**missed** by 10.0 points", text)
        self.assertIn("| 256 | 1,000 | 1500 | 0 | 0 | 0 | 0 | 1000 | 500 | 0 | 0 | 0 | 91% |",
                      text)
        self.assertIn("- 256: SMs busy 91% against 90%: **met**.", text)


if __name__ == "__main__":
    unittest.main()
