#!/usr/bin/env bash
# Draws the benchmarks' pictures (issue 19) into bench/results/ from the raw figures recorded
# there (every bench/results/*.json that bench/report knows: scaling.json from
# bench/run_scaling.sh, server.json from bench/server/run.sh), with the figures their tables
# print. Installs Debian's python3-matplotlib first when it is missing.
#   bash bench/plots.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${LINSERVE_PYTHON:-/usr/bin/python3}

if ! "$python" -c "import matplotlib" 2>/dev/null; then
  echo "plots: installing python3-matplotlib" >&2
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends python3-matplotlib
fi
"$python" "$root/bench/report/plots.py" --out "$root/bench/results" "$root"/bench/results/*.json
