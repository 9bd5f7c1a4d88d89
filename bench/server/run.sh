#!/usr/bin/env bash
# The server overhead benchmark of issue 6: linserve-loadtest against linserve on loopback with
# the CPU backend at concurrency 1, 8 and 32, each next to linserve-decode-bench (the engine
# alone: the backend's batched Decode plus sampling) at the same batch, with the same model and
# backend threads, in the same run. Target: the server streams >= 85% of the engine's tokens/s.
# The two alternate (engine, server, engine, server, ...) for several rounds per point and the
# report gives medians, so that other load on a shared machine weighs on both alike.
# The last two columns say whether the comparison was fair: how much of the time the engine
# thread was on a CPU (alone and in the server) and, per CPU-second of it, how many tokens the
# server's engine thread produced relative to the engine alone.
# Prints markdown; bench/results/server.md records a run of exactly:
#   bash bench/server/run.sh [BUILD_DIR]     (BUILD_DIR default: build/cpu, as scripts/test.sh)
# On a machine shared with other sessions, run it in a session of its own whose autogroup has
# priority, or the other sessions' share of the CPU decides the result:
#   setsid bash -c 'echo -10 > /proc/self/autogroup && bash bench/server/run.sh [BUILD_DIR]'
# Environment (defaults in brackets): LINSERVE_BENCH_MODEL [the bundled model; "random" or its
# absence: a random model of its shape], LINSERVE_BENCH_THREADS [1: backend threads of both],
# LINSERVE_BENCH_ROUNDS [3], LINSERVE_BENCH_SECONDS [6: measured seconds per round and side],
# LINSERVE_BENCH_WARMUP [2], LINSERVE_BENCH_OUTPUT_TOKENS [256: tokens per request; 16 prompt
# tokens each].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
python=${LINSERVE_PYTHON:-/usr/bin/python3}
threads=${LINSERVE_BENCH_THREADS:-1}
rounds=${LINSERVE_BENCH_ROUNDS:-3}
seconds=${LINSERVE_BENCH_SECONDS:-6}
warmup=${LINSERVE_BENCH_WARMUP:-2}
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

# "TID utime+stime" of every server thread, in clock ticks, sorted for join.
threads_cpu() {
  for task in /proc/"$server_pid"/task/*; do
    echo "$(basename "$task") $(awk '{print $14 + $15}' "$task/stat")"
  done | sort
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for c in "${concurrencies[@]}"; do
  for r in $(seq "$rounds"); do
    echo "concurrency $c, round $r: engine alone, then server" >&2
    "$build/bench/server/linserve-decode-bench" --model="$model" --batches="$c" \
      --seconds="$seconds" --warmup_seconds="$warmup" --prompt_tokens="$prompt_tokens" \
      --threads="$threads" >"$tmp/engine_${c}_$r.json" 2>/dev/null
    threads_cpu >"$tmp/cpu_before"
    start=$(date +%s.%N)
    "$build/client/loadtest/linserve-loadtest" --target="127.0.0.1:$port" --concurrency="$c" \
      --duration="${seconds}s" --warmup="${warmup}s" --prompt-tokens="$prompt_tokens" \
      --output-tokens="$output_tokens" --seed="$r" --progress-interval=0 \
      --json="$tmp/load_${c}_$r.json" >/dev/null
    end=$(date +%s.%N)
    threads_cpu >"$tmp/cpu_after"
    # The engine thread is the server's busiest; its CPU seconds over the whole load test (the
    # tokens it is compared with are the load test's total, warm-up included).
    join "$tmp/cpu_before" "$tmp/cpu_after" | awk -v hz="$(getconf CLK_TCK)" -v s="$start" \
      -v e="$end" '{ d = ($3 - $2) / hz; if (d > max) max = d }
                   END { printf "{\"engine_cpu_seconds\": %f, \"seconds\": %f}\n", max, e - s }' \
      >"$tmp/server_cpu_${c}_$r.json"
  done
done

"$python" - "$tmp" "$model_note" "$threads" "$rounds" "$seconds" "$warmup" "$output_tokens" \
  "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" "${concurrencies[@]}" <<'PY'
import json, statistics, subprocess, sys
tmp, model, threads, rounds, seconds, warmup, output_tokens, load_before, load_after = sys.argv[1:10]
concurrencies = sys.argv[10:]
rounds = int(rounds)
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
print(f"Model: {model}. CPU: {cpu}, {cores} cores; load average before {load_before}, "
      f"after {load_after}.")
print(f"Backend threads {threads}; per point {rounds} rounds of engine alone then server, each "
      f"{seconds} s measured after {warmup} s warm-up; requests of 16 prompt + {output_tokens} "
      f"output tokens, temperature 1, closed loop. Medians over the rounds; latencies from the "
      f"median round of the server.")
print()
print("| concurrency | engine alone tok/s | server tok/s | server / engine (rounds) "
      "| TTFT p50 / p99 ms | inter-token p50 / p99 ms | end-to-end p50 ms | errors "
      "| engine thread on CPU: alone / in server | tokens per engine CPU-second: server / engine |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in concurrencies:
    engine = [json.load(open(f"{tmp}/engine_{c}_{r}.json")) for r in range(1, rounds + 1)]
    loads = [json.load(open(f"{tmp}/load_{c}_{r}.json")) for r in range(1, rounds + 1)]
    cpus = [json.load(open(f"{tmp}/server_cpu_{c}_{r}.json")) for r in range(1, rounds + 1)]
    engine_tps = [e["tokens_per_second"] for e in engine]
    server_tps = [l["output_tokens_per_second"] for l in loads]
    ratios = [s / e for s, e in zip(server_tps, engine_tps)]
    median = sorted(loads, key=lambda l: l["output_tokens_per_second"])[len(loads) // 2]
    ttft, itl, e2e = (median["time_to_first_token_ms"], median["inter_token_latency_ms"],
                      median["end_to_end_ms"])
    errors = sum(l["total"]["errors"] for l in loads)
    each = ", ".join(f"{100 * r:.0f}%" for r in ratios)
    alone_share = statistics.median(e["cpu_seconds"] / e["seconds"] for e in engine)
    server_share = statistics.median(x["engine_cpu_seconds"] / x["seconds"] for x in cpus)
    per_cpu = statistics.median(
        (l["total"]["output_tokens"] / x["engine_cpu_seconds"]) /
        (e["tokens_per_second"] * e["seconds"] / e["cpu_seconds"])
        for l, x, e in zip(loads, cpus, engine))
    print(f"| {c} | {statistics.median(engine_tps):.0f} | {statistics.median(server_tps):.0f} "
          f"| **{100 * statistics.median(ratios):.1f}%** ({each}) "
          f"| {ttft['p50']:.2f} / {ttft['p99']:.2f} | {itl['p50']:.2f} / {itl['p99']:.2f} "
          f"| {e2e['p50']:.0f} | {errors} | {100 * alone_share:.0f}% / {100 * server_share:.0f}% "
          f"| {100 * per_cpu:.0f}% |")
PY
