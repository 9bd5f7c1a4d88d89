#!/usr/bin/python3
"""Merges llamacpp_bench's per-pass JSON objects (bench/llamacpp/run.sh) into one JSON file and
prints a markdown table: the median over every round of every pass, for each model file.

  report.py --json_out OUT.json --meta META.json PASS.json [PASS.json ...]

META.json carries the run's settings (run.sh writes it); each PASS.json is one llamacpp_bench
output for one model file named <arch>-<dtype>.gguf. Output JSON (one object):
  llama_cpp, node_llama_cpp, threads, quick, steps, prefill_tokens, passes, rounds_per_pass,
  host, started_utc, wall_seconds, archs, dtypes, system_info          the run
  models: [{arch, dtype, desc, n_params, size_bytes, check_tokens, setup_seconds,
            decode: [{batch, context, tokens_per_s, rounds: [...]}],
            prefill_tokens_per_s, prefill_rounds: [...]}]
tokens_per_s and prefill_tokens_per_s are medians over rounds; decode figures are tokens per
second summed over the batch.
"""
import argparse
import json
import os
import statistics
import sys

ARCH_LABEL = {"gpt2": "GPT-2", "rwkv7": "RWKV-7"}
DTYPE_LABEL = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0"}


def merge(meta, passes):
    models = {}
    for p in passes:
        # run.sh names each model file <arch>-<dtype>.gguf.
        key = tuple(os.path.basename(p["model"])[:-len(".gguf")].split("-", 1))
        m = models.setdefault(key, {
            "arch": key[0], "dtype": key[1], "desc": p["desc"], "n_params": p["n_params"],
            "size_bytes": p["size_bytes"], "check_tokens": p["check_tokens"],
            "setup_seconds": 0.0, "decode": {}, "prefill_rounds": []})
        if p["check_tokens"] != m["check_tokens"]:
            raise SystemExit(f"{key}: greedy check tokens differ between passes")
        m["setup_seconds"] += p["setup_seconds"]
        for cell in p["decode"]:
            rounds = m["decode"].setdefault((cell["batch"], cell["context"]), [])
            rounds.extend(cell["tokens_per_s"])
        m["prefill_rounds"].extend(p["prefill_tokens_per_s"])
    out = dict(meta)
    out["system_info"] = passes[0]["system_info"] if passes else ""
    out["models"] = []
    for key in sorted(models, key=lambda k: (meta["archs"].index(k[0]),
                                             meta["dtypes"].index(k[1]))):
        m = models[key]
        m["decode"] = [{"batch": b, "context": c, "tokens_per_s": statistics.median(r),
                        "rounds": r}
                       for (b, c), r in sorted(m["decode"].items(),
                                               key=lambda x: (x[0][1], x[0][0]))]
        m["prefill_tokens_per_s"] = statistics.median(m["prefill_rounds"])
        out["models"].append(m)
    return out


def markdown(run):
    models = run["models"]
    lines = [
        f"llama.cpp {run['llama_cpp']} (node-llama-cpp {run['node_llama_cpp']}), CPU backend, "
        f"{run['threads']} threads, on {run['host']}; {run['started_utc']}, "
        f"{run['wall_seconds']:.0f} s{' (--quick)' if run['quick'] else ''}.",
        f"Median of {run['passes']} passes x {run['rounds_per_pass']} rounds, "
        f"{run['steps']} timed steps per decode cell; prefill of {run['prefill_tokens']} tokens.",
        "",
        "| tokens/s (decode: summed over the batch) | "
        + " | ".join(f"{ARCH_LABEL[m['arch']]} {DTYPE_LABEL[m['dtype']]}" for m in models) + " |",
        "|---|" + "---|" * len(models),
    ]
    cells = [(d["batch"], d["context"]) for d in models[0]["decode"]] if models else []
    for batch, context in cells:
        row = []
        for m in models:
            d = next(x for x in m["decode"] if (x["batch"], x["context"]) == (batch, context))
            row.append(f"{d['tokens_per_s']:,.1f}")
        lines.append(f"| decode, batch {batch}, context {context} | " + " | ".join(row) + " |")
    lines.append(f"| prefill, {run['prefill_tokens']}-token prompt | "
                 + " | ".join(f"{m['prefill_tokens_per_s']:,.1f}" for m in models) + " |")
    lines.append("| model size (MB, all tensors) | "
                 + " | ".join(f"{m['size_bytes'] / 1e6:,.0f}" for m in models) + " |")
    return "\n".join(lines)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json_out", required=True)
    p.add_argument("--meta", required=True)
    p.add_argument("passes", nargs="+")
    args = p.parse_args(argv)
    with open(args.meta) as f:
        meta = json.load(f)
    passes = []
    for path in args.passes:
        with open(path) as f:
            passes.append(json.load(f))
    run = merge(meta, passes)
    with open(args.json_out, "w") as f:
        json.dump(run, f, indent=1)
        f.write("\n")
    print(markdown(run))


if __name__ == "__main__":
    main(sys.argv[1:])
