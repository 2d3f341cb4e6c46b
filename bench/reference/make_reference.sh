#!/usr/bin/env bash
# Regenerate tests/reference_data/*.tbprof*.json: torch-tb-profiler 0.4.3's own numbers for a fixed list
# of real corpus traces (see README.md). Runs bench/reference/tbprof_dump.py inside $REFVENV.
#
#   CORPUS=/work/shared/corpus REFVENV=/opt/refvenv bench/reference/make_reference.sh
#
# For each trace two files are written:
#   <name>.tbprof.json        the PyPI 0.4.3 wheel as is               (--categories pypi)
#   <name>.tbprof-main.json   the wheel with kineto main's categories  (--categories kineto-main)
# <name> = the trace's path relative to $CORPUS, without .json[.gz], '/' -> '__'.
# A plugin failure is recorded in that file as {"error": ...}; a missing corpus file fails the script.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
CORPUS="${CORPUS:-/work/shared/corpus}"
REFVENV="${REFVENV:-/opt/refvenv}"
OUT="${OUT:-$repo/tests/reference_data}"
PY="$REFVENV/bin/python"

# A directory entry stands for every *.pt.trace.json[.gz] in it (one file per span / worker).
TRACES=(
  hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz
  generated/tinygpt_cpu
  generated/tinygpt_ddp4_gloo/rank0.1795315503706026973.pt.trace.json.gz
  kineto-tb_plugin/samples/resnet50_num_workers_0
  hta/trace_filter/sampled_rank-0.json.gz
  hta/nccl_parser_config/nccl_data.json.gz
  traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz
  hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz
  traces/facebookresearch_param/et_replay/tests/inputs/linear_kineto.json.gz
  hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz
  hta/execution_trace/benchmark_simple_add_et.json.gz
)
MODES=(pypi kineto-main)

[[ -x "$PY" ]] || { echo "no $PY: create the venv first (bench/reference/README.md)" >&2; exit 1; }
mkdir -p "$OUT"

files=()
for entry in "${TRACES[@]}"; do
  path="$CORPUS/$entry"
  if [[ -d "$path" ]]; then
    mapfile -t found < <(find "$path" -maxdepth 1 -type f -name '*.pt.trace.json*' | sort)
    [[ ${#found[@]} -gt 0 ]] || { echo "no traces in $path" >&2; exit 1; }
    files+=("${found[@]}")
  elif [[ -f "$path" ]]; then
    files+=("$path")
  else
    echo "missing corpus trace: $path" >&2
    exit 1
  fi
done

safe_name() {
  local rel="$1"
  rel="${rel%.gz}"
  rel="${rel%.json}"
  rel="${rel//\//__}"
  printf '%s' "${rel//[^A-Za-z0-9._-]/_}"
}

index="$OUT/index.tsv"
printf 'file\tcategories\tsource\tsha256\tstatus\n' > "$index"
for file in "${files[@]}"; do
  rel="${file#"$CORPUS"/}"
  name="$(safe_name "$rel")"
  for mode in "${MODES[@]}"; do
    suffix=".tbprof.json"
    [[ "$mode" == pypi ]] || suffix=".tbprof-main.json"
    target="$OUT/$name$suffix"
    start=$EPOCHREALTIME
    status=ok
    if ! "$PY" "$here/tbprof_dump.py" "$file" --corpus-root "$CORPUS" --categories "$mode" \
        > "$target.tmp" 2> "$target.err"; then
      status=error
    fi
    # No JSON at all (interpreter crash, import error): write the error document ourselves.
    if ! "$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$target.tmp" 2>/dev/null; then
      status=error
      "$PY" - "$rel" "$file" "$mode" "$target.err" > "$target.tmp" <<'EOF'
import hashlib, json, sys
rel, path, mode, err = sys.argv[1:]
tail = open(err, errors="replace").read().strip().splitlines()[-6:]
print(json.dumps({"tool": "torch-tb-profiler", "categories": mode, "source": rel,
                  "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
                  "error": tail[-1] if tail else "no output", "stderr_tail": tail}, indent=1))
EOF
    fi
    mv "$target.tmp" "$target"
    rm -f "$target.err"
    seconds=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    sha=$(sha256sum "$file" | cut -d' ' -f1)
    printf '%s\t%s\t%s\t%s\t%s\n' "$(basename "$target")" "$mode" "$rel" "$sha" "$status" >> "$index"
    echo "$status  ${seconds}s  $(basename "$target")"
  done
done

# Distributed view: one reference per run folder (all workers and spans of the run together).
DISTRIBUTED_RUNS=(
  generated/tinygpt_ddp4_gloo
)
for entry in "${DISTRIBUTED_RUNS[@]}"; do
  target="$OUT/$(safe_name "$entry").tbprof-distributed.json"
  "$PY" "$here/tbprof_distributed_dump.py" "$CORPUS/$entry" --corpus-root "$CORPUS" > "$target.tmp"
  mv "$target.tmp" "$target"
  echo "ok  $(basename "$target")"
done
