#!/usr/bin/env bash
# HTTP (the OpenAI API) against gRPC: served tokens/s of one linserve process (CPU backend, the
# bundled model) at concurrency 1, 32 and 256, closed loop, 16 prompt tokens and 256 output
# tokens per request (ignore_eos). gRPC load: linserve-loadtest; HTTP load: http_load.mjs (Node,
# raw streaming requests). Both sides are measured the same way: the server's own
# linserve_generated_tokens_total over the same window after the same warm-up, so the client
# does not count. The sides alternate (gRPC, HTTP, gRPC, ...) for ROUNDS rounds per point and
# the table gives medians and the median of the per-round ratios, so that other load on a
# shared machine weighs on both alike. bench/results/http.md records runs of exactly:
#   bash bench/http/run.sh [BUILD_DIR]     (default: build/cpu)
# Environment (defaults in brackets): LINSERVE_BENCH_THREADS [1: backend threads],
# LINSERVE_BENCH_ROUNDS [3], LINSERVE_BENCH_SECONDS [6: measured seconds per round and side],
# LINSERVE_BENCH_WARMUP [2], LINSERVE_BENCH_CONCURRENCIES ["1 32 256"].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
threads=${LINSERVE_BENCH_THREADS:-1}
rounds=${LINSERVE_BENCH_ROUNDS:-3}
seconds=${LINSERVE_BENCH_SECONDS:-6}
warmup=${LINSERVE_BENCH_WARMUP:-2}
read -ra concurrencies <<<"${LINSERVE_BENCH_CONCURRENCIES:-1 32 256}"
output_tokens=256

cmake --build "$build" --target linserve linserve-loadtest >&2
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

"$build/server/linserve" --device=cpu --host=127.0.0.1 --port=0 --metrics_port=0 --http_port=0 \
  --port_file="$tmp/ports" --threads="$threads" --max_batch_size=256 --max_queue_depth=1024 \
  --log_level=warn >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 600); do [[ -s $tmp/ports ]] && break; sleep 0.1; done
grpc_port=$(sed -n 's/^grpc_port=//p' "$tmp/ports")
http_port=$(sed -n 's/^http_port=//p' "$tmp/ports")
metrics_port=$(sed -n 's/^metrics_port=//p' "$tmp/ports")

generated() {
  curl -s "http://127.0.0.1:$metrics_port/metrics" |
    sed -n 's/^linserve_generated_tokens_total //p'
}

# Runs one side's load for warm-up + measured seconds in the background and prints the served
# tokens/s of the measured window.
measure() {  # SIDE CONCURRENCY
  local side=$1 c=$2 total=$((warmup + seconds)) pid before after
  if [[ $side == grpc ]]; then
    "$build/client/loadtest/linserve-loadtest" --target="127.0.0.1:$grpc_port" --concurrency="$c" \
      --duration="${total}s" --prompt-tokens=16 --output-tokens="$output_tokens" \
      --progress-interval=0 --drain-timeout=0s >/dev/null 2>"$tmp/client.log" &
  else
    node "$root/bench/http/http_load.mjs" "http://127.0.0.1:$http_port" "$c" "$total" \
      "$output_tokens" >/dev/null 2>"$tmp/client.log" &
  fi
  pid=$!
  sleep "$warmup"
  before=$(generated)
  sleep "$seconds"
  after=$(generated)
  wait "$pid" || { echo "$side load failed:" >&2; cat "$tmp/client.log" >&2; exit 1; }
  # Let the requests still running end before the next side starts.
  while [[ $(curl -s "http://127.0.0.1:$metrics_port/metrics" |
    sed -n 's/^linserve_active_requests //p') != 0 ]]; do sleep 0.2; done
  python3 -c "print(round(($after - $before) / $seconds, 1))"
}

echo "| concurrency | gRPC tok/s (median) | HTTP tok/s (median) | HTTP / gRPC (median of rounds) | rounds (gRPC/HTTP) |"
echo "|---:|---:|---:|---:|---|"
for c in "${concurrencies[@]}"; do
  grpc=() http=() ratios=() detail=()
  for ((r = 0; r < rounds; r++)); do
    g=$(measure grpc "$c")
    h=$(measure http "$c")
    grpc+=("$g") http+=("$h") detail+=("$g/$h")
    ratios+=("$(python3 -c "print($h / $g)")")
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
  printf '| %s | %s | %s | %.3f | %s |\n' "$c" "$(median "${grpc[@]}")" "$(median "${http[@]}")" \
    "$(median "${ratios[@]}")" "${detail[*]}"
done
