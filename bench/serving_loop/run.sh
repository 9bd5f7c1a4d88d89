#!/usr/bin/env bash
# The serving-loop ceiling of issue 9: linserve-serving-loop-bench (the engine alone, then the
# engine behind gRPC on loopback with in-process streaming clients, both over a backend whose
# step costs nothing; vocabulary 50257) at batch 64 and 256, for several rounds, reporting
# medians. Target: the engine's host time per step at batch 256 <= 250 us on this machine.
# Prints markdown; the raw figures (every round, and the medians) go to JSON_OUT as JSON.
# bench/results/serving_loop.md and serving_loop.json record a run of exactly:
#   bash bench/serving_loop/run.sh [BUILD_DIR [JSON_OUT]]
#     (BUILD_DIR default: build/cpu; JSON_OUT default: none)
# On a machine shared with other sessions, give it an autogroup of its own with priority:
#   setsid bash -c 'echo -10 > /proc/self/autogroup && bash bench/serving_loop/run.sh ...'
# Environment (defaults in brackets): LINSERVE_BENCH_ROUNDS [3], LINSERVE_BENCH_SECONDS [5:
# measured seconds per point and round], LINSERVE_BENCH_WARMUP [1], LINSERVE_BENCH_BATCHES
# [64,256].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
json_out=${2:-}
python=${LINSERVE_PYTHON:-/usr/bin/python3}
rounds=${LINSERVE_BENCH_ROUNDS:-3}
seconds=${LINSERVE_BENCH_SECONDS:-5}
warmup=${LINSERVE_BENCH_WARMUP:-1}
batches=${LINSERVE_BENCH_BATCHES:-64,256}

cmake --build "$build" --target linserve-serving-loop-bench >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$rounds"); do
  echo "round $r of $rounds" >&2
  "$build/bench/serving_loop/linserve-serving-loop-bench" --paths=engine,grpc \
    --batches="$batches" --seconds="$seconds" --warmup_seconds="$warmup" \
    --json_out="$tmp/round_$r.json" >/dev/null
done

"$python" - "$tmp" "$rounds" "$seconds" "$warmup" "$load_before" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git -C "$root" rev-parse --short HEAD)" "$json_out" <<'PY'
import datetime, json, statistics, subprocess, sys
tmp, rounds, seconds, warmup, load_before, load_after, commit, json_out = sys.argv[1:9]
rounds = int(rounds)
runs = [json.load(open(f"{tmp}/round_{r}.json")) for r in range(1, rounds + 1)]
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
target_us = 250.0
fields = ["host_us_per_step", "engine_thread_cpu_us_per_step", "backend_us_per_step",
          "tokens_per_second", "client_tokens_per_second", "engine_thread_cpu_share",
          "process_cpu_seconds_per_second"]
points = []
for point in runs[0]:
    key = (point["path"], point["batch"])
    each = [p for run in runs for p in run if (p["path"], p["batch"]) == key]
    median = {f: statistics.median(p[f] for p in each) for f in fields}
    points.append({"path": key[0], "batch": key[1], "median": median, "rounds": each})

print(f"Measured {date} at commit {commit}. CPU: {cpu}, {cores} cores; load average before "
      f"{load_before}, after {load_after}.")
print(f"Vocabulary 50257, prompts of 16 tokens, generations that never end within the window; "
      f"{rounds} rounds of (engine, then engine + gRPC) per batch, each {seconds} s measured "
      f"after {warmup} s of steady decoding at the full batch. Medians over the rounds.")
print()
print("| path | batch | host µs / step (wall) | engine thread CPU µs / step | of which in the "
      "backend | tokens/s (engine) | tokens/s (clients) | engine thread on CPU | process CPU "
      "(cores) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for p in points:
    m = p["median"]
    name = "engine" if p["path"] == "engine" else "engine + gRPC"
    print(f"| {name} | {p['batch']} | {m['host_us_per_step']:.1f} "
          f"| {m['engine_thread_cpu_us_per_step']:.1f} | {m['backend_us_per_step']:.1f} "
          f"| {m['tokens_per_second']:,.0f} | {m['client_tokens_per_second']:,.0f} "
          f"| {100 * m['engine_thread_cpu_share']:.0f}% "
          f"| {m['process_cpu_seconds_per_second']:.2f} |")
print()
for p in points:
    if p["batch"] != 256:
        continue
    m = p["median"]
    wall, own = m["host_us_per_step"], m["engine_thread_cpu_us_per_step"]
    name = "engine" if p["path"] == "engine" else "engine + gRPC"
    verdict = "met" if wall <= target_us else f"missed by {wall - target_us:.0f} µs"
    print(f"- {name}, batch 256: {wall:.0f} µs per step (wall; {own:.0f} µs of engine-thread "
          f"CPU) against the target of {target_us:.0f} µs: **{verdict}** "
          f"({100 * wall / target_us:.0f}% of the budget).")
if json_out:
    with open(json_out, "w") as f:
        json.dump({"date": date, "commit": commit, "cpu": cpu, "cores": int(cores),
                   "load_average_before": load_before, "load_average_after": load_after,
                   "rounds": rounds, "seconds": float(seconds), "warmup_seconds": float(warmup),
                   "vocab_size": 50257, "prompt_tokens": 16,
                   "target_engine_us_per_step_at_256": target_us, "points": points}, f, indent=2)
        f.write("\n")
PY
