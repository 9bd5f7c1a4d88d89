#!/usr/bin/env python3
"""linserve's CPU weight formats beside llama.cpp, from one bench/run_cpu.sh session (issue 28):
prints markdown, a table of every cell and a table of the issue's targets.

    cpu_peer.py --llamacpp LLAMACPP.json CPU_BENCH.json [CPU_BENCH.json ...]

LLAMACPP.json is bench/llamacpp/run.sh's output (bench/llamacpp/report.py documents it). Each
CPU_BENCH.json is a cpu_bench --json_out file: the main mode's ("mode": "main") or the context
sweep's ("points"), each for one --weight_precision (fp32, bf16 or int8; at most one of each kind
per format). A figure whose run is missing prints as "–" and a target that needs it as "n/a".

Cells: decode at batch 1, 8 and 32 at a short context (linserve: cpu_bench's decode table,
sessions of 16 tokens; llama.cpp: context 128) and at context 4096 (linserve: the sweep), tokens/s
summed over the batch; prefill of the 2048-token prompt, tokens/s. A linear-attention step costs
the same at any context; the 4096 cells measure it there.
"""

import argparse
import json
import sys

FORMATS = ("fp32", "bf16", "int8")
PEERS = [("gpt2", "f32"), ("gpt2", "f16"), ("gpt2", "q8_0"),
         ("rwkv7", "f32"), ("rwkv7", "f16"), ("rwkv7", "q8_0")]
ARCH_LABEL = {"gpt2": "GPT-2", "rwkv7": "RWKV-7"}
DTYPE_LABEL = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0"}
BATCHES = (1, 8, 32)
SHORT = 128  # llama.cpp's short context
LONG = 4096


class Runs:
    """The figures of one session, looked up by cell; None where a run is missing."""

    def __init__(self, llamacpp, cpu_bench):
        self.llamacpp = llamacpp
        self.main, self.sweep = {}, {}
        for doc in cpu_bench:
            fmt = doc["weight_precision"]
            if fmt not in FORMATS:
                raise SystemExit(f"cpu_peer: weight_precision {fmt!r} is not one of {FORMATS}")
            kind = self.main if doc.get("mode") == "main" else self.sweep
            if fmt in kind:
                raise SystemExit(f"cpu_peer: two cpu_bench runs of the same kind for {fmt}")
            if doc["threads"] != llamacpp["threads"]:
                raise SystemExit(f"cpu_peer: cpu_bench ran {fmt} on {doc['threads']} threads, "
                                 f"llama.cpp on {llamacpp['threads']}: not the same run")
            kind[fmt] = doc
        self.models = {(m["arch"], m["dtype"]): m for m in llamacpp["models"]}

    def linserve_decode(self, fmt, batch, context):
        if context == SHORT:
            doc = self.main.get(fmt)
            rows = [d for d in doc["decode"] if d["batch"] == batch] if doc else []
            return rows[0]["tokens_per_s"] if rows else None
        doc = self.sweep.get(fmt)
        points = [p for p in doc["points"] if (p["batch"], p["context"]) == (batch, context)] \
            if doc else []
        return batch / (points[0]["step_ms"] / 1e3) if points else None

    def linserve_prefill(self, fmt):
        doc = self.main.get(fmt)
        rows = [p for p in doc["prefill"] if p["mode"] == "chunked"] if doc else []
        return rows[0]["tokens_per_s"] if rows else None

    def peer_decode(self, arch, dtype, batch, context):
        m = self.models.get((arch, dtype))
        cells = [d for d in m["decode"] if (d["batch"], d["context"]) == (batch, context)] \
            if m else []
        return cells[0]["tokens_per_s"] if cells else None

    def peer_prefill(self, arch, dtype):
        m = self.models.get((arch, dtype))
        return m["prefill_tokens_per_s"] if m else None

    def bandwidth_share(self, fmt, batch):
        doc = self.main.get(fmt)
        rows = [d for d in doc["decode"] if d["batch"] == batch] if doc else []
        return rows[0]["of_bandwidth_floor"] if rows else None

    def gemm_share(self, fmt):
        """The prefill-shape Linear of `fmt`, measured in fmt's own run, as a share of its peak."""
        doc = self.main.get(fmt)
        rows = [r for r in doc["prefill_linear"] if r["weights"] == fmt] if doc else []
        return rows[0]["of_peak"] if rows else None

    def prefill_share(self, fmt):
        doc = self.main.get(fmt)
        rows = [p for p in doc["prefill"] if p["mode"] == "chunked"] if doc else []
        return rows[0]["of_format_peak"] if rows else None


def tps(x):
    return "–" if x is None else f"{x:,.1f}"


def div(a, b):
    return None if a is None or b is None else a / b


def cells_table(runs):
    header = ([f"linserve {f}" for f in FORMATS]
              + [f"llama.cpp {ARCH_LABEL[a]} {DTYPE_LABEL[d]}" for a, d in PEERS])
    lines = ["| tokens/s (decode: summed over the batch) | " + " | ".join(header) + " |",
             "|---|" + "---|" * len(header)]
    for context in (SHORT, LONG):
        for batch in BATCHES:
            label = (f"decode, batch {batch}, short context (linserve 16, llama.cpp {SHORT})"
                     if context == SHORT else f"decode, batch {batch}, context {context}")
            row = ([runs.linserve_decode(f, batch, context) for f in FORMATS]
                   + [runs.peer_decode(a, d, batch, context) for a, d in PEERS])
            lines.append(f"| {label} | " + " | ".join(tps(x) for x in row) + " |")
    row = [runs.linserve_prefill(f) for f in FORMATS] + [runs.peer_prefill(a, d) for a, d in PEERS]
    lines.append("| prefill, 2048-token prompt | " + " | ".join(tps(x) for x in row) + " |")
    return lines


def targets(runs):
    """[(target, value, goal, kind)]: kind "x" for a ratio, "%" for a share; goal None for a
    figure shown beside the targets for reference (the issue's 70% is for the GEMMs)."""
    short_b1 = lambda f: runs.linserve_decode(f, 1, SHORT)  # noqa: E731
    int8_b32 = runs.linserve_decode("int8", 32, LONG)
    return [
        ("batch 1, short context: int8 vs llama.cpp GPT-2 Q8_0",
         div(short_b1("int8"), runs.peer_decode("gpt2", "q8_0", 1, SHORT)), 1.0, "x"),
        ("batch 1, short context: int8 share of its bandwidth floor",
         runs.bandwidth_share("int8", 1), 0.8, "%"),
        ("batch 1, short context: bf16 vs llama.cpp GPT-2 F16",
         div(short_b1("bf16"), runs.peer_decode("gpt2", "f16", 1, SHORT)), 1.0, "x"),
        (f"batch 32, context {LONG}: int8 vs llama.cpp RWKV-7 Q8_0",
         div(int8_b32, runs.peer_decode("rwkv7", "q8_0", 32, LONG)), 2.0, "x"),
        (f"batch 32, context {LONG}: int8 vs llama.cpp GPT-2 Q8_0",
         div(int8_b32, runs.peer_decode("gpt2", "q8_0", 32, LONG)), 5.0, "x"),
        ("prefill 2048: int8 vs llama.cpp GPT-2 Q8_0",
         div(runs.linserve_prefill("int8"), runs.peer_prefill("gpt2", "q8_0")), 1.2, "x"),
        ("prefill 2048: int8 vs llama.cpp RWKV-7 Q8_0",
         div(runs.linserve_prefill("int8"), runs.peer_prefill("rwkv7", "q8_0")), 1.2, "x"),
        ("prefill GEMMs (512 rows): int8 share of the int8 compute peak",
         runs.gemm_share("int8"), 0.7, "%"),
        ("prefill GEMMs (512 rows): bf16 share of the bf16 (= fp32 FMA) compute peak",
         runs.gemm_share("bf16"), 0.7, "%"),
        ("whole prefill 2048: int8 share of the int8 compute peak",
         runs.prefill_share("int8"), None, "%"),
        ("whole prefill 2048: bf16 share of the bf16 compute peak",
         runs.prefill_share("bf16"), None, "%"),
    ]


def show(x, kind):
    if x is None:
        return "–"
    return f"{x:.2f}×" if kind == "x" else f"{100 * x:.0f}%"


def targets_table(runs):
    lines = ["| target (issue 28) | result | goal | |", "|---|---|---|---|"]
    for name, value, goal, kind in targets(runs):
        if goal is None:
            lines.append(f"| {name} | {show(value, kind)} | (for reference) | |")
            continue
        verdict = "n/a" if value is None else ("met" if value >= goal else "**missed**")
        lines.append(f"| {name} | {show(value, kind)} | ≥ {show(goal, kind)} | {verdict} |")
    return lines


def markdown(runs):
    ll = runs.llamacpp
    peaks = [f"{f}: {d['compute_peak']['isa']} path, fp32 {d['compute_peak']['fp32_gflops']:.0f} "
             f"GFLOP/s, int8 {d['compute_peak']['int8_gops']:.0f} GOP/s"
             for f, d in sorted(runs.main.items())]
    lines = [f"llama.cpp {ll['llama_cpp']} (node-llama-cpp {ll['node_llama_cpp']}), CPU backend, "
             f"{'--quick, ' if ll['quick'] else ''}{ll['passes']} pass(es) × "
             f"{ll['rounds_per_pass']} rounds of {ll['steps']} steps, on {ll['host']}, "
             f"{ll['started_utc']}; linserve cpu_bench in the same session, {ll['threads']} "
             "threads each.",
             "Compute peaks measured by each cpu_bench run: " + ("; ".join(peaks) or "–") + ".",
             ""]
    lines += cells_table(runs)
    lines += [""]
    lines += targets_table(runs)
    return "\n".join(lines)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llamacpp", required=True, help="bench/llamacpp/run.sh's JSON")
    p.add_argument("cpu_bench", nargs="+", help="cpu_bench --json_out files")
    args = p.parse_args(argv)
    with open(args.llamacpp) as f:
        llamacpp = json.load(f)
    docs = []
    for path in args.cpu_bench:
        with open(path) as f:
            docs.append(json.load(f))
    print(markdown(Runs(llamacpp, docs)))


if __name__ == "__main__":
    main(sys.argv[1:])
