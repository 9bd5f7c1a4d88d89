#!/usr/bin/env bash
# Installs every Debian package that linserve's build, tests (sanitizer and fuzz builds included),
# benchmarks (matplotlib draws their pictures) and PyTorch reference need. Idempotent: packages
# already present are left alone, and apt is not touched at all when nothing is missing. CUDA is
# not installed here: the build uses nvcc when it finds one.
#   scripts/setup.sh                # everything: build, tests, benchmarks, PyTorch reference
#   scripts/setup.sh --build-only   # just what compiling the C++ needs (container images)
set -euo pipefail

build_only=false
case "${1:-}" in
  "") ;;
  --build-only) build_only=true ;;
  *) echo "usage: setup.sh [--build-only]" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake ninja-build pkg-config git ccache
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libabsl-dev libspdlog-dev libfmt-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcpp-httplib-dev libevent-dev
  libsentencepiece-dev sentencepiece
  libopenblas-dev
)
# The sanitizer and fuzz stages of scripts/test.sh: gcc's ASan/UBSan/TSan runtimes come with g++;
# clang-14 builds the libFuzzer targets, and libclang-rt-14-dev holds -fsanitize=fuzzer's runtime
# (libclang_rt.fuzzer; Debian's libfuzzer-14-dev only adds a standalone libFuzzer.a).
fuzz_packages=(clang-14 libclang-rt-14-dev)
if ! $build_only; then
  packages+=("${fuzz_packages[@]}")
  # The OpenAI API tests run the official openai client under Node (tests/clients/openai). A
  # Node from elsewhere (NodeSource) ships its own npm, which Debian's npm package conflicts with.
  packages+=(nodejs curl)
  command -v npm >/dev/null || packages+=(npm)
  packages+=(python3 python3-torch python3-numpy python3-sentencepiece python3-grpcio
             python3-protobuf python3-matplotlib
             # Independent validators of structured output (tests/clients/openai/structured_*).
             python3-jsonschema python3-lark)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} packages present"
fi
