#!/usr/bin/env bash
# Install profscope into .venv/ (idempotent) and serve the built-in demo run on http://127.0.0.1:8080.
# Extra arguments go to `profscope serve`, e.g. `scripts/demo.sh ./my-traces --port 9000`; relative paths are
# read from the directory you run it in. Needs Python >= 3.11 with venv; no root.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-venv.sh"
install_into_venv "" "profscope and its dependencies (FastAPI, uvicorn, numpy, cloud storage SDKs, ...)"
exec "$VENV/bin/profscope" serve "$@"
