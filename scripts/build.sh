#!/usr/bin/env bash
# Configures and builds one configuration:
#   scripts/build.sh BUILD_DIR [cmake args...] [-- targets...]     (no targets: everything)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${1:?usage: build.sh BUILD_DIR [cmake args...] [-- targets...]}
shift
cmake_args=()
while (($#)) && [[ $1 != -- ]]; do cmake_args+=("$1"); shift; done
targets=()
if (($#)); then shift; targets=(--target "$@"); fi
# ccache with paths taken relative to the repository lets the second configuration (CUDA on)
# reuse every object the first one (CUDA off) compiled: only the CUDA-dependent files differ.
# The cache lives outside the clone, so a fresh clone on the same machine (CI) starts warm; 5G
# holds every configuration scripts/test.sh builds (Release CPU and CUDA, ASan, TSan, fuzz).
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$root"
  export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/linserve/ccache}"
  export CCACHE_NOHASHDIR=true CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "${cmake_args[@]}"
cmake --build "$build_dir" --parallel "$(nproc)" "${targets[@]}"
