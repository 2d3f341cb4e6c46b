"""PaddlePaddle's summary tables (what ``Profiler.summary()`` prints), from the parsed tables.

Paddle's definitions (``docs/definitions.md`` §13): host events of one thread
(its Python and C++ tracks together) nest by time into a tree; ``CudaRuntime`` calls hang on the
innermost host event around them and device events on their launch (by correlation id); memory
events on the innermost host event around them.
- total time: the ProfileStep ranges, merged;
- Overview: per event type, its ranges merged per thread and then across threads (CPU), per device
  type across devices and streams (GPU); Dataloader / Forward / Backward / Optimization take the
  Model Summary's numbers;
- Model Summary: the outermost Dataloader / Forward / Backward / Optimization events (and every
  ProfileStep); CPU time summed, GPU time = kernels launched inside; "Others" = total minus phases;
- Operator Summary: every ``Operator`` event by name, with its non-Operator children (infer_meta,
  compute, kernel launch) nested; GPU time includes memcpy / memset; ratios of all operators' time;
- Kernel Summary: kernels by name; Memory Summary: per place, the peaks and per host event name the
  allocations / frees of its own memory events (an operator also counts its children's);
- UserDefined Summary: Python ``RecordEvent`` ranges (``PythonUserDefined``) by name.
All times are integer nanoseconds; every function here is pure (tables in, small result out).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profscope.analysis.arrays import is_one_of
from profscope.analysis.context import TraceContext
from profscope.analysis.payloads import payload
from profscope.tables import NO_ID, Kind, TraceTables

MODEL_PHASES = ("Dataloader", "Forward", "Backward", "Optimization")
COMMUNICATION_OP_WORDS = ("allreduce", "broadcast", "rpc")
_DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)


@dataclass(slots=True)
class _Device:
    name: str
    type: str
    start: int
    end: int


@dataclass(slots=True)
class _Runtime:
    start: int
    end: int
    devices: list[_Device] = field(default_factory=list)


@dataclass(slots=True)
class _Node:
    name: str
    type: str
    thread: str
    start: int
    end: int
    children: list[_Node] = field(default_factory=list)
    runtimes: list[_Runtime] = field(default_factory=list)
    memory: list[tuple[str, int]] = field(default_factory=list)  # (place, increase bytes)
    devices: list[_Device] = field(default_factory=list)  # launched by its own runtime calls
    kernel_ns: int = 0  # of the device events launched inside (this and the following: ``_sum_device_time``)
    device_ns: int = 0  # kernels, memcpy and memset

    @property
    def cpu_ns(self) -> int:
        return self.end - self.start

    def all_devices(self) -> list[_Device]:
        return [device for node in self.walk() for device in node.devices]

    def walk(self) -> list[_Node]:
        found, stack = [], [self]
        while stack:
            node = stack.pop()
            found.append(node)
            stack.extend(node.children)
        return found

    def gpu_ns(self, general: bool) -> int:
        """Kernel time launched inside (``general``: memcpy and memset too), streams summed."""
        return self.device_ns if general else self.kernel_ns


class _Stats:
    """Calls and Total / Avg / Max / Min of one row, as Paddle accumulates them."""

    def __init__(self) -> None:
        self.calls = 0
        self.cpu: list[int] = []
        self.gpu: list[int] = []

    def add(self, cpu_ns: int | None, gpu_ns: int) -> None:
        self.calls += 1
        if cpu_ns is not None:
            self.cpu.append(cpu_ns)
        self.gpu.append(gpu_ns)

    def row(self, name: str, cpu_of: int, gpu_of: int) -> dict[str, Any]:
        return {"name": name, "calls": self.calls, "cpu": _columns(self.cpu, cpu_of), "gpu": _columns(self.gpu, gpu_of)}


def _columns(values: list[int], ratio_of: int) -> dict[str, Any] | None:
    if not values:
        return None
    total = sum(values)
    return {
        "total_ns": total,
        "avg_ns": total / len(values),
        "max_ns": max(values),
        "min_ns": min(values),
        "ratio_pct": 100.0 * total / ratio_of if ratio_of else 0.0,
    }


# ---- the trees ------------------------------------------------------------------------------------
def _thread_of(pid: str, tid: str) -> str:
    """Paddle writes one thread as two tracks, "12721(Python)" and "12721(C++)": one tree per thread."""
    return f"{pid}/{tid.split('(', 1)[0]}"


def _place(device_type: int, device_id: int) -> str:
    if device_type == 0:
        return "Place(cpu)"
    if device_type == 1:
        return f"Place(gpu:{device_id})"
    return "Place(other)"


def build_trees(tables: TraceTables) -> list[_Node]:
    """One root per thread; its children are the outermost host events of that thread."""
    events = tables.events
    strings = tables.strings
    threads = [_thread_of(t.pid, t.tid) for t in tables.tracks]
    kind = np.asarray(events["kind"])
    ts = np.asarray(events["ts_ns"]).tolist()
    end = (np.asarray(events["ts_ns"]) + np.asarray(events["dur_ns"])).tolist()
    names = [strings[int(i)] for i in np.asarray(events["name"])]
    cats = [strings[int(i)] for i in np.asarray(events["cat"])]
    track = np.asarray(events["track"]).tolist()
    correlation = np.asarray(events["correlation"]).tolist()

    runtimes: dict[int, _Runtime] = {}
    by_thread: dict[str, list[tuple[int, int, int, Any]]] = defaultdict(list)  # (start, -length, order, item)
    for row in np.flatnonzero(kind == Kind.RUNTIME).tolist():
        runtime = _Runtime(ts[row], end[row])
        if correlation[row] != NO_ID:
            runtimes[correlation[row]] = runtime
        by_thread[threads[track[row]]].append((ts[row], -(end[row] - ts[row]), 1, runtime))
    for row in np.flatnonzero(is_one_of(kind, _DEVICE_KINDS)).tolist():
        launch = runtimes.get(correlation[row])
        if launch is not None:
            launch.devices.append(_Device(names[row], cats[row], ts[row], end[row]))
    host = np.flatnonzero(~is_one_of(kind, (*_DEVICE_KINDS, Kind.RUNTIME, Kind.OTHER)))
    for row in host.tolist():
        thread = threads[track[row]]
        node = _Node(names[row], cats[row], thread, ts[row], end[row])
        by_thread[thread].append((ts[row], -(end[row] - ts[row]), 0, node))
    memory = tables.table("memory")
    memory_ts = np.asarray(memory["ts_ns"]).tolist()
    places = [_place(int(t), int(i)) for t, i in zip(memory["device_type"], memory["device_id"], strict=True)]
    for row, (when, size) in enumerate(zip(memory_ts, np.asarray(memory["bytes"]).tolist(), strict=True)):
        by_thread[threads[int(memory["track"][row])]].append((when, 0, 2, (places[row], size)))
    roots = [_nest(thread, items) for thread, items in sorted(by_thread.items())]
    for root in roots:
        _sum_device_time(root)
    return roots


def _sum_device_time(root: _Node) -> None:
    """Each node's kernel and device time launched inside it, children first (one pass over the tree)."""
    for node in reversed(root.walk()):  # a node comes after its parent in walk(): reversed, before it
        own = node.devices = [device for runtime in node.runtimes for device in runtime.devices]
        node.kernel_ns = sum(d.end - d.start for d in own if d.type == "Kernel") + sum(
            c.kernel_ns for c in node.children
        )
        node.device_ns = sum(d.end - d.start for d in own) + sum(c.device_ns for c in node.children)


def _nest(thread: str, items: list[tuple[int, int, int, Any]]) -> _Node:
    """Hosts nest by time (a partial overlap goes to the nearest event that holds it whole)."""
    root = _Node("root", "root", thread, 0, 0)
    stack: list[_Node] = []
    for start, negative_length, order, item in sorted(items, key=lambda i: (i[0], i[1], i[2])):
        stop = start - negative_length
        while stack and not (stack[-1].start <= start and stop <= stack[-1].end):
            stack.pop()
        parent = stack[-1] if stack else root
        if order == 0:
            parent.children.append(item)
            stack.append(item)
        elif order == 1:
            parent.runtimes.append(item)
        else:
            parent.memory.append(item)
    return root


# ---- the tables -----------------------------------------------------------------------------------
def _merged_ns(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def _length_ns(ranges: list[tuple[int, int]]) -> int:
    return sum(stop - start for start, stop in _merged_ns(ranges))


def _intersection_ns(first: list[tuple[int, int]], second: list[tuple[int, int]]) -> int:
    total, a, b = 0, _merged_ns(first), _merged_ns(second)
    i = j = 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def paddle_summary(tables: TraceTables) -> dict[str, Any]:
    """Every table ``Profiler.summary()`` prints, as numbers (nanoseconds, bytes, percentages)."""
    roots = build_trees(tables)
    nodes = [node for root in roots for node in root.walk() if node is not root]
    total_ns = _length_ns([(n.start, n.end) for n in nodes if n.type == "ProfileStep"])
    model = _model_items(roots)
    communication = _communication_ranges(nodes)
    return {
        "total_ns": total_ns,
        "overview": overview_summary(roots, communication, model, total_ns),
        "model": model_summary(model, total_ns),
        "distribution": distribution_summary(communication, total_ns),
        "operators": operator_summary(nodes),
        "kernels": kernel_summary(nodes),
        "memory": memory_summary(nodes, tables.meta.get("paddle", {}).get("memory_peaks", {})),
        "user_defined": user_defined_summary(nodes, total_ns),
    }


def _model_items(roots: list[_Node]) -> dict[str, _Stats]:
    """ProfileStep and the outermost Dataloader / Forward / Backward / Optimization events."""
    items: dict[str, _Stats] = {}
    queue = list(roots)
    while queue:
        node = queue.pop(0)
        for child in node.children:
            if child.type in MODEL_PHASES or child.type == "ProfileStep":
                items.setdefault(child.type, _Stats()).add(child.cpu_ns, child.gpu_ns(general=False))
            if child.type not in MODEL_PHASES:
                queue.append(child)
    return items


def overview_summary(
    roots: list[_Node], communication: _CommunicationRanges, model: dict[str, _Stats], total_ns: int
) -> dict[str, list[dict[str, Any]]]:
    cpu_ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    calls: dict[str, int] = defaultdict(int)
    for root in roots:
        per_thread: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for node in root.walk():
            if node is not root:
                per_thread[node.type].append((node.start, node.end))
            for runtime in node.runtimes:
                per_thread["CudaRuntime"].append((runtime.start, runtime.end))
        for event_type, ranges in per_thread.items():
            cpu_ranges[event_type].extend(_merged_ns(ranges))
            calls[event_type] += len(ranges)
    cpu = {event_type: _length_ns(ranges) for event_type, ranges in cpu_ranges.items()}
    cpu.pop("Communication", None)
    if communication[0]:
        cpu["Communication"], calls["Communication"] = _length_ns(communication[0]), len(set(communication[0]))
    for phase in MODEL_PHASES:
        if phase in calls and phase in model:
            cpu[phase], calls[phase] = sum(model[phase].cpu), model[phase].calls
    device_ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for device in (d for root in roots for n in root.walk() for d in n.devices):
        device_ranges[device.type].append((device.start, device.end))
    gpu_rows = [_overview_row(t, len(r), _length_ns(r), total_ns) for t, r in device_ranges.items()]
    if communication[1]:
        gpu_rows.append(
            _overview_row("Communication", len(set(communication[1])), _length_ns(communication[1]), total_ns)
        )
    ordered = sorted(cpu.items(), key=lambda item: item[1], reverse=True)
    return {"cpu": [_overview_row(t, calls[t], ns, total_ns) for t, ns in ordered], "gpu": gpu_rows}


def _overview_row(event_type: str, calls: int, time_ns: int, total_ns: int) -> dict[str, Any]:
    return {
        "type": event_type,
        "calls": calls,
        "time_ns": time_ns,
        "ratio_pct": 100.0 * time_ns / total_ns if total_ns else 0.0,
    }


def model_summary(model: dict[str, _Stats], total_ns: int) -> list[dict[str, Any]]:
    if len(model) <= 1:
        return []  # Paddle prints no Model Summary without phases
    step_gpu = sum(model["ProfileStep"].gpu) if "ProfileStep" in model else 0
    rows = [model[name].row(name, total_ns, step_gpu) for name in ("ProfileStep", *MODEL_PHASES) if name in model]
    phases_cpu = sum(sum(model[name].cpu) for name in MODEL_PHASES if name in model)
    phases_gpu = sum(sum(model[name].gpu) for name in MODEL_PHASES if name in model)
    others_cpu, others_gpu = total_ns - phases_cpu, step_gpu - phases_gpu
    rows.append({
        "name": "Others",
        "calls": None,
        "cpu": {"total_ns": others_cpu, "ratio_pct": 100.0 * others_cpu / total_ns if total_ns else 0.0},
        "gpu": {"total_ns": others_gpu, "ratio_pct": 100.0 * others_gpu / step_gpu if step_gpu else 0.0},
    })  # fmt: skip
    return rows


PHASE_OF_ROW = {"Dataloader": "dataloader", "Forward": "forward", "Backward": "backward", "Optimization": "optimizer"}


def model_summary_of_phases(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Paddle's Model Summary of a PyTorch trace, from ``phases.model_phases``' per-step values
    (``docs/definitions.md`` §14.4): each step is a ProfileStep call (CPU: its host time; GPU: its device busy
    time) and a call of each phase that took time in it."""
    model = {"ProfileStep": _Stats()}
    for step in steps:
        model["ProfileStep"].add(_ns(step["host_us"]), _ns(step["device_busy_us"]))
        for row, phase in PHASE_OF_ROW.items():
            cpu_ns, gpu_ns = _ns(step[f"{phase}_us"]), _ns(step[f"device_{phase}_us"])
            if cpu_ns or gpu_ns:
                model.setdefault(row, _Stats()).add(cpu_ns, gpu_ns)
    return model_summary(model, sum(model["ProfileStep"].cpu))


def _ns(us: float) -> int:
    return round(us * 1000)


def _is_communication(node: _Node) -> bool:
    return node.type == "Communication" or (
        node.type == "Operator" and any(word in node.name.lower() for word in COMMUNICATION_OP_WORDS)
    )


_CommunicationRanges = tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]


def _communication_ranges(nodes: list[_Node]) -> _CommunicationRanges:
    """(host communication, device communication, computation kernels) ranges, by Paddle's three cases."""
    host, device, computation = [], [], []
    for node in nodes:
        if _is_communication(node):
            host.append((node.start, node.end))
            device.extend((d.start, d.end) for d in node.all_devices() if d.type == "Kernel")
            continue
        for kernel in (d for d in node.devices if d.type == "Kernel"):
            is_collective = "nccl" in kernel.name.lower() or "xccl" in kernel.name.lower()
            (device if is_collective else computation).append((kernel.start, kernel.end))
    return host, device, computation


def distribution_summary(communication_ranges: _CommunicationRanges, total_ns: int) -> dict[str, Any] | None:
    host, device, computation = communication_ranges
    communication = _merged_ns(_merged_ns(host) + _merged_ns(device))
    if not communication:
        return None  # Paddle prints no Distribution Summary without communication
    rows = {
        "Communication": _length_ns(communication),
        "Computation": _length_ns(computation),
        "Overlap": _intersection_ns(communication, computation),
    }
    pct = lambda ns: 100.0 * ns / total_ns if total_ns else 0.0  # noqa: E731
    return {"ProfileStep": {"time_ns": total_ns, "ratio_pct": 100.0 if total_ns else 0.0},
            **{name: {"time_ns": ns, "ratio_pct": pct(ns)} for name, ns in rows.items()}}  # fmt: skip


def operator_summary(nodes: list[_Node]) -> list[dict[str, Any]]:
    """Operators by name, by CPU total descending, each with its inner rows and their kernels."""
    operators: dict[str, _Stats] = {}
    inners: dict[str, dict[str, _Stats]] = defaultdict(dict)
    inner_devices: dict[tuple[str, str], dict[str, _Stats]] = defaultdict(dict)
    own_devices: dict[str, dict[str, _Stats]] = defaultdict(dict)
    for node in (n for n in nodes if n.type == "Operator"):
        operators.setdefault(node.name, _Stats()).add(node.cpu_ns, node.gpu_ns(general=True))
        for child in (c for c in node.children if c.type != "Operator"):
            inners[node.name].setdefault(child.name, _Stats()).add(child.cpu_ns, child.gpu_ns(general=True))
            for device in child.devices:
                inner_devices[(node.name, child.name)].setdefault(device.name, _Stats()).add(
                    None, device.end - device.start
                )
        for device in node.devices:
            own_devices[node.name].setdefault(device.name, _Stats()).add(None, device.end - device.start)
    all_cpu = sum(sum(s.cpu) for s in operators.values())
    all_gpu = sum(sum(s.gpu) for s in operators.values())
    rows = []
    for name, stats in sorted(operators.items(), key=lambda item: sum(item[1].cpu), reverse=True):
        op_cpu, op_gpu = sum(stats.cpu), sum(stats.gpu)
        inner_rows = []
        for inner_name, inner in inners[name].items():
            inner_gpu = sum(inner.gpu)
            devices = [d.row(n, 0, inner_gpu) for n, d in inner_devices[(name, inner_name)].items()]
            inner_rows.append({**inner.row(inner_name, op_cpu, op_gpu), "kernels": devices})
        kernels = [d.row(n, 0, op_gpu) for n, d in own_devices[name].items()]
        rows.append({**stats.row(name, all_cpu, all_gpu), "inner": inner_rows, "kernels": kernels})
    return rows


def kernel_summary(nodes: list[_Node]) -> list[dict[str, Any]]:
    kernels: dict[str, _Stats] = {}
    for device in (d for n in nodes for d in n.devices if d.type == "Kernel"):
        kernels.setdefault(device.name, _Stats()).add(None, device.end - device.start)
    total = sum(sum(s.gpu) for s in kernels.values())
    ordered = sorted(kernels.items(), key=lambda item: sum(item[1].gpu), reverse=True)
    return [stats.row(name, 0, total) for name, stats in ordered]


def memory_summary(nodes: list[_Node], peaks: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Per place: the peaks, and allocations / frees per host event name (an operator's include its children's)."""
    items: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)

    def count(place: str, name: str, size: int) -> None:
        item = items[place].setdefault(
            name, {"allocation_count": 0, "free_count": 0, "allocation_bytes": 0, "free_bytes": 0}
        )
        if size >= 0:
            item["allocation_count"] += 1
            item["allocation_bytes"] += size
        else:
            item["free_count"] += 1
            item["free_bytes"] -= size

    for node in nodes:
        if node.type == "OperatorInner":
            continue
        sources = [node, *node.children] if node.type == "Operator" else [node]
        for source in sources:
            for place, size in source.memory:
                count(place, node.name, size)
    places = []
    for place in sorted(set(items) | set(peaks)):
        rows = [
            {"name": name, "type": "Allocated", **values,
             "increased_bytes": values["allocation_bytes"] - values["free_bytes"]}
            for name, values in items[place].items()
        ]  # fmt: skip
        rows.sort(key=lambda row: row["increased_bytes"], reverse=True)
        peak = peaks.get(place, {})
        places.append({
            "place": place,
            "peak_allocated_bytes": peak.get("peak_allocated_bytes"),
            "peak_reserved_bytes": peak.get("peak_reserved_bytes"),
            "rows": rows,
        })  # fmt: skip
    return places


def user_defined_summary(nodes: list[_Node], total_ns: int) -> list[dict[str, Any]]:
    """Python ``RecordEvent`` ranges by name (memcpy / memset ones are Paddle's memory manipulation table)."""
    items: dict[str, _Stats] = {}
    for node in nodes:
        lowered = node.name.lower()
        if node.type != "PythonUserDefined" or any(w in lowered for w in ("memcpy", "memorycopy", "memset")):
            continue
        items.setdefault(node.name, _Stats()).add(node.cpu_ns, node.gpu_ns(general=True))
    step_gpu = 0
    rows = sorted(items.items(), key=lambda item: sum(item[1].cpu), reverse=True)
    return [stats.row(name, total_ns, step_gpu) for name, stats in rows]


NOT_PADDLE = "Paddle's summary tables are made from PaddlePaddle profiler traces; this trace is not one."


@payload("paddle_summary", version=1)
def paddle_summary_payload(context: TraceContext) -> dict[str, Any]:
    """The summary of a Paddle trace; for any other trace, why there is none."""
    if context.tables.meta.get("format") != "paddle":
        return {"applies": False, "reason": NOT_PADDLE}
    return {"applies": True, **paddle_summary(context.tables)}
