#!/usr/bin/env bash
# GPU tests and benchmark of the CUDA backend, in one script.
#
#   bench/run_gpu.sh pack [BUNDLE]          on a build machine (our Debian packages + nvcc, no
#                                           GPU needed): builds the GPU test and benchmark
#                                           binaries for sm_90 (+ compute_90 PTX) and packs them
#                                           with the shared libraries they need into BUNDLE
#                                           (default build/gpu-bundle, git-ignored) and into
#                                           BUNDLE.tar.xz (~14 MB: the one file to carry).
#   bench/run_gpu.sh run [BUNDLE] [WHAT]    on the GPU machine: runs the packed binaries from
#                                           the directory or the .tar.xz (default: whichever of
#                                           build/gpu-bundle, build/gpu-bundle.tar.xz exists).
#                                           WHAT: all (default: tests, bench, kernels, peers),
#                                           tests, bench (125M shape, then the Based and the
#                                           Gated DeltaNet shapes at batches 1, 64, 256),
#                                           kernels (issues 29, 40: per-kernel times under a
#                                           profiler at batches 1, 64, 256 and of a 2048-token
#                                           prefill, every shape, beside their floors,
#                                           bench/gpu/kernel_report.py; writes
#                                           gpu_kernels.md), peers,
#                                           served (issue 9: gpu_bench's
#                                           engine-alone decode next to linserve --device=cuda
#                                           driven by linserve-loadtest; writes gpu_serving.md)
#                                           prefill (issue 16: bench/prefill/run.sh on the
#                                           GPU, 125M shape; writes prefill_serving_gpu.md)
#                                           or compare (gpu_bench against another commit's,
#                                           LINSERVE_BASELINE_GPU_BENCH, interleaved on the
#                                           same GPU; writes gpu_compare.md).
#                                           WHAT may list several, comma-separated, e.g.
#                                           tests,prefill.
#   bench/run_gpu.sh                        pack, then run: a GPU machine that has our packages.
#
# Why a bundle: the GPU machine has nvcc, CMake, the CUDA libraries and python with torch and
# transformers, but none of the Debian packages our targets link (Abseil, spdlog, fmt,
# GoogleTest, OpenBLAS, SentencePiece, OpenSSL's libcrypto, libgomp, libgfortran). The bundle
# carries exactly those (bundle/lib, listed in bundle/MANIFEST); from the GPU machine it takes
# glibc (>= the version MANIFEST names), libstdc++, the driver (libcuda.so.1) and cuBLASLt
# (libcublasLt.so.13, CUDA 13). The CUDA runtime is linked statically.
#
# Output: markdown for bench/results/gpu.md (or, for served, gpu_serving.md) on stdout; every
# log under build/gpu-run. Where $OUT is set (the device tool's folder of files to bring back, at
# most 8 files) the summary files and a tarball of the logs are copied there at exit, failed or
# not.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-both}
bundle=${2:-$root/build/gpu-bundle}
if [[ $mode == run && -z ${2:-} && ! -d $bundle ]]; then
  bundle=$bundle.tar.xz
fi
what=${3:-all}
binaries=(cuda_host_test backend_factory_test cuda_kernels_test cuda_backend_test gpu_bench
  linserve linserve-loadtest linserve-cli linserve-bench-model linserve-prefill-bench)
# The served benchmark: concurrencies of the greedy runs (1024 needs ~2.5 GB of state on the
# 125M shape) and of the top-k 50 + top-p 0.9 run, seconds measured per point after a warm-up.
served_concurrencies=(1 64 256 1024)
served_sampling_concurrency=64
served_long_concurrency=256
served_seconds=${LINSERVE_SERVED_SECONDS:-10}
served_warmup=${LINSERVE_SERVED_WARMUP:-3}

pack() {
  local build=$root/build/gpu
  # scripts/build.sh: the shared ccache makes the CPU-only objects free.
  bash "$root/scripts/build.sh" "$build" -DLINSERVE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -- "${binaries[@]}" >&2
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  for b in "${binaries[@]}"; do
    cp "$(find "$build" -type f -name "$b" -perm -u+x | head -1)" "$bundle/bin/"
  done
  # Every resolved dependency except what the GPU machine provides itself: the C runtime
  # (glibc, libstdc++, libgcc_s) and the CUDA driver and libraries.
  ldd "$bundle"/bin/* | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libmvec.so*) ;;
      libstdc++.so*|libgcc_s.so*) ;;
      libcuda.so*|libcublas*|libcudart*|libnvidia*) ;;
      *) cp -L "$lib" "$bundle/lib/" ;;
    esac
  done
  local glibc
  glibc=$( (objdump -T "$bundle"/bin/* "$bundle"/lib/* 2>/dev/null || true) |
    grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  {
    echo "built: $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(nvcc --version 2>/dev/null | tail -1 || /usr/local/cuda/bin/nvcc --version | tail -1)"
    echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "cuda architectures: 90 (sm_90 SASS + compute_90 PTX)"
    echo "needs from the host: $glibc or newer, libstdc++.so.6, libgcc_s.so.1, libcuda.so.1, libcublasLt.so.13"
    echo "carried libraries:"
    (cd "$bundle/lib" && ls -1)
  } >"$bundle/MANIFEST"
  tar -C "$(dirname "$bundle")" -cf - "$(basename "$bundle")" | xz -T0 -6 >"$bundle.tar.xz"
  echo "run_gpu: packed $(du -sh "$bundle" | cut -f1) into $bundle and" \
    "$(du -sh "$bundle.tar.xz" | cut -f1) into $bundle.tar.xz" >&2
}

# Adds the directory holding libcublasLt.so.13 to LD_LIBRARY_PATH: the toolkit's, or the one
# PyTorch's nvidia-cublas wheel installs.
find_cublas() {
  local dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  local py
  py=$(python3 - <<'EOF' 2>/dev/null || true
import glob, os, site
for base in site.getsitepackages():
    for path in glob.glob(os.path.join(base, "nvidia", "*", "lib", "libcublasLt.so.13")):
        print(os.path.dirname(path))
EOF
)
  for d in "${dirs[@]}" $py; do
    if [[ -e $d/libcublasLt.so.13 ]]; then
      echo "$d"
      return
    fi
  done
  ldconfig -p | awk '/libcublasLt.so.13/ {print $NF; exit}' | xargs -r dirname
}

# Copies the summary and a tarball of every log to $OUT (if set).
export_results() {
  local out=$1
  [[ -n ${OUT:-} && -d ${OUT:-} ]] || return 0
  for f in gpu.md gpu_bench.json peers.json tests.txt gpu_kernels.md gpu_serving.md \
    prefill_serving_gpu.md gpu_compare.md; do
    [[ -f $out/$f ]] && cp "$out/$f" "$OUT/"
  done
  # Without the profiles (tens of MB each): their per-kernel sums are in the logs.
  tar -C "$out" --exclude='*.nsys-rep' --exclude='*.ncu-rep' --exclude='*.sqlite' --exclude='model-*' -czf "$OUT/logs.tar.gz" . \
    2>/dev/null || true
}

# The served path of issue 9 in this call: gpu_bench's engine-alone decode at the served batch
# sizes, then linserve --device=cuda on a random model of the same 125M shape driven by
# linserve-loadtest, greedy at each of served_concurrencies, greedy with 1024 output tokens at
# served_long_concurrency and top-k 50 + top-p 0.9 at served_sampling_concurrency; around each
# point the server's /metrics is scraped (the engine thread's phases per step, issue 38) and
# `nvidia-smi dmon -s u` samples the SMs' busy share; writes $out/gpu_serving.md.
served() {
  local out=$1
  local batches
  batches=$(IFS=,; echo "${served_concurrencies[*]}")
  "$bundle/bin/gpu_bench" --batches="$batches" --prefill_lengths=2048 --positions=1024 \
    --json_out="$out/served_engine.json" | tee "$out/served_engine.md" >&2
  local model=$out/model-125m
  make_125m_model "$model"
  local max=${served_concurrencies[-1]}
  rm -f "$out/ports"
  "$bundle/bin/linserve" --model="$model" --device=cuda --weight_precision=bf16 \
    --host=127.0.0.1 --port=0 --metrics_port=0 --http_port=-1 --port_file="$out/ports" \
    --max_batch_size="$max" --max_slots="$((max + 64))" --state_memory_mib=8192 \
    --max_queue_depth="$((2 * max))" --log_level=warn >"$out/server.log" 2>&1 &
  local server_pid=$!
  local port=
  for _ in $(seq 1200); do
    [[ -s $out/ports ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  port=$(sed -n 's/^grpc_port=//p' "$out/ports" 2>/dev/null || true)
  local metrics_port
  metrics_port=$(sed -n 's/^metrics_port=//p' "$out/ports" 2>/dev/null || true)
  if [[ -z $port ]]; then
    cat "$out/server.log" >&2
    echo "run_gpu: linserve did not start" >&2
    kill "$server_pid" 2>/dev/null || true
    return 1
  fi
  local load=("$bundle/bin/linserve-loadtest" --target="127.0.0.1:$port" --prompt-tokens=16
    --output-tokens=256 --duration="${served_seconds}s" --warmup="${served_warmup}s"
    --drain-timeout=10s --progress-interval=0)
  local greedy=() phases=() dmon=() rc=0
  # scrape FILE: the server's /metrics (python3: the device machines have no curl).
  scrape() {
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
      "http://127.0.0.1:$metrics_port/metrics" >"$1" || true
  }
  # point LABEL NAME LOADTEST-ARGS...: one served point, with its scrapes and SM samples.
  point() {
    local label=$1 name=$2
    shift 2
    echo "run_gpu: served, $label" >&2
    scrape "$out/metrics_${name}_before.txt"
    nvidia-smi dmon -s u -d 1 >"$out/dmon_$name.txt" 2>/dev/null &
    local dmon_pid=$!
    "${load[@]}" "$@" --json="$out/served_$name.json" | tee "$out/served_$name.txt" >&2 || rc=1
    kill "$dmon_pid" 2>/dev/null || true
    wait "$dmon_pid" 2>/dev/null || true
    scrape "$out/metrics_${name}_after.txt"
    phases+=("$label=$out/metrics_${name}_before.txt,$out/metrics_${name}_after.txt")
    dmon+=("$label=$out/dmon_$name.txt")
  }
  for c in "${served_concurrencies[@]}"; do
    point "$c" "$c" --concurrency="$c" --temperature=0
    greedy+=("$c=$out/served_$c.json")
  done
  local long=$served_long_concurrency
  point "$long, 16 + 1024 tokens" "${long}_long" --concurrency="$long" --temperature=0 \
    --output-tokens=1024
  local c=$served_sampling_concurrency
  point "$c, top-k 50 + top-p 0.9" "${c}_topk_topp" --concurrency="$c" --temperature=1 \
    --top-k=50 --top-p=0.9
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  ((rc == 0)) || { echo "run_gpu: a load test failed" >&2; return 1; }
  python3 "$root/bench/gpu/serving_report.py" --engine "$out/served_engine.json" \
    --greedy "${greedy[@]}" --sampling "$c=$out/served_${c}_topk_topp.json" \
    --long "$long=$out/served_${long}_long.json" --phases "${phases[@]}" --dmon "${dmon[@]}" \
    --gpu "$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)" \
    --command "bench/run_gpu.sh run build/gpu-bundle.tar.xz served" | tee "$out/gpu_serving.md"
}

# Issue 29 in this call: gpu_bench --profile_batch for each shape and batch under a profiler (and,
# issue 40, --profile_prefill=2048 for each shape), its per-kernel times, and kernel_report.py's
# table of each kernel's time per step (or prefill) against its floor; writes $out/gpu_kernels.md. The profiler: nsys (kernels only, CUDA graphs traced node by
# node, 50 steps) where it is installed; else Nsight Compute (ncu), which times each launch alone
# (graph nodes too) at the card's own clocks and without flushing caches, over fewer steps since
# it serializes every launch (the device machines' image has ncu but no working nsys).
kernels() {
  local out=$1 nsys ncu
  nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
    2>/dev/null | head -1 || true)
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu \
    2>/dev/null | head -1 || true)
  if [[ -z $nsys && -z $ncu ]]; then
    echo "run_gpu: neither nsys nor ncu found: per-kernel times not measured" |
      tee "$out/gpu_kernels.md" >&2
    return 1
  fi
  local pairs=() shape b
  # One profiled gpu_bench run: profile NAME NSYS_STEPS NCU_STEPS GPU_BENCH_FLAGS...
  profile() {
    local name=$1 nsys_steps=$2 ncu_steps=$3
    shift 3
    local bench=("$bundle/bin/gpu_bench" "$@" --json_out="$out/$name.json")
    if [[ -n $nsys ]]; then
      "$nsys" profile --trace=cuda --cuda-graph-trace=node --capture-range=cudaProfilerApi \
        --capture-range-end=stop --force-overwrite=true --output="$out/$name" \
        "${bench[@]}" --profile_steps="$nsys_steps" >"$out/$name.log" 2>&1 || {
        cat "$out/$name.log" >&2; return 1; }
      "$nsys" stats --report cuda_gpu_kern_sum --format csv --force-export=true \
        --output="$out/$name" "$out/$name.nsys-rep" >>"$out/$name.log" 2>&1 || {
        cat "$out/$name.log" >&2; return 1; }
      pairs+=("$out/$name.json=$(ls "$out/$name"*kern_sum*.csv | head -1)")
    else
      "$ncu" --profile-from-start off --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum --force-overwrite --export "$out/$name" \
        "${bench[@]}" --profile_steps="$ncu_steps" >"$out/$name.log" 2>&1 || {
        cat "$out/$name.log" >&2; return 1; }
      "$ncu" --import "$out/$name.ncu-rep" --csv \
        >"$out/$name.csv" 2>>"$out/$name.log" || { cat "$out/$name.log" >&2; return 1; }
      pairs+=("$out/$name.json=$out/$name.csv")
    fi
  }
  for shape in 125m based gated_delta_net gla retnet mamba2; do
    for b in 1 64 256; do
      profile "kernels_${shape}_$b" 50 5 --shape="$shape" --profile_batch="$b" || return 1
    done
    # Issue 40: one 2048-token prefill's kernels against their floors.
    profile "kernels_${shape}_prefill2048" 10 2 --shape="$shape" --profile_prefill=2048 || return 1
  done
  python3 "$root/bench/gpu/kernel_report.py" "${pairs[@]}" | tee "$out/gpu_kernels.md"
}

# WHAT=compare: the bundle's gpu_bench against another commit's (LINSERVE_BASELINE_GPU_BENCH, a
# gpu_bench binary run with the bundle's libraries) on this same GPU, interleaved: two rounds of
# (baseline, ours) for each shape (LINSERVE_COMPARE_SHAPES, default "125m based") at the batches
# LINSERVE_COMPARE_BATCHES (default 1,8,64,256), then bench/gpu/compare_report.py's table of
# decode step times; writes $out/gpu_compare.md.
compare() {
  local out=$1 baseline=${LINSERVE_BASELINE_GPU_BENCH:-}
  local batches=${LINSERVE_COMPARE_BATCHES:-1,8,64,256} shapes=${LINSERVE_COMPARE_SHAPES:-125m based}
  if [[ ! -x $baseline ]]; then
    echo "run_gpu: compare needs LINSERVE_BASELINE_GPU_BENCH, an executable gpu_bench" >&2
    return 1
  fi
  local runs=() round shape who bin
  for round in 1 2; do
    for shape in $shapes; do
      for who in baseline ours; do
        bin=$baseline
        [[ $who == ours ]] && bin=$bundle/bin/gpu_bench
        local name=compare_${shape}_${who}_$round
        "$bin" --shape="$shape" --batches="$batches" --prefill_lengths=2048 --positions=1024 \
          --json_out="$out/$name.json" >"$out/$name.md" 2>&1 || { cat "$out/$name.md" >&2; return 1; }
        runs+=("$who=$out/$name.json")
      done
    done
  done
  python3 "$root/bench/gpu/compare_report.py" "${runs[@]}" | tee "$out/gpu_compare.md"
}

# A random model of gpu_bench's Config125M shape but for the position embedding (none here,
# sinusoidal there) at $1.
make_125m_model() {
  rm -rf "$1"
  "$bundle/bin/linserve-bench-model" --out="$1" --vocab_size=50257 --d_model=768 \
    --n_layers=12 --n_heads=12 --d_ff=3072
}

# Issue 16 in this call: bench/prefill/run.sh with the bundle's binaries on the GPU (engine-alone
# prefill against served time to first token at 2k/8k/32k, concurrency 1 and 8; 32 streams'
# inter-token p99 with and without 8k-token prompts arriving); writes prefill_serving_gpu.md.
prefill() {
  local out=$1
  make_125m_model "$out/model-125m"
  LINSERVE_BENCH_BIN=$bundle/bin LINSERVE_BENCH_DEVICE=cuda LINSERVE_BENCH_THREADS=0 \
    LINSERVE_BENCH_MODEL=$out/model-125m LINSERVE_BENCH_ROUNDS=3 LINSERVE_BENCH_OUTPUT=2048 \
    LINSERVE_BENCH_SERVER_FLAGS="--weight_precision=bf16" \
    bash "$root/bench/prefill/run.sh" | tee "$out/prefill_serving_gpu.md"
}

run() {
  local out=$root/build/gpu-run
  mkdir -p "$out"
  trap "export_results '$out'" EXIT
  if [[ -f $bundle && $bundle == *.tar.xz ]]; then
    local unpacked=${TMPDIR:-/tmp}/linserve-gpu-bundle
    rm -rf "$unpacked"
    mkdir -p "$unpacked"
    tar -C "$unpacked" -xJf "$bundle"
    bundle=$(find "$unpacked" -mindepth 1 -maxdepth 1 -type d | head -1)
  fi
  [[ -d $bundle/bin ]] || { echo "run_gpu: no bundle at $bundle (run 'bench/run_gpu.sh pack' where our packages are)" >&2; exit 1; }
  local cublas
  cublas=$(find_cublas)
  [[ -n $cublas ]] || { echo "run_gpu: libcublasLt.so.13 not found" >&2; exit 1; }
  export LD_LIBRARY_PATH=$bundle/lib:$cublas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ldd "$bundle"/bin/* | grep -q "not found"; then
    echo "run_gpu: unresolved libraries:" >&2
    ldd "$bundle"/bin/* | grep "not found" | sort -u >&2
    exit 1
  fi
  nvidia-smi -L >&2 || true
  cat "$bundle/MANIFEST" >&2

  local failed=0
  # WHAT: one mode or a comma-separated list of them.
  wants() { [[ ,$what, == *,$1,* ]]; }
  if wants all || wants tests; then
    : >"$out/tests.txt"
    for t in cuda_host_test backend_factory_test cuda_kernels_test cuda_backend_test; do
      local start=$SECONDS rc=0
      "$bundle/bin/$t" --gtest_color=no >"$out/$t.log" 2>&1 || rc=$?
      local verdict="Passed"
      ((rc == 0)) || { verdict="***Failed (exit $rc)"; failed=1; }
      grep -q "^\[  SKIPPED \]" "$out/$t.log" && verdict="$verdict, with skipped tests"
      echo "Test #: $t ... $verdict $((SECONDS - start)) s" | tee -a "$out/tests.txt" >&2
      grep -E "^\[  FAILED  \]|Failure|error:" "$out/$t.log" | head -40 | tee -a "$out/tests.txt" >&2 || true
    done
  fi
  if wants all || wants bench; then
    "$bundle/bin/gpu_bench" --json_out="$out/gpu_bench.json" | tee "$out/gpu_bench.md" >&2
    local shape
    for shape in based gated_delta_net gla retnet mamba2; do
      "$bundle/bin/gpu_bench" --shape="$shape" --batches=1,64,256 --prefill_lengths=2048 \
        --positions=1024 --json_out="$out/gpu_bench_$shape.json" |
        tee "$out/gpu_bench_$shape.md" >&2
    done
  fi
  if wants all || wants kernels; then
    kernels "$out" || failed=1
  fi
  if wants all || wants peers; then
    PYTHONUNBUFFERED=1 python3 "$root/bench/gpu/peers.py" --json_out="$out/peers.json" >/dev/null
  fi
  if wants prefill; then
    prefill "$out" || failed=1
  fi
  if wants compare; then
    compare "$out" || failed=1
  fi
  if wants served; then
    served "$out" || failed=1
    return $failed
  fi
  if [[ -f $out/gpu_bench.json && -f $out/peers.json ]]; then
    local tests=()
    [[ -f $out/tests.txt ]] && tests=(--tests "$out/tests.txt")
    python3 "$root/bench/gpu/report.py" --ours "$out/gpu_bench.json" --peers "$out/peers.json" \
      "${tests[@]}" --command "bench/run_gpu.sh run" | tee "$out/gpu.md"
  fi
  return $failed
}

case $mode in
  pack) pack ;;
  run) run ;;
  both) pack; run ;;
  *) echo "usage: bench/run_gpu.sh [pack [BUNDLE] | run [BUNDLE] [all|tests|bench|kernels|peers|served|prefill|compare[,...]]]" >&2; exit 2 ;;
esac
