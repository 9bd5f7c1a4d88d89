#!/usr/bin/env bash
# GPU tests and benchmark of the CUDA backend, in one script.
#
#   bench/run_gpu.sh pack [BUNDLE]          on a build machine (our Debian packages + nvcc, no
#                                           GPU needed): builds the GPU test and benchmark
#                                           binaries for sm_90 (+ compute_90 PTX) and packs them
#                                           with the shared libraries they need into BUNDLE
#                                           (default build/gpu-bundle, git-ignored) and into
#                                           BUNDLE.tar.xz (~10 MB: the one file to carry).
#   bench/run_gpu.sh run [BUNDLE] [WHAT]    on the GPU machine: runs the packed binaries from
#                                           the directory or the .tar.xz (default: whichever of
#                                           build/gpu-bundle, build/gpu-bundle.tar.xz exists).
#                                           WHAT: all (default), tests, bench or peers.
#   bench/run_gpu.sh                        pack, then run: a GPU machine that has our packages.
#
# Why a bundle: the GPU machine has nvcc, CMake, the CUDA libraries and python with torch and
# transformers, but none of the Debian packages our targets link (Abseil, spdlog, fmt,
# GoogleTest, OpenBLAS, SentencePiece, OpenSSL's libcrypto, libgomp, libgfortran). The bundle
# carries exactly those (bundle/lib, listed in bundle/MANIFEST); from the GPU machine it takes
# glibc (>= the version MANIFEST names), libstdc++, the driver (libcuda.so.1) and cuBLASLt
# (libcublasLt.so.13, CUDA 13). The CUDA runtime is linked statically.
#
# Output: markdown for bench/results/gpu.md on stdout; every log under build/gpu-run. Where
# $OUT is set (the device tool's folder of files to bring back, at most 8 files) the summary
# files and a tarball of the logs are copied there at exit, failed or not.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-both}
bundle=${2:-$root/build/gpu-bundle}
if [[ $mode == run && -z ${2:-} && ! -d $bundle ]]; then
  bundle=$bundle.tar.xz
fi
what=${3:-all}
binaries=(cuda_host_test backend_factory_test cuda_kernels_test cuda_backend_test gpu_bench)

pack() {
  local build=$root/build/gpu
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINSERVE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  cmake --build "$build" --parallel "$(nproc)" --target "${binaries[@]}"
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
  for f in gpu.md gpu_bench.json peers.json tests.txt; do
    [[ -f $out/$f ]] && cp "$out/$f" "$OUT/"
  done
  tar -C "$out" -czf "$OUT/logs.tar.gz" . 2>/dev/null || true
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
  if [[ $what == all || $what == tests ]]; then
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
  if [[ $what == all || $what == bench ]]; then
    "$bundle/bin/gpu_bench" --json_out="$out/gpu_bench.json" | tee "$out/gpu_bench.md" >&2
  fi
  if [[ $what == all || $what == peers ]]; then
    PYTHONUNBUFFERED=1 python3 "$root/bench/gpu/peers.py" --json_out="$out/peers.json" >/dev/null
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
  *) echo "usage: bench/run_gpu.sh [pack [BUNDLE] | run [BUNDLE] [all|tests|bench|peers]]" >&2; exit 2 ;;
esac
