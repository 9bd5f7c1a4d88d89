#!/usr/bin/env bash
# Builds the images and runs the deployments for real (podman + podman-compose), checking what an
# operator would see:
#   1. images: localhost/linserve:cpu from build/cpu's binaries (docker/stage.sh +
#      Dockerfile.prebuilt: no recompilation), localhost/linserve:cuda from build/cuda's when
#      that build exists, the HAProxy and Prometheus images;
#   2. serve: the CPU image serves the bundled model as an unprivileged user (health, a
#      generation, /metrics, the image's HEALTHCHECK); the CUDA image without a GPU says it
#      falls back to the CPU and serves;
#   3. compose: docker-compose.yml + docker-compose.loadtest.yml up, the load test passes,
#      Prometheus has scraped linserve_* series, down;
#   4. scale-out: docker-compose.scaleout.yml (3 replicas behind HAProxy): a multi-turn session
#      load test through the proxy ends with no error (no NOT_FOUND), sessions on all replicas;
#      then chats run through the proxy while the replica holding most of them is stopped
#      (SIGTERM): every chat's transcript equals one taken before with no replica stopped.
#   bash docker/test.sh            # needs build/cpu (scripts/build.sh build/cpu ...) first
# Skips (exit 0, saying why) when no container engine can be set up on this machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if ! command -v podman >/dev/null || ! command -v podman-compose >/dev/null; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    bash docker/setup-engine.sh
  else
    echo "docker/test.sh: SKIPPED: no podman/podman-compose, and they cannot be installed here" \
         "(needs root on Debian: docker/setup-engine.sh)"
    exit 0
  fi
fi
if ! podman info >/dev/null 2>&1; then
  echo "docker/test.sh: SKIPPED: podman is installed but cannot run containers here:" >&2
  podman info 2>&1 | tail -3 >&2
  exit 0
fi
# This machine's podman needs these (docker/setup-engine.sh explains why).
build_args=(--isolation chroot --format docker)
run_args=(--runtime runc)
compose() { podman-compose --podman-run-args "${run_args[*]}" "$@"; }

work=$(mktemp -d)
projects=()
cleanup() {
  local p
  for p in "${projects[@]}"; do
    compose -p "$p" -f "$root/docker/docker-compose.yml" \
      -f "$root/docker/docker-compose.loadtest.yml" down -v >/dev/null 2>&1 || true
    compose -p "$p" -f "$root/docker/docker-compose.scaleout.yml" down -v >/dev/null 2>&1 || true
  done
  podman rm -f linserve-test-cpu linserve-test-cuda >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "docker/test.sh: FAILED: $*" >&2; exit 1; }
# has PATTERN: whether stdin has a line matching the extended regex PATTERN. Reads all of it
# (grep -q would stop early, and under pipefail the writer's SIGPIPE would fail the pipeline).
has() { grep -Ec -- "$1" >/dev/null; }
step() { echo "docker/test.sh: ---- $*"; }

# wait_for TIMEOUT_S COMMAND...: retries COMMAND (quietly) every second until it succeeds.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 1
  done
}
# metrics CONTAINER: the server's /metrics, read inside the container (the image has no curl).
metrics() {
  podman exec "$1" bash -c 'exec 3<>/dev/tcp/127.0.0.1/9090
    printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3; cat <&3'
}

# ---- 1. images -------------------------------------------------------------------------------
step "images"
if [[ ! -x build/cpu/server/linserve ]]; then
  bash scripts/build.sh build/cpu -DLINSERVE_CUDA=OFF -- \
    linserve linserve-cli linserve-loadtest linserve-generate
fi
bash docker/stage.sh build/cpu build/image-cpu
podman build "${build_args[@]}" -q -f docker/Dockerfile.prebuilt -t localhost/linserve:cpu \
  build/image-cpu >/dev/null
have_cuda=false
if [[ -x build/cuda/server/linserve ]]; then
  bash docker/stage.sh build/cuda build/image-cuda
  podman build "${build_args[@]}" -q -f docker/Dockerfile.prebuilt -t localhost/linserve:cuda \
    build/image-cuda >/dev/null
  have_cuda=true
else
  echo "docker/test.sh: no CUDA build (build/cuda); the CUDA image is not built"
fi
podman build "${build_args[@]}" -q -f docker/Dockerfile.haproxy -t localhost/linserve-haproxy \
  docker >/dev/null
podman build "${build_args[@]}" -q -f docker/Dockerfile.prometheus \
  -t localhost/linserve-prometheus docker >/dev/null
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep linserve

# ---- 2. serve --------------------------------------------------------------------------------
# serve_check NAME IMAGE: runs the image, checks health, a generation, /metrics, the user.
serve_check() {
  local name=$1 image=$2
  podman run "${run_args[@]}" -d --name "$name" "$image" >/dev/null
  wait_for 60 podman exec "$name" linserve-cli --target=127.0.0.1:50051 --timeout=2s health ||
    { podman logs "$name"; fail "$image did not become healthy"; }
  local text
  text=$(podman exec "$name" linserve-cli --target=127.0.0.1:50051 generate \
    --max-new-tokens=24 --seed=1 "ROMEO:")
  [[ -n ${text//[[:space:]]/} ]] || fail "$image generated no text"
  metrics "$name" | has '^linserve_generated_tokens_total' ||
    fail "$image: /metrics has no linserve_generated_tokens_total"
  [[ $(podman exec "$name" id -u) != 0 ]] || fail "$image runs as root"
  podman healthcheck run "$name" >/dev/null 2>&1 || fail "$image: its HEALTHCHECK fails"
  echo "docker/test.sh: $image serves: $(echo "$text" | head -c 60 | tr '\n' ' ')..."
}
step "serve: CPU image"
serve_check linserve-test-cpu localhost/linserve:cpu
podman rm -f linserve-test-cpu >/dev/null
if $have_cuda; then
  step "serve: CUDA image without a GPU"
  serve_check linserve-test-cuda localhost/linserve:cuda
  podman logs linserve-test-cuda 2>&1 | grep "device auto: no usable CUDA device" ||
    fail "the CUDA image did not log its fallback to the CPU"
  podman rm -f linserve-test-cuda >/dev/null
fi

# ---- 3. compose: server + Prometheus + load test ---------------------------------------------
step "compose: server, load test, Prometheus"
p=linserve-test-compose
projects+=("$p")
files=(-f docker/docker-compose.yml -f docker/docker-compose.loadtest.yml)
compose -p "$p" "${files[@]}" up -d >"$work/up.log" 2>&1 || { cat "$work/up.log"; fail "up"; }
loadtest_rc=$(podman wait "${p}_loadtest_1")
podman logs "${p}_loadtest_1" >"$work/loadtest.log" 2>&1
[[ $loadtest_rc == 0 ]] || { cat "$work/loadtest.log"; fail "the load test exited $loadtest_rc"; }
grep -q "requests  *40 ok, 0 failed" "$work/loadtest.log" ||
  { cat "$work/loadtest.log"; fail "the load test did not complete 40 requests without error"; }
# promtool ships with Prometheus: ask the running server what it scraped.
scraped() {
  podman exec "${p}_prometheus_1" promtool query instant http://localhost:9090 \
    'sum(linserve_generated_tokens_total)' | has '=> [1-9]'
}
wait_for 60 scraped || fail "Prometheus has no linserve_generated_tokens_total samples"
echo "docker/test.sh: load test 40 ok; Prometheus:" \
  "$(podman exec "${p}_prometheus_1" promtool query instant http://localhost:9090 \
     'count({__name__=~"linserve_.+"})')"
compose -p "$p" "${files[@]}" down -v >/dev/null 2>&1 || fail "down"
podman ps -a --format '{{.Names}}' | has "^${p}_" && fail "down left containers behind"

# ---- 4. scale-out: 3 replicas behind HAProxy --------------------------------------------------
step "scale-out: 3 replicas behind HAProxy"
p=linserve-test-scaleout
projects+=("$p")
files=(-f docker/docker-compose.scaleout.yml)
replicas=("${p}_linserve-1_1" "${p}_linserve-2_1" "${p}_linserve-3_1")
compose -p "$p" "${files[@]}" up -d >"$work/up.log" 2>&1 || { cat "$work/up.log"; fail "up"; }
# client ARGS...: a linserve image container on the deployment's network.
client() {
  podman run "${run_args[@]}" --rm -i --network "${p}_default" --entrypoint /bin/sh \
    localhost/linserve:cpu -c "$@"
}
for r in "${replicas[@]}"; do
  wait_for 60 podman exec "$r" linserve-cli --target=127.0.0.1:50051 --timeout=2s health ||
    fail "$r did not become healthy"
done
wait_for 30 client "linserve-cli --target=haproxy:50051 --timeout=2s model" ||
  fail "the proxy does not reach the replicas"
# created REPLICA: sessions created on it so far.
created() { podman logs "$1" 2>&1 | grep -c ": created for" || true; }

client "linserve-loadtest --target=haproxy:50051 --turns=4 --concurrency=6 --requests=96 \
  --prompt-tokens=uniform:8:32 --output-tokens=16 --warmup=0s --duration=300s --seed=5 \
  --progress-interval=0" \
  >"$work/sessions.log" 2>&1 || { cat "$work/sessions.log"; fail "the session load test"; }
grep -q "requests  *96 ok, 0 failed" "$work/sessions.log" && grep -A1 "^errors" \
  "$work/sessions.log" | has none ||
  { cat "$work/sessions.log"; fail "the session load test had errors"; }
spread=""
for r in "${replicas[@]}"; do
  n=$(created "$r")
  ((n > 0)) || fail "$r got no session: the proxy does not spread sessions"
  spread+=" $n"
done
echo "docker/test.sh: 96 turns through the proxy, 0 errors; sessions per replica:$spread"

step "scale-out: a replica stops (SIGTERM) while its sessions are in use"
# Each chat: 6 turns, 2 s apart, on a session of its own (greedy: the transcript is a function
# of the session's state). The reference is one chat with no replica stopped.
chat='for p in ROMEO: JULIET: NURSE: ROMEO: FRIAR: JULIET:; do echo "$p"; sleep 2; done |'
chat+=' linserve-cli --target=haproxy:50051 --retry-unavailable chat --max-new-tokens=12'
chat+=' --temperature=0'
client "$chat" >"$work/reference.txt" 2>"$work/reference.err" ||
  { cat "$work/reference.err"; fail "the reference chat"; }
[[ -s $work/reference.txt ]] || fail "the reference chat printed nothing"
declare -A before
for r in "${replicas[@]}"; do before[$r]=$(created "$r"); done
kChats=12
client "for c in \$(seq $kChats); do ( $chat ) >/tmp/chat-\$c.txt 2>/tmp/chat-\$c.err & done
  wait; for c in \$(seq $kChats); do echo ==== \$c; cat /tmp/chat-\$c.txt; echo ==== err;
  cat /tmp/chat-\$c.err; done" >"$work/chats.log" 2>&1 &
chats=$!
# After the first turns, stop the replica that holds the most of these chats' sessions.
sleep 3
victim="" most=-1
for r in "${replicas[@]}"; do
  n=$(($(created "$r") - before[$r]))
  ((n > most)) && { most=$n; victim=$r; }
done
echo "docker/test.sh: stopping $victim, which holds $most of the $kChats sessions"
podman stop -t 10 "$victim" >/dev/null
wait "$chats" || { cat "$work/chats.log"; fail "the chats"; }
podman logs "$victim" 2>&1 | has "persisted" || fail "$victim did not persist its sessions"
loaded=0
for r in "${replicas[@]}"; do
  [[ $r == "$victim" ]] && continue
  loaded=$((loaded + $(podman logs "$r" 2>&1 | grep -c "loaded from state_dir on first use" ||
                       true)))
done
((loaded >= most)) || fail "only $loaded of $victim's $most sessions were taken over"
lost=0
for c in $(seq $kChats); do
  awk -v c="$c" '$0 == "==== " c { on = 1; next } /^==== / { on = 0 } on' "$work/chats.log" \
    >"$work/chat-$c.txt"
  cmp -s "$work/chat-$c.txt" "$work/reference.txt" || lost=$((lost + 1))
done
if ((lost)); then
  cat "$work/chats.log"
  echo "---- reference"; cat "$work/reference.txt"
  fail "$lost of $kChats chats differ from the reference"
fi
echo "docker/test.sh: $kChats chats, $most on the stopped replica, $loaded sessions taken over" \
     "from state_dir; every transcript identical to the reference; HAProxy marked a replica" \
     "down $(podman logs "${p}_haproxy_1" 2>&1 | grep -c '^Server linserve/.* is DOWN' || true)" \
     "time(s)"
compose -p "$p" "${files[@]}" down -v >/dev/null 2>&1 || fail "down"
echo "docker/test.sh: all container tests passed"
