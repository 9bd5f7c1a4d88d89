#!/usr/bin/env bash
# The CPU benchmark of issues 2 and 28, in one session on an otherwise idle machine: the PyTorch
# eager reference (bench/peer_torch.py), llama.cpp (bench/llamacpp/run.sh --quick: GPT-2 and
# RWKV-7 in F32, F16 and Q8_0), then cpu_bench in fp32 (with the PyTorch ratios; its markdown is
# printed as it is), bf16 and int8, each also at context 4096 (--contexts=4096
# --context_batches=1,8,32), and last bench/report/cpu_peer.py's tables of linserve's formats
# beside llama.cpp's and issue 28's targets. Every run uses the same threads. Prints markdown;
# bench/results/cpu.md records a run of exactly:
#   bash bench/run_cpu.sh [BUILD_DIR] [--threads=N] [--skip_llamacpp] [--llamacpp_args="..."]
#                         [--json_dir=DIR]
# BUILD_DIR: Default: build/cpu, as scripts/test.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${LINSERVE_PYTHON:-/usr/bin/python3}

build=$root/build/cpu
threads=$(nproc)      # Default: every core (nproc), for cpu_bench and llama.cpp alike.
skip_llamacpp=false   # Default: false (--skip_llamacpp: only the PyTorch reference and fp32,
                      # for a host without npm or llama.cpp's prebuilt binaries).
llamacpp_args=""      # Default: "" (extra arguments of bench/llamacpp/run.sh after --quick,
                      # e.g. "--archs=gpt2 --dtypes=q8_0" for a short check of the pipeline).
json_dir=""           # Default: a temporary directory, removed at exit (keeps every JSON).
for arg in "$@"; do
  case $arg in
    --threads=*) threads=${arg#*=} ;;
    --skip_llamacpp) skip_llamacpp=true ;;
    --llamacpp_args=*) llamacpp_args=${arg#*=} ;;
    --json_dir=*) json_dir=${arg#*=} ;;
    --*) echo "run_cpu.sh: unknown argument $arg" >&2; exit 1 ;;
    *) build=$arg ;;
  esac
done

cmake --build "$build" --target cpu_bench >&2
if [[ -z $json_dir ]]; then
  json_dir=$(mktemp -d)
  trap 'rm -rf "$json_dir"' EXIT
fi
mkdir -p "$json_dir"
bench=$build/bench/cpu_bench

echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "$(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
"$python" "$root/bench/peer_torch.py" --threads="$threads" > "$json_dir/peer.json"
if ! $skip_llamacpp; then
  echo "llama.cpp..." >&2
  # shellcheck disable=SC2086  # llamacpp_args is a list of arguments
  bash "$root/bench/llamacpp/run.sh" --quick --threads="$threads" \
    --json_out="$json_dir/llamacpp.json" $llamacpp_args > "$json_dir/llamacpp.md"
fi
"$bench" --threads="$threads" --weight_precision=fp32 --peer_json="$json_dir/peer.json" \
  --json_out="$json_dir/fp32.json" 2>/dev/null
if $skip_llamacpp; then exit 0; fi

for precision in bf16 int8; do
  echo "cpu_bench --weight_precision=$precision..." >&2
  "$bench" --threads="$threads" --weight_precision=$precision \
    --json_out="$json_dir/$precision.json" > "$json_dir/$precision.md" 2>/dev/null
done
for precision in fp32 bf16 int8; do
  echo "cpu_bench --weight_precision=$precision --contexts=4096..." >&2
  "$bench" --threads="$threads" --weight_precision=$precision --contexts=4096 \
    --context_batches=1,8,32 --json_out="$json_dir/${precision}_ctx.json" 2>/dev/null
done
echo
echo "## linserve's weight formats beside llama.cpp (issue 28)"
echo
"$python" "$root/bench/report/cpu_peer.py" --llamacpp="$json_dir/llamacpp.json" \
  "$json_dir"/{fp32,bf16,int8}.json "$json_dir"/{fp32,bf16,int8}_ctx.json
