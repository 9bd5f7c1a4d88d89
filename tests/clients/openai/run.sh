#!/usr/bin/env bash
# Runs one test of the OpenAI-compatible HTTP API against a real linserve process:
#   run.sh install WORK_DIR                        npm ci of the pinned openai client into
#                                                  WORK_DIR (skipped when the lock is unchanged)
#   run.sh test WORK_DIR LINSERVE TEST [FLAGS...]  starts LINSERVE (bundled model, free ports,
#                                                  tenants alice and bob, FLAGS), runs TEST (a .mjs
#                                                  under node, a .sh under bash) with
#                                                  LINSERVE_HTTP, LINSERVE_METRICS and the tokens in
#                                                  the environment, then stops the server
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=$1
work=$2
mkdir -p "$work"

if [[ $mode == install ]]; then
  if cmp -s "$here/package-lock.json" "$work/package-lock.json" &&
    [[ -f $work/node_modules/openai/package.json ]]; then
    exit 0
  fi
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  cd "$work"
  npm ci --no-audit --no-fund --loglevel=error
  exit 0
fi

binary=$3
test=$4
shift 4
name=$(basename "$test")
dir=$(mktemp -d "$work/$name.XXXXXX")
server_pid=
# Prints PREFIX and how the server stands: still running, or how it ended (its exit status, or
# the signal that killed it: a crash such as SIGSEGV or SIGPIPE logs nothing). A server that
# ended is reaped (not in a subshell: only this shell can wait for it).
server_state() {
  if kill -0 "$server_pid" 2>/dev/null && [[ $(ps -o stat= -p "$server_pid" || true) != Z* ]]; then
    echo "$1linserve (pid $server_pid) is still running"
    return 0  # (a bare return in the EXIT trap would return the test's status: set -e)
  fi
  local code=0
  wait "$server_pid" || code=$?
  if ((code > 128)); then
    local signal=$((code - 128))
    echo "$1linserve (pid $server_pid) was killed by signal $signal (SIG$(kill -l $signal))"
  else
    echo "$1linserve (pid $server_pid) exited with status $code"
  fi
  server_pid=
}
cleanup() {
  local status=$?
  if ((status != 0)) && [[ -n $server_pid ]]; then
    server_state "--- test failed (status $status): "
  fi
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if ((status != 0)); then
    echo "--- server log (${dir}/server.log, last 50 lines) ---"
    tail -n 50 "$dir/server.log" || true
  else
    rm -rf "$dir"
  fi
}
trap cleanup EXIT

printf 'alice alice-token\nbob bob-token\n' >"$dir/tokens"
# --log_level=info: the log shows the server starting and each request ending, so that the log of
# a failed run says how far the server got (spdlog flushes every line).
"$binary" --host=127.0.0.1 --port=0 --metrics_port=0 --http_port=0 --port_file="$dir/ports" \
  --auth_tokens_file="$dir/tokens" --threads=2 --log_level=info "$@" >"$dir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 600); do
  [[ -s $dir/ports ]] && break
  [[ $(ps -o stat= -p "$server_pid" || true) == [^Z]* ]] ||
    { server_state "before writing its ports: "; exit 1; }
  sleep 0.1
done
[[ -s $dir/ports ]] || { echo "linserve did not write its ports in 60 s"; exit 1; }
http_port=$(sed -n 's/^http_port=//p' "$dir/ports")
metrics_port=$(sed -n 's/^metrics_port=//p' "$dir/ports")
export LINSERVE_HTTP="http://127.0.0.1:$http_port"
export LINSERVE_METRICS="http://127.0.0.1:$metrics_port/metrics"
export LINSERVE_TOKEN=alice-token LINSERVE_OTHER_TOKEN=bob-token

case $test in
  *.mjs)
    # Imports resolve from the script's folder: run a copy beside node_modules.
    cp "$test" "$work/$name"
    node --test --test-reporter=spec "$work/$name"
    ;;
  *.sh) bash "$test" ;;
  *) echo "unknown test kind: $test"; exit 2 ;;
esac
