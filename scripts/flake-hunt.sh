#!/usr/bin/env bash
# Runs the CPU test suite N times and prints how often each test failed: how a flaky test is
# found before CI finds it (docs/testing.md, "Hunting flaky tests").
#   scripts/flake-hunt.sh N [BUILD_DIR] [-- ctest args...]
# BUILD_DIR (default build/cpu) is built first (scripts/build.sh, CUDA off). The first half of
# the runs has the machine to itself; the second half runs beside two busy-loop processes, the
# load of a shared CI machine. Each run's ctest log is kept in BUILD_DIR/flake-hunt/. Exits 1
# when any test failed in any run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
runs=${1:?usage: flake-hunt.sh N [BUILD_DIR] [-- ctest args...]}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "flake-hunt: N must be a positive integer, got '$runs'" >&2; exit 2; }
shift
build_dir=build/cpu
if (($#)) && [[ $1 != -- ]]; then build_dir=$1; shift; fi
if (($#)) && [[ $1 == -- ]]; then shift; fi
ctest_args=("$@")

bash scripts/build.sh "$build_dir" -DLINSERVE_CUDA=OFF >/dev/null
logs="$build_dir/flake-hunt"
rm -rf "$logs"
mkdir -p "$logs"

load_pids=()
stop_load() {
  ((${#load_pids[@]})) && kill "${load_pids[@]}" 2>/dev/null || true
  load_pids=()
}
trap stop_load EXIT

declare -A failures=()
loaded_from=$(((runs + 1) / 2 + 1))  # runs from this one on are under load
for ((run = 1; run <= runs; run++)); do
  if ((run == loaded_from)); then
    for _ in 1 2; do (while :; do :; done) & load_pids+=($!); done
  fi
  load=$(((run >= loaded_from) ? 2 : 0))
  log="$logs/run-$run.log"
  start=$SECONDS
  if ctest --test-dir "$build_dir" --output-on-failure --timeout 900 -j "$(nproc)" "${ctest_args[@]}" \
      >"$log" 2>&1; then
    status=passed
  else
    status=failed
  fi
  # ctest's summary lists each failed test as "  <number> - <name> (<reason>)".
  failed=$(sed -n '/tests failed out of/,$p' "$log" | sed -n 's/^[[:space:]]*[0-9][0-9]* - \([^ ]*\) .*/\1/p')
  for name in $failed; do failures[$name]=$((${failures[$name]:-0} + 1)); done
  echo "flake-hunt: run $run/$runs ($load busy loops): $status in $((SECONDS - start)) s${failed:+: $(echo $failed)}"
done
stop_load

echo "flake-hunt: $runs runs of $build_dir (runs $loaded_from-$runs beside 2 busy loops); logs in $logs"
if ((${#failures[@]} == 0)); then
  echo "flake-hunt: no test failed"
  exit 0
fi
for name in "${!failures[@]}"; do
  printf '  %-48s failed %d of %d runs\n' "$name" "${failures[$name]}" "$runs"
done | sort
exit 1
