#!/usr/bin/env bash
# The Based benchmark of issue 26 on the CPU backend, in one session: state bytes per session of
# the based-360m and based-1b shapes, decode step against context (a small based-shaped model
# and its pure linear_attention peer), decode tokens/s of the based-360m shape next to a linear
# peer. Prints markdown; bench/results/based.md records a run of exactly:
#   bash bench/based/run.sh [BUILD_DIR]          (BUILD_DIR default: build/cpu)
# Environment (defaults in brackets): LINSERVE_BENCH_THREADS [0: every core],
# LINSERVE_BENCH_CONTEXTS [128,1024,4096,16384,65536], LINSERVE_BENCH_ROUNDS [3],
# LINSERVE_BENCH_PARTS [state context throughput].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
threads=${LINSERVE_BENCH_THREADS:-0}
contexts=${LINSERVE_BENCH_CONTEXTS:-128,1024,4096,16384,65536}
rounds=${LINSERVE_BENCH_ROUNDS:-3}
parts=" ${LINSERVE_BENCH_PARTS:-state context throughput} "

cmake --build "$build" --target based_bench >&2
bench=$(cd "$build" && pwd)/bench/based_bench
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "$(nproc) cores, backend threads $threads."
if [[ $parts == *" state "* ]]; then
  echo
  echo "## State bytes per session"
  echo
  echo "Softmax KV cache = 2 · n_layers · d_model · context · 4 B (fp32 keys and values)."
  echo
  (cd "$root" && "$bench" --part=state --configs=bench/based/based-360m.json,bench/based/based-1b.json)
fi
if [[ $parts == *" context "* ]]; then
  echo
  echo "## Decode step against context (batch 1)"
  echo
  echo "Load average before: $(load)."
  echo
  "$bench" --part=context --threads="$threads" --contexts="$contexts"
  echo
  echo "Load average after: $(load)."
fi
if [[ $parts == *" throughput "* ]]; then
  echo
  echo "## Decode tokens/s, based-360m shape"
  echo
  echo "Load average before: $(load)."
  echo
  "$bench" --part=throughput --threads="$threads" --rounds="$rounds" \
    --based_config="$root/bench/based/based-360m.json"
  echo
  echo "Load average after: $(load)."
fi
