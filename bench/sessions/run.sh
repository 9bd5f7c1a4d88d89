#!/usr/bin/env bash
# The session tiers' benchmark of issue 12. Prints markdown; bench/results/sessions.md records
# a run of exactly:
#   bash bench/sessions/run.sh [BUILD_DIR]     (BUILD_DIR default: build/cpu)
# 1. Write-behind cost: two servers of the same model side by side, one with --state_dir (on
#    the disk, fsync and all) and one without, each driven by linserve-loadtest at concurrency
#    32 with 10-turn sessions, alternating (without, with, without, ...) for several rounds;
#    medians and the ratio. Target: with >= 95% of without.
# 2. Restore at start: linserve-sessions-bench writes a state_dir of N idle sessions (sparse
#    zero-state records of full size: a restore reads only each file's header), a server with
#    one state slot (so that the warm start reads one session whole, and the slot pool adds
#    nothing) starts on it, and its log's "restored N sessions in X ms" and its resident memory
#    (VmRSS) once serving are recorded next to the same server started on an empty state_dir.
# 3. Swap latency per tier (linserve-sessions-bench --mode=tiers: one state slot, the CPU
#    backend, the state_dir on the disk).
# Environment (defaults in brackets): LINSERVE_BENCH_MODEL [the bundled model],
# LINSERVE_BENCH_ROUNDS [3], LINSERVE_BENCH_SECONDS [8: measured seconds per load test],
# LINSERVE_BENCH_SESSIONS ["10000 100000 1000000": state_dir sizes for 2],
# LINSERVE_BENCH_DIR [a new directory under $TMPDIR or /tmp: the state_dirs, on the disk].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
python=${LINSERVE_PYTHON:-/usr/bin/python3}
model=${LINSERVE_BENCH_MODEL:-$root/models/shakespeare-linear}
rounds=${LINSERVE_BENCH_ROUNDS:-3}
seconds=${LINSERVE_BENCH_SECONDS:-8}
read -r -a sizes <<<"${LINSERVE_BENCH_SESSIONS:-10000 100000 1000000}"

cmake --build "$build" --target linserve linserve-loadtest linserve-sessions-bench >&2
work=${LINSERVE_BENCH_DIR:-$(mktemp -d -p "${TMPDIR:-/tmp}" linserve-sessions-bench.XXXXXX)}
mkdir -p "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# start_server NAME ARGS...: starts linserve, waits until it serves; sets port and pid.
start_server() {
  local name=$1
  shift
  rm -f "$work/$name.ports"
  "$build/server/linserve" --model="$model" --device=cpu --host=127.0.0.1 --port=0 \
    --metrics_port=-1 --http_port=-1 --port_file="$work/$name.ports" --threads=1 \
    --max_batch_size=32 "$@" \
    >"$work/$name.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 6000); do
    [[ -s $work/$name.ports ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  port=$(sed -n 's/^grpc_port=//p' "$work/$name.ports" 2>/dev/null || true)
  [[ -n $port ]] || { cat "$work/$name.log" >&2; echo "run.sh: $name did not start" >&2; exit 1; }
}
stop_server() { kill -TERM "$1"; wait "$1" || true; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# 1. Write-behind cost.
start_server memory --max_sessions=100000
memory_port=$port memory_pid=$pid
start_server durable --max_sessions=100000 --state_dir="$work/durable"
durable_port=$port durable_pid=$pid
for r in $(seq "$rounds"); do
  for side in memory durable; do
    p=${side}_port
    echo "write-behind round $r: $side" >&2
    "$build/client/loadtest/linserve-loadtest" --target="127.0.0.1:${!p}" --concurrency=32 \
      --turns=10 --duration="${seconds}s" --warmup=2s --prompt-tokens=16 --output-tokens=32 \
      --seed="$r" --progress-interval=0 --json="$work/load_${side}_$r.json" >/dev/null
  done
done
stop_server "$memory_pid"
stop_server "$durable_pid"

# 2. Restore at start, and memory with that many idle sessions.
mkdir -p "$work/empty"
start_server empty --state_dir="$work/empty" --max_sessions=2000000 --max_slots=1
sleep 1
echo "{\"sessions\": 0, \"rss_kib\": $(rss_kib "$pid")}" >"$work/restore_0.json"
stop_server "$pid"
for n in "${sizes[@]}"; do
  echo "restore: writing $n sessions" >&2
  "$build/bench/sessions/linserve-sessions-bench" --model="$model" --mode=make_state_dir \
    --sessions="$n" --dir="$work/restore_$n" >"$work/make_$n.json"
  start_server "restore_$n" --state_dir="$work/restore_$n" --max_sessions=2000000 \
    --max_slots=1 --log_level=info
  sleep 1
  ms=$(sed -n "s/.*restored $n sessions in \([0-9.]*\) ms.*/\1/p" "$work/restore_$n.log")
  echo "{\"sessions\": $n, \"restore_ms\": ${ms:-null}, \"rss_kib\": $(rss_kib "$pid")," \
    "\"record_bytes\": $(sed -n 's/.*"record_bytes": \([0-9]*\).*/\1/p' "$work/make_$n.json")}" \
    >"$work/restore_$n.json"
  stop_server "$pid"
  rm -rf "$work/restore_$n"
done

# 3. Swap latency per tier.
echo "tiers" >&2
"$build/bench/sessions/linserve-sessions-bench" --model="$model" --mode=tiers \
  --dir="$work/tiers" | tail -n 1 >"$work/tiers.json"

"$python" - "$work" "$model" "$rounds" "$seconds" "$load_before" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "${sizes[@]}" <<'PY'
import json, statistics, subprocess, sys
work, model, rounds, seconds, load_before, load_after = sys.argv[1:7]
sizes = sys.argv[7:]
rounds = int(rounds)
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
print(f"Model: {model}. CPU: {cpu}, {cores} cores; load average before {load_before}, "
      f"after {load_after}. Servers: CPU backend, 1 thread, max_batch_size 32.")
print()
print("### Write-behind cost (concurrency 32, 10-turn sessions of 16 prompt + 32 output tokens)")
print()
print("| server | output tok/s (rounds) | turns/s | TTFT p50 ms | errors |")
print("|---|---:|---:|---:|---:|")
tps = {}
for side in ("memory", "durable"):
    loads = [json.load(open(f"{work}/load_{side}_{r}.json")) for r in range(1, rounds + 1)]
    tps[side] = [l["output_tokens_per_second"] for l in loads]
    median = sorted(loads, key=lambda l: l["output_tokens_per_second"])[len(loads) // 2]
    turns = median["total"].get("requests", 0) / float(seconds)
    errors = sum(l["total"]["errors"] for l in loads)
    each = ", ".join(f"{t:.0f}" for t in tps[side])
    name = "without --state_dir" if side == "memory" else "with --state_dir (write-behind)"
    print(f"| {name} | {statistics.median(tps[side]):.0f} ({each}) | {turns:.1f} "
          f"| {median['time_to_first_token_ms']['p50']:.1f} | {errors} |")
ratios = [d / m for d, m in zip(tps["durable"], tps["memory"])]
print()
print(f"With / without, per round: {', '.join(f'{100 * r:.1f}%' for r in ratios)}; "
      f"median **{100 * statistics.median(ratios):.1f}%**.")
print()
print("### Restore at start, and resident memory with that many idle sessions")
print()
base = json.load(open(f"{work}/restore_0.json"))
print(f"Servers with one state slot; the same server on an empty state_dir: VmRSS "
      f"{base['rss_kib'] / 1024:.0f} MiB.")
print()
print("| sessions | record bytes | restore ms | VmRSS MiB | over the empty server, bytes per session |")
print("|---:|---:|---:|---:|---:|")
for n in sizes:
    r = json.load(open(f"{work}/restore_{n}.json"))
    extra = (r["rss_kib"] - base["rss_kib"]) * 1024 / int(n)
    print(f"| {int(n):,} | {r['record_bytes']:,} | {r['restore_ms']} | "
          f"{r['rss_kib'] / 1024:.0f} | {extra:.0f} |")
print()
t = json.load(open(f"{work}/tiers.json"))
print(f"### Swap latency per tier (state {t['state_bytes']:,} bytes, {t['swaps']} swaps each; "
      "median / p90 µs)")
print()
print("| the session taking the slot comes from | median µs | p90 µs |")
print("|---|---:|---:|")
for key, name in (("host_us", "host memory (the other hibernates to host memory)"),
                  ("disk_warm_us", "disk, file in the page cache (the other leaves memory)"),
                  ("disk_cold_us", "disk, file evicted from the page cache first")):
    print(f"| {name} | {t[key][0]:.0f} | {t[key][1]:.0f} |")
PY
