#!/usr/bin/env python3
"""Markdown for bench/results/gpu_serving.md (issue 9): the served path against the engine alone.

Inputs, all from one `bench/run_gpu.sh run BUNDLE served` call: gpu_bench's JSON (the engine
alone: decode tokens/s per batch, greedy, and top-k 50 + top-p 0.9 at batch 64) and one
linserve-loadtest JSON per served point; optionally (issue 38) a 16 + 1024-token greedy point,
the server's /metrics scraped before and after each point (the engine thread's time per step by
phase, linserve_engine_phase_seconds) and `nvidia-smi dmon -s u` sampled during it (SM busy).
Targets: served >= 85% of the engine alone (greedy) at concurrency 1, 64 and 256 (issue 38: also
1024); top-k 50 + top-p 0.9 at 64 >= 75% of the engine alone, greedy; SMs busy >= 90%.
"""
import argparse
import json
import re
import statistics

PHASES = ["inbox", "admit", "plan", "launch", "collect", "emit", "prefill", "exports", "other"]
_SAMPLE = re.compile(r'^linserve_engine_phase_seconds_(sum|count)\{phase="([a-z]+)"\} (\S+)$')


def phase_totals(text):
    """{phase: (seconds, steps)} from a Prometheus text scrape."""
    totals = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        kind, phase, value = m.groups()
        seconds, steps = totals.get(phase, (0.0, 0))
        if kind == "sum":
            seconds = float(value)
        else:
            steps = int(float(value))
        totals[phase] = (seconds, steps)
    return totals


def phases_per_step(before, after):
    """{phase: us per engine step} over the window between two scrapes, and the steps in it
    (the steps that ran any phase: those of `other`, which every step enters)."""
    a, b = phase_totals(before), phase_totals(after)
    steps = b.get("other", (0, 0))[1] - a.get("other", (0, 0))[1]
    if steps <= 0:
        return {}, 0
    return {ph: 1e6 * (b.get(ph, (0, 0))[0] - a.get(ph, (0, 0))[0]) / steps
            for ph in PHASES}, steps


def sm_busy(dmon_text):
    """Median SM busy % over `nvidia-smi dmon -s u` samples (its `sm` column), None without any."""
    header, samples = None, []
    for line in dmon_text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "#":
            if header is None and "sm" in fields:
                header = fields[1:]
            continue
        if header is None or len(fields) < len(header):
            continue
        try:
            samples.append(float(fields[header.index("sm")]))
        except ValueError:
            continue
    return statistics.median(samples) if samples else None


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--engine", required=True, help="gpu_bench --json_out file")
    p.add_argument("--greedy", nargs="+", default=[], metavar="C=FILE",
                   help="loadtest JSON of the greedy run at concurrency C")
    p.add_argument("--sampling", metavar="C=FILE",
                   help="loadtest JSON of the top-k 50 + top-p 0.9 run at concurrency C")
    p.add_argument("--long", metavar="C=FILE",
                   help="loadtest JSON of a greedy run with 1024 output tokens at concurrency C")
    p.add_argument("--phases", nargs="+", default=[], metavar="LABEL=BEFORE,AFTER",
                   help="/metrics scrapes before and after the served point LABEL")
    p.add_argument("--dmon", nargs="+", default=[], metavar="LABEL=FILE",
                   help="nvidia-smi dmon -s u output sampled during the served point LABEL")
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
        row(str(c), c, r["output_tokens_per_second"], 0.85 if c in (1, 64, 256, 1024) else None)
    long_run = load(a.long) if a.long else None
    if long_run:
        c, r = long_run
        row(f"{c}, 16 + 1024 tokens", c, r["output_tokens_per_second"], 0.85)
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
            [(f"{long_run[0]}, 16 + 1024 tokens", long_run[1])] if long_run else []) + (
            [(f"{sampled[0]}, top-k 50 + top-p 0.9", sampled[1])] if sampled else []):
        t, i = r["time_to_first_token_ms"], r["inter_token_latency_ms"]
        total = r.get("total", {})
        print(f"| {label} | {t['p50']:.2f} / {t['p99']:.2f} | {i['p50']:.2f} / {i['p99']:.2f} "
              f"| {total.get('requests', '–')} | {total.get('errors', '–')} |")

    if a.phases:
        dmon = dict(spec.split("=", 1) for spec in a.dmon)
        print()
        print("Where the engine thread's time goes, µs per engine step (the phases add up to the "
              "step period; `collect` is waiting for the GPU), and the SMs' busy share sampled "
              "by `nvidia-smi dmon` during the point:")
        print()
        print("| served point | steps | period | " + " | ".join(PHASES) + " | SM busy |")
        print("|---|---:|---:|" + "---:|" * len(PHASES) + "---:|")
        sm_verdicts = []
        for spec in a.phases:
            label, files = spec.split("=", 1)
            before, after = files.split(",", 1)
            per_step, steps = phases_per_step(open(before).read(), open(after).read())
            busy = sm_busy(open(dmon[label]).read()) if label in dmon else None
            period = sum(per_step.values())
            cells = " | ".join(f"{per_step.get(ph, 0):.0f}" for ph in PHASES)
            busy_cell = "–" if busy is None else f"{busy:.0f}%"
            print(f"| {label} | {steps:,} | {period:.0f} | {cells} | {busy_cell} |")
            if busy is not None:
                ok = busy >= 90
                sm_verdicts.append(f"- {label}: SMs busy {busy:.0f}% against 90%: "
                                   f"**{'met' if ok else 'missed'}**.")
        if sm_verdicts:
            print()
            print("\n".join(sm_verdicts))


if __name__ == "__main__":
    main()
