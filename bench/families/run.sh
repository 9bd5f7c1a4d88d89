#!/usr/bin/env bash
# The families benchmark of issue 39 on the CPU backend, in one session: decode and prefill
# throughput and state per session of each family at the 125M-class width next to the 2020
# linear attention, and decode step time against context. Prints markdown;
# bench/results/families.md records a run of exactly:
#   bash bench/families/run.sh [BUILD_DIR]          (BUILD_DIR default: build/cpu)
# Environment (defaults in brackets): LINSERVE_BENCH_THREADS [0: every core],
# LINSERVE_BENCH_CONTEXTS [128,1024,4096,16384,65536], LINSERVE_BENCH_ROUNDS [3],
# LINSERVE_BENCH_PARTS [throughput context].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
threads=${LINSERVE_BENCH_THREADS:-0}
contexts=${LINSERVE_BENCH_CONTEXTS:-128,1024,4096,16384,65536}
rounds=${LINSERVE_BENCH_ROUNDS:-3}
parts=" ${LINSERVE_BENCH_PARTS:-throughput context} "

cmake --build "$build" --target families_bench >&2
bench=$(cd "$build" && pwd)/bench/families_bench
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') at $(git -C "$root" rev-parse --short HEAD) on" \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, backend" \
     "threads $threads."
if [[ $parts == *" throughput "* ]]; then
  echo
  echo "## Throughput and state at the 125M-class width"
  echo
  echo "Load average before: $(load)."
  echo
  "$bench" --part=throughput --threads="$threads" --rounds="$rounds"
  echo
  echo "Load average after: $(load)."
fi
if [[ $parts == *" context "* ]]; then
  echo
  echo "## Decode step against context (batch 1, 8 layers × d_model 384)"
  echo
  echo "Load average before: $(load)."
  echo
  "$bench" --part=context --threads="$threads" --contexts="$contexts"
  echo
  echo "Load average after: $(load)."
fi
