#!/usr/bin/env bash
# The overlap of host and device work (issue 38) on a machine without a GPU:
# linserve-serving-loop-bench with --device_us=D, the InstantBackend behind DeviceClockBackend (a
# device thread that completes each decode step D us after it starts; the launch returns at
# once), the engine alone and behind gRPC with in-process streaming clients, at batch 64, 256 and
# 1024, with one step in flight at most (collect, then launch: the loop before launch-ahead) and
# with two (launch-ahead), for several rounds, reporting medians. Target: the step period at
# batch 256 with D = 1 ms within 1.1 x max(device step, host time per step) with launch-ahead.
# Prints markdown; the raw figures (every round, and the medians) go to JSON_OUT as JSON.
# bench/results/serving_loop.md ("The overlap, on a stand-in for the GPU") and
# serving_loop_device_clock.json record a run of exactly:
#   bash bench/serving_loop/run_device_clock.sh [BUILD_DIR [JSON_OUT]]
#     (BUILD_DIR default: build/cpu; JSON_OUT default: none)
# On a machine shared with other sessions, give it an autogroup of its own with priority:
#   setsid bash -c 'echo -10 > /proc/self/autogroup && bash bench/serving_loop/run_device_clock.sh'
# Environment (defaults in brackets): LINSERVE_BENCH_ROUNDS [2], LINSERVE_BENCH_SECONDS [4],
# LINSERVE_BENCH_WARMUP [1], LINSERVE_BENCH_BATCHES [64,256,1024], LINSERVE_BENCH_DEVICE_US
# [1000], LINSERVE_BENCH_PATHS [engine,grpc].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
json_out=${2:-}
python=${LINSERVE_PYTHON:-/usr/bin/python3}
rounds=${LINSERVE_BENCH_ROUNDS:-2}
seconds=${LINSERVE_BENCH_SECONDS:-4}
warmup=${LINSERVE_BENCH_WARMUP:-1}
batches=${LINSERVE_BENCH_BATCHES:-64,256,1024}
device_us=${LINSERVE_BENCH_DEVICE_US:-1000}
paths=${LINSERVE_BENCH_PATHS:-engine,grpc}

cmake --build "$build" --target linserve-serving-loop-bench >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$rounds"); do
  for in_flight in 1 2; do
    echo "round $r of $rounds, $in_flight step(s) in flight" >&2
    "$build/bench/serving_loop/linserve-serving-loop-bench" --paths="$paths" \
      --batches="$batches" --seconds="$seconds" --warmup_seconds="$warmup" \
      --device_us="$device_us" --steps_in_flight="$in_flight" \
      --json_out="$tmp/round_${r}_$in_flight.json" >/dev/null
  done
done

"$python" - "$tmp" "$rounds" "$seconds" "$warmup" "$device_us" "$load_before" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git -C "$root" rev-parse --short HEAD)" "$json_out" <<'PY'
import datetime, glob, json, statistics, subprocess, sys
tmp, rounds, seconds, warmup, device_us, load_before, load_after, commit, json_out = sys.argv[1:10]
runs = [p for f in sorted(glob.glob(f"{tmp}/round_*.json")) for p in json.load(open(f))]
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
fields = ["host_us_per_step", "backend_us_per_step", "host_busy_us_per_step", "period_over_bound",
          "device_busy_share", "client_tokens_per_second"]
phases = ["emit", "launch", "collect"]
points = []
for key in sorted({(p["path"], p["batch"], p["steps_in_flight"]) for p in runs},
                  key=lambda k: (k[0] != "engine", k[1], k[2])):
    each = [p for p in runs if (p["path"], p["batch"], p["steps_in_flight"]) == key]
    median = {f: statistics.median(p[f] for p in each) for f in fields}
    for ph in phases:
        median[ph] = statistics.median(p["phase_us_per_step"][ph] for p in each)
    points.append({"path": key[0], "batch": key[1], "steps_in_flight": key[2],
                   "median": median, "rounds": each})

print(f"Measured {date} at commit {commit}. CPU: {cpu}, {cores} cores; load average before "
      f"{load_before}, after {load_after}.")
print(f"D = {device_us} µs a decode step on the stand-in; vocabulary 50257, prompts of 16 tokens, "
      f"generations that never end within the window; {rounds} rounds per point, each {seconds} s "
      f"measured after {warmup} s of steady decoding at the full batch. Medians over the rounds.")
print()
print("| path | batch | steps in flight | step period µs | device step µs | host µs / step "
      "(emit / launch) | collect (host waits) µs | period / max(device, host) | device busy "
      "| tokens/s (clients) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for p in points:
    m = p["median"]
    name = "engine" if p["path"] == "engine" else "engine + gRPC"
    print(f"| {name} | {p['batch']} | {p['steps_in_flight']} | {m['host_us_per_step']:.0f} "
          f"| {m['backend_us_per_step']:.0f} | {m['host_busy_us_per_step']:.0f} "
          f"({m['emit']:.0f} / {m['launch']:.0f}) | {m['collect']:.0f} "
          f"| {m['period_over_bound']:.3f} | {100 * m['device_busy_share']:.1f}% "
          f"| {m['client_tokens_per_second']:,.0f} |")
print()
for p in points:
    if p["batch"] != 256 or p["steps_in_flight"] != 2:
        continue
    ratio = p["median"]["period_over_bound"]
    name = "engine" if p["path"] == "engine" else "engine + gRPC"
    verdict = "met" if ratio <= 1.1 else "missed"
    print(f"- {name}, batch 256, launch-ahead: step period {ratio:.3f} × max(device, host) "
          f"against the target of 1.1: **{verdict}**.")
if json_out:
    with open(json_out, "w") as f:
        json.dump({"date": date, "commit": commit, "cpu": cpu, "cores": int(cores),
                   "load_average_before": load_before, "load_average_after": load_after,
                   "rounds": int(rounds), "seconds": float(seconds),
                   "warmup_seconds": float(warmup), "device_us": int(device_us),
                   "vocab_size": 50257, "prompt_tokens": 16, "points": points}, f, indent=2)
        f.write("\n")
PY
