#!/usr/bin/env bash
# llama.cpp's CPU backend on linserve's 125M benchmark shape (issue 28): GPT-2 (softmax) and
# RWKV-7 (recurrent) GGUF files with random weights in F32, F16 and Q8_0; decode tokens/s at
# batch 1, 8, 32 and contexts 128 and 4096, and prefill of a 2048-token prompt. Prints markdown
# on stdout and writes the figures as JSON (bench/llamacpp/report.py documents the fields).
#   bash bench/llamacpp/run.sh [--quick] [--threads=N] [--json_out=FILE] [--archs=gpt2,rwkv7]
#                              [--dtypes=f32,f16,q8_0]
# Passes interleave the model files in time (pass 1: every file, pass 2: every file, ...), and
# each pass runs several short rounds per file over all its cells in turn; a figure is the
# median over every round of every pass. Run it on an otherwise idle machine: llama.cpp's
# threads spin at their barriers, and a busy core slows them by far more than its share.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${LINSERVE_PYTHON:-/usr/bin/python3}

quick=false       # Default: false (--quick: 1 pass x 3 rounds of 8 steps).
threads=2         # Default: 2, as linserve's CPU figures on the 2-core benchmark host.
json_out=""       # Default: <install dir>/results/llamacpp-<UTC time>.json
archs=gpt2,rwkv7  # Default: gpt2,rwkv7
dtypes=f32,f16,q8_0  # Default: f32,f16,q8_0
for arg in "$@"; do
  case $arg in
    --quick) quick=true ;;
    --threads=*) threads=${arg#*=} ;;
    --json_out=*) json_out=${arg#*=} ;;
    --archs=*) archs=${arg#*=} ;;
    --dtypes=*) dtypes=${arg#*=} ;;
    *) echo "run.sh: unknown argument $arg" >&2; exit 1 ;;
  esac
done
if $quick; then
  passes=1; rounds=3; steps=8
else
  passes=3; rounds=3; steps=32
fi

source "$here/setup.sh"
llamacpp_setup
dir=$llamacpp_dir
tag=$llamacpp_tag
version=$llamacpp_version
bins=$llamacpp_bins
bench=$llamacpp_bench
files=()
for arch in ${archs//,/ }; do
  for dtype in ${dtypes//,/ }; do
    files+=("$(llamacpp_model "$arch" "$dtype" 8192)")
  done
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
started=$(date -u '+%Y-%m-%d %H:%M UTC')
[[ -n $json_out ]] || json_out=$dir/results/llamacpp-$(date -u '+%Y%m%dT%H%M%SZ').json
start=$SECONDS
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for pass in $(seq 1 $passes); do
  for file in "${files[@]}"; do
    name=$(basename "$file" .gguf)
    echo "pass $pass/$passes: $name" >&2
    "$bench" --model="$file" --backends="$bins" --threads="$threads" --steps="$steps" \
      --rounds="$rounds" --batches=1,8,32 --contexts=128,4096 --prefill=2048 \
      > "$tmp/$name-pass$pass.json"
  done
done
host=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
cat > "$tmp/meta.json" <<EOF
{"llama_cpp": "$tag", "node_llama_cpp": "$version", "threads": $threads, "quick": $quick,
 "steps": $steps, "prefill_tokens": 2048, "passes": $passes, "rounds_per_pass": $rounds,
 "host": "$host, $(nproc) cores", "started_utc": "$started", "wall_seconds": $((SECONDS - start)),
 "archs": ["${archs//,/\", \"}"], "dtypes": ["${dtypes//,/\", \"}"]}
EOF
"$python" "$here/report.py" --json_out="$json_out" --meta="$tmp/meta.json" "$tmp"/*-pass*.json
echo
echo "JSON: $json_out"
