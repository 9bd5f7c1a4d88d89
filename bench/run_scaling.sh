#!/usr/bin/env bash
# The scaling benchmark of issues 19 and 28, on the CPU: per-token decode step against context,
# at batch 1 and 32, in one run with the same threads, for
#   - linserve's engine (cpu_bench --contexts, real states), fp32 and int8 weights;
#   - llama.cpp's CPU backend (bench/llamacpp: llamacpp_bench --sweep) on GGUF files of the same
#     125M shape at Q8_0: GPT-2 (softmax attention, F16 KV cache) and RWKV-7 (recurrent);
#   - a PyTorch eager softmax decoder of the same shape over an fp32 KV cache
#     (bench/peer_softmax.py), the reference line of issue 19;
# plus linserve's state bytes per session as the server reports them (linserve on a random model
# of that shape, asked by linserve-cli model) against the KV cache's and RWKV-7's state bytes.
# Writes the raw figures to JSON_OUT and prints the tables (bench/report/tables.py, from that
# JSON); bench/plots.sh draws the pictures from the same file. bench/results/scaling.{json,md}
# record a run of exactly:
#   bash bench/run_scaling.sh [BUILD_DIR [JSON_OUT]]
#     (BUILD_DIR default: build/cpu; JSON_OUT default: bench/results/scaling.json)
# On a machine shared with other sessions, give it an autogroup of its own with priority:
#   setsid bash -c 'echo -10 > /proc/self/autogroup && bash bench/run_scaling.sh ...'
# Environment (defaults in brackets): LINSERVE_BENCH_CONTEXTS [128,256,...,65536],
# LINSERVE_BENCH_BATCHES [1,32], LINSERVE_BENCH_THREADS [every core], LINSERVE_KV_BUDGET_GIB
# [0: half of the memory available at the start, see bench/peer_softmax.py; the same budget
# bounds llama.cpp's KV caches and states], LINSERVE_LLAMACPP_PREFILL_CAP_S [180: a llama.cpp
# prefill to a context still running after this many seconds is stopped and recorded as capped,
# and that model's sweep ends there; prefilling GPT-2 to 64k tokens on 2 cores takes far longer],
# LINSERVE_LLAMACPP_STEPS [8: timed llama.cpp decode steps per point, after one untimed].
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu}
json_out=${2:-$root/bench/results/scaling.json}
python=${LINSERVE_PYTHON:-/usr/bin/python3}
contexts=${LINSERVE_BENCH_CONTEXTS:-128,256,512,1024,2048,4096,8192,16384,32768,65536}
batches=${LINSERVE_BENCH_BATCHES:-1,32}
threads=${LINSERVE_BENCH_THREADS:-$(nproc)}
kv_budget=${LINSERVE_KV_BUDGET_GIB:-0}
prefill_cap=${LINSERVE_LLAMACPP_PREFILL_CAP_S:-180}
llamacpp_steps=${LINSERVE_LLAMACPP_STEPS:-8}

cmake --build "$build" --target cpu_bench linserve linserve-cli linserve-bench-model >&2
source "$root/bench/llamacpp/setup.sh"
llamacpp_setup
# GPT-2's position table covers the largest context and its decode steps.
max_context=$(tr ',' '\n' <<<"$contexts" | sort -n | tail -1)
context_length=$(( max_context + 512 > 8192 ? max_context + 512 : 8192 ))
gpt2_file=$(llamacpp_model gpt2 q8_0 "$context_length")
rwkv7_file=$(llamacpp_model rwkv7 q8_0 8192)
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git -C "$root" rev-parse --short HEAD)

# linserve's own report of a session's bytes, for cpu_bench's shape (no position embedding
# here, sinusoidal there: positions hold no state).
echo "scaling: state bytes as the server reports them" >&2
"$build/bench/server/linserve-bench-model" --out="$tmp/model" --vocab_size=32000 --d_model=768 \
  --n_layers=12 --n_heads=12 --d_ff=3072 >&2
"$build/server/linserve" --model="$tmp/model" --device=cpu --host=127.0.0.1 --port=0 \
  --metrics_port=-1 --http_port=-1 --port_file="$tmp/ports" --threads=1 --max_slots=4 --state_memory_mib=64 \
  --log_level=warn >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 600); do [[ -s $tmp/ports ]] && break; sleep 0.1; done
port=$(sed -n 's/^grpc_port=//p' "$tmp/ports" 2>/dev/null || true)
if [[ -z $port ]]; then
  cat "$tmp/server.log" >&2
  echo "run_scaling: linserve did not start" >&2
  exit 1
fi
"$build/client/cli/linserve-cli" --target="127.0.0.1:$port" model >"$tmp/model_info.txt"
kill "$server_pid"
wait "$server_pid" || true
server_pid=
state_bytes=$(sed -n 's/^state bytes per session: //p' "$tmp/model_info.txt")
[[ -n $state_bytes ]] || { cat "$tmp/model_info.txt" >&2; exit 1; }

echo "scaling: the softmax peer" >&2
"$python" "$root/bench/peer_softmax.py" --contexts="$contexts" --batches="$batches" \
  --threads="$threads" --kv_budget_gib="$kv_budget" >"$tmp/softmax.json"
for arch in gpt2 rwkv7; do
  echo "scaling: llama.cpp $arch Q8_0" >&2
  file=${arch}_file
  "$llamacpp_bench" --sweep --model="${!file}" --backends="$llamacpp_bins" --threads="$threads" \
    --contexts="$contexts" --batches="$batches" --steps="$llamacpp_steps" \
    --memory_budget_gib="$kv_budget" --prefill_cap_s="$prefill_cap" >"$tmp/llamacpp-$arch.json"
done
for precision in fp32 int8; do
  echo "scaling: linserve's engine, $precision weights" >&2
  "$build/bench/cpu_bench" --threads="$threads" --contexts="$contexts" \
    --context_batches="$batches" --weight_precision="$precision" \
    --json_out="$tmp/linserve-$precision.json" 2>&1 | grep -v '^\[' >&2
done

"$python" - "$tmp" "$state_bytes" "$started" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$commit" "$json_out" "$llamacpp_tag" "$llamacpp_version" "$prefill_cap" <<'PY'
import json, subprocess, sys
(tmp, state_bytes, started, load_before, load_after, commit, json_out, llamacpp_tag,
 llamacpp_version, prefill_cap) = sys.argv[1:11]
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
cores = int(subprocess.run(["nproc"], capture_output=True, text=True).stdout)
memory = int(open("/proc/meminfo").readline().split()[1]) * 1024
doc = {
    "benchmark": "scaling",
    "date": started, "commit": commit,
    "machine": {"cpu": cpu, "cores": cores, "memory_bytes": memory, "device": "cpu"},
    "load_average_before": load_before, "load_average_after": load_after,
    "model": ("125M shape: d_model 768, 12 layers, 12 heads × 64, d_ff 3072, vocab 32000; random "
              "weights: linserve fp32 and int8, llama.cpp Q8_0, PyTorch fp32"),
    "linserve": json.load(open(f"{tmp}/linserve-fp32.json")),
    "linserve_int8": json.load(open(f"{tmp}/linserve-int8.json")),
    "llamacpp": {"llama_cpp": llamacpp_tag, "node_llama_cpp": llamacpp_version,
                 "prefill_cap_s": float(prefill_cap),
                 "gpt2": json.load(open(f"{tmp}/llamacpp-gpt2.json")),
                 "rwkv7": json.load(open(f"{tmp}/llamacpp-rwkv7.json"))},
    "softmax": json.load(open(f"{tmp}/softmax.json")),
}
doc["linserve"]["server_state_bytes_per_session"] = int(state_bytes)
with open(json_out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
PY
"$python" "$root/bench/report/tables.py" "$json_out"
