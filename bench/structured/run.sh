#!/usr/bin/env bash
# The structured-output benchmark of issue 27 on the CPU backend: the token-mask cost against the
# decode step, at batch 1 and 64, for each constraint kind, with the bundled model. Prints
# markdown; bench/results/structured.md records a run of exactly:
#   bash bench/structured/run.sh [BUILD_DIR]      (BUILD_DIR default: build/cpu)
# Environment (defaults in brackets): LINSERVE_BENCH_THREADS [0: every core],
# LINSERVE_BENCH_ROUNDS [5], LINSERVE_BENCH_STEPS [128], LINSERVE_BENCH_BATCHES [1,64].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
cmake --build "$build" --target structured_bench >&2
bench=$(cd "$build" && pwd)/bench/structured/structured_bench
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "$(nproc) cores, backend threads ${LINSERVE_BENCH_THREADS:-0}. Load average before: $(load)."
echo
(cd "$root" && "$bench" --threads="${LINSERVE_BENCH_THREADS:-0}" \
  --rounds="${LINSERVE_BENCH_ROUNDS:-5}" --steps="${LINSERVE_BENCH_STEPS:-128}" \
  --batches="${LINSERVE_BENCH_BATCHES:-1,64}")
echo
echo "Load average after: $(load)."
