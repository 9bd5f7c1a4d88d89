#!/usr/bin/env python3
"""Markdown for bench/results/gpu_serving.md (issue 9): the served path against the engine alone.

Inputs, all from one `bench/run_gpu.sh run BUNDLE served` call: gpu_bench's JSON (the engine
alone: decode tokens/s per batch, greedy, and top-k 50 + top-p 0.9 at batch 64) and one
linserve-loadtest JSON per served point. Targets: served >= 85% of the engine alone (greedy) at
concurrency 1, 64 and 256; top-k 50 + top-p 0.9 at 64 >= 75% of the engine alone, greedy.
"""
import argparse
import json


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--engine", required=True, help="gpu_bench --json_out file")
    p.add_argument("--greedy", nargs="+", default=[], metavar="C=FILE",
                   help="loadtest JSON of the greedy run at concurrency C")
    p.add_argument("--sampling", metavar="C=FILE",
                   help="loadtest JSON of the top-k 50 + top-p 0.9 run at concurrency C")
    p.add_argument("--gpu", default="unknown GPU")
    p.add_argument("--command", default="bench/run_gpu.sh run build/gpu-bundle.tar.xz served")
    p.add_argument("--notes", default="")
    a = p.parse_args()

    engine = json.load(open(a.engine))
    greedy = {d["batch"]: d["tokens_per_s"] for d in engine.get("decode", [])}
    sampling_engine = engine.get("decode_sampling", {})

    def load(spec):
        c, path = spec.split("=", 1)
        return int(c), json.load(open(path))

    rows = [load(s) for s in a.greedy]
    sampled = load(a.sampling) if a.sampling else None

    print(f"GPU: {a.gpu}. Command: `{a.command}` (one device call).")
    print()
    print("Model: random weights of the 125M shape (vocabulary 50257, d_model 768, 12 layers, "
          "12 heads × 64, d_ff 3072), bf16 weights, fp32 state. Served: `linserve --device=cuda` "
          "and `linserve-loadtest` on loopback, closed loop, 16 prompt + 256 output tokens per "
          "request. Engine: `gpu_bench` (CudaBackend::DecodeAndSample alone) at the same batch, "
          "same machine, same call." + (f" {a.notes}" if a.notes else ""))
    print()
    print("| concurrency | served tok/s | engine tok/s | served / engine |")
    print("|---|---:|---:|---:|")
    verdicts = []

    def row(label, c, served, target):
        eng = greedy.get(c)
        if eng is None:
            print(f"| {label} | {served:,.0f} | (not measured) | – |")
            return
        ratio = served / eng
        print(f"| {label} | {served:,.0f} | {eng:,.0f} | {100 * ratio:.1f}% |")
        if target is not None:
            ok = ratio >= target
            verdicts.append(f"- {label}: {100 * ratio:.1f}% of the engine alone (greedy) against "
                            f"{100 * target:.0f}%: **{'met' if ok else 'missed'}**"
                            + ("" if ok else f" by {100 * (target - ratio):.1f} points") + ".")

    for c, r in rows:
        row(str(c), c, r["output_tokens_per_second"], 0.85 if c in (1, 64, 256) else None)
    if sampled:
        c, r = sampled
        row(f"{c}, top-k 50 + top-p 0.9", c, r["output_tokens_per_second"], 0.75)
    print()
    if sampling_engine:
        print(f"Engine alone with top-k 50 + top-p 0.9 (temperature 0.8, repetition penalty 1.1) "
              f"at batch {sampling_engine['batch']}: {sampling_engine['tokens_per_s']:,.0f} tok/s.")
        print()
    print("Targets:")
    print("\n".join(verdicts))
    print()
    print("| served point | TTFT p50 / p99 ms | inter-token p50 / p99 ms | requests | errors |")
    print("|---|---:|---:|---:|---:|")
    for label, r in [(str(c), r) for c, r in rows] + (
            [(f"{sampled[0]}, top-k 50 + top-p 0.9", sampled[1])] if sampled else []):
        t, i = r["time_to_first_token_ms"], r["inter_token_latency_ms"]
        total = r.get("total", {})
        print(f"| {label} | {t['p50']:.2f} / {t['p99']:.2f} | {i['p50']:.2f} / {i['p99']:.2f} "
              f"| {total.get('requests', '–')} | {total.get('errors', '–')} |")


if __name__ == "__main__":
    main()
