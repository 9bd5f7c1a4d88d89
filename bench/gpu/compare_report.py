#!/usr/bin/env python3
"""Decode step times of two gpu_bench builds on one GPU, side by side, as markdown.

  compare_report.py WHO=RUN.json [...]

Each argument is one `gpu_bench --json_out` run labelled `baseline` or `ours` (bench/run_gpu.sh
WHAT=compare runs them interleaved, two rounds per shape). For each shape and batch of the
"graphs" decode rows: every round's median step time of each build, and the baseline's median
over its rounds divided by ours (> 1: ours is faster). The 2048-token prefill likewise, in
tokens/s (ours over the baseline).
"""
import json
import statistics
import sys
from collections import OrderedDict

WHO = ("baseline", "ours")


def main(argv):
    if len(argv) < 2 or any(a.split("=", 1)[0] not in WHO for a in argv[1:]):
        sys.stderr.write(__doc__)
        return 2
    steps = OrderedDict()    # (shape, batch) -> {who: [ms, ...]}
    prefill = OrderedDict()  # shape -> {who: [tokens/s, ...]}
    device = None
    for arg in argv[1:]:
        who, path = arg.split("=", 1)
        with open(path) as f:
            run = json.load(f)
        device = device or run["device"]
        shape = run.get("shape", "125m")
        for row in run["decode"]:
            if row["label"] == "graphs":
                steps.setdefault((shape, row["batch"]), {w: [] for w in WHO})[who].append(
                    row["step_ms_median"])
        for row in run["prefill"]:
            if row["tokens"] == 2048:
                prefill.setdefault(shape, {w: [] for w in WHO})[who].append(row["tokens_per_s"])
    print("## Decode step against the baseline build, same GPU, same call\n")
    print("%s; bf16 weights, fp32 state, greedy, CUDA graphs; step ms = each run's median; "
          "rounds interleaved (baseline, ours).\n" % device)
    print("| shape | batch | baseline step ms (rounds) | ours step ms (rounds) | speed-up |")
    print("|---|---|---|---|---|")
    for (shape, batch), by in steps.items():
        if not by["baseline"] or not by["ours"]:
            continue
        ratio = statistics.median(by["baseline"]) / statistics.median(by["ours"])
        print("| %s | %d | %s | %s | %.2f× |" % (
            shape, batch, " / ".join("%.3f" % v for v in by["baseline"]),
            " / ".join("%.3f" % v for v in by["ours"]), ratio))
    if prefill:
        print("\n| shape | 2048-token prefill, baseline tokens/s | ours | ours / baseline |")
        print("|---|---|---|---|")
        for shape, by in prefill.items():
            if by["baseline"] and by["ours"]:
                print("| %s | %s | %s | %.2f× |" % (
                    shape, " / ".join("%.0f" % v for v in by["baseline"]),
                    " / ".join("%.0f" % v for v in by["ours"]),
                    statistics.median(by["ours"]) / statistics.median(by["baseline"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
