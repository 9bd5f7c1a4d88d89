#!/usr/bin/env python3
"""Tests of bench/report (ctest: bench_report_test): on the committed fixtures in testdata/,
plots.py writes every picture as a valid PNG of the expected size, and every figure drawn is the
figure its table prints (and the other way round); every committed result JSON's tables appear
verbatim in its results file. No timings: the figures are the fixtures'.
"""

import os
import re
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import matplotlib.pyplot as plt  # noqa: E402

import figures  # noqa: E402
import plots  # noqa: E402
import tables  # noqa: E402

# A scaling document with llama.cpp's peers and linserve int8 (issue 28) and the served one: one
# of each, as plots.py takes them. OLD_SCALING: a scaling document recorded before issue 28
# (linserve fp32 and the PyTorch softmax reference only), which must still render.
FIXTURES = [os.path.join(HERE, "testdata", n) for n in ("scaling_llamacpp.json", "served.json")]
OLD_SCALING = os.path.join(HERE, "testdata", "scaling.json")
RESULTS = os.path.join(HERE, "..", "results")
# (width, height) in pixels of each picture: figsize × plots.DPI.
SIZES = {"decode_vs_context.png": (1200, 520), "memory_vs_context.png": (1200, 520),
         "throughput_vs_concurrency.png": (800, 520), "ttft_vs_prompt.png": (800, 520)}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_chunks(data):
    """[(type, payload)] of a PNG, every chunk's CRC checked; raises ValueError if malformed."""
    if data[:8] != PNG_SIGNATURE:
        raise ValueError("no PNG signature")
    chunks, at = [], 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        payload = data[at + 8:at + 8 + length]
        crc = struct.unpack(">I", data[at + 8 + length:at + 12 + length])[0]
        if len(payload) != length or zlib.crc32(kind + payload) != crc:
            raise ValueError(f"chunk {kind!r} at {at} is truncated or fails its CRC")
        chunks.append((kind, payload))
        at += 12 + length
    return chunks


def parse_tables(markdown):
    """Every markdown table as a list of {header: cell} rows."""
    out, header = [], None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header, rows = cells, []
            out.append(rows)
        elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
            rows.append(dict(zip(header, cells)))
    return out


def number(cell):
    """The number a cell prints (commas, units, bold and a trailing "×" or "%" dropped)."""
    m = re.match(r"\**(-?[\d,]+(?:\.\d+)?)", cell)
    if not m:
        raise ValueError(f"no number in {cell!r}")
    return float(m.group(1).replace(",", ""))


def printed_tolerance(cell):
    """Half a unit of the last printed digit."""
    m = re.match(r"\**-?[\d,]+(?:\.(\d+))?", cell)
    return 0.5 * 10 ** -len(m.group(1) or "")


def drawn(fig):
    """{gid: [(x, y)]} of every line in a figure."""
    out = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_gid():
                out[line.get_gid()] = list(zip(line.get_xdata(), line.get_ydata()))
    return out


def disagreements(lines, rows, key, column, scale=1.0):
    """Where a drawn line and a table column differ: points drawn that the table prints
    otherwise or not at all, and numbers printed that are not drawn. `scale` converts the
    drawn unit to the printed one; `column` may pick a part of a "a / b" cell."""
    part = 0
    if isinstance(column, tuple):
        column, part = column
    printed = {}
    for row in rows:
        cell = row[column].split(" / ")[part]
        if re.match(r"\**-?\d", cell):
            printed[number(row[key])] = cell
    problems = []
    xs = set()
    for x, y in lines:
        xs.add(float(x))
        cell = printed.get(float(x))
        if cell is None:
            problems.append(f"{column}: {x} drawn, not printed")
        elif abs(number(cell) - y * scale) > printed_tolerance(cell) + 1e-9 * abs(y * scale):
            problems.append(f"{column} at {x}: drawn {y * scale}, printed {cell}")
    problems += [f"{column}: {x} printed, not drawn" for x in printed if x not in xs]
    return problems


def scaling_disagreements(doc):
    tables_printed = parse_tables(tables.markdown(doc))
    memory = tables_printed[-1]
    problems = []
    lines = drawn(plots.decode_vs_context(doc))
    for b, decode in zip(figures.batches(doc), tables_printed):
        for engine in figures.engines(doc):
            column = figures.ENGINES[engine]
            problems += disagreements(lines[f"{engine}/{b}"], decode, "context", column)
            if engine not in figures.BASELINES:
                continue
            cells = [(number(r["context"]), r[column]) for r in decode]
            for kind, printed in (("oom", "out of memory"), ("capped", "prefill capped")):
                gid = f"{engine}/{b}/{kind}"
                rows = [i for i, (_, cell) in enumerate(cells) if cell.startswith(printed)]
                if rows:
                    last_measured = cells[rows[0] - 1][0]
                    if gid not in lines or lines[gid][0][0] != last_measured:
                        problems.append(f"{engine}, batch {b}: the table stops ({printed}) after "
                                        f"{last_measured}, the picture marks {lines.get(gid)}")
                elif gid in lines:
                    problems.append(f"{engine}, batch {b}: the picture marks {kind}, the table "
                                    f"does not")
    lines = drawn(plots.memory_vs_context(doc))
    mib = 2**20
    columns = [("linserve", "linserve state, as the server reports it")]
    names = ["linserve"]
    for engine, what, short in (("llamacpp/rwkv7", "state", "RWKV-7"),
                                ("llamacpp/gpt2", "KV cache, F16", "GPT-2")):
        if engine in figures.engines(doc):
            columns.append((engine, f"{figures.ENGINES[engine]} {what}, from the shape"))
            names.append(short)
    columns.append(("softmax", "PyTorch softmax KV cache, measured"))
    names = " / ".join(names + ["PyTorch"])
    for part, (gid, column) in enumerate(columns):
        problems += disagreements(lines[f"{gid}/bytes"], memory, "context", column, mib)
        for g in figures.MEMORY_SIZES_GIB:
            problems += disagreements(lines[f"{gid}/fit{g}"], memory, "context",
                                      (f"sessions in {g} GiB: {names}", part))
    for fig in plt.get_fignums():
        plt.close(fig)
    return problems


def served_disagreements(doc):
    throughput, ttft = parse_tables(tables.markdown(doc))
    device = doc["machine"]["device"]
    lines = drawn(plots.throughput_vs_concurrency([doc]))
    problems = disagreements(lines[f"{device}/served"], throughput, "concurrency", "server tok/s")
    problems += disagreements(lines[f"{device}/engine"], throughput, "concurrency",
                              "engine alone tok/s")
    lines = drawn(plots.ttft_vs_prompt([doc]))
    problems += disagreements(lines[f"{device}/p50"], ttft, "prompt tokens", "TTFT p50 ms")
    problems += disagreements(lines[f"{device}/p99"], ttft, "prompt tokens", "TTFT p99 ms")
    for fig in plt.get_fignums():
        plt.close(fig)
    return problems


class PlotsTest(unittest.TestCase):
    def test_every_picture_is_a_valid_png_of_its_size(self):
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([sys.executable, os.path.join(HERE, "plots.py"), "--out", out,
                            *FIXTURES], check=True)
            self.assertEqual(sorted(os.listdir(out)), sorted(SIZES))
            for name, (width, height) in SIZES.items():
                with open(os.path.join(out, name), "rb") as f:
                    data = f.read()
                chunks = png_chunks(data)
                self.assertEqual(chunks[0][0], b"IHDR", name)
                self.assertEqual(struct.unpack(">II", chunks[0][1][:8]), (width, height), name)
                self.assertEqual(chunks[-1][0], b"IEND", name)
                self.assertIn(b"IDAT", [kind for kind, _ in chunks], name)
                # A blank canvas of this size compresses to a few kilobytes.
                self.assertGreater(len(data), 20_000, name)

    def test_png_check_rejects_a_corrupt_file(self):
        fig = plots.ttft_vs_prompt([figures.load(FIXTURES[1])])
        with tempfile.TemporaryDirectory() as out:
            path = os.path.join(out, "x.png")
            fig.savefig(path, dpi=plots.DPI)
            plt.close(fig)
            with open(path, "rb") as f:
                data = bytearray(f.read())
        png_chunks(bytes(data))
        data[40] ^= 0xFF
        with self.assertRaises(ValueError):
            png_chunks(bytes(data))


class AgreementTest(unittest.TestCase):
    def test_scaling_tables_and_pictures_agree(self):
        self.assertEqual(scaling_disagreements(figures.load(FIXTURES[0])), [])

    def test_a_scaling_document_from_before_llamacpp_still_agrees(self):
        doc = figures.load(OLD_SCALING)
        self.assertEqual(figures.engines(doc), ["linserve", "softmax"])
        self.assertEqual(scaling_disagreements(doc), [])

    def test_llamacpp_lines_are_drawn_and_pytorch_is_the_labelled_reference(self):
        doc = figures.load(FIXTURES[0])
        fig = plots.decode_vs_context(doc)
        labels = {line.get_gid(): line.get_label() for ax in fig.axes for line in ax.get_lines()}
        plt.close("all")
        for b in (1, 32):
            for engine in ("linserve", "linserve_int8", "llamacpp/gpt2", "llamacpp/rwkv7",
                           "softmax"):
                self.assertIn(f"{engine}/{b}", labels)
            self.assertTrue(labels[f"softmax/{b}"].startswith("PyTorch eager softmax reference"))
            self.assertTrue(labels[f"llamacpp/gpt2/{b}"].startswith("llama.cpp GPT-2 Q8_0"))
            self.assertTrue(labels[f"llamacpp/rwkv7/{b}"].startswith("llama.cpp RWKV-7 Q8_0"))

    def test_memory_of_llamacpp_follows_the_shape(self):
        doc = figures.load(FIXTURES[0])
        # GPT-2's F16 K and V: 12 layers x 2 x 768 values x 2 bytes per token.
        self.assertEqual(figures.session_bytes(doc, "llamacpp/gpt2")[1], (1024, 1024 * 36864))
        # RWKV-7's F32 state: 12 layers x (2 x 768 shifted + 768 x 64 WKV) x 4 bytes.
        self.assertEqual({b for _, b in figures.session_bytes(doc, "llamacpp/rwkv7")}, {2433024})
        lines = drawn(plots.memory_vs_context(doc))
        plt.close("all")
        self.assertEqual(lines["llamacpp/gpt2/bytes"][2], (8192, 8192 * 36864 / 2**20))

    def test_served_tables_and_pictures_agree(self):
        self.assertEqual(served_disagreements(figures.load(FIXTURES[1])), [])

    def test_a_figure_drawn_otherwise_is_caught(self):
        doc = figures.load(FIXTURES[0])
        original = tables.markdown(doc)
        doc["softmax"]["points"][1]["step_ms"] += 0.01
        self.assertNotEqual(tables.markdown(doc), original)
        # Tables and pictures come from the same document, so they still agree...
        self.assertEqual(scaling_disagreements(doc), [])
        # ...and a table that printed the old figure would not.
        decode = parse_tables(original)[0]
        lines = drawn(plots.decode_vs_context(doc))
        plt.close("all")
        self.assertNotEqual(disagreements(lines["softmax/1"], decode, "context",
                                          "PyTorch softmax"), [])

    def test_the_out_of_memory_point_is_marked(self):
        for path in (FIXTURES[0], OLD_SCALING):
            doc = figures.load(path)
            lines = drawn(plots.decode_vs_context(doc))
            plt.close("all")
            self.assertEqual(lines["softmax/32/oom"], [(1024, 1204.333)])
            self.assertNotIn("softmax/1/oom", lines)

    def test_llamacpp_stops_are_marked(self):
        doc = figures.load(FIXTURES[0])
        lines = drawn(plots.decode_vs_context(doc))
        plt.close("all")
        self.assertEqual(lines["llamacpp/gpt2/32/oom"], [(128, 60.5)])
        self.assertEqual(lines["llamacpp/gpt2/1/capped"], [(1024, 7.25)])
        self.assertNotIn("llamacpp/gpt2/1/oom", lines)
        self.assertNotIn("llamacpp/rwkv7/1/oom", lines)
        self.assertNotIn("llamacpp/rwkv7/32/capped", lines)
        printed = tables.markdown(doc)
        self.assertIn("| 8192 | 16.05 | 9.20 | prefill capped: 6,144 tokens in 180 s |", printed)
        self.assertIn("out of memory: needs 1.4 GiB", printed)

    def test_every_picture_carries_machine_model_and_date(self):
        for path in FIXTURES + [OLD_SCALING]:
            doc = figures.load(path)
            for name, fig in plots.draw([doc]).items():
                text = " ".join(" ".join(t.get_text() for t in fig.texts).split())
                for part in (doc["machine"]["cpu"], doc["model"], doc["date"]):
                    self.assertIn(" ".join(part.split()), text, name)
            plt.close("all")


class ResultsTest(unittest.TestCase):
    def test_committed_tables_are_the_committed_json(self):
        """Each bench/results/X.json's tables appear verbatim in bench/results/X.md."""
        found = 0
        for name in sorted(os.listdir(RESULTS)):
            if not name.endswith(".json"):
                continue
            doc = figures.load(os.path.join(RESULTS, name))
            if not isinstance(doc, dict) or doc.get("benchmark") not in tables.WRITERS:
                continue
            found += 1
            with open(os.path.join(RESULTS, name[:-len(".json")] + ".md")) as f:
                self.assertIn(tables.markdown(doc), f.read(), name)
        self.assertGreater(found, 0, "no result JSON with tables in bench/results")


if __name__ == "__main__":
    unittest.main()
