#!/usr/bin/env bash
# Sets up a new machine and runs the server on the bundled model:
#   scripts/run.sh [linserve flags...]        e.g. scripts/run.sh --port 50051 --state_dir /tmp/s
# Installs the build dependencies (scripts/setup.sh --build-only), builds the server, the CLI and
# the load-test client into build/run, then execs `linserve` with the flags given.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash scripts/setup.sh --build-only
bash scripts/build.sh build/run -DLINSERVE_CUDA=AUTO -- \
  linserve linserve-cli linserve-loadtest linserve-generate
exec build/run/server/linserve "$@"
