#!/usr/bin/env bash
# The prefix-state benchmark of issue 13 (bench/results/prefix.md records a run of exactly:
#   bash bench/prefix/run.sh [BUILD_DIR]     (BUILD_DIR default: build/cpu)
# Two linserve servers on loopback with the CPU backend and the bundled model, one with the
# prefix cache (the defaults: --prefix_cache_mib=1024, checkpoints every 1024 tokens) and one
# without (--prefix_cache_mib=0), one after the other, each running:
#   chat:   20 turns replayed statelessly, each resending the whole history plus 200 new tokens
#           (16 generated per turn): time to first token per turn;
#   shared: 64 concurrent users with one 4096-token system prompt and 32 tokens of their own:
#           prompt tokens actually prefilled.
# Environment: LINSERVE_BENCH_THREADS [1: backend threads].
# Prints markdown.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
threads=${LINSERVE_BENCH_THREADS:-1}
model=$root/models/shakespeare-linear

cmake --build "$build" --target linserve linserve-prefix-bench >&2
tmp=$(mktemp -d)
server_pid=
stop_server() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" || true; fi
  server_pid=
}
trap 'stop_server; rm -rf "$tmp"' EXIT

start_server() {  # NAME FLAGS...
  local name=$1
  shift
  rm -f "$tmp/ports"
  "$build/server/linserve" --model="$model" --device=cpu --host=127.0.0.1 --port=0 \
    --metrics_port=0 --http_port=-1 --port_file="$tmp/ports" --threads="$threads" --log_level=warn "$@" \
    >"$tmp/$name.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do [[ -s $tmp/ports ]] && break; sleep 0.1; done
  port=$(sed -n 's/^grpc_port=//p' "$tmp/ports")
  metrics_port=$(sed -n 's/^metrics_port=//p' "$tmp/ports")
  [[ -n $port ]] || { cat "$tmp/$name.log" >&2; echo "run.sh: linserve did not start" >&2; exit 1; }
}

metric() {  # NAME: its value on the running server
  curl -s "http://127.0.0.1:$metrics_port/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for side in cache nocache; do
  flags=()
  [[ $side == nocache ]] && flags=(--prefix_cache_mib=0)
  for scenario in chat shared; do
    echo "$side: $scenario" >&2
    start_server "$side-$scenario" "${flags[@]}"
    "$build/bench/prefix/linserve-prefix-bench" --target="127.0.0.1:$port" \
      --scenario="$scenario" >"$tmp/$side-$scenario.json"
    {
      echo "{\"bytes\": $(metric linserve_prefix_bytes), \"states\": $(metric linserve_prefix_states),"
      echo " \"hits\": $(metric linserve_prefix_hits_total),"
      echo " \"misses\": $(curl -s "http://127.0.0.1:$metrics_port/metrics" |
        awk '/^linserve_prefix_misses_total/ { s += $2 } END { print s + 0 }'),"
      echo " \"saved\": $(metric linserve_prefix_tokens_saved_total)}"
    } >"$tmp/$side-$scenario.metrics.json"
    stop_server
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$tmp" "$threads" "$load_before" "$load_after" <<'PY'
import json, subprocess, sys
tmp, threads, load_before, load_after = sys.argv[1:5]
def load(name):
    return json.load(open(f"{tmp}/{name}.json"))
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
print(f"CPU: {cpu}, {cores} cores (shared with other sessions: noisy; compare the two columns "
      f"of one run); load average before {load_before}, after {load_after}. Model: "
      f"models/shakespeare-linear; backend threads {threads}; greedy decoding.")
print()
chat, chat_off = load("cache-chat")["turns"], load("nocache-chat")["turns"]
m = load("cache-chat.metrics")
print("### Stateless 20-turn chat (each turn resends everything: +200 prompt tokens, 16 generated)")
print()
print("| turn | prompt tokens | cached | TTFT with store ms (server) | TTFT without ms (server) "
      "| without / with |")
print("|---:|---:|---:|---:|---:|---:|")
for w, o in zip(chat, chat_off):
    print(f"| {w['turn']} | {w['prompt_tokens']} | {w['cached_prompt_tokens']} "
          f"| {w['ttft_ms']:.1f} ({w['server_ttft_ms']:.1f}) "
          f"| {o['ttft_ms']:.1f} ({o['server_ttft_ms']:.1f}) | {o['ttft_ms'] / w['ttft_ms']:.1f} |")
hits = m["hits"]
lookups = hits + m["misses"]
print()
print(f"With the store: hit rate {hits:.0f}/{lookups:.0f} lookups (turn 1 has nothing to hit), "
      f"{m['saved']:.0f} prompt tokens not re-read, {m['states']:.0f} states held in "
      f"{m['bytes'] / 2**20:.1f} MiB of host memory at the end.")
print()
s, s_off = load("cache-shared"), load("nocache-shared")
sm = load("cache-shared.metrics")
print("### 64 concurrent users, one 4096-token system prompt + 32 tokens each (16 generated)")
print()
print("| | prompt tokens | prefilled | cached | wall s | TTFT p50 / max ms | failed |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, r in (("with store", s), ("without", s_off)):
    print(f"| {name} | {r['prompt_tokens']} | {r['prefilled_tokens']} | "
          f"{r['cached_prompt_tokens']} | {r['seconds']:.1f} | "
          f"{r['ttft_ms_p50']:.0f} / {r['ttft_ms_max']:.0f} | {r['failed']} |")
print()
print(f"With the store: {sm['states']:.0f} states held in {sm['bytes'] / 2**20:.1f} MiB.")
PY
