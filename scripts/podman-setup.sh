#!/usr/bin/env bash
# Podman for the container test (tests/container), on a Debian machine without a Docker engine or a
# reachable container registry. Idempotent: installs nothing that is there already.
#
#   eval "$(scripts/podman-setup.sh)"   # exports CONTAINERS_CONF and PROFSCOPE_BASE_IMAGE
#
# 1. podman with the runc runtime (crun refuses some cgroup layouts) and explicit ulimits;
# 2. a local base image, localhost/debian-py:bookworm (Debian 12 + python3, venv, pip), made with
#    debootstrap and `podman import`, because python:3.12-slim cannot be pulled. The Dockerfile takes
#    it as --build-arg BASE_IMAGE. First run 1.5-2.5 minutes (debootstrap), later runs seconds.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
export PATH="$PATH:/usr/sbin:/sbin"  # debootstrap lives there, off a normal user's PATH on Debian
BASE=localhost/debian-py:bookworm
source "$(dirname "${BASH_SOURCE[0]}")/setup-venv.sh"  # apt_install: root or sudo, a clear message without apt-get
{
  if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
    apt_install podman buildah runc debootstrap
  fi
  NOFILE=$(ulimit -Hn); if [ "$NOFILE" = unlimited ]; then NOFILE=1048576; fi
  NPROC=$(ulimit -Hu); if [ "$NPROC" = unlimited ] || [ "$NPROC" -gt 32768 ]; then NPROC=32768; fi
  CONF_DIR=${TMPDIR:-/tmp}/podman-conf
  mkdir -p "$CONF_DIR"
  cat > "$CONF_DIR/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${NOFILE}:${NOFILE}", "nproc=${NPROC}:${NPROC}"]
[engine]
runtime = "runc"
CONF
  export CONTAINERS_CONF=$CONF_DIR/containers.conf
  if ! podman image exists "$BASE"; then
    ROOTFS=$(mktemp -d)
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates,curl \
      bookworm "$ROOTFS" >"$ROOTFS.log" 2>&1 || { tail -20 "$ROOTFS.log"; exit 1; }
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/lib/apt/lists/*
    : > "$ROOTFS/etc/resolv.conf"
    tar -C "$ROOTFS" --numeric-owner -c . |
      podman import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$BASE" >/dev/null
    rm -rf "$ROOTFS" "$ROOTFS.log"
  fi
} >&2
echo "export CONTAINERS_CONF=${CONF_DIR}/containers.conf"
echo "export PROFSCOPE_BASE_IMAGE=$BASE"
