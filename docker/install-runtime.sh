#!/usr/bin/env bash
# Run inside an image build (FROM debian:bookworm): installs the shared libraries linserve's
# binaries link at run time (the same for the CPU and the CUDA build; the CUDA libraries come
# with the binaries), removes apt's lists and caches, and creates the unprivileged `linserve`
# user whose home, /var/lib/linserve, holds the sessions.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends \
  libgrpc++1.51 libprotobuf32 libabsl20220623 libspdlog1.10 libfmt9 libssl3 \
  libopenblas0-pthread libsentencepiece0 libevent-core-2.1-7 \
  libevent-extra-2.1-7 libevent-pthreads-2.1-7 ca-certificates
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log
useradd --system --uid 10001 --home-dir /var/lib/linserve --create-home --shell /usr/sbin/nologin \
  linserve
