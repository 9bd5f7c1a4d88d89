#!/usr/bin/env bash
# The server overhead benchmark of issue 6: linserve-loadtest against linserve on loopback with
# the CPU backend at concurrency 1, 8 and 32, each next to linserve-decode-bench (the engine
# alone: the backend's batched Decode plus sampling) at the same batch, with the same model and
# backend threads, in the same run. Target: the server streams >= 85% of the engine's tokens/s.
# Prints markdown; bench/results/server.md records a run of exactly:
#   bash bench/server/run.sh [BUILD_DIR]     (BUILD_DIR default: build/cpu, as scripts/test.sh)
# Environment (defaults in brackets): LINSERVE_BENCH_MODEL [the bundled model; "random" or its
# absence: a random model of its shape], LINSERVE_BENCH_THREADS [1: backend threads of both],
# LINSERVE_BENCH_SECONDS [15: measured seconds per point], LINSERVE_BENCH_WARMUP [3],
# LINSERVE_BENCH_OUTPUT_TOKENS [256: tokens per request; 16 prompt tokens each].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
python=${LINSERVE_PYTHON:-/usr/bin/python3}
threads=${LINSERVE_BENCH_THREADS:-1}
seconds=${LINSERVE_BENCH_SECONDS:-15}
warmup=${LINSERVE_BENCH_WARMUP:-3}
output_tokens=${LINSERVE_BENCH_OUTPUT_TOKENS:-256}
prompt_tokens=16
concurrencies=(1 8 32)

cmake --build "$build" --target linserve linserve-loadtest linserve-decode-bench \
  linserve-bench-model >&2
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

model=${LINSERVE_BENCH_MODEL:-$root/models/shakespeare-linear}
model_note="$model"
if [[ $model == random || ! -f $model/config.json ]]; then
  "$build/bench/server/linserve-bench-model" --out="$tmp/model"
  model_note="random weights of the bundled model's shape (vocabulary 2048, d_model 256, 6 layers, 4 heads, d_ff 1024), byte tokenizer"
  [[ $model == random ]] || model_note="$model_note: $model was absent"
  model=$tmp/model
fi

"$build/server/linserve" --model="$model" --device=cpu --host=127.0.0.1 --port=0 \
  --metrics_port=-1 --port_file="$tmp/ports" --threads="$threads" --max_batch_size=32 \
  --log_level=warn >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 600); do [[ -s $tmp/ports ]] && break; sleep 0.1; done
port=$(sed -n 's/^grpc_port=//p' "$tmp/ports" 2>/dev/null || true)
[[ -n $port ]] || { cat "$tmp/server.log" >&2; echo "run.sh: linserve did not start" >&2; exit 1; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for c in "${concurrencies[@]}"; do
  echo "concurrency $c: engine alone..." >&2
  "$build/bench/server/linserve-decode-bench" --model="$model" --batches="$c" \
    --seconds="$seconds" --warmup_seconds="$warmup" --prompt_tokens="$prompt_tokens" \
    --threads="$threads" >"$tmp/engine_$c.json" 2>/dev/null
  echo "concurrency $c: server..." >&2
  "$build/client/loadtest/linserve-loadtest" --target="127.0.0.1:$port" --concurrency="$c" \
    --duration="${seconds}s" --warmup="${warmup}s" --prompt-tokens="$prompt_tokens" \
    --output-tokens="$output_tokens" --progress-interval=0 --json="$tmp/load_$c.json" >/dev/null
done

"$python" - "$tmp" "$model_note" "$threads" "$seconds" "$warmup" "$output_tokens" \
  "$load_before" "${concurrencies[@]}" <<'PY'
import json, subprocess, sys
tmp, model, threads, seconds, warmup, output_tokens, load = sys.argv[1:8]
concurrencies = sys.argv[8:]
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
print(f"Model: {model}. CPU: {cpu}, {cores} cores; load average before: {load}.")
print(f"Backend threads {threads}; {seconds} s measured after {warmup} s warm-up per point; "
      f"requests of 16 prompt + {output_tokens} output tokens, temperature 1, closed loop.")
print()
print("| concurrency | engine alone tok/s | server tok/s | server / engine | TTFT p50 / p99 ms "
      "| inter-token p50 / p99 ms | end-to-end p50 ms | errors |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in concurrencies:
    engine = json.load(open(f"{tmp}/engine_{c}.json"))
    load = json.load(open(f"{tmp}/load_{c}.json"))
    e = engine["tokens_per_second"]
    s = load["output_tokens_per_second"]
    ttft, itl, e2e = (load["time_to_first_token_ms"], load["inter_token_latency_ms"],
                      load["end_to_end_ms"])
    errors = load["total"]["errors"]
    print(f"| {c} | {e:.0f} | {s:.0f} | {100 * s / e:.1f}% | {ttft['p50']:.2f} / {ttft['p99']:.2f} "
          f"| {itl['p50']:.2f} / {itl['p99']:.2f} | {e2e['p50']:.0f} | {errors} |")
PY
