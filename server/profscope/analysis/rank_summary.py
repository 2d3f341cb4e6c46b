"""Per-rank summary of a distributed job, computed once per trace at ingest (the cached query ``distributed.rank``).

Each rank is parsed on its own in the ingest pool; this module reduces it to a summary of a few kilobytes
per collective call: identity and clock, devices, process groups, collective calls with their sizes and
steps, the computation / communication breakdown per step, and HTA's per-rank analyses. The cross-rank
view (``analysis/distributed.py``) reads only these summaries, never a rank's events.

Definitions: ``docs/definitions.md`` §6.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np

from profscope.analysis import intervals, name_rules
from profscope.analysis.arrays import is_one_of, match_keys
from profscope.analysis.call_tree import CallTree
from profscope.analysis.context import TraceContext
from profscope.analysis.device_activity import (
    UNDESCRIBED,
    communication_device_rows,
    device_descriptions,
    device_kernels,
)
from profscope.analysis.payloads import payload
from profscope.analysis.steps import Steps
from profscope.tables import HOST_OP_KINDS, NO_ID, Kind, TraceTables

# of the summary's shape: build_distributed refuses summaries of another version
# (2: temporal_hta_filter, activities_without_stream; 3: host computation per thread)
SUMMARY_VERSION = 3
NS_PER_US = 1000.0
KERNEL_WAIT_THRESHOLD_NS = 30_000  # HTA consecutive_kernel_delay=30 on µs timestamps
TOP_KERNELS_PER_TYPE = 5
MAX_ANCESTORS = 12
ABSOLUTE_US = 1e14  # timestamps above this are epoch microseconds (after 1973), not relative ones


@payload("distributed.rank", version=3, first=True, for_ranks=True)
def rank_payload(context: TraceContext) -> dict[str, Any]:
    return rank_summary(context.tables, context.tree, context.steps)


def rank_summary(tables: TraceTables, tree: CallTree, steps: Steps) -> dict[str, Any]:
    """The small summary of one rank that the distributed view is built from."""
    events = tables.events
    kind = np.asarray(events["kind"])
    has_kernels = bool((kind == Kind.KERNEL).any())
    comm_device = communication_device_rows(tables, tree) & (kind == Kind.KERNEL)
    groups = _ProcessGroups(tables.meta.get("distributedInfo"))
    calls = _collective_calls(tables, tree, comm_device, has_kernels, groups)
    calls["step"] = _step_of(calls["start_ns"], calls["end_ns"], steps)
    if len(groups.items) == 1:  # gloo:* / old nccl:* ops name no group: the only one there is
        calls["pg"][calls["pg"] < 0] = 0
    _number_calls(calls)
    warnings = list(calls.pop("warnings"))
    summary = {
        "version": SUMMARY_VERSION,
        "identity": _identity(tables),
        "clock": _clock(tables),
        "host": _host(tables),
        "devices": _devices(tables),
        "mode": "device" if has_kernels else "host",
        "process_groups": groups.items,
        "steps": _step_breakdown(tables, tree, steps, comm_device, calls, has_kernels),
        "collectives": _columns(calls),
        "hta": _hta(tables, tree, comm_device) if has_kernels else None,
        "warnings": warnings,
    }
    return summary


def _identity(tables: TraceTables) -> dict[str, Any]:
    info = tables.meta.get("distributedInfo") or {}
    rank = info.get("rank")
    return {
        "rank": rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else None,
        "world_size": info.get("world_size") if isinstance(info.get("world_size"), int) else None,
        "backend": info.get("backend") if isinstance(info.get("backend"), str) else None,
        "nccl_version": info.get("nccl_version") if isinstance(info.get("nccl_version"), str) else None,
        "has_distributed_info": bool(info),
    }


def _clock(tables: TraceTables) -> dict[str, Any]:
    """Absolute time of the trace origin (epoch µs) so ranks can be put on one time axis."""
    origin_us = float(tables.meta.get("origin_us") or 0.0)
    base_ns = tables.meta.get("baseTimeNanoseconds")
    if origin_us > ABSOLUTE_US:
        return {"origin_us": origin_us, "base_ns": 0, "wall_origin_us": origin_us, "source": "absolute timestamps"}
    if isinstance(base_ns, int | float) and not isinstance(base_ns, bool) and base_ns > 0:
        base_ns = int(base_ns)  # kept apart from origin_us: their float sum would round to 0.25 µs
        return {
            "origin_us": origin_us,
            "base_ns": base_ns,
            "wall_origin_us": base_ns / 1000.0 + origin_us,
            "source": "baseTimeNanoseconds",
        }
    return {"origin_us": origin_us, "base_ns": None, "wall_origin_us": None, "source": None}


def _host(tables: TraceTables) -> dict[str, Any]:
    other = tables.meta.get("other") or {}
    hostname = next((other[k] for k in ("host_name", "hostname", "hostName") if isinstance(other.get(k), str)), None)
    kind = np.asarray(tables.events["kind"])
    host_rows = is_one_of(kind, HOST_OP_KINDS)
    pid = None
    if host_rows.any():
        counts = np.bincount(np.asarray(tables.events["track"])[host_rows], minlength=len(tables.tracks))
        pid = tables.tracks[int(counts.argmax())].pid
    return {"hostname": hostname, "pid": pid}


def _devices(tables: TraceTables) -> list[dict[str, Any]]:
    """GPUs that ran kernels, with the trace's ``deviceProperties``."""
    device = device_kernels(tables).device
    if not len(device):
        return []
    described = device_descriptions(tables)
    return [{"id": int(gpu), **described.get(gpu, UNDESCRIBED)} for gpu in sorted(set(device.tolist()))]


class _ProcessGroups:
    """Process groups of a rank: ``distributedInfo.pg_config`` plus any named by a collective's args."""

    def __init__(self, info: dict[str, Any] | None) -> None:
        self.items: list[dict[str, Any]] = []
        self._index: dict[tuple[str, str], int] = {}
        for config in (info or {}).get("pg_config") or []:
            if isinstance(config, dict):
                ranks = config.get("ranks")
                self.add(
                    str(config.get("pg_name", "")),
                    str(config.get("pg_desc", "") or ""),
                    ranks if isinstance(ranks, list) else None,
                    backend=config.get("backend_config"),
                )

    def add(self, name: str, desc: str, ranks: list[int] | None, backend: Any = None) -> int:
        key = (name, json.dumps(ranks))
        found = self._index.get(key)
        if found is None:
            found = self._index.get((name, "null")) if ranks is not None else None
        if found is not None:
            if desc and not self.items[found]["desc"]:
                self.items[found]["desc"] = desc
            return found
        self._index[key] = len(self.items)
        self.items.append(
            {
                "name": name,
                "desc": desc,
                "ranks": ranks,
                "size": len(ranks) if ranks is not None else None,
                "backend": backend if isinstance(backend, str) else None,
            }
        )
        return len(self.items) - 1


def _parse_ranks(text: str) -> list[int] | None:
    """``Process Group Ranks`` is a JSON list, often written as a string holding one."""
    value: Any = text
    for _ in range(3):
        if isinstance(value, list):
            try:
                return [int(v) for v in value]
            except (TypeError, ValueError):
                return None
        if not isinstance(value, str) or not value:
            return None
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return None


def _collective_calls(
    tables: TraceTables, tree: CallTree, comm_device: np.ndarray, has_kernels: bool, groups: _ProcessGroups
) -> dict[str, Any]:
    """One record per collective call (see the module docstring), in start order."""
    events = tables.events
    strings = tables.strings
    kind = np.asarray(events["kind"])
    name = np.asarray(events["name"])
    ts = np.asarray(events["ts_ns"])
    dur = np.asarray(events["dur_ns"])
    host = is_one_of(kind, HOST_OP_KINDS)
    backend_name = name_rules.string_mask(strings, name_rules.is_backend_comm_op)
    if has_kernels:
        gloo_name = name_rules.string_mask(strings, lambda s: s.startswith("gloo:"))
        host_calls = np.flatnonzero(host & gloo_name[name])
    else:
        host_calls = np.flatnonzero(host & (backend_name[name] | _paddle_collectives(tables)))
    kernel_calls = np.flatnonzero(comm_device)
    rows = np.concatenate([kernel_calls, host_calls])
    on_device = np.concatenate([np.ones(len(kernel_calls), bool), np.zeros(len(host_calls), bool)])
    order = np.lexsort((rows, ts[rows]))
    rows, on_device = rows[order], on_device[order]

    resolver = _CallResolver(tables, tree, groups)
    records = [
        resolver.resolve(int(row), bool(device)) for row, device in zip(rows.tolist(), on_device.tolist(), strict=True)
    ]
    kernels = tables.table("kernels")
    kernel_event = np.asarray(kernels["event"])
    stream_of = np.full(len(rows), -1, dtype=np.int64)
    if len(rows) and len(kernel_event):
        position = np.minimum(np.searchsorted(kernel_event, rows), len(kernel_event) - 1)
        found = kernel_event[position] == rows
        stream_of[found] = np.asarray(kernels["stream"])[position[found]]
    warnings = _kernelless_collectives(tables, host & backend_name[name], comm_device) if has_kernels else []
    unlinked = sum(1 for r in records if r["linked"] is False)
    if unlinked:
        warnings.append(
            f"{unlinked} communication kernel(s) could not be linked to the op that launched them: "
            "their process group and size are unknown."
        )
    return {
        "name": [r["name"] for r in records],
        "kind": [r["kind"] for r in records],
        "pg": np.array([r["pg"] for r in records], dtype=np.int64),
        "seq": np.array([r["seq"] for r in records], dtype=np.int64),
        "bytes": np.array([r["bytes"] for r in records], dtype=np.int64),
        "out_bytes": np.array([r["out_bytes"] for r in records], dtype=np.int64),
        "dtype": [r["dtype"] for r in records],
        "start_ns": ts[rows],
        "end_ns": ts[rows] + dur[rows],
        "event": rows,
        "stream": stream_of,
        "on_device": on_device,
        "warnings": warnings,
    }


def _paddle_collectives(tables: TraceTables) -> np.ndarray:
    """Per event: a PaddlePaddle host record of a collective, its ``Communication`` events and its collective
    operators (categories only Paddle writes, so no other trace has one)."""
    events = tables.events
    category = np.asarray(events["cat"])
    collective_name = name_rules.string_mask(tables.strings, name_rules.is_paddle_collective_op)
    communication, operator = tables.strings.lookup("Communication"), tables.strings.lookup("Operator")
    found = (category == communication) if communication >= 0 else np.zeros(len(category), dtype=bool)
    if operator >= 0:
        found |= (category == operator) & collective_name[np.asarray(events["name"])]
    return found


def _kernelless_collectives(tables: TraceTables, backend_ops: np.ndarray, comm_device: np.ndarray) -> list[str]:
    """On a GPU rank the calls are its communication kernels: say so when its ``nccl:*`` ops launched none
    (a one-rank group needs no transfer, or the kernels were not captured), rather than show 0 calls unexplained."""
    if comm_device.any() or not backend_ops.any():
        return []
    names = np.asarray(tables.events["name"])[backend_ops]
    unique, counts = np.unique(names, return_counts=True)
    listed = ", ".join(
        f"{tables.strings[int(n)]} \u00d7{c}" for n, c in zip(unique.tolist(), counts.tolist(), strict=True)
    )
    return [
        f"{int(backend_ops.sum())} collective op(s) ({listed}) launched no communication kernel on this GPU rank "
        "(a one-rank process group transfers nothing; otherwise the kernels were not captured): no collective "
        "call to time or match."
    ]


class _CallResolver:
    """Name, process group, sequence number and size of one collective call."""

    def __init__(self, tables: TraceTables, tree: CallTree, groups: _ProcessGroups) -> None:
        self.tables = tables
        self.tree = tree
        self.groups = groups
        self.strings = tables.strings
        self.name = np.asarray(tables.events["name"])
        collectives = tables.table("collectives")
        # int64 once: searching a narrower (memory-mapped) column for a Python int converts the whole
        # column on every call, milliseconds each for thousands of calls
        self.coll_event = np.asarray(collectives["event"], dtype=np.int64)
        self.coll = {column: np.asarray(values) for column, values in collectives.items()}
        ops = tables.table("ops")
        self.op_event = np.asarray(ops["event"], dtype=np.int64)
        self.op_dims = np.asarray(ops["input_dims"])
        self.op_types = np.asarray(ops["input_types"])
        self.device_rows = np.asarray(tree.device_rows, dtype=np.int64)  # sorted (flatnonzero): binary search
        self.node_of_event: dict[int, int] | None = None
        self._pg_cache: dict[tuple[int, int, int], int] = {}

    def _row_in(self, sorted_events: np.ndarray, row: int) -> int:
        if len(sorted_events) == 0:
            return NO_ID
        position = int(np.searchsorted(sorted_events, row))
        return position if position < len(sorted_events) and int(sorted_events[position]) == row else NO_ID

    def _ancestors(self, row: int, on_device: bool) -> list[int]:
        """Event rows of the ops enclosing / launching this call, innermost first."""
        tree = self.tree
        if on_device:
            position = self._row_in(self.device_rows, row)
            node = int(tree.device_node[position]) if position != NO_ID else -1
        else:
            if self.node_of_event is None:
                self.node_of_event = {int(e): i for i, e in enumerate(np.asarray(tree.node_event).tolist())}
            node = self.node_of_event.get(row, -1)
            node = int(tree.parent[node]) if node >= 0 else -1
        chain = []
        while node >= 0 and len(chain) < MAX_ANCESTORS:
            chain.append(int(tree.node_event[node]))
            node = int(tree.parent[node])
        return chain

    def resolve(self, row: int, on_device: bool) -> dict[str, Any]:
        strings = self.strings
        chain = [row, *self._ancestors(row, on_device)]
        coll_rows = [c for c in (self._row_in(self.coll_event, r) for r in chain) if c != NO_ID]
        backend_op = next((r for r in chain if name_rules.is_backend_comm_op(strings[int(self.name[r])])), None)
        c10d_op = next((r for r in chain[1:] if strings[int(self.name[r])].startswith("c10d::")), None)
        coll = self.coll

        def first(column: str, missing: Any = NO_ID) -> Any:
            for c in coll_rows:
                value = int(coll[column][c])
                if value != NO_ID:
                    return value
            return missing

        collective_name = strings[first("collective_name")] if coll_rows else ""
        if backend_op is not None:
            display = strings[int(self.name[backend_op])]
        elif collective_name:
            display = collective_name
        elif c10d_op is not None:
            display = strings[int(self.name[c10d_op])]
        elif on_device:
            display = _short_kernel_name(strings[int(self.name[row])])
        else:  # a Paddle collective operator ("all_reduce dygraph"), the only record of the call
            display = strings[int(self.name[row])]
        kind = name_rules.collective_kind(collective_name or display)
        if kind == "other" and on_device:
            kind = name_rules.collective_kind(strings[int(self.name[row])])
        dtype_id = first("dtype")
        dtype = strings[dtype_id] if dtype_id != NO_ID else None
        element = name_rules.DTYPE_BYTES.get(dtype or "", 0)
        in_nelems, out_nelems = first("in_nelems"), first("out_nelems")
        size = in_nelems * element if in_nelems >= 0 and element else -1
        out_size = out_nelems * element if out_nelems >= 0 and element else -1
        if size < 0:
            size_op = backend_op if backend_op is not None else (row if not on_device else None)
            if size_op is not None:
                size = self._input_bytes(size_op)
        return {
            "name": display,
            "kind": kind,
            "pg": self._group(first("pg_name"), first("pg_desc"), first("pg_ranks")) if coll_rows else -1,
            "seq": first("seq"),
            "bytes": size,
            "out_bytes": out_size,
            "dtype": dtype,
            "linked": (len(chain) > 1 or bool(coll_rows)) if on_device else None,
        }

    def _group(self, name_id: int, desc_id: int, ranks_id: int) -> int:
        key = (name_id, desc_id, ranks_id)
        found = self._pg_cache.get(key)
        if found is None:
            strings = self.strings
            if name_id == NO_ID and ranks_id == NO_ID:
                found = -1
            else:
                found = self.groups.add(
                    strings[name_id], strings[desc_id], _parse_ranks(strings[ranks_id]) if ranks_id != NO_ID else None
                )
            self._pg_cache[key] = found
        return found

    def _input_bytes(self, row: int) -> int:
        """Σ over inputs of Π ``Input Dims`` × bytes of ``Input type`` (torch-tb-profiler's size)."""
        op = self._row_in(self.op_event, row)
        if op == NO_ID or self.op_dims[op] == NO_ID:
            return -1
        try:
            dims = json.loads(self.strings[int(self.op_dims[op])])
            types = json.loads(self.strings[int(self.op_types[op])]) if self.op_types[op] != NO_ID else []
        except ValueError:
            return -1
        total = 0
        for shape, type_name in zip(dims, types, strict=False):
            if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
                continue
            total += int(np.prod(shape, dtype=np.int64)) * name_rules.DTYPE_BYTES.get(str(type_name), 0)
        return total


def _short_kernel_name(kernel: str) -> str:
    text = kernel.replace("(anonymous namespace)", "")
    text = text.split("(", 1)[0].split("<", 1)[0].strip()
    return text.rsplit(" ", 1)[-1].lstrip(":") or kernel[:80]


def _step_of(start: np.ndarray, end: np.ndarray, steps: Steps) -> np.ndarray:
    """Index of the step that holds the whole call (torch-tb-profiler's rule), else -1."""
    if len(start) == 0:
        return np.zeros(0, dtype=np.int64)
    candidate = np.searchsorted(steps.starts_ns, start, side="right") - 1
    safe = np.maximum(candidate, 0)
    inside = (candidate >= 0) & (end <= steps.ends_ns[safe]) & (start >= steps.starts_ns[safe])
    return np.where(inside, candidate, -1).astype(np.int64)


def _number_calls(calls: dict[str, Any]) -> None:
    """Matching keys: with ``Seq``, (group, seq) and the call's position among equal keys;
    without, (group, type) and the call's position among those (calls are in start order)."""
    count = len(calls["start_ns"])
    order = np.zeros(count, dtype=np.int64)
    sub = np.zeros(count, dtype=np.int64)
    seen: dict[tuple, int] = defaultdict(int)
    for i in range(count):
        pg, seq = int(calls["pg"][i]), int(calls["seq"][i])
        if seq >= 0:
            key: tuple = ("s", pg, seq)
            sub[i] = seen[key]
            order[i] = seq
        else:
            key = ("o", pg, calls["kind"][i])
            order[i] = seen[key]
        seen[key] += 1
    calls["order"] = order
    calls["sub"] = sub


def _columns(calls: dict[str, Any]) -> dict[str, Any]:
    """Columnar JSON: strings as indexes into small lists, numbers as arrays."""
    out: dict[str, Any] = {}
    for column in ("name", "kind", "dtype"):
        values = calls[column]
        table: dict[Any, int] = {}
        out[column] = [table.setdefault(v, len(table)) if v is not None else -1 for v in values]
        out[f"{column}s"] = list(table)
    for column in ("pg", "seq", "order", "sub", "bytes", "out_bytes", "start_ns", "end_ns", "event", "stream", "step"):
        out[column] = np.asarray(calls[column], dtype=np.int64)
    out["on_device"] = np.asarray(calls["on_device"], dtype=bool)
    return out


def _step_breakdown(
    tables: TraceTables,
    tree: CallTree,
    steps: Steps,
    comm_device: np.ndarray,
    calls: dict[str, Any],
    has_kernels: bool,
) -> list[dict[str, Any]]:
    """torch-tb-profiler's Computation / Overlapping / Communication / Other per step."""
    events = tables.events
    kind = np.asarray(events["kind"])
    ts = np.asarray(events["ts_ns"])
    end = ts + np.asarray(events["dur_ns"])
    if has_kernels:
        compute = (kind == Kind.KERNEL) & ~comm_device
        computation = intervals.merge(ts[compute], end[compute])
    else:
        computation = _host_computation(tables)
    communication = intervals.merge(calls["start_ns"], calls["end_ns"])
    overlap = intervals.intersect(computation, communication)
    starts, ends = steps.starts_ns, steps.ends_ns
    comp = intervals.total_within(computation, starts, ends)
    comm = intervals.total_within(communication, starts, ends)
    both = intervals.total_within(overlap, starts, ends)
    rows = []
    for i, step_name in enumerate(steps.names):
        total = int(ends[i] - starts[i])
        rows.append(
            {
                "name": step_name,
                "start_ns": int(starts[i]),
                "end_ns": int(ends[i]),
                "computation_ns": int(comp[i] - both[i]),
                "overlapping_ns": int(both[i]),
                "communication_ns": int(comm[i] - both[i]),
                "other_ns": int(total + both[i] - comp[i] - comm[i]),
            }
        )
    return rows


def _host_computation(tables: TraceTables) -> intervals.IntervalSet:
    """On a rank without kernels: host operators (not annotations, collectives, data loading,
    steps), thread by thread, minus the time that thread spends inside a collective
    (``docs/definitions.md``, "Distributed totals"): the ops around a ``gloo:all_reduce``
    (``record_param_comms``, DDP hooks, backward) are waiting for it, not computing, so only
    another thread's work overlaps communication."""
    events = tables.events
    kind, name, track = (np.asarray(events[c]) for c in ("kind", "name", "track"))
    ts = np.asarray(events["ts_ns"])
    end = ts + np.asarray(events["dur_ns"])
    collective = is_one_of(kind, HOST_OP_KINDS) & (
        name_rules.string_mask(tables.strings, name_rules.is_comm_op)[name] | _paddle_collectives(tables)
    )
    not_compute = name_rules.string_mask(
        tables.strings, lambda s: name_rules.is_dataloader(s) or name_rules.is_step_range(s)
    )
    # operators only: a user_annotation (a whole train step in record_function) is no computation
    compute = is_one_of(kind, (Kind.CPU_OP, Kind.PYTHON_LEGACY)) & ~collective & ~not_compute[name]
    pieces = []
    for thread in np.unique(track[compute]).tolist():
        on_thread = track == thread
        busy = intervals.merge(ts[compute & on_thread], end[compute & on_thread])
        waiting = intervals.merge(ts[collective & on_thread], end[collective & on_thread])
        pieces.append(intervals.subtract(busy, waiting))
    if not pieces:
        return intervals.empty()
    return intervals.merge(np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))


def _hta(tables: TraceTables, tree: CallTree, comm_device: np.ndarray) -> dict[str, Any]:
    """HTA's temporal, idle-time, overlap and kernel-type breakdowns of one GPU rank.

    ``docs/definitions.md``, "Temporal breakdown": ``temporal`` counts all device activity on a
    stream; ``temporal_hta_filter`` also applies HTA's trace filter (only activities launched by a
    runtime call in the trace, before the start of the last ``ProfilerStep`` when there are two or
    more). Activities with no stream (MTIA ``dma_request`` without a ``stream`` arg) are in neither,
    as in HTA (``stream != -1``), and are counted in ``activities_without_stream``.
    """
    events = tables.events
    kind = np.asarray(events["kind"])
    rows = np.flatnonzero(is_one_of(kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)))  # every mask is of these
    kind = kind[rows]
    ts = np.asarray(events["ts_ns"])[rows]
    end = ts + np.asarray(events["dur_ns"])[rows]
    device = _on_stream(tables)[rows]
    dma = name_rules.string_mask(tables.strings, lambda s: s.startswith("dma"))
    is_mem = device & (is_one_of(kind, (Kind.MEMCPY, Kind.MEMSET)) | dma[np.asarray(events["name"])[rows]])
    is_comm = device & comm_device[rows] & ~is_mem
    is_comp = device & ~is_mem & ~is_comm
    comp = intervals.merge(ts[is_comp], end[is_comp])
    comm = intervals.merge(ts[is_comm], end[is_comm])
    comm_total = intervals.total(comm)
    types = {}
    for label, mask in (("COMM", is_comm), ("COMP", is_comp), ("MEM", is_mem)):
        types[label] = {
            "time_ns": int((end[mask] - ts[mask]).sum()),
            "count": int(mask.sum()),
            "top": _top(tables, rows[mask]),
        }
    kept_by_hta = _kept_by_hta_filter(tables, tree)[rows]
    return {
        "temporal": _temporal(ts, end, device, is_comp),
        "temporal_hta_filter": _temporal(ts, end, device & kept_by_hta, is_comp & kept_by_hta),
        "activities_without_stream": int((~device).sum()),
        "idle": _idle_breakdown(tables, tree),
        "comm_comp_overlap_ratio": intervals.total(intervals.intersect(comm, comp)) / comm_total
        if comm_total
        else None,
        "kernel_types": types,
    }


def _temporal(ts: np.ndarray, end: np.ndarray, device: np.ndarray, is_comp: np.ndarray) -> dict[str, int]:
    """Window = [first activity start, last end]; idle = window − busy; compute = ∪ compute; the rest non-compute."""
    busy = intervals.merge(ts[device], end[device])
    window = int(busy[1][-1] - busy[0][0]) if len(busy[0]) else 0
    idle = window - intervals.total(busy)
    compute = intervals.total(intervals.merge(ts[is_comp], end[is_comp]))
    return {
        "window_ns": window,
        "idle_ns": int(idle),
        "compute_ns": int(compute),
        "non_compute_ns": window - compute - idle,
    }


def _on_stream(tables: TraceTables) -> np.ndarray:
    """Per event: a device activity with a stream (HTA drops ``stream == -1``)."""
    kernels = tables.table("kernels")
    on_stream = np.zeros(tables.row_count("events"), dtype=bool)
    on_stream[np.asarray(kernels["event"])] = np.asarray(kernels["stream"]) >= 0
    return on_stream


def _kept_by_hta_filter(tables: TraceTables, tree: CallTree) -> np.ndarray:
    """Per event: HTA 0.5's ``_filter_irrelevant_gpu_kernels`` keeps it (non-device events: True).

    With two or more ``ProfilerStep`` names, a device activity is kept when a runtime call in the
    trace launched it (same correlation) and started before the start of the last step.
    """
    events = tables.events
    keep = np.ones(tables.row_count("events"), dtype=bool)
    ts = np.asarray(events["ts_ns"])
    step_name = name_rules.string_mask(tables.strings, name_rules.is_profiler_step)[np.asarray(events["name"])]
    host_steps = step_name & is_one_of(np.asarray(events["kind"]), HOST_OP_KINDS)
    if len(np.unique(np.asarray(events["name"])[host_steps])) < 2:
        return keep
    last_step_start = int(ts[host_steps].max())
    runtime = tree.device_runtime
    launched_in_time = runtime >= 0
    launched_in_time[launched_in_time] = ts[runtime[launched_in_time]] < last_step_start
    keep[tree.device_rows] = launched_in_time
    return keep


def _top(tables: TraceTables, rows: np.ndarray) -> list[dict[str, Any]]:
    """The longest kernel names among event rows ``rows`` (ascending)."""
    if not len(rows):
        return []
    name = np.asarray(tables.events["name"])[rows]
    dur = np.asarray(tables.events["dur_ns"])[rows]
    unique, inverse = np.unique(name, return_inverse=True)
    total = np.bincount(inverse, weights=dur)
    count = np.bincount(inverse)
    low = np.full(len(unique), np.iinfo(np.int64).max)
    high = np.zeros(len(unique), dtype=np.int64)
    np.minimum.at(low, inverse, dur)
    np.maximum.at(high, inverse, dur)
    best = np.argsort(-total, kind="stable")[:TOP_KERNELS_PER_TYPE]
    return [
        {
            "name": tables.strings[int(unique[i])],
            "count": int(count[i]),
            "total_ns": int(total[i]),
            "mean_ns": float(total[i] / count[i]),
            "min_ns": int(low[i]),
            "max_ns": int(high[i]),
        }
        for i in best.tolist()
    ]


def _idle_breakdown(tables: TraceTables, tree: CallTree) -> dict[str, Any]:
    """Per stream, each gap before a device activity: host wait / kernel wait / other (HTA)."""
    kernels = tables.table("kernels")
    events = tables.events
    with_stream = np.asarray(kernels["stream"]) >= 0  # a stream-less activity is no stream's (as in HTA)
    rows = np.asarray(kernels["event"])[with_stream]
    stream = np.asarray(kernels["stream"])[with_stream]
    device_arg = np.asarray(kernels["device"])[with_stream]
    ts = np.asarray(events["ts_ns"])[rows]
    end = ts + np.asarray(events["dur_ns"])[rows]
    runtime_start = np.full(len(rows), np.iinfo(np.int64).min, dtype=np.int64)
    device_rows = np.asarray(tree.device_rows)  # sorted (flatnonzero)
    launch = match_keys(device_rows, np.arange(len(device_rows)), rows, -1)
    has_launch = launch >= 0
    runtime_rows = np.asarray(tree.device_runtime)[launch[has_launch]]
    linked = runtime_rows >= 0
    starts = np.full(int(has_launch.sum()), np.iinfo(np.int64).min, dtype=np.int64)
    starts[linked] = np.asarray(events["ts_ns"])[runtime_rows[linked]]
    runtime_start[has_launch] = starts
    order = np.lexsort((ts, stream, device_arg))
    ts, end, stream, device_arg, runtime_start = (
        ts[order],
        end[order],
        stream[order],
        device_arg[order],
        runtime_start[order],
    )
    same = np.zeros(len(ts), dtype=bool)
    same[1:] = (stream[1:] == stream[:-1]) & (device_arg[1:] == device_arg[:-1])
    # end of everything before each activity on its stream (HTA: the previous kernel's end)
    group_start = np.flatnonzero(~same)
    groups = list(zip(group_start.tolist(), [*group_start[1:].tolist(), len(ts)][: len(group_start)], strict=True))
    prev_end = np.zeros(len(ts), dtype=np.int64)
    for a, b in groups:
        if b - a > 1:
            prev_end[a + 1 : b] = np.maximum.accumulate(end[a : b - 1])
    gap = np.where(same, np.clip(ts - prev_end, 0, None), 0)
    host_wait = same & (runtime_start > prev_end)
    kernel_wait = same & ~host_wait & (gap < KERNEL_WAIT_THRESHOLD_NS)
    other = same & ~host_wait & ~kernel_wait
    per_stream = []
    for a, b in groups:
        piece = slice(a, b)
        per_stream.append(
            {
                "device": int(device_arg[a]),
                "stream": int(stream[a]),
                "host_wait_ns": int(gap[piece][host_wait[piece]].sum()),
                "kernel_wait_ns": int(gap[piece][kernel_wait[piece]].sum()),
                "other_ns": int(gap[piece][other[piece]].sum()),
            }
        )
    return {
        "host_wait_ns": int(gap[host_wait].sum()),
        "kernel_wait_ns": int(gap[kernel_wait].sum()),
        "other_ns": int(gap[other].sum()),
        "streams": per_stream,
        "kernel_wait_threshold_ns": KERNEL_WAIT_THRESHOLD_NS,
    }
