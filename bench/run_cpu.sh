#!/usr/bin/env bash
# The CPU benchmark of issue 2: the PyTorch peer, then cpu_bench (which measures the bandwidth
# and GEMM floors itself), in one session on an otherwise idle machine. Prints markdown;
# bench/results/cpu.md records a run of exactly:
#   bash bench/run_cpu.sh [BUILD_DIR]        (BUILD_DIR default: build/cpu, as scripts/test.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu}
python=${LINSERVE_PYTHON:-/usr/bin/python3}

cmake --build "$build" --target cpu_bench >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "$(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
"$python" "$root/bench/peer_torch.py" > "$tmp/peer.json"
"$build/bench/cpu_bench" --peer_json="$tmp/peer.json" 2>/dev/null
