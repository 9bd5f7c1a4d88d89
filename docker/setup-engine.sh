#!/usr/bin/env bash
# Sets up a container engine on a Debian 12 machine that has no Docker daemon and no access to any
# image registry, so that docker/ images and the compose deployment can be built and run for real.
#
#   bash docker/setup-engine.sh            # once per machine (idempotent, ~1 min; docker/test.sh runs it)
#
# Afterwards, from the project root: bash docker/test.sh, or the commands of docs/deployment.md.
#
# What it does and why:
# - installs podman, podman-compose, runc and the CNI/DNS plugins from Debian's packages;
# - writes /etc/containers/containers.conf: no default ulimits (this sandbox refuses setrlimit)
#   and the cgroupfs manager (cgroups here are v1, not managed by systemd);
# - builds a Debian bookworm base image with debootstrap (packages come from Debian's archive,
#   which this machine reaches) and tags it docker.io/library/debian:bookworm, so a Dockerfile's
#   `FROM debian:bookworm` resolves locally. No other base image (nvidia/cuda, ubuntu) can be had
#   here: images built FROM those can be written but not built on this machine.
# Known here (podman 4.3.1, podman-compose 1.0.3): podman-compose has no --profile and ignores
# `profiles:` (use separate compose files), ignores stop_grace_period (stops with -t 10), and exits
# 255 with --abort-on-container-exit even on success (use --exit-code-from SERVICE); OCI images drop
# HEALTHCHECK unless built with --format docker.
# Known here: `podman build` needs --isolation chroot; `podman run` needs --runtime runc;
# network_mode: host does not work under podman-compose 1.0.3: use the default bridge network,
# where services reach each other by service name.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
if ! command -v podman-compose >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
  apt-get update -q >/dev/null
  apt-get install -y -q podman podman-compose runc debootstrap \
    golang-github-containernetworking-plugin-dnsname >/dev/null
fi

mkdir -p /etc/containers
cat > /etc/containers/containers.conf <<'EOF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
EOF

if ! podman image exists docker.io/library/debian:bookworm; then
  root=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$root" >/dev/null
  tar -C "$root" -c . | podman import - docker.io/library/debian:bookworm >/dev/null
  rm -rf "$root"
fi

podman --version
podman-compose version 2>/dev/null | head -1 || true
echo "base image: $(podman image inspect --format '{{.Id}}' docker.io/library/debian:bookworm | cut -c1-12) docker.io/library/debian:bookworm"
