"""Overview: step time breakdown, GPU summary and recommendations (``docs/definitions.md`` §2).

Step time breakdown: every nanosecond of a step is counted once, by the highest-priority category
active then — Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CPU Exec — and what no
category covers is Other, so a step's categories sum to its duration.

CPU Exec counts host operators and ``user_annotation`` ranges alike (``docs/definitions.md``, "CPU
Exec"), as torch-tb-profiler does with kineto's current categories.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profscope.analysis import intervals, name_rules
from profscope.analysis.arrays import is_one_of, unique_values
from profscope.analysis.call_tree import CallTree
from profscope.analysis.context import TraceContext
from profscope.analysis.device_activity import (
    UNDESCRIBED,
    busy_by_device,
    communication_device_rows,
    communication_without_call_tree,
    device_descriptions,
    device_kernels,
    with_collective_launches,
)
from profscope.analysis.payloads import payload
from profscope.analysis.steps import Steps, find_steps
from profscope.tables import Kind, TraceTables

CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec")
_COMM_OP, _DATALOADER, _STEP_RANGE, _NOT_HOST = 1, 2, 4, 8  # what an event's name says (_intervals_without_call_tree)
_NAME_BITS = (
    (_COMM_OP, name_rules.is_comm_op),
    (_DATALOADER, name_rules.is_dataloader),
    (_STEP_RANGE, name_rules.is_step_range),
)
NS_PER_US = 1000.0


def category_intervals(tables: TraceTables, tree: CallTree) -> dict[str, intervals.IntervalSet]:
    """The merged time ranges of each breakdown category, before priorities are applied."""
    return _with_kernel_intervals(tables, communication_device_rows(tables, tree), _intervals_without_call_tree(tables))


def _intervals_without_call_tree(tables: TraceTables) -> dict[str, intervals.IntervalSet]:
    """The categories the call tree does not decide: all but the kernels (communication or not), and the host side
    of communication (``host_communication``)."""
    events = tables.events
    kind = np.asarray(events["kind"])
    ts, dur = np.asarray(events["ts_ns"]), np.asarray(events["dur_ns"])
    strings = tables.strings
    # each event's name as the bits of a byte, found once (one gather of every event, not one per mask)
    name_bits = np.zeros(len(strings), dtype=np.uint8)
    for bit, rule in _NAME_BITS:
        name_bits[name_rules.string_mask(strings, rule)] |= bit
    host = is_one_of(kind, (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY))
    host_name = np.where(host, np.uint8(0), np.uint8(_NOT_HOST))
    del host
    host_name |= name_bits[np.asarray(events["name"])]  # a host event's name bits; _NOT_HOST on any other
    del name_bits
    masks = {  # one mask of every event at a time, each made as its category comes
        "memcpy": lambda: kind == Kind.MEMCPY,
        "memset": lambda: kind == Kind.MEMSET,
        "host_communication": lambda: (host_name & (_NOT_HOST | _COMM_OP)) == _COMM_OP,
        "runtime": lambda: is_one_of(kind, (Kind.RUNTIME, Kind.DRIVER)),
        "dataloader": lambda: (host_name & (_NOT_HOST | _DATALOADER)) == _DATALOADER,
        "cpu_exec": lambda: host_name == 0,  # a host event not named as data loading, a step or communication
    }
    # each category's ends alone: no end time of every event at once
    return dict(zip(masks, intervals.merge_each(ts, dur, list(masks.values())), strict=True))


def _with_kernel_intervals(
    tables: TraceTables, comm_device: np.ndarray, without_tree: dict[str, intervals.IntervalSet]
) -> dict[str, intervals.IntervalSet]:
    """Every category, in ``CATEGORIES`` order: ``without_tree``'s and the kernels', communication or not as
    ``comm_device`` says (``communication_device_rows``); communication's ranges are the union of both sides'."""
    events = tables.events
    kernel_rows = np.flatnonzero(np.asarray(events["kind"]) == Kind.KERNEL)
    comm = comm_device[kernel_rows]
    ts, dur = np.asarray(events["ts_ns"])[kernel_rows], np.asarray(events["dur_ns"])[kernel_rows]
    kernel, kernel_comm = intervals.merge_each(ts, dur, [lambda: ~comm, lambda: comm])
    host_comm = without_tree["host_communication"]
    communication = intervals.merge(*(np.concatenate(sides) for sides in zip(host_comm, kernel_comm, strict=True)))
    every = {**without_tree, "kernel": kernel, "communication": communication}
    return {category: every[category] for category in CATEGORIES}


def step_breakdown(ranges: dict[str, intervals.IntervalSet], steps: Steps) -> list[dict[str, Any]]:
    """Each step's time by category (``ranges``: ``category_intervals``)."""
    shares = intervals.paint(intervals.merge(steps.starts_ns, steps.ends_ns), [ranges[c] for c in CATEGORIES])
    assigned = dict(zip((*CATEGORIES, "other"), shares, strict=True))
    per_category = {
        category: intervals.total_within(ranges_of_category, steps.starts_ns, steps.ends_ns)
        for category, ranges_of_category in assigned.items()
    }
    rows = []
    for i, (step_name, start, end) in enumerate(
        zip(steps.names, steps.starts_ns.tolist(), steps.ends_ns.tolist(), strict=True)
    ):
        row: dict[str, Any] = {"step": step_name, "start_us": start / NS_PER_US, "total_us": (end - start) / NS_PER_US}
        for category, covered in per_category.items():
            row[f"{category}_us"] = int(covered[i]) / NS_PER_US
        rows.append(row)
    return rows


def average_breakdown(step_rows: list[dict[str, Any]]) -> dict[str, float]:
    keys = ["total_us"] + [f"{c}_us" for c in (*CATEGORIES, "other")]
    count = max(len(step_rows), 1)
    return {key: sum(row[key] for row in step_rows) / count for key in keys}


def gpu_summary(tables: TraceTables, steps: Steps) -> list[dict[str, Any]]:
    """Per GPU: utilization, est. SM efficiency, est. achieved occupancy, tensor-core kernel time."""
    kernels = tables.table("kernels")
    events = tables.events
    on_gpu = device_kernels(tables)
    if not len(on_gpu.event):
        return []
    rows, device = on_gpu.event, on_gpu.device
    ts = np.asarray(events["ts_ns"])[rows]
    end = ts + np.asarray(events["dur_ns"])[rows]
    blocks_per_sm = np.asarray(kernels["blocks_per_sm"])[on_gpu.kernel_index]
    occupancy = np.asarray(kernels["est_occupancy_pct"])[on_gpu.kernel_index]
    tc_name = name_rules.string_mask(tables.strings, name_rules.uses_tensor_cores)
    uses_tc = tc_name[np.asarray(events["name"])[rows]]
    window_start, window_end = steps.window
    window_ns = max(window_end - window_start, 1)
    described = device_descriptions(tables)
    summary = []
    for gpu, busy_intervals in busy_by_device(ts, end, device).items():
        on = device == gpu
        busy = intervals.clip(busy_intervals, window_start, window_end)
        sm_valid = on & (blocks_per_sm > 0)
        sm_efficiency = None
        if sm_valid.any():
            seg_start, seg_end, value = intervals.weighted_coverage(
                ts[sm_valid], end[sm_valid], blocks_per_sm[sm_valid], 1.0
            )
            clipped_start = np.clip(seg_start, window_start, window_end)
            clipped_end = np.clip(seg_end, window_start, window_end)
            sm_efficiency = float(((clipped_end - clipped_start) * value).sum() / window_ns * 100.0)
        occupancy_pct = None
        occ_valid = on & (occupancy >= 0)
        if occ_valid.any():
            clipped = np.clip(end[occ_valid], window_start, window_end) - np.clip(
                ts[occ_valid], window_start, window_end
            )
            if clipped.sum() > 0:
                occupancy_pct = float((clipped * occupancy[occ_valid]).sum() / clipped.sum())
        kernel_time = float((end[on] - ts[on]).sum())
        tc_time = float((end[on & uses_tc] - ts[on & uses_tc]).sum())
        summary.append(
            {
                "device": int(gpu),
                **described.get(gpu, UNDESCRIBED),
                "utilization_pct": intervals.total(busy) / window_ns * 100.0,
                "est_sm_efficiency_pct": sm_efficiency,
                "est_achieved_occupancy_pct": occupancy_pct,
                "tensor_cores_pct": tc_time / kernel_time * 100.0 if kernel_time > 0 else 0.0,
                "kernel_time_us": kernel_time / NS_PER_US,
            }
        )
    return summary


def environment(tables: TraceTables) -> dict[str, Any]:
    kind = np.asarray(tables.events["kind"])
    on_device = is_one_of(kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.RUNTIME)).any()
    return {
        "device_type": "GPU" if on_device else "CPU",
        "distributed": tables.meta.get("distributedInfo"),
        "schema_version": tables.meta.get("schemaVersion"),
    }


def recommendations(
    tables: TraceTables, tree: CallTree, average: dict[str, float], gpus: list[dict[str, Any]], names_used: set[str]
) -> list[str]:
    """torch-tb-profiler's rule-based recommendations (``docs/definitions.md`` §2.4), plain text; ``names_used``:
    ``event_names``."""
    advice: list[str] = []
    total = average.get("total_us") or 0.0
    if total > 0 and average["dataloader_us"] / total > 0.05:
        advice.append(
            f"This run has high time cost on input data loading. {average['dataloader_us'] / total * 100:.1f}% "
            "of the step time is in DataLoader. You could try to set num_workers on DataLoader's construction "
            "and enable multi-processes on data loading."
        )
    if "DataParallel.forward" in names_used and len(gpus) > 1:
        advice.append(
            "It is recommended to use DistributedDataParallel instead of DataParallel to do multi-GPU training."
        )
    uses_nccl = any("nccl" in n.lower() for n in names_used)
    capabilities = [float(g["compute_capability"]) for g in gpus if g.get("compute_capability")]
    if "DistributedDataParallel.forward" in names_used and not uses_nccl and any(c >= 3.5 for c in capabilities):
        advice.append(
            "Nccl backend is currently the fastest and highly recommended backend when using DDP for training."
        )
    if total > 0 and average["communication_us"] / total > 0.1:
        advice.append(
            f"This run has high time cost on communication. {average['communication_us'] / total * 100:.1f}% of the "
            "step time is in communication. You could try Gradient Compression or Gradient Accumulation, or increase "
            "the batch size (note: gradient accumulation increases the delay of optimizer updates, and a larger "
            "batch size may need an optimizer such as LAMB to keep accuracy)."
        )
    for gpu in gpus:
        if gpu["utilization_pct"] < 50.0:
            advice.append(
                f"GPU {gpu['device']} has low utilization ({gpu['utilization_pct']:.1f}%). You could try to increase "
                "the batch size to improve it; a larger batch may need a re-tuned learning rate."
            )
    majors = [p.get("computeMajor") for p in tables.meta.get("deviceProperties", []) if isinstance(p, dict)]
    if gpus and majors and majors[0] is not None and majors[0] >= 7:
        total_kernel = sum(g["kernel_time_us"] for g in gpus)
        tc_used = sum(g["tensor_cores_pct"] * g["kernel_time_us"] for g in gpus)
        eligible_ratio = _tc_eligible_kernel_ratio(tree)
        if total_kernel > 0 and tc_used == 0 and eligible_ratio > 0:
            advice.append(matrix_core_advice(eligible_ratio, name_rules.low_precisions(sorted(names_used))))
    return advice


def event_names(tables: TraceTables) -> set[str]:
    """The names of the trace's events."""
    return {tables.strings[int(i)] for i in unique_values(np.asarray(tables.events["name"]))}


def matrix_core_advice(eligible_ratio: float, precisions: list[str]) -> str:
    """The advice when no kernel ran on matrix cores, given the low precisions the run already uses:
    AMP only for a run that computes in FP32 alone (torch-tb-profiler advised FP16 to every run)."""
    share = (
        f"Kernels with {round(eligible_ratio * 100)}% time are launched by matrix-core (Tensor Core) eligible operators"
    )
    if precisions:
        return (
            f"{share}, and the run already computes in {' / '.join(precisions)}, yet no kernel ran on matrix cores. "
            "Check that these operators get low-precision inputs (inside torch.autocast) and that their matrix "
            "dimensions are multiples of 8."
        )
    return (
        f"{share}, all in FP32. You could enable Automatic Mixed Precision (torch.autocast with bfloat16, "
        "or float16 on GPUs without bfloat16) to run them on matrix cores."
    )


def _tc_eligible_kernel_ratio(tree: CallTree) -> float:
    """Share of op-launched kernel time whose op is a bottom-most tensor-core eligible op."""
    total = tree.device_self_ns.sum()
    if total <= 0:
        return 0.0
    has_eligible_child = np.zeros(len(tree.parent), dtype=bool)
    eligible_children = tree.tc_eligible & (tree.parent >= 0)
    has_eligible_child[tree.parent[eligible_children]] = True
    bottom = tree.tc_eligible & ~has_eligible_child
    return float(tree.device_self_ns[bottom].sum() / total)


def memory_peak_recommendation(peaks: dict[int, int], tables: TraceTables) -> list[str]:
    advice = []
    for props in tables.meta.get("deviceProperties", []):
        if not isinstance(props, dict):
            continue
        device, total = props.get("id"), props.get("totalGlobalMem")
        peak = peaks.get(device)
        if total and peak and peak > 0.9 * total:
            advice.append(
                f"Device memory usage is at the limit of device memory capacity ({peak / total * 100:.1f}% of "
                f"{total / 1024**3:.1f}GB on GPU{device}). To get better value of your GPU or to use a larger batch "
                "size for training, please refer to Gradient Checkpoint or Automatic Mixed Precision."
            )
            break
    return advice


def peak_allocated_by_device(tables: TraceTables) -> dict[int, int]:
    memory = tables.table("memory")
    device_type = np.asarray(memory["device_type"])
    gpu = device_type == 1
    peaks: dict[int, int] = {}
    device_id = np.asarray(memory["device_id"])[gpu]
    allocated = np.asarray(memory["total_allocated"])[gpu]
    for device in np.unique(device_id).tolist():
        peaks[int(device)] = int(allocated[device_id == device].max())
    return peaks


def _recording_mode_notes(tables: TraceTables) -> list[str]:
    range_profiler = tables.strings.lookup("cuda_profiler_range")
    if range_profiler >= 0 and (np.asarray(tables.events["cat"]) == range_profiler).any():
        return [
            "This trace was recorded in CUPTI range-profiler mode (cuda_profiler_range events with hardware "
            "counters): kernels were replayed one at a time to collect counters, so their durations are not "
            "real execution times and they are not counted as kernels."
        ]
    return []


def build_overview(context: TraceContext, steps: Steps) -> dict[str, Any]:
    """The Overview with ``steps`` as the steps. The call tree is asked for (``context.tree``) once what needs none
    is done: the worker builds it on another thread meanwhile (``parallel_queries.TreeBuilding``)."""
    tables = context.tables
    gpus = gpu_summary(tables, steps)
    without_tree = _intervals_without_call_tree(tables)
    comm_device = communication_without_call_tree(tables, context.launches.device_rows)
    names_used = event_names(tables)
    memory_advice = memory_peak_recommendation(peak_allocated_by_device(tables), tables)
    notes = steps.notes + _recording_mode_notes(tables)
    run_environment, step_ranges = environment(tables), step_range_candidates(tables)
    tree = context.tree
    ranges = _with_kernel_intervals(tables, with_collective_launches(tables, tree, comm_device), without_tree)
    step_rows = step_breakdown(ranges, steps)
    average = average_breakdown(step_rows)
    dropped = f"{tree.dropped} host ops overlap their parent without nesting and were left out of the call tree."
    return {
        "environment": run_environment,
        "steps": step_rows,
        "average": average,
        "gpus": gpus,
        "recommendations": recommendations(tables, tree, average, gpus, names_used) + memory_advice,
        "notes": notes + ([dropped] if tree.dropped else []),
        "steps_from_profiler_steps": steps.from_profiler_steps,
        "step_ranges": step_ranges,
    }


STEP_RANGE_CANDIDATES = 12


def step_range_candidates(tables: TraceTables) -> list[dict[str, Any]]:
    """Annotation ranges (NVTX, record_function) that repeat: the names a user may pick as the step.

    The most frequent first; operators (``aten::``) are left out, they are no steps.
    """
    events = tables.events
    rows = np.flatnonzero(np.asarray(events["kind"]) == Kind.USER_ANNOTATION)
    names, counts = np.unique(np.asarray(events["name"])[rows], return_counts=True)
    repeated = counts >= 2
    order = np.lexsort((names[repeated], -counts[repeated]))
    found = []
    for name_id, count in zip(names[repeated][order].tolist(), counts[repeated][order].tolist(), strict=True):
        name = tables.strings[name_id]
        if not name_rules.is_profiler_step(name):
            found.append({"name": name, "count": count})
        if len(found) == STEP_RANGE_CANDIDATES:
            break
    return found


def overview_for_step_range(context: TraceContext, step_range: str) -> dict[str, Any]:
    """The Overview with the host ranges named ``step_range`` as the steps (``docs/definitions.md`` §15);
    ValueError when there are none."""
    steps = find_steps(context.tables, context.launches, step_range)
    return {**build_overview(context, steps), "step_range": step_range}


@payload("overview", version=3, first=True)
def overview_payload(context: TraceContext) -> dict[str, Any]:
    return build_overview(context, context.steps)
