#!/usr/bin/env bash
# Builds the GPU tests against the CUDA emulation and runs them on the CPU (x86-64, no GPU).
#   tests/gpu/emulation/run.sh [BUILD_DIR] [gtest args...]
# BUILD_DIR (default build/cuda, configured with -DLINSERVE_CUDA=ON if it is not yet) provides
# the host libraries the tests link (CPU backend, model format, test support); the CUDA code
# itself is compiled here from the sources, with g++, into build/gpu-emulation.
# On 2 shared cores: cuda_kernels_test ~10 s, cuda_backend_test ~5 min (plus ~2 min to compile).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${1:-$root/build/cuda}
shift || true
out=$root/build/gpu-emulation
mkdir -p "$out/gen" "$out/obj"

if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINSERVE_CUDA=ON >/dev/null
fi
cmake --build "$build" --parallel "$(nproc)" --target linserve_testing linserve_model_compute \
  linserve_model linserve_model_format linserve_model_layers linserve_tokenizer linserve_kernels_cpu \
  linserve_kernel_account

# The compiler cache of scripts/build.sh, where there is ccache.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$root"
  export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/linserve/ccache}"
  export CCACHE_NOHASHDIR=true CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
  launcher=(ccache)
fi
cxx=("${launcher[@]}" g++ -std=gnu++20 -O2 -g -ffp-contract=off -fopenmp -Wall -Wextra -Wno-unknown-pragmas
     -DFMT_SHARED -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB
     -DGTEST_HAS_PTHREAD=1 -I"$root" -isystem /usr/include/x86_64-linux-gnu/openblas-pthread
     -isystem /usr/local/cuda/include)
tests_defines=(-DLINSERVE_SOURCE_DIR=\""$root"\" -DLINSERVE_BINARY_DIR=\""$build"\"
               -DLINSERVE_PYTHON=\"/usr/bin/python3\" -DLINSERVE_DEFAULT_MODEL_DIR=\"\"
               -DLINSERVE_CUDA_EMULATION=1)

# (source, object, extra flags) for every translation unit.
units=()
for cu in "$root"/kernels/cuda/*.cu; do
  name=$(basename "$cu" .cu)
  python3 "$here/translate_cu.py" "$cu" >"$out/gen/$name.cc.new"
  cmp -s "$out/gen/$name.cc.new" "$out/gen/$name.cc" 2>/dev/null || mv "$out/gen/$name.cc.new" "$out/gen/$name.cc"
  rm -f "$out/gen/$name.cc.new"
  units+=("$out/gen/$name.cc|k_$name|-include $here/cuda_emulation.h")
done
for cc in "$root"/kernels/cuda/*.cc; do units+=("$cc|c_$(basename "$cc" .cc)|"); done
for cc in "$root"/model/backend/cuda/*.cc; do units+=("$cc|b_$(basename "$cc" .cc)|"); done
units+=("$root/model/backend/backend_factory.cc|backend_factory|-DLINSERVE_WITH_CUDA=1"
        "$here/cuda_emulation.cc|cuda_emulation|"
        "$here/fake_cuda_runtime.cc|fake_cuda_runtime|"
        "$root/tests/gpu/gpu_test_util.cc|gpu_test_util|")
tests=(cuda_host_test backend_factory_test cuda_kernels_test cuda_backend_test)
for t in "${tests[@]}"; do units+=("$root/tests/gpu/$t.cc|t_$t|TEST"); done

compile_one() {
  IFS='|' read -r src obj flags <<<"$1"
  local target=$out/obj/$obj.o
  local extra=()
  [[ $flags == TEST ]] && extra=("${tests_defines[@]}") || read -ra extra <<<"$flags"
  if [[ ! -f $target || $src -nt $target || $here/cuda_emulation.h -nt $target ||
        -n $(find "$root/kernels/cuda" "$root/model" "$root/tests/gpu" \
               \( -name '*.h' -o -name '*.cuh' \) -newer "$target" -print -quit) ]]; then
    "${cxx[@]}" "${extra[@]}" -c "$src" -o "$target"
  fi
}
pids=()
for u in "${units[@]}"; do
  compile_one "$u" &
  pids+=($!)
  if ((${#pids[@]} >= $(nproc))); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done

libs=("$build/tests/testing/liblinserve_testing.a" /usr/lib/x86_64-linux-gnu/libgtest_main.a
      /usr/lib/x86_64-linux-gnu/libgmock.a /usr/lib/x86_64-linux-gnu/libgtest.a
      "$build/bench/liblinserve_kernel_account.a"
      "$build/model/backend/liblinserve_model_compute.a" "$build/kernels/liblinserve_kernels_cpu.a"
      "$build/model/liblinserve_model.a" "$build/model/tokenizer/liblinserve_tokenizer.a"
      "$build/model/format/liblinserve_model_format.a" "$build/model/layers/liblinserve_model_layers.a"
      /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so -lgomp -lmvec
      /usr/lib/x86_64-linux-gnu/libabsl_*.so /usr/lib/x86_64-linux-gnu/libspdlog.so
      /usr/lib/x86_64-linux-gnu/libfmt.so /usr/lib/x86_64-linux-gnu/libsentencepiece.so
      /usr/lib/x86_64-linux-gnu/libsentencepiece_train.so /usr/lib/x86_64-linux-gnu/libcrypto.so
      -lpthread -ldl -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-pthread)
# Every non-test unit of this tree (not a glob of obj/: an object left there by a source file
# that has since been removed would still define, and break, the link).
shared=()
for u in "${units[@]}"; do
  IFS='|' read -r _ obj flags <<<"$u"
  [[ $flags == TEST ]] || shared+=("$out/obj/$obj.o")
done
status=0
for t in "${tests[@]}"; do
  "${cxx[@]}" -o "$out/$t" "$out/obj/t_$t.o" "${shared[@]}" "${libs[@]}"
  echo "== $t (emulated)"
  "$out/$t" --gtest_brief=1 "$@" || status=1
done
exit $status
