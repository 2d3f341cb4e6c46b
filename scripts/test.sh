#!/usr/bin/env bash
# Install everything the tests need (idempotent) and run them. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'

if ! command -v chromium >/dev/null 2>&1; then
  # Debian's Chromium for the browser tests (Playwright drives it; no browser download).
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
fi

if [ ! -x tests/storage/node_modules/.bin/azurite-blob ]; then
  # Azurite (Azure Blob emulator) for tests/storage, pinned by tests/storage/package-lock.json.
  command -v npm >/dev/null 2>&1 || { SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq nodejs npm >/dev/null; }
  npm ci --prefix tests/storage --no-audit --no-fund --loglevel=error
fi

# podman and a local base image for the container test (tests/container): no Docker engine needed.
eval "$(bash scripts/podman-setup.sh)"

if ! command -v kubectl >/dev/null 2>&1; then
  # kubectl only renders the kustomize manifests in tests/test_deploy.py (offline, no cluster).
  mkdir -p .cache/bin
  curl -fsSL -o .cache/bin/kubectl "https://dl.k8s.io/release/v1.30.0/bin/linux/$(dpkg --print-architecture)/kubectl"
  chmod +x .cache/bin/kubectl
  export PATH="$(pwd)/.cache/bin:$PATH"
fi

export PROFSCOPE_CORPUS="${PROFSCOPE_CORPUS:-$(pwd)/../shared/corpus}"
exec python3 -m pytest -q "$@"
