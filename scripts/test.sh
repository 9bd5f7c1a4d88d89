#!/usr/bin/env bash
# Sets up a new machine and runs the whole test suite:
#   1. installs the Debian packages (scripts/setup.sh);
#   2. builds with CUDA off and runs every test (GPU tests are not built there);
#   3. builds with CUDA on when nvcc is present (the CUDA sources must compile everywhere) and
#      runs its tests: the `gpu` ones skip themselves on a machine without a GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash scripts/setup.sh

bash scripts/build.sh build/cpu -DLINSERVE_CUDA=OFF
ctest --test-dir build/cpu --output-on-failure --timeout 900 -j "$(nproc)"

if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  bash scripts/build.sh build/cuda -DLINSERVE_CUDA=ON
  ctest --test-dir build/cuda --output-on-failure --timeout 900 -L gpu
else
  echo "test: no nvcc on this machine; the CUDA configuration was not built"
fi
