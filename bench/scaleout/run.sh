#!/usr/bin/env bash
# Scale-out benchmark: linserve-loadtest (multi-turn sessions, routed by the linserve-session
# header) against the deployment of docker/docker-compose.scaleout.yml, in one run:
#   A  through HAProxy, 3 replicas;   B  through HAProxy, 1 replica (the other two stopped);
#   C  straight to that replica.
# A/B is the scaling from 1 to 3 replicas, B/C the proxy's cost. The three alternate round by
# round (replicas 2 and 3 are paused for B and C, and the proxy's health checks take them out of
# the ring and back), so that other load on a shared machine weighs on all alike; the report
# gives each round and the medians. The load test runs in a container on the deployment's
# network, as a client would.
# Needs the images of docker/test.sh (run it first). Prints markdown; bench/results/scaleout.md
# records a run of exactly:
#   bash bench/scaleout/run.sh
# Environment (defaults in brackets): LINSERVE_BENCH_ROUNDS [3], LINSERVE_BENCH_SECONDS [10:
# measured seconds per round], LINSERVE_BENCH_CONCURRENCY [8 sessions in flight].
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
rounds=${LINSERVE_BENCH_ROUNDS:-3}
seconds=${LINSERVE_BENCH_SECONDS:-10}
concurrency=${LINSERVE_BENCH_CONCURRENCY:-8}
p=linserve-bench-scaleout
compose() { podman-compose --podman-run-args "--runtime runc" -p "$p" \
              -f docker/docker-compose.scaleout.yml "$@"; }
trap 'compose down -v >/dev/null 2>&1 || true' EXIT
compose up -d >/dev/null 2>&1
for r in 1 2 3; do
  until podman exec "${p}_linserve-${r}_1" linserve-cli --target=127.0.0.1:50051 --timeout=2s \
      health >/dev/null 2>&1; do sleep 1; done
done
sleep 3  # the proxy's health checks mark every replica up

# run TARGET: output tokens/s of one measured round.
run() {
  podman run --runtime runc --rm --network "${p}_default" --entrypoint linserve-loadtest \
    localhost/linserve:cpu --target="$1" --retry-unavailable --concurrency="$concurrency" \
    --turns=4 --prompt-tokens=uniform:16:64 --output-tokens=64 --warmup=2s \
    --duration="${seconds}s" --seed=11 --progress-interval=0 2>/dev/null |
    awk '/output tokens\/s/ { print $3 }'
}
# ring STATE: waits until HAProxy has marked replicas 2 and 3 STATE (UP or DOWN) once more.
ring() {
  local before
  before=$(podman logs "${p}_haproxy_1" 2>&1 | grep -c "^Server linserve/linserve-[23] is $1" ||
           true)
  if [[ $1 == DOWN ]]; then podman pause "${p}_linserve-2_1" "${p}_linserve-3_1" >/dev/null
  else podman unpause "${p}_linserve-2_1" "${p}_linserve-3_1" >/dev/null; fi
  until (($(podman logs "${p}_haproxy_1" 2>&1 |
            grep -c "^Server linserve/linserve-[23] is $1" || true) >= before + 2)); do
    sleep 0.5
  done
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

a=() b=() c=()
for ((i = 0; i < rounds; ++i)); do
  a+=("$(run haproxy:50051)")
  ring DOWN
  b+=("$(run haproxy:50051)")
  c+=("$(run linserve-1:50051)")
  ring UP
done
ma=$(median "${a[@]}") mb=$(median "${b[@]}") mc=$(median "${c[@]}")
echo "| setup | output tokens/s per round | median |"
echo "|---|---|---|"
echo "| A: proxy, 3 replicas | ${a[*]} | $ma |"
echo "| B: proxy, 1 replica | ${b[*]} | $mb |"
echo "| C: direct, 1 replica | ${c[*]} | $mc |"
echo
awk -v a="$ma" -v b="$mb" -v c="$mc" 'BEGIN {
  printf "scaling A/B = %.2f; proxy B/C = %.3f (%+.1f%% through the proxy)\n", a / b, b / c,
         100 * (b / c - 1) }'
echo "machine: $(nproc) cores; $concurrency sessions in flight, 4 turns each, 16-64 prompt" \
     "tokens, 64 output tokens; $rounds rounds of ${seconds} s"
