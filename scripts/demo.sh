#!/usr/bin/env bash
# Install profscope (idempotent) and serve the built-in demo run on http://127.0.0.1:8080.
# Extra arguments go to `profscope serve`, e.g. `scripts/demo.sh ./my-traces --port 9000`.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e .
exec profscope serve "$@"
