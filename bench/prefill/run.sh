#!/usr/bin/env bash
# The prefill serving benchmark of issue 16, in one run. For N in LENGTHS and c in 1 and 8,
# ROUNDS rounds alternating (so that other load on a shared machine weighs on both alike):
#  1. the engine alone (linserve-prefill-bench): c random prompts of N tokens, each fed whole in
#     one PrefillAndSample call;
#  2. linserve driven by linserve-loadtest with the same prompts' shape (output 1 token, so the
#     end of a request is its first token), c requests started together. Served prefill
#     tokens/s is prompt tokens over the wave's last time to first token, next to the engine
#     alone's; the report gives medians over the rounds.
# Then, for the decoding streams:
#  3. STREAMS sessions decoding OUTPUT tokens each, alone and while a closed loop of one
#     PROMPT_LOAD-token prompt after another runs beside them, ITL_ROUNDS times alternately; the
#     streams' inter-token p50/p99 with and without the prompts.
# Prints markdown; bench/results/prefill_serving.md records a run of
#   bash bench/prefill/run.sh [BUILD_DIR]      (BUILD_DIR default: build/cpu)
# On a machine shared with other sessions, run it in a session whose autogroup has priority:
#   setsid bash -c 'echo -10 > /proc/self/autogroup && bash bench/prefill/run.sh [BUILD_DIR]'
# The prompt loop has no report of its own (it is stopped when the streams end): the prompt
# tokens the server fed meanwhile come from its /metrics.
# Environment (defaults in brackets): LINSERVE_BENCH_BIN [unset: the binaries of BUILD_DIR,
# built first; else a directory holding them all, e.g. run_gpu.sh's bundle/bin],
# LINSERVE_BENCH_DEVICE [cpu], LINSERVE_BENCH_MODEL [the bundled model], LINSERVE_BENCH_THREADS
# [1: CPU backend threads of both sides], LINSERVE_BENCH_LENGTHS [2048 8192 32768],
# LINSERVE_BENCH_ROUNDS [3: rounds per point], LINSERVE_BENCH_STREAMS [32], LINSERVE_BENCH_OUTPUT
# [768: tokens per stream],
# LINSERVE_BENCH_PROMPT_LOAD [8192], LINSERVE_BENCH_ITL_ROUNDS [2], LINSERVE_BENCH_SERVER_FLAGS
# [none: extra linserve flags, e.g. --weight_precision=bf16], LINSERVE_BENCH_PARTS [ttft streams:
# which of the two to run].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
python=${LINSERVE_PYTHON:-python3}
device=${LINSERVE_BENCH_DEVICE:-cpu}
threads=${LINSERVE_BENCH_THREADS:-1}
read -ra lengths <<<"${LINSERVE_BENCH_LENGTHS:-2048 8192 32768}"
rounds=${LINSERVE_BENCH_ROUNDS:-3}
streams=${LINSERVE_BENCH_STREAMS:-32}
output=${LINSERVE_BENCH_OUTPUT:-768}
prompt_load=${LINSERVE_BENCH_PROMPT_LOAD:-8192}
itl_rounds=${LINSERVE_BENCH_ITL_ROUNDS:-2}
read -ra server_flags <<<"${LINSERVE_BENCH_SERVER_FLAGS:-}"
parts=" ${LINSERVE_BENCH_PARTS:-ttft streams} "
model=${LINSERVE_BENCH_MODEL:-$root/models/shakespeare-linear}

if [[ -n ${LINSERVE_BENCH_BIN:-} ]]; then
  bin() { echo "$LINSERVE_BENCH_BIN/$1"; }
else
  cmake --build "$build" --target linserve linserve-loadtest linserve-prefill-bench >&2
  bin() {
    case $1 in
      linserve) echo "$build/server/linserve" ;;
      linserve-loadtest) echo "$build/client/loadtest/linserve-loadtest" ;;
      linserve-prefill-bench) echo "$build/bench/prefill/linserve-prefill-bench" ;;
    esac
  }
fi
tmp=$(mktemp -d)
server_pid=
prompts_pid=
cleanup() {
  for pid in $prompts_pid $server_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
gpu=
[[ $device == cuda ]] && gpu=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
max_prompt=$((${lengths[-1]} > prompt_load ? ${lengths[-1]} : prompt_load))
"$(bin linserve)" --model="$model" --device="$device" --threads="$threads" \
  --host=127.0.0.1 --port=0 --metrics_port=0 --port_file="$tmp/ports" \
  --max_batch_size=64 --max_prompt_tokens="$((max_prompt + 1))" \
  --max_new_tokens="$((output > 4096 ? output : 4096))" --log_level=warn \
  "${server_flags[@]}" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1200); do
  [[ -s $tmp/ports ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
port=$(sed -n 's/^grpc_port=//p' "$tmp/ports" 2>/dev/null || true)
[[ -n $port ]] || { cat "$tmp/server.log" >&2; echo "run.sh: linserve did not start" >&2; exit 1; }
metrics_port=$(sed -n 's/^metrics_port=//p' "$tmp/ports")
# Prompt tokens the server has fed so far (the sum of linserve_prefill_step_tokens).
prompt_tokens_fed() {
  "$python" - "$metrics_port" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
print(sum(float(l.split()[-1]) for l in text.splitlines()
          if l.startswith("linserve_prefill_step_tokens_sum")))
PY
}
load=("$(bin linserve-loadtest)" --target="127.0.0.1:$port" --progress-interval=0
  --request-timeout=1800s --drain-timeout=1800s --duration=3600s)

# Warm the server's buffers and the model's pages.
"${load[@]}" --concurrency=1 --requests=1 --prompt-tokens="${lengths[0]}" --output-tokens=1 \
  >/dev/null
[[ $parts == *" ttft "* ]] || lengths=()
for n in "${lengths[@]}"; do
  for c in 1 8; do
    for r in $(seq "$rounds"); do
      echo "$n-token prompts, concurrency $c, round $r: engine alone, then served" >&2
      "$(bin linserve-prefill-bench)" --model="$model" --device="$device" \
        --threads="$threads" --lengths="$n" --concurrency="$c" --rounds=1 --seed="$r" \
        >"$tmp/engine_${n}_${c}_$r.json" 2>/dev/null
      "${load[@]}" --concurrency="$c" --requests="$c" --prompt-tokens="$n" --output-tokens=1 \
        --seed="$r" --json="$tmp/served_${n}_${c}_$r.json" >/dev/null
    done
  done
done

[[ $parts == *" streams "* ]] || itl_rounds=0
for r in $(seq "$itl_rounds"); do
  for with in 0 1; do
    echo "streams: round $r, prompt load $with" >&2
    if ((with)); then
      "${load[@]}" --concurrency=1 --prompt-tokens="$prompt_load" --output-tokens=1 \
        --seed="$r" >/dev/null &
      prompts_pid=$!
      sleep 1  # the first prompt is in the engine before the streams arrive
    fi
    fed_before=$(prompt_tokens_fed)
    "${load[@]}" --concurrency="$streams" --requests="$streams" --prompt-tokens=16 \
      --output-tokens="$output" --seed="$r" --json="$tmp/streams_${with}_$r.json" >/dev/null
    echo "$fed_before $(prompt_tokens_fed)" >"$tmp/fed_${with}_$r"
    if ((with)); then
      kill "$prompts_pid" 2>/dev/null || true
      wait "$prompts_pid" 2>/dev/null || true
      prompts_pid=
    fi
  done
done

"$python" - "$tmp" "$model" "$device" "$threads" "$rounds" "$streams" "$output" \
  "$prompt_load" "$itl_rounds" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" "$gpu" \
  "${lengths[@]}" <<'PY'
import json, statistics, subprocess, sys
(tmp, model, device, threads, rounds, streams, output, prompt_load, itl_rounds, load_before,
 load_after, gpu) = sys.argv[1:13]
lengths = [int(n) for n in sys.argv[13:]]
rounds = int(rounds)
itl_rounds = int(itl_rounds)
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
print(f"Model: {model}; device {device}{' (' + gpu + ')' if gpu else ''}, backend threads "
      f"{threads}. Host: {cpu}, {cores} cores; load average before {load_before}, after "
      f"{load_after}.")
if lengths:
    print()
    print("## Time to first token: served against the engine alone")
    print()
    print(f"Engine alone: c prompts fed one after another, each whole in one PrefillAndSample "
          f"call. Served: linserve-loadtest, c requests of 1 output token started together; "
          f"served time = the last time to first token, prompt tokens as the server counted "
          f"them (a BOS more each). {rounds} rounds per point, engine alone then served; "
          f"medians, and each round's ratio.")
    print()
    print("| prompt tokens | concurrency | engine alone s | engine tok/s "
          "| served TTFT p50 / max s | served tok/s | served / engine (rounds) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    med = statistics.median
    for n in lengths:
        for c in (1, 8):
            engine = [json.load(open(f"{tmp}/engine_{n}_{c}_{r}.json"))
                      for r in range(1, rounds + 1)]
            served = [json.load(open(f"{tmp}/served_{n}_{c}_{r}.json"))
                      for r in range(1, rounds + 1)]
            served_tps = [s["prompt_tokens"] / (s["time_to_first_token_ms"]["max"] / 1000)
                          for s in served]
            ratios = [s / e["tokens_per_second"] for s, e in zip(served_tps, engine)]
            p50 = med(s["time_to_first_token_ms"]["p50"] for s in served) / 1000
            last = med(s["time_to_first_token_ms"]["max"] for s in served) / 1000
            each = ", ".join(f"{100 * x:.0f}%" for x in ratios)
            print(f"| {n} | {c} | {med(e['seconds'] for e in engine):.2f} "
                  f"| {med(e['tokens_per_second'] for e in engine):.0f} "
                  f"| {p50:.2f} / {last:.2f} | {med(served_tps):.0f} "
                  f"| **{100 * med(ratios):.1f}%** ({each}) |")
if itl_rounds:
    print()
    print(f"## {streams} decoding streams while {prompt_load}-token prompts arrive")
    print()
    print(f"{streams} requests of 16 prompt + {output} output tokens started together, alone and "
          f"beside a closed loop of one {prompt_load}-token prompt after another (1 output token); "
          f"{itl_rounds} rounds, alternately without and with. Inter-token latency of the streams; "
          f"prompt tokens/s: what the server fed meanwhile (its /metrics; the streams' own "
          f"{17 * int(streams)} prompt tokens included), over the streams' run.")
    print()
    print("| round | inter-token p50 / p99 ms without | with | p99 with / without "
          "| stream tokens/s without / with | prompt tokens/s fed |")
    print("|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for r in range(1, itl_rounds + 1):
        a = json.load(open(f"{tmp}/streams_0_{r}.json"))
        b = json.load(open(f"{tmp}/streams_1_{r}.json"))
        before, after = map(float, open(f"{tmp}/fed_1_{r}").read().split())
        fed = after - before
        ia, ib = a["inter_token_latency_ms"], b["inter_token_latency_ms"]
        ratio = ib["p99"] / ia["p99"]
        ratios.append(ratio)
        prompt_tps = fed / (b["end_to_end_ms"]["max"] / 1000)
        print(f"| {r} | {ia['p50']:.2f} / {ia['p99']:.2f} | {ib['p50']:.2f} / {ib['p99']:.2f} "
              f"| **{ratio:.2f}×** | {a['output_tokens_per_second']:.0f} / "
              f"{b['output_tokens_per_second']:.0f} | {prompt_tps:.0f} |")
    print()
    print(f"Median p99 ratio over the rounds: **{statistics.median(ratios):.2f}×**.")
PY
