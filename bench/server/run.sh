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
# Optionally (issue 19) also time to first token against prompt length, at concurrency 1.
# Writes the raw figures to JSON_OUT (every round, and the medians) and prints the tables
# (bench/report/tables.py, from that JSON; bench/plots.sh draws the pictures from it).
# bench/results/server.md records runs of exactly:
#   bash bench/server/run.sh [BUILD_DIR [JSON_OUT]]
#     (BUILD_DIR default: build/cpu, as scripts/test.sh; JSON_OUT default: none)
# On a machine shared with other sessions, run it in a session of its own whose autogroup has
# priority, or the other sessions' share of the CPU decides the result:
#   setsid bash -c 'echo -10 > /proc/self/autogroup && bash bench/server/run.sh [BUILD_DIR]'
# Environment (defaults in brackets): LINSERVE_BENCH_MODEL [the bundled model; "random" or its
# absence: a random model of its shape], LINSERVE_BENCH_THREADS [1: backend threads of both],
# LINSERVE_BENCH_ROUNDS [3], LINSERVE_BENCH_SECONDS [6: measured seconds per round and side],
# LINSERVE_BENCH_WARMUP [2], LINSERVE_BENCH_OUTPUT_TOKENS [256: tokens per request; 16 prompt
# tokens each], LINSERVE_BENCH_CONCURRENCIES ["1 8 32"], LINSERVE_BENCH_PROMPT_LENGTHS [none:
# prompt lengths of the time-to-first-token sweep, e.g. "16 256 4096"; each measured for
# LINSERVE_BENCH_SECONDS after LINSERVE_BENCH_WARMUP, with 16 output tokens].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
json_out=${2:-}
python=${LINSERVE_PYTHON:-/usr/bin/python3}
threads=${LINSERVE_BENCH_THREADS:-1}
rounds=${LINSERVE_BENCH_ROUNDS:-3}
seconds=${LINSERVE_BENCH_SECONDS:-6}
warmup=${LINSERVE_BENCH_WARMUP:-2}
output_tokens=${LINSERVE_BENCH_OUTPUT_TOKENS:-256}
prompt_tokens=16
read -ra concurrencies <<<"${LINSERVE_BENCH_CONCURRENCIES:-1 8 32}"
read -ra prompt_lengths <<<"${LINSERVE_BENCH_PROMPT_LENGTHS:-}"
ttft_output_tokens=16
max_concurrency=$(printf '%s\n' "${concurrencies[@]}" | sort -n | tail -1)

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
# The model's name and shape, for the report's caption.
model_note=$("$python" -c 'import json, os, sys
c = json.load(open(os.path.join(sys.argv[1], "config.json")))
print("%s (vocabulary %d, d_model %d, %d layers, %d heads, d_ff %d), %s tokenizer" % (
    os.path.basename(os.path.normpath(sys.argv[1])), c["vocab_size"], c["d_model"],
    c["n_layers"], c["n_heads"], c["d_ff"], c.get("tokenizer", "byte")))' "$model" 2>/dev/null ||
  echo "$model")
if [[ $model == random || ! -f $model/config.json ]]; then
  "$build/bench/server/linserve-bench-model" --out="$tmp/model"
  model_note="random weights of the bundled model's shape (vocabulary 2048, d_model 256, 6 layers, 4 heads, d_ff 1024), byte tokenizer"
  [[ $model == random ]] || model_note="$model_note: $model was absent"
  model=$tmp/model
fi

"$build/server/linserve" --model="$model" --device=cpu --host=127.0.0.1 --port=0 \
  --metrics_port=-1 --http_port=-1 --port_file="$tmp/ports" --threads="$threads" \
  --max_batch_size="$max_concurrency" --log_level=warn >"$tmp/server.log" 2>&1 &
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
started=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git -C "$root" rev-parse --short HEAD)
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

for n in "${prompt_lengths[@]}"; do
  echo "prompt length $n: time to first token" >&2
  "$build/client/loadtest/linserve-loadtest" --target="127.0.0.1:$port" --concurrency=1 \
    --duration="${seconds}s" --warmup="${warmup}s" --prompt-tokens="$n" \
    --output-tokens="$ttft_output_tokens" --progress-interval=0 --json="$tmp/prompt_$n.json" \
    >/dev/null
done

[[ -n $json_out ]] || json_out=$tmp/served.json
"$python" - "$tmp" "$model_note" "$threads" "$rounds" "$seconds" "$warmup" "$output_tokens" \
  "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" "$started" \
  "$commit" "$json_out" "$ttft_output_tokens" \
  "${concurrencies[*]}" "${prompt_lengths[*]}" <<'PY'
import json, statistics, subprocess, sys
(tmp, model, threads, rounds, seconds, warmup, output_tokens, load_before, load_after, started,
 commit, json_out, ttft_output_tokens, concurrencies, prompt_lengths) = sys.argv[1:16]
rounds = int(rounds)
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
cores = int(subprocess.run(["nproc"], capture_output=True, text=True).stdout)
doc = {"benchmark": "served", "date": started, "commit": commit,
       "machine": {"cpu": cpu, "cores": cores, "device": "cpu"},
       "load_average_before": load_before, "load_average_after": load_after, "model": model,
       "settings": {"backend_threads": int(threads), "rounds": rounds,
                    "seconds": float(seconds), "warmup_seconds": float(warmup),
                    "prompt_tokens": 16, "output_tokens": int(output_tokens)},
       "concurrency": []}
for c in concurrencies.split():
    engine = [json.load(open(f"{tmp}/engine_{c}_{r}.json")) for r in range(1, rounds + 1)]
    loads = [json.load(open(f"{tmp}/load_{c}_{r}.json")) for r in range(1, rounds + 1)]
    cpus = [json.load(open(f"{tmp}/server_cpu_{c}_{r}.json")) for r in range(1, rounds + 1)]
    engine_tps = [e["tokens_per_second"] for e in engine]
    server_tps = [l["output_tokens_per_second"] for l in loads]
    ratios = [s / e for s, e in zip(server_tps, engine_tps)]
    median = sorted(loads, key=lambda l: l["output_tokens_per_second"])[len(loads) // 2]
    doc["concurrency"].append({
        "concurrency": int(c),
        "engine_tokens_per_second": statistics.median(engine_tps),
        "server_tokens_per_second": statistics.median(server_tps),
        "ratio": statistics.median(ratios), "ratios": ratios,
        "ttft_ms": median["time_to_first_token_ms"],
        "inter_token_latency_ms": median["inter_token_latency_ms"],
        "end_to_end_ms_p50": median["end_to_end_ms"]["p50"],
        "errors": sum(l["total"]["errors"] for l in loads),
        "engine_cpu_share_alone": statistics.median(e["cpu_seconds"] / e["seconds"]
                                                    for e in engine),
        "engine_cpu_share_server": statistics.median(x["engine_cpu_seconds"] / x["seconds"]
                                                     for x in cpus),
        "tokens_per_engine_cpu_second": statistics.median(
            (l["total"]["output_tokens"] / x["engine_cpu_seconds"]) /
            (e["tokens_per_second"] * e["seconds"] / e["cpu_seconds"])
            for l, x, e in zip(loads, cpus, engine)),
        "rounds": [{"engine": e, "load": l, "server_cpu": x}
                   for e, l, x in zip(engine, loads, cpus)]})
if prompt_lengths.split():
    doc["prompt_settings"] = {"output_tokens": int(ttft_output_tokens),
                              "seconds": float(seconds), "warmup_seconds": float(warmup)}
    doc["prompt_length"] = []
    for n in prompt_lengths.split():
        load = json.load(open(f"{tmp}/prompt_{n}.json"))
        doc["prompt_length"].append({"prompt_tokens": int(n),
                                     "ttft_ms": load["time_to_first_token_ms"],
                                     "requests": load["requests_ok"],
                                     "errors": load["requests_failed"], "load": load})
with open(json_out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
PY
"$python" "$root/bench/report/tables.py" "$json_out"
