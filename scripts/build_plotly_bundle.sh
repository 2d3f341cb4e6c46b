#!/usr/bin/env bash
# Rebuild web/static/vendor/plotly.min.js: plotly.js with only the trace types profscope's pages draw
# (scripts/plotly-bundle/entry.js), about a quarter of the full bundle, so the first chart of a page
# draws sooner. The bundle is committed: a fresh clone, the wheel and the container need no npm. Run this
# only to change the traces or the pinned versions (scripts/plotly-bundle/package.json and its lock).
# Needs node and npm, and the npm registry once (npm ci).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUNDLE_DIR="$HERE/plotly-bundle"
OUT="$HERE/../web/static/vendor/plotly.min.js"

npm ci --prefix "$BUNDLE_DIR" --no-audit --no-fund --ignore-scripts --loglevel=error
PLOTLY_VERSION=$(node -p "require('$BUNDLE_DIR/node_modules/plotly.js/package.json').version")
ESBUILD_VERSION=$(node -p "require('$BUNDLE_DIR/node_modules/esbuild/package.json').version")
TRACES=$(grep -o 'plotly.js/lib/[a-z0-9]*' "$BUNDLE_DIR/entry.js" | sed 's|plotly.js/lib/||; s|^core$|scatter|' | sort | paste -sd, -)
BANNER="/**
* plotly.js v$PLOTLY_VERSION, partial bundle for profscope: traces $TRACES
* Copyright 2012-2026, Plotly, Inc. All rights reserved. Licensed under the MIT license.
* The license notes of the bundled dependencies follow at the end of this file.
* Built by scripts/build_plotly_bundle.sh (esbuild v$ESBUILD_VERSION); do not edit.
*/"

# The options of plotly.js's own esbuild-config.js; the stylesheet of map traces (not bundled) is dropped.
"$BUNDLE_DIR/node_modules/.bin/esbuild" "$BUNDLE_DIR/entry.js" \
  --bundle --minify --format=iife --global-name=Plotly --target=es2016 \
  --define:global=window --define:define.amd=false --loader:.css=empty \
  --legal-comments=eof --banner:js="$BANNER" --log-level=warning \
  --outfile="$OUT"
echo "$OUT: $(wc -c <"$OUT") bytes, plotly.js $PLOTLY_VERSION, traces $TRACES"
