#!/usr/bin/env python3
"""Tests of bench/report/cpu_peer.py (ctest: cpu_peer_report_test) on the committed fixtures in
testdata/cpu_peer/: made-up figures in the shape of cpu_bench --json_out and
bench/llamacpp/run.sh's JSON (not measurements). Every cell printed is the fixture's figure for
that cell, every target's ratio and verdict follow from them, missing runs print as "–" / "n/a",
and runs that are not one session's (different threads, two runs of one kind) are refused.
"""

import copy
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cpu_peer  # noqa: E402

DATA = os.path.join(HERE, "testdata", "cpu_peer")
CPU_BENCH = ["fp32.json", "bf16.json", "int8.json", "fp32_ctx.json", "bf16_ctx.json",
             "int8_ctx.json"]


def load(name):
    with open(os.path.join(DATA, name)) as f:
        return json.load(f)


def tables(markdown):
    """Every markdown table as {first cell: [cells after it]}, with its header row's cells."""
    out, rows, header = [], None, None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            rows = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if rows is None:
            rows, header = {}, cells
            out.append((header, rows))
        elif not set(cells[0]) <= {"-"}:
            rows[cells[0]] = cells[1:]
    return out


def report(llamacpp=None, docs=None):
    return cpu_peer.markdown(cpu_peer.Runs(llamacpp or load("llamacpp.json"),
                                           docs if docs is not None else
                                           [load(n) for n in CPU_BENCH]))


class CellsTest(unittest.TestCase):
    def setUp(self):
        (self.header, self.cells), (_, self.targets) = tables(report())

    def cell(self, row, column):
        return self.cells[row][self.header.index(column) - 1]

    def test_linserve_cells_are_the_runs_figures(self):
        short = "decode, batch 1, short context (linserve 16, llama.cpp 128)"
        self.assertEqual(self.cell(short, "linserve int8"), "200.0")
        self.assertEqual(self.cell(short, "linserve bf16"), "150.0")
        # The sweep: batch / step: 32 / 50 ms.
        self.assertEqual(self.cell("decode, batch 32, context 4096", "linserve int8"), "640.0")
        self.assertEqual(self.cell("decode, batch 1, context 4096", "linserve fp32"), "80.0")
        self.assertEqual(self.cell("prefill, 2048-token prompt", "linserve int8"), "1,000.0")

    def test_llamacpp_cells_are_the_runs_figures(self):
        self.assertEqual(self.cell("decode, batch 8, short context (linserve 16, llama.cpp 128)",
                                   "llama.cpp GPT-2 F16"), "290.0")
        self.assertEqual(self.cell("decode, batch 32, context 4096", "llama.cpp RWKV-7 Q8_0"),
                         "400.0")
        self.assertEqual(self.cell("prefill, 2048-token prompt", "llama.cpp GPT-2 F32"), "360.0")

    def test_every_cell_and_column_is_there(self):
        self.assertEqual(len(self.cells), 7)
        self.assertEqual(len(self.header), 10)
        for row in self.cells.values():
            self.assertEqual(len(row), 9)
            self.assertNotIn("–", row)

    def test_targets_follow_from_the_figures(self):
        t = self.targets
        self.assertEqual(t["batch 1, short context: int8 vs llama.cpp GPT-2 Q8_0"],
                         ["1.25×", "≥ 1.00×", "met"])
        self.assertEqual(t["batch 1, short context: int8 share of its bandwidth floor"],
                         ["60%", "≥ 80%", "**missed**"])
        self.assertEqual(t["batch 1, short context: bf16 vs llama.cpp GPT-2 F16"],
                         ["1.25×", "≥ 1.00×", "met"])
        self.assertEqual(t["batch 32, context 4096: int8 vs llama.cpp RWKV-7 Q8_0"],
                         ["1.60×", "≥ 2.00×", "**missed**"])
        self.assertEqual(t["batch 32, context 4096: int8 vs llama.cpp GPT-2 Q8_0"],
                         ["6.40×", "≥ 5.00×", "met"])
        self.assertEqual(t["prefill 2048: int8 vs llama.cpp GPT-2 Q8_0"],
                         ["1.25×", "≥ 1.20×", "met"])
        self.assertEqual(t["prefill 2048: int8 vs llama.cpp RWKV-7 Q8_0"],
                         ["1.00×", "≥ 1.20×", "**missed**"])
        # Each format's GEMM share comes from its own run (the others' rows say 50%).
        self.assertEqual(t["prefill GEMMs (512 rows): int8 share of the int8 compute peak"],
                         ["75%", "≥ 70%", "met"])
        self.assertEqual(
            t["prefill GEMMs (512 rows): bf16 share of the bf16 (= fp32 FMA) compute peak"],
            ["65%", "≥ 70%", "**missed**"])
        self.assertEqual(t["whole prefill 2048: int8 share of the int8 compute peak"],
                         ["50%", "(for reference)", ""])


class MissingAndMismatchedTest(unittest.TestCase):
    def test_missing_runs_print_as_dashes_and_their_targets_as_na(self):
        llamacpp = load("llamacpp.json")
        llamacpp["models"] = [m for m in llamacpp["models"] if m["arch"] == "gpt2"]
        docs = [load(n) for n in CPU_BENCH if not n.startswith("bf16")]
        (header, cells), (_, targets) = tables(report(llamacpp, docs))
        row = cells["decode, batch 32, context 4096"]
        self.assertEqual(row[header.index("linserve bf16") - 1], "–")
        self.assertEqual(row[header.index("llama.cpp RWKV-7 Q8_0") - 1], "–")
        self.assertEqual(row[header.index("linserve int8") - 1], "640.0")
        self.assertEqual(targets["batch 32, context 4096: int8 vs llama.cpp RWKV-7 Q8_0"][2],
                         "n/a")
        self.assertEqual(targets["batch 1, short context: bf16 vs llama.cpp GPT-2 F16"][2], "n/a")
        self.assertEqual(targets["batch 32, context 4096: int8 vs llama.cpp GPT-2 Q8_0"][2], "met")

    def test_runs_on_other_threads_are_refused(self):
        docs = [load(n) for n in CPU_BENCH]
        docs[2]["threads"] = 4
        with self.assertRaisesRegex(SystemExit, "int8 on 4 threads, llama.cpp on 2"):
            report(docs=docs)

    def test_two_runs_of_one_kind_are_refused(self):
        docs = [load(n) for n in CPU_BENCH] + [copy.deepcopy(load("int8.json"))]
        with self.assertRaisesRegex(SystemExit, "two cpu_bench runs of the same kind for int8"):
            report(docs=docs)

    def test_the_command_line_prints_the_report(self):
        out = subprocess.run(
            [sys.executable, os.path.join(HERE, "cpu_peer.py"), "--llamacpp",
             os.path.join(DATA, "llamacpp.json")] + [os.path.join(DATA, n) for n in CPU_BENCH],
            check=True, capture_output=True, text=True).stdout
        self.assertEqual(out.strip(), report().strip())


if __name__ == "__main__":
    unittest.main()
