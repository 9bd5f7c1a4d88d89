#!/usr/bin/env bash
# The structured-output benchmarks of issue 27 on the CPU backend, with the bundled model: the
# token-mask cost against the decode step at batch 1 and 64 for each constraint kind
# (structured_bench), and FillMask/Accept alone on a JSON grammar for the bundled SentencePiece
# vocabulary and, when BUILD_DIR has GPT-2's files (gpt2_bpe/model, the test fixture), GPT-2's
# (mask_bench). Prints markdown; bench/results/structured.md records a run of exactly:
#   bash bench/structured/run.sh [BUILD_DIR]      (BUILD_DIR default: build/cpu)
# Environment (defaults in brackets): LINSERVE_BENCH_THREADS [0: every core],
# LINSERVE_BENCH_ROUNDS [5], LINSERVE_BENCH_STEPS [128], LINSERVE_BENCH_BATCHES [1,64].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
cmake --build "$build" --target structured_bench mask_bench >&2
bench=$(cd "$build" && pwd)/bench/structured/structured_bench
mask_bench=$(cd "$build" && pwd)/bench/structured/mask_bench
gpt2=$(cd "$build" && pwd)/gpt2_bpe/model
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "$(nproc) cores, backend threads ${LINSERVE_BENCH_THREADS:-0}. Load average before: $(load)."
echo
(cd "$root" && "$bench" --threads="${LINSERVE_BENCH_THREADS:-0}" \
  --rounds="${LINSERVE_BENCH_ROUNDS:-5}" --steps="${LINSERVE_BENCH_STEPS:-128}" \
  --batches="${LINSERVE_BENCH_BATCHES:-1,64}")
echo
echo "## FillMask and Accept alone (mask_bench, JSON object grammar, random walk)"
echo
echo '```'
if [[ -d $gpt2 ]]; then "$mask_bench" --gpt2_dir="$gpt2"; else "$mask_bench"; fi
echo '```'
echo
echo "Load average after: $(load)."
