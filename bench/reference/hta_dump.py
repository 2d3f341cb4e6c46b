"""Dump HTA 0.5.0's own numbers for the corpus's GPU traces as JSON (a second reference next to tbprof).

Run with HTA installed (``pip install HolisticTraceAnalysis==0.5.0``, which profscope does not need):

    python bench/reference/hta_dump.py [--corpus ../shared/corpus] [--out tests/reference_data]

For each trace it writes ``<corpus path with / as __>.hta.json``: every number is copied from the
DataFrames HTA's ``TraceAnalysis`` returns, nothing recomputed. Each trace is analysed alone, in a
temporary directory holding only a link named ``rank-0.json.gz`` (HTA reads a directory of ranks;
the rank number it uses comes from ``distributedInfo`` when the trace has one).

temporal            ``get_temporal_breakdown()``: idle / compute / non-compute / kernel time (µs; HTA's
                    "kernel_time" is the window [first device activity, last end] after its filter).
idle                ``get_idle_time_breakdown(show_idle_interval_stats=False)[0]``: per stream and
                    category (host_wait / kernel_wait / other), idle time in µs.
overlap_pct         ``get_comm_comp_overlap()``: comp_comm_overlap_pctg (null when HTA gives none).
kernel_types        ``get_gpu_kernel_breakdown()[0]``: time per kernel type (µs), including HTA's
                    "X overlapping Y" rows (they add up to the busy time, window − idle).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

# The corpus's kineto traces with device activity that HTA 0.5.0 reads (relative to the corpus root).
TRACES = (
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/trace_filter/sampled_rank-0.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
    "hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz",
    "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz",
    "hta/triton_example/triton_example.json.gz",
    "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "traces/AMD-AGI_TraceLens/tests/traces/b200/eager_trace.json.gz",
    "traces/facebookresearch_param/et_replay/tests/inputs/linear_kineto.json.gz",
)


def reference_name(relative: str) -> str:
    stem = relative.removesuffix(".gz").removesuffix(".json")
    return stem.replace("/", "__") + ".hta.json"


def _number(value: Any) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def analyse(path: Path) -> dict[str, Any]:
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "rank-0.json.gz").symlink_to(path.resolve())
        analysis = TraceAnalysis(trace_dir=folder)
        (rank,) = analysis.t.traces.keys()
        temporal = analysis.get_temporal_breakdown(visualize=False).to_dict("records")[0]
        idle = analysis.get_idle_time_breakdown(visualize=False, show_idle_interval_stats=False)[0]
        overlap = analysis.get_comm_comp_overlap(visualize=False).to_dict("records")
        kernel_types, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
    return {
        "hta_version": "0.5.0",
        "rank": int(rank),
        "temporal": {
            "idle_us": _number(temporal["idle_time(us)"]),
            "compute_us": _number(temporal["compute_time(us)"]),
            "non_compute_us": _number(temporal["non_compute_time(us)"]),
            "window_us": _number(temporal["kernel_time(us)"]),
        },
        "idle": [
            {"stream": int(r["stream"]), "category": r["idle_category"], "idle_us": _number(r["idle_time"])}
            for r in idle.to_dict("records")
        ],
        "overlap_pct": _number(overlap[0]["comp_comm_overlap_pctg"]) if overlap else None,
        "kernel_types": {r["kernel_type"]: _number(r["sum"]) for r in kernel_types.to_dict("records")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = Path(__file__).resolve().parents[2]
    parser.add_argument("--corpus", type=Path, default=repo.parent / "shared" / "corpus")
    parser.add_argument("--out", type=Path, default=repo / "tests" / "reference_data")
    args = parser.parse_args()
    for relative in TRACES:
        result = {"source": relative, **analyse(args.corpus / relative)}
        (args.out / reference_name(relative)).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(relative, "->", reference_name(relative))


if __name__ == "__main__":
    main()
