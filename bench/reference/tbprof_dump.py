"""Dump torch-tb-profiler 0.4.3's own numbers for ONE kineto trace file as normalised JSON.

Runs inside /opt/refvenv (see README.md), never in profscope's environment. It does in one
process what the plugin's loader worker does for one file (``RunLoader._process_data``):

    data    = RunProfileData.parse(worker, span, path, cache_dir)   # read, gunzip, json, parsers, analyze()
    profile = RunGenerator(worker, span, data).generate_run_profile()

and then reads the payloads the plugin's HTTP routes serve from ``profile`` (a ``RunProfile``).
Nothing is recomputed here: every number below is copied (and, where the plugin hands out a
display string such as ``'45.2 %'``, parsed back to a number) from these plugin objects.

Field provenance (``data`` = RunProfileData, ``profile`` = RunProfile, ``gmp`` =
``data.gpu_metrics_parser``):

steps[]                  ``profile.overview['steps']`` (columns + rows; the ``/overview`` route), one
                         row per step the plugin kept. Category columns the plugin does not show are
                         null (Kernel/Memcpy/Memset/Runtime need a GPU activity; Communication needs comm
                         ops). ``total_us`` is ``data.steps_costs[i].costs[ProfileRole.Total]``, the
                         object the overview rows were built from (the route only shows it in tooltips).
                         Category order = ProfileRole: kernel, memcpy, memset, communication, runtime,
                         dataloader, cpu_exec, other; the categories of a step sum to total_us.
avg_step                 ``profile.overview['performance'][0]`` ("Average Step Time" pie; the plugin
                         rounds these values to integers).
gpus[]                   ``profile.gpu_summary`` (the overview route's ``gpu_metrics.data``): one block per
                         GPU id in ``gmp.gpu_ids``; name / compute capability / percentages parsed from its
                         display strings (percentages are rounded to 2 decimals by the plugin).
                         ``memory_bytes`` is ``RunGenerator._get_gpu_info(data.device_props, id)['Memory
                         Raw']`` (what the summary's "Memory" string is formatted from). ``raw`` holds the
                         unrounded values the strings are formatted from: ``gmp.gpu_utilization[id]``,
                         ``gmp.avg_approximated_sm_efficiency_per_device[id]``, ``gmp.avg_occupancy_per_
                         device[id]`` and ``data.tc_ratio[id]`` (fractions, occupancy in %).
recommendations[]        ``data.recommendations`` (HTML snippets; the overview route wraps them in <li>).
operators.operator       ``profile.operation_table_by_name['data']`` (``/operation/table``, group_by
                         Operation); integers as the route rounds them. device_* are null when the plugin
                         hides device columns (no kernel/memcpy/memset). ``tensor_cores_eligible`` is the
                         route's 'Yes'/'No' as a bool.
operators.operator_input_shape
                         ``profile.operation_table_by_name_input['data']`` (group_by OperationAndInputShape).
kernels.kernel           ``profile.kernel_table`` (``/kernel/table`` group_by Kernel): rows of the
                         ``data.kernel_stat`` DataFrame as the route rounds them. This grouping has no
                         operator / grid / block / registers / shared memory: those are null.
kernels.kernel_op        ``profile.kernel_op_table`` (``/kernel/table`` default grouping, "Kernel Properties
                         + Op Name"). ``op_tensor_cores_eligible`` is an extra column of that table.
kernels.tensor_cores_used_ratio
                         ``profile.tc_pie`` ("Using Tensor Cores" share of kernel time, i.e.
                         ``data.tc_used_ratio``).
memory                   only when the plugin shows the Memory view (``profile.memory_snapshot``):
                         ``peaks_bytes`` = ``data.memory_snapshot.get_peak_memory()`` (used by the plugin's
                         memory recommendation); ``curve`` = ``profile.get_memory_curve(time_metric='us',
                         memory_metric='B')`` metadata (devices, the "Peak Memory Usage" strings, number of
                         points after the plugin's LTTB sampling); ``stats`` =
                         ``profile.get_memory_stats(memory_metric='B')`` rows per device (``/memory``);
                         ``events_rows`` = per-device row counts of ``profile.get_memory_events(...)``
                         (``/memory_events``: paired alloc/free rows plus unpaired halves) and
                         ``events`` its first ``--top`` rows per device in time order (times in µs and
                         sizes in bytes, rounded to 2 decimals by the plugin).
plugin_log               WARNING+ messages the plugin logged (deduplicated, counted), e.g. dropped tail steps.

Large tables are cut to the first ``--top`` rows (default 300) after a deterministic sort (see
``_sort_key_*``); ``*_rows_total`` tells how many rows the plugin produced.

``--categories kineto-main``: the 0.4.3 wheel on PyPI maps only the category ``runtime`` (and the old
``Runtime``) to its Runtime type, and ignores ``user_annotation`` events other than ``ProfilerStep#``
and comm ops. kineto's tb_plugin source at its last commits (what anchors.md §1 describes) also maps
``cuda_runtime``, ``mtia_runtime``, ``glow_runtime``, ``xpu_runtime``, ``privateuse1_runtime`` and keeps
every ``user_annotation`` / ``gpu_user_annotation`` as an operator event. This option applies just those
two changes to the installed wheel (by extending ``trace.EventTypeMap`` and wrapping
``trace.create_trace_event``); everything else is the wheel's code. Default: ``pypi`` (wheel as is).

Usage: tbprof_dump.py TRACE [--corpus-root DIR] [--top N] [--categories pypi|kineto-main]
Prints one JSON document on stdout. On a plugin exception prints {"error": ..., "source": ...} and
exits 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import traceback
from collections import Counter
from typing import Any

from torch_tb_profiler import __version__ as TBPROF_VERSION
from torch_tb_profiler import consts
from torch_tb_profiler.profiler import trace
from torch_tb_profiler.profiler.data import RunProfileData
from torch_tb_profiler.profiler.event_parser import ProfileRole
from torch_tb_profiler.profiler.run_generator import RunGenerator

CATEGORY_MODES = ("pypi", "kineto-main")
KINETO_MAIN_RUNTIME_CATEGORIES = (
    "cuda_runtime",
    "mtia_runtime",
    "glow_runtime",
    "xpu_runtime",
    "privateuse1_runtime",
)

# overview column name -> output key, in ProfileRole order.
STEP_COLUMNS = {
    "Kernel": "kernel_us",
    "Memcpy": "memcpy_us",
    "Memset": "memset_us",
    "Communication": "communication_us",
    "Runtime": "runtime_us",
    "DataLoader": "dataloader_us",
    "CPU Exec": "cpu_exec_us",
    "Other": "other_us",
}

KERNEL_COLUMNS = {
    "Name": "name",
    "Operator": "operator",
    "Grid": "grid",
    "Block": "block",
    "Register Per Thread": "registers_per_thread",
    "Shared Memory": "shared_memory",
    "Tensor Cores Used": "tensor_cores_used",
    "Kernel Uses Tensor Cores": "tensor_cores_used",
    "Op is Tensor Cores eligible": "op_tensor_cores_eligible",
    "Calls": "calls",
    "Total Duration (us)": "total_us",
    "Mean Duration (us)": "mean_us",
    "Max Duration (us)": "max_us",
    "Min Duration (us)": "min_us",
    "Mean Blocks Per SM": "mean_blocks_per_sm",
    "Mean Est. Achieved Occupancy (%)": "mean_est_achieved_occupancy_pct",
}
KERNEL_KEYS = (
    "name",
    "operator",
    "grid",
    "block",
    "registers_per_thread",
    "shared_memory",
    "calls",
    "total_us",
    "mean_us",
    "max_us",
    "min_us",
    "tensor_cores_used",
    "mean_blocks_per_sm",
    "mean_est_achieved_occupancy_pct",
)


class _LogCollector(logging.Handler):
    """Counts the plugin's WARNING+ messages (numbers inside a message are masked to group them)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().splitlines()[0][:300]
        self.counts[re.sub(r"\d+", "N", message)] += 1

    def summary(self, limit: int = 20) -> list[dict[str, Any]]:
        top = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        return [{"message": message, "count": count} for message, count in top]


def use_kineto_main_categories() -> None:
    """Apply kineto main's two trace.py category changes to the installed 0.4.3 wheel."""
    for category in KINETO_MAIN_RUNTIME_CATEGORIES:
        trace.EventTypeMap.setdefault(category, trace.EventTypes.RUNTIME)
    wheel_create_trace_event = trace.create_trace_event

    def create_trace_event(event: dict, is_pytorch_lightning: bool):
        created = wheel_create_trace_event(event, is_pytorch_lightning)
        category = (event.get("cat") or "").lower()
        if created is None and trace.EventTypeMap.get(category) == trace.EventTypes.USER_ANNOTATION:
            return trace.OperatorEvent(trace.EventTypes.USER_ANNOTATION, event)
        return created

    trace.create_trace_event = create_trace_event


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def worker_and_span(path: str) -> tuple[str, str | None, int | None]:
    """Worker name, raw span suffix and 1-based span index, as the plugin's RunLoader derives them."""
    directory, filename = os.path.split(os.path.abspath(path))
    match = consts.WORKER_PATTERN.match(filename)
    if not match:
        return filename, None, None
    worker, span = match.group(1), match.group(2)
    if span is None:
        return worker, None, None
    spans = []
    for other in os.listdir(directory):
        other_match = consts.WORKER_PATTERN.match(other)
        if other_match and other_match.group(1) == worker and other_match.group(2) is not None:
            spans.append(other_match.group(2)[1:])
    spans.sort()  # RunLoader keeps them with bisect.insort, i.e. sorted as strings
    return worker, span[1:], spans.index(span[1:]) + 1


def parse_percent(text: str) -> float:
    return float(text.strip().rstrip("%").strip())


def plain(value: Any) -> Any:
    """numpy / pandas scalars -> plain Python numbers for json."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        return value.item()
    return value


def dump_steps(data: RunProfileData, profile) -> list[dict[str, Any]]:
    overview = profile.overview["steps"]
    names = [column.get("name") for column in overview["columns"]]
    steps = []
    for i, row in enumerate(overview["rows"]):
        step: dict[str, Any] = {
            "step": row[0],
            "total_us": plain(data.steps_costs[i].costs[ProfileRole.Total]),
        }
        for column, key in STEP_COLUMNS.items():
            step[key] = plain(row[names.index(column)]) if column in names else None
        steps.append(step)
    return steps


def dump_avg_step(profile) -> dict[str, Any]:
    performance = profile.overview["performance"][0]
    avg = {"total_us": performance["value"]}
    by_name = {child["name"]: child for child in performance["children"]}
    for column, key in STEP_COLUMNS.items():
        child = by_name.get(column)
        avg[key] = None if child is None else child["value"]
        avg[key.replace("_us", "_pct")] = None if child is None else child["extra"]
    return avg


def dump_gpus(data: RunProfileData, profile) -> list[dict[str, Any]]:
    if not profile.gpu_summary:
        return []
    gmp = data.gpu_metrics_parser
    gpus: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for item in profile.gpu_summary:
        title, value = item["title"], item["value"]
        gpu_header = re.fullmatch(r"GPU (\d+):", title)
        if gpu_header:
            device = int(gpu_header.group(1))
            info = RunGenerator._get_gpu_info(data.device_props, device) or {}
            current = {
                "device": device,
                "name": None,
                "memory_bytes": info.get("Memory Raw"),
                "memory_display": None,
                "compute_capability": None,
                "utilization_pct": None,
                "est_sm_efficiency_pct": None,
                "est_achieved_occupancy_pct": None,
                "tensor_cores_pct": None,
                "raw": {
                    "utilization": gmp.gpu_utilization[device],
                    "est_sm_efficiency": gmp.avg_approximated_sm_efficiency_per_device[device],
                    "est_achieved_occupancy_pct": gmp.avg_occupancy_per_device[device],
                    "tensor_cores_ratio": data.tc_ratio[device],
                },
            }
            gpus.append(current)
        elif current is None or title == "<hr/>":
            continue
        elif title == "Name":
            current["name"] = value
        elif title == "Memory":
            current["memory_display"] = value
        elif title == "Compute Capability":
            current["compute_capability"] = value
        elif title == "GPU Utilization":
            current["utilization_pct"] = parse_percent(value)
        elif title == "Est. SM Efficiency":
            current["est_sm_efficiency_pct"] = parse_percent(value)
        elif title == "Est. Achieved Occupancy":
            current["est_achieved_occupancy_pct"] = parse_percent(value)
        elif title == "Kernel Time using Tensor Cores":
            current["tensor_cores_pct"] = parse_percent(value)
    return gpus


def _sort_key_operator(row: dict[str, Any]) -> tuple:
    return (
        -(row["device_total_us"] or 0),
        -(row["device_self_us"] or 0),
        -row["host_total_us"],
        -row["host_self_us"],
        row["name"],
        row["input_shape"] or "",
    )


def dump_operator_table(table: dict, top: int) -> tuple[list[dict[str, Any]], int]:
    rows = []
    for op in table["data"]:
        rows.append(
            {
                "name": op["name"],
                "input_shape": op.get("input_shape"),
                "calls": op["calls"],
                "host_self_us": op["host_self_duration"],
                "host_total_us": op["host_total_duration"],
                "device_self_us": op.get("device_self_duration"),
                "device_total_us": op.get("device_total_duration"),
                "tensor_cores_eligible": op["tc_eligible"] == "Yes",
                "tensor_cores_self_pct": op["tc_self_ratio"],
                "tensor_cores_total_pct": op["tc_total_ratio"],
            }
        )
    rows.sort(key=_sort_key_operator)
    return rows[:top], len(rows)


def _sort_key_kernel(row: dict[str, Any]) -> tuple:
    return (
        -row["total_us"],
        row["name"],
        row["operator"] or "",
        row["grid"] or "",
        row["block"] or "",
        str(row["registers_per_thread"]),
        str(row["shared_memory"]),
    )


def dump_kernel_table(table: dict, top: int) -> tuple[list[dict[str, Any]], int]:
    names = [KERNEL_COLUMNS[column["name"]] for column in table["data"]["columns"]]
    rows = []
    for values in table["data"]["rows"]:
        source = dict(zip(names, (plain(v) for v in values), strict=True))
        row = {key: source.get(key) for key in KERNEL_KEYS}
        row["tensor_cores_used"] = source["tensor_cores_used"] == "Yes"
        if "op_tensor_cores_eligible" in source:
            row["op_tensor_cores_eligible"] = source["op_tensor_cores_eligible"] == "Yes"
        for key in ("registers_per_thread", "shared_memory"):
            if isinstance(row[key], str):
                row[key] = int(row[key]) if row[key].lstrip("-").isdigit() else row[key]
        rows.append(row)
    rows.sort(key=_sort_key_kernel)
    return rows[:top], len(rows)


def dump_kernels(profile, top: int) -> dict[str, Any] | None:
    if profile.kernel_table is None:
        return None
    kernel, kernel_total = dump_kernel_table(profile.kernel_table, top)
    kernel_op, kernel_op_total = dump_kernel_table(profile.kernel_op_table, top)
    tc_used = dict(profile.tc_pie["total"]["rows"]).get("Using Tensor Cores")
    return {
        "kernel_rows_total": kernel_total,
        "kernel_op_rows_total": kernel_op_total,
        "tensor_cores_used_ratio": plain(tc_used),
        "kernel": kernel,
        "kernel_op": kernel_op,
    }


def dump_memory(data: RunProfileData, profile, top: int) -> dict[str, Any] | None:
    if profile.memory_snapshot is None:
        return None
    device_names = {0: "CPU", 1: "GPU"}
    peaks = []
    for (device_type, device_id), peak in sorted(
        data.memory_snapshot.get_peak_memory().items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))
    ):
        kind = device_names.get(int(device_type), str(device_type)) if device_type is not None else None
        peaks.append({"device_type": kind, "device_id": device_id, "peak_allocated_bytes": plain(peak)})

    curve = profile.get_memory_curve(time_metric="us", memory_metric="B")
    stats = profile.get_memory_stats(memory_metric="B")
    stat_columns = [
        "operator",
        "calls",
        "size_increase_bytes",
        "self_size_increase_bytes",
        "allocation_count",
        "self_allocation_count",
        "allocation_size_bytes",
        "self_allocation_size_bytes",
    ]
    stats_out = {}
    stats_totals = {}
    for device, rows in sorted(stats["rows"].items()):
        as_dicts = [dict(zip(stat_columns, (plain(v) for v in row), strict=True)) for row in rows]
        as_dicts.sort(key=lambda r: (-r["allocation_size_bytes"], -r["allocation_count"], r["operator"]))
        stats_out[device] = as_dicts[:top]
        stats_totals[device] = len(as_dicts)
    events = profile.get_memory_events(time_metric="us", memory_metric="B")
    event_columns = ["operator", "size_bytes", "alloc_time_us", "release_time_us", "duration_us"]
    events_out = {}
    for device, rows in sorted(events["rows"].items()):
        as_dicts = [dict(zip(event_columns, (plain(v) for v in row), strict=True)) for row in rows]
        as_dicts.sort(key=_sort_key_memory_event)
        events_out[device] = as_dicts[:top]
    return {
        "peaks_bytes": peaks,
        "curve": {
            "devices": curve["metadata"]["devices"],
            "default_device": curve["metadata"]["default_device"],
            "peaks_display": curve["metadata"]["peaks"],
            "points_after_lttb": {dev: len(points) for dev, points in sorted(curve["rows"].items())},
        },
        "stats_default_device": stats["metadata"]["default_device"],
        "stats_rows_total": stats_totals,
        "stats": stats_out,
        "events_rows": {dev: len(rows) for dev, rows in sorted(events["rows"].items())},
        "events": events_out,
    }


def _sort_key_memory_event(row: dict[str, Any]) -> tuple:
    """Time order: by allocation time (unpaired releases by release time), then the rest of the row."""
    when = row["alloc_time_us"] if row["alloc_time_us"] is not None else row["release_time_us"]
    release = row["release_time_us"] if row["release_time_us"] is not None else float("inf")
    return (when, release, row["operator"], row["size_bytes"])


def dump(path: str, top: int) -> dict[str, Any]:
    worker, _, span_index = worker_and_span(path)
    with tempfile.TemporaryDirectory(prefix="tbprof_dump_") as cache_dir:
        data = RunProfileData.parse(worker, span_index, path, cache_dir)
        profile = RunGenerator(worker, span_index, data).generate_run_profile()
        operator, operator_total = dump_operator_table(profile.operation_table_by_name, top)
        by_shape, by_shape_total = dump_operator_table(profile.operation_table_by_name_input, top)
        return {
            "views": [view.display_name for view in profile.views],
            "has": {
                "runtime": data.has_runtime,
                "kernel": data.has_kernel,
                "memcpy_or_memset": data.has_memcpy_or_memset,
                "communication": data.has_communication,
            },
            "steps": dump_steps(data, profile),
            "avg_step": dump_avg_step(profile),
            "gpus": dump_gpus(data, profile),
            "recommendations": list(data.recommendations),
            "operators": {
                "operator_rows_total": operator_total,
                "operator_input_shape_rows_total": by_shape_total,
                "operator": operator,
                "operator_input_shape": by_shape,
            },
            "kernels": dump_kernels(profile, top),
            "memory": dump_memory(data, profile, top),
        }


def to_json(document: dict[str, Any]) -> str:
    """Indented JSON, but each table row (a dict inside a list) on one line, so diffs stay readable."""

    def encode(value: Any, indent: int) -> str:
        pad = " " * indent
        if isinstance(value, dict) and value:
            items = [f"{pad} {json.dumps(k)}: {encode(v, indent + 1)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + f"\n{pad}}}"
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            items = [f"{pad} {json.dumps(v, separators=(', ', ': '))}" for v in value]
            return "[\n" + ",\n".join(items) + f"\n{pad}]"
        return json.dumps(value)

    return encode(document, 0) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="kineto trace, .json or .json.gz")
    parser.add_argument("--corpus-root", default=None, help="record the source path relative to this")
    parser.add_argument("--top", type=int, default=300, help="rows kept per table (default 300)")
    parser.add_argument("--categories", choices=CATEGORY_MODES, default="pypi")
    args = parser.parse_args(argv)

    collector = _LogCollector()
    plugin_logger = logging.getLogger(consts.PLUGIN_NAME)
    plugin_logger.addHandler(collector)
    plugin_logger.propagate = False  # keep the plugin's log lines off stdout/stderr noise

    worker, span, span_index = worker_and_span(args.trace)
    source = (
        os.path.relpath(os.path.abspath(args.trace), os.path.abspath(args.corpus_root))
        if args.corpus_root
        else args.trace
    )
    header = {
        "tool": "torch-tb-profiler",
        "tool_version": TBPROF_VERSION,
        "categories": args.categories,
        "source": source,
        "sha256": sha256_of(args.trace),
        "worker": worker,
        "span": span,
        "span_index": span_index,
    }
    if args.categories == "kineto-main":
        use_kineto_main_categories()
    try:
        document = {**header, **dump(args.trace, args.top)}
        status = 0
    except Exception as exc:  # the plugin's own failure is the reference result for this file
        document = {
            **header,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback_tail": traceback.format_exc().strip().splitlines()[-6:],
        }
        status = 2
    document["plugin_log"] = collector.summary()
    sys.stdout.write(to_json(document))
    return status


if __name__ == "__main__":
    sys.exit(main())
