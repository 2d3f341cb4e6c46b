"""Distributed view: every rank of a job side by side, built from small per-rank summaries.

Scale (issue #5 item 6): each rank is parsed on its own in the ingest pool, and this module's
payload ``distributed.rank`` reduces it to a summary of a few kilobytes per collective call. The
view itself (:func:`build_distributed`) reads only those summaries, never the ranks' events, so a
64-rank job costs 64 small JSON files at request time.

Definitions (``anchors.md`` §1.10, torch-tb-profiler's Distributed view, and §2.2, HTA):

- **Collective calls** of a rank: on a GPU rank, every communication kernel (NCCL / RCCL / HCCL /
  UCC / MSCCL kernels, custom all-reduce kernels, and any kernel launched by a collective op), plus
  ``gloo:*`` host ops (Gloo runs on the CPU); on a CPU-only rank, the backend's host records of the
  collective (``gloo:*``, ``nccl:*``, ``mpi:*``, ``ucc:*`` ...). Each call takes its name, process
  group, sequence number and size from its own collective args or from the ops that launched it
  (``record_param_comms``, ``nccl:*``, ``c10d::*``).
- **Computation / Overlapping / Communication / Other** per step (torch-tb-profiler's
  ``OverallParser.aggregate``): computation = the union of compute kernels (communication kernels
  excluded) in the step, or, on a rank without kernels, of host ops (other than collectives, data
  loading and steps); communication = the union of the rank's collective calls; overlapping = their
  intersection; the view shows computation − overlap, overlap, communication − overlap, and other
  = step − the rest. The plugin also counted the host ``nccl:*`` enqueue ops as communication on
  GPU ranks; here a GPU rank's communication is what runs on the device.
- **Data transfer vs synchronizing** (torch-tb-profiler's ``_process_distributed_profiles``): the
  transfer time of a collective call is the minimum duration of that same call across the ranks
  that made it; each rank's transfer range is ``[end − min duration, end]``; synchronizing time =
  communication − transfer (time spent waiting for the other ranks). The plugin matched calls by
  their position in each rank's list and gave up when the counts differed; here calls are matched
  by (process group, sequence number), or, without ``Seq`` args, by (process group, collective
  type, n-th call of that type), and unmatched calls are counted and reported.
- **Stragglers**: for each matched call, every rank's arrival (start on the wall clock) and skew
  (arrival − first arrival); the last to arrive made the others wait Σ (last arrival − arrival).
  Ranks are aligned by absolute time (``baseTimeNanoseconds`` + ``ts``, or epoch ``ts``); when a
  rank has no absolute time they are aligned on the end of the calls they share.
- **HTA analyses** per GPU rank (``hta/analyzers/breakdown_analysis.py``,
  ``communication_analysis.py``): temporal breakdown over [first device activity, last end]: idle
  = window − busy, compute = union of compute kernels, non-compute = the rest; idle time per
  stream split into host wait (the launch of the next kernel started after the previous kernel
  ended), kernel wait (otherwise, when the gap is under 30 µs — HTA's ``consecutive_kernel_delay``
  default, compared with µs timestamps) and other; communication–computation overlap ratio =
  |COMM ∩ COMP| / |COMM|; kernel type breakdown COMM / COMP / MEM (memcpy, memset, ``dma*``).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

import numpy as np
import orjson

from profscope.analysis import intervals
from profscope.analysis import names as rules
from profscope.analysis.call_tree import CallTree
from profscope.analysis.context import TraceContext
from profscope.analysis.overview import communication_device_rows, track_pids
from profscope.analysis.payloads import payload
from profscope.analysis.steps import Steps
from profscope.tables import HOST_OP_KINDS, NO_ID, Kind, TraceTables

SUMMARY_VERSION = 1
NS_PER_US = 1000.0
KERNEL_WAIT_THRESHOLD_NS = 30_000  # HTA consecutive_kernel_delay=30 on µs timestamps
TOP_KERNELS_PER_TYPE = 5
MAX_ANCESTORS = 12
ABSOLUTE_US = 1e14  # timestamps above this are epoch microseconds (after 1973), not relative ones


# ================================================================================================
# Per rank, at ingest
# ================================================================================================
@payload("distributed.rank")
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
    host_rows = np.isin(kind, HOST_OP_KINDS)
    pid = None
    if host_rows.any():
        counts = np.bincount(np.asarray(tables.events["track"])[host_rows], minlength=len(tables.tracks))
        pid = tables.tracks[int(counts.argmax())].pid
    return {"hostname": hostname, "pid": pid}


def _devices(tables: TraceTables) -> list[dict[str, Any]]:
    """GPUs that ran kernels, with the trace's ``deviceProperties``."""
    kernels = tables.table("kernels")
    kind = np.asarray(tables.events["kind"])
    rows = np.asarray(kernels["event"])
    on_kernel = kind[rows] == Kind.KERNEL
    if not on_kernel.any():
        return []
    device = np.asarray(kernels["device"])[on_kernel]
    device = np.where(device >= 0, device, track_pids(tables)[np.asarray(tables.events["track"])[rows[on_kernel]]])
    properties = {p.get("id"): p for p in tables.meta.get("deviceProperties", []) if isinstance(p, dict)}
    found = []
    for gpu in sorted(set(device.tolist())):
        props = properties.get(gpu, {})
        major, minor = props.get("computeMajor"), props.get("computeMinor")
        found.append(
            {
                "id": int(gpu),
                "name": props.get("name"),
                "memory_bytes": props.get("totalGlobalMem"),
                "compute_capability": f"{major}.{minor}" if major is not None and minor is not None else None,
            }
        )
    return found


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
    host = np.isin(kind, HOST_OP_KINDS)
    backend_name = rules.string_mask(strings, rules.is_backend_comm_op)
    if has_kernels:
        gloo_name = rules.string_mask(strings, lambda s: s.startswith("gloo:"))
        host_calls = np.flatnonzero(host & gloo_name[name])
    else:
        host_calls = np.flatnonzero(host & backend_name[name])
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
        self.coll_event = np.asarray(collectives["event"])
        self.coll = {column: np.asarray(values) for column, values in collectives.items()}
        ops = tables.table("ops")
        self.op_event = np.asarray(ops["event"])
        self.op_dims = np.asarray(ops["input_dims"])
        self.op_types = np.asarray(ops["input_types"])
        self.device_position = {int(r): i for i, r in enumerate(np.asarray(tree.device_rows).tolist())}
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
            position = self.device_position.get(row)
            node = int(tree.device_node[position]) if position is not None else -1
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
        backend_op = next((r for r in chain if rules.is_backend_comm_op(strings[int(self.name[r])])), None)
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
        else:
            display = _short_kernel_name(strings[int(self.name[row])])
        kind = rules.collective_kind(collective_name or display)
        if kind == "other" and on_device:
            kind = rules.collective_kind(strings[int(self.name[row])])
        dtype_id = first("dtype")
        dtype = strings[dtype_id] if dtype_id != NO_ID else None
        element = rules.DTYPE_BYTES.get(dtype or "", 0)
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
            total += int(np.prod(shape, dtype=np.int64)) * rules.DTYPE_BYTES.get(str(type_name), 0)
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
    else:
        name = np.asarray(events["name"])
        excluded = rules.string_mask(
            tables.strings, lambda s: rules.is_comm_op(s) or rules.is_dataloader(s) or rules.is_step_range(s)
        )
        compute = np.isin(kind, HOST_OP_KINDS) & ~excluded[name]
    computation = intervals.merge(ts[compute], end[compute])
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


def _hta(tables: TraceTables, tree: CallTree, comm_device: np.ndarray) -> dict[str, Any]:
    """HTA's temporal, idle-time, overlap and kernel-type breakdowns of one GPU rank."""
    events = tables.events
    kind = np.asarray(events["kind"])
    name = np.asarray(events["name"])
    ts = np.asarray(events["ts_ns"])
    end = ts + np.asarray(events["dur_ns"])
    device = np.isin(kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))
    dma = rules.string_mask(tables.strings, lambda s: s.startswith("dma"))
    is_mem = device & (np.isin(kind, (Kind.MEMCPY, Kind.MEMSET)) | dma[name])
    is_comm = device & comm_device & ~is_mem
    is_comp = device & ~is_mem & ~is_comm
    busy = intervals.merge(ts[device], end[device])
    comp = intervals.merge(ts[is_comp], end[is_comp])
    comm = intervals.merge(ts[is_comm], end[is_comm])
    window = int(busy[1][-1] - busy[0][0]) if len(busy[0]) else 0
    idle = window - intervals.total(busy)
    compute = intervals.total(comp)
    comm_total = intervals.total(comm)
    types = {}
    for label, mask in (("COMM", is_comm), ("COMP", is_comp), ("MEM", is_mem)):
        types[label] = {
            "time_ns": int((end[mask] - ts[mask]).sum()),
            "count": int(mask.sum()),
            "top": _top(tables, mask),
        }
    return {
        "temporal": {
            "window_ns": window,
            "idle_ns": int(idle),
            "compute_ns": int(compute),
            "non_compute_ns": int(window - compute - idle),
        },
        "idle": _idle_breakdown(tables, tree),
        "comm_comp_overlap_ratio": intervals.total(intervals.intersect(comm, comp)) / comm_total
        if comm_total
        else None,
        "kernel_types": types,
    }


def _top(tables: TraceTables, mask: np.ndarray) -> list[dict[str, Any]]:
    rows = np.flatnonzero(mask)
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
    rows = np.asarray(kernels["event"])
    stream = np.asarray(kernels["stream"])
    device_arg = np.asarray(kernels["device"])
    ts = np.asarray(events["ts_ns"])[rows]
    end = ts + np.asarray(events["dur_ns"])[rows]
    runtime_start = np.full(len(rows), np.iinfo(np.int64).min, dtype=np.int64)
    position = {int(r): i for i, r in enumerate(np.asarray(tree.device_rows).tolist())}
    launch = np.array([position.get(int(r), -1) for r in rows.tolist()], dtype=np.int64)
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
    prev_end = np.zeros(len(ts), dtype=np.int64)
    for a, b in zip(group_start.tolist(), [*group_start[1:].tolist(), len(ts)], strict=True):
        if b - a > 1:
            prev_end[a + 1 : b] = np.maximum.accumulate(end[a : b - 1])
    gap = np.where(same, np.clip(ts - prev_end, 0, None), 0)
    host_wait = same & (runtime_start > prev_end)
    kernel_wait = same & ~host_wait & (gap < KERNEL_WAIT_THRESHOLD_NS)
    other = same & ~host_wait & ~kernel_wait
    per_stream = []
    for a, b in zip(group_start.tolist(), [*group_start[1:].tolist(), len(ts)], strict=True):
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


# ================================================================================================
# All ranks, at request time: from the summaries only
# ================================================================================================
MAX_COLLECTIVES_LISTED = 50
MAX_TRACE_WORKERS = 8
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_PARALLEL_DIMS = re.compile(r"_(dp|tp|pp|ep|cp|sp|fsdp)(\d+)", re.IGNORECASE)
_NODE_PROCESS = re.compile(r"^(.*)_(\d+)$")  # torch-tb-profiler's NODE_PROCESS_PATTERN (hostname_pid)
_GROUP_DIMENSION = re.compile(r"(?:^|[^a-z])(dp_shard|dp_replicate|fsdp|dp|tp|pp|ep|cp|sp)(?:[^a-z]|$)", re.IGNORECASE)


def summary_from_json(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """A cached rank summary with its per-call columns as numpy arrays (compact while many ranks are held)."""
    try:
        summary = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return None, f"its summary is unreadable ({exc})"
    if not isinstance(summary, dict) or "identity" not in summary:
        return None, str(summary.get("error") if isinstance(summary, dict) else "") or "no distributed summary"
    if summary.get("version") != SUMMARY_VERSION:
        return None, "its summary was written by another profscope version: parse it again"
    table = summary["collectives"]
    for column, values in table.items():
        if column not in ("names", "kinds", "dtypes"):
            table[column] = np.asarray(values, dtype=bool if column == "on_device" else np.int64)
    return summary, None


def rank_from_name(worker: str) -> int | None:
    """``rank3``, ``worker3``, ``rank3_dp0_tp1_pp0``, ``sampled_rank-1`` -> the number."""
    found = _RANK_IN_NAME.search(worker)
    return int(found.group(1)) if found else None


def parallel_dims_from_name(worker: str) -> dict[str, int]:
    """InternLM-style worker folders: ``rank3_dp0_tp1_pp0`` -> {dp: 0, tp: 1, pp: 0}."""
    return {dim.lower(): int(value) for dim, value in _PARALLEL_DIMS.findall(worker)}


def build_distributed(inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The Distributed view of one span from the ranks' summaries.

    ``inputs``: one item per worker, in the catalog's worker order: ``{"worker", "span", "file",
    "summary"}`` with the ``distributed.rank`` payload, or ``{"worker", "span", "file", "error"}``
    when that rank's trace could not be read (it is reported, and the view is built without it).
    """
    warnings: list[str] = []
    ranks = _assign_ranks(inputs, warnings)
    ready = [r for r in ranks if r["summary"] is not None]
    for position, rank in enumerate(ready):
        rank["position"] = position
    for rank in ranks:
        if rank["summary"] is None:
            warnings.append(f"{rank['worker']} ({rank['file']}) could not be read and is left out: {rank['error']}")
    _check_world(ranks, warnings)
    calls = _flatten_calls(ready)
    alignment = _align_clocks(ready, calls, warnings)
    matched = _match(ready, calls, warnings)
    rank_rows = [_rank_row(rank, calls, matched) for rank in ranks]
    stragglers, collectives = _stragglers(ready, calls, matched, alignment)
    return {
        "ranks": rank_rows,
        "steps": sorted({s["name"] for r in ready for s in r["summary"]["steps"]}, key=_step_sort_key),
        "topology": _topology(ranks),
        "process_groups": _process_groups(ready, calls, matched),
        "op_stats": _op_stats(ready, calls, matched),
        "collectives": collectives,
        "stragglers": stragglers,
        "alignment": alignment,
        "matching": matched["report"],
        "warnings": warnings,
    }


def _step_sort_key(name: str) -> tuple:
    return (0, int(name), name) if name.isdigit() else (1, 0, name)


def _assign_ranks(inputs: list[dict[str, Any]], warnings: list[str]) -> list[dict[str, Any]]:
    """Rank from ``distributedInfo``, else from the worker's name, else its position (with a warning)."""
    ranks = []
    by_order = []
    for position, item in enumerate(inputs):
        summary = item.get("summary")
        if summary is not None and not isinstance(summary.get("identity"), dict):
            summary = None
            item = {**item, "error": "its distributed summary is unreadable"}
        number, source = (summary["identity"]["rank"], "distributedInfo") if summary else (None, None)
        if number is None:
            number, source = rank_from_name(item["worker"]), "name"
        if number is None:
            number, source = position, "file order"
            by_order.append(item["worker"])
        ranks.append(
            {
                "worker": item["worker"],
                "span": item.get("span"),
                "file": item.get("file"),
                "rank": number,
                "rank_source": source,
                "parallel": parallel_dims_from_name(item["worker"]),
                "summary": summary,
                "error": item.get("error"),
            }
        )
    if by_order:
        warnings.append(
            f"No rank recorded for {', '.join(by_order)} (no distributedInfo, no rank in the name): "
            "numbered by file order, which may not be the real rank."
        )
    seen: dict[int, list[str]] = defaultdict(list)
    for rank in ranks:
        seen[rank["rank"]].append(rank["worker"])
    for number, workers in sorted(seen.items()):
        if len(workers) > 1:
            warnings.append(f"Rank {number} is claimed by {len(workers)} files ({', '.join(workers)}).")
    ranks.sort(key=lambda r: (r["rank"], r["worker"]))
    for index, rank in enumerate(ranks):
        rank["index"] = index
    return ranks


def _check_world(ranks: list[dict[str, Any]], warnings: list[str]) -> None:
    sizes = {r["summary"]["identity"]["world_size"] for r in ranks if r["summary"]} - {None}
    if len(sizes) > 1:
        warnings.append(f"The ranks disagree on the world size: {sorted(sizes)}.")
    if sizes:
        world = max(sizes)
        present = {r["rank"] for r in ranks}
        missing = [n for n in range(world) if n not in present]
        if missing:
            listed = ", ".join(map(str, missing[:20])) + (" …" if len(missing) > 20 else "")
            warnings.append(
                f"{len(present)} of {world} ranks have a trace in this span; missing: {listed}. "
                "Collectives are matched among the ranks present."
            )


def _flatten_calls(ready: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Every rank's collective calls in one set of arrays, with a global matching key per call."""
    pg_codes: dict[str, int] = {}
    kind_codes: dict[str, int] = {}
    parts: dict[str, list[np.ndarray]] = defaultdict(list)
    for position, rank in enumerate(ready):
        summary = rank["summary"]
        table = summary["collectives"]
        count = len(table["start_ns"])
        groups = summary["process_groups"]
        pg_key = [pg_codes.setdefault(_group_key(g), len(pg_codes)) for g in groups]
        pg = np.asarray(table["pg"], dtype=np.int64)
        pg_code = np.array([pg_key[p] if p >= 0 else pg_codes.setdefault("", len(pg_codes)) for p in pg.tolist()])
        kinds = [kind_codes.setdefault(k, len(kind_codes)) for k in table["kinds"]]
        kind = np.array([kinds[k] for k in table["kind"]], dtype=np.int64)
        seq = np.asarray(table["seq"], dtype=np.int64)
        parts["rank"].append(np.full(count, position, dtype=np.int64))
        parts["pg"].append(pg_code.astype(np.int64).reshape(count))
        parts["pg_local"].append(pg)
        parts["by_seq"].append((seq >= 0).astype(np.int64))
        parts["kind"].append(kind)
        parts["kind_key"].append(np.where(seq >= 0, -1, kind))
        parts["order"].append(np.asarray(table["order"], dtype=np.int64))
        parts["sub"].append(np.asarray(table["sub"], dtype=np.int64))
        parts["start_ns"].append(np.asarray(table["start_ns"], dtype=np.int64))
        parts["end_ns"].append(np.asarray(table["end_ns"], dtype=np.int64))
        parts["bytes"].append(np.asarray(table["bytes"], dtype=np.int64))
        parts["step"].append(np.asarray(table["step"], dtype=np.int64))
        parts["name_local"].append(np.asarray(table["name"], dtype=np.int64))
    calls = {key: np.concatenate(values) if values else np.zeros(0, np.int64) for key, values in parts.items()}
    if not ready:
        calls = {key: np.zeros(0, np.int64) for key in ("rank", "pg", "pg_local", "by_seq", "kind", "kind_key",
                 "order", "sub", "start_ns", "end_ns", "bytes", "step", "name_local")}  # fmt: skip
    calls["kind_names"] = np.array(list(kind_codes) or [""], dtype=object)
    calls["pg_names"] = np.array(list(pg_codes) or [""], dtype=object)
    keys = np.stack([calls["pg"], calls["by_seq"], calls["kind_key"], calls["order"], calls["sub"]], axis=1)
    if len(keys):
        _, inverse = np.unique(keys, axis=0, return_inverse=True)
        calls["key"] = inverse.reshape(-1).astype(np.int64)
    else:
        calls["key"] = np.zeros(0, dtype=np.int64)
    calls["dur_ns"] = calls["end_ns"] - calls["start_ns"]
    return calls


def _group_key(group: dict[str, Any]) -> str:
    """Process groups are named alike on every rank (c10d numbers them in creation order)."""
    return str(group.get("name") or "") or json.dumps(group.get("ranks"))


def _align_clocks(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], warnings: list[str]) -> dict[str, Any]:
    """Offset (µs) of each rank's trace origin on a common time axis."""
    clocks = [r["summary"]["clock"] for r in ready]
    if ready and all(c["base_ns"] is not None for c in clocks):
        reference = min(clocks, key=lambda c: c["base_ns"] / 1000.0 + c["origin_us"])
        offsets = [
            (c["base_ns"] - reference["base_ns"]) / 1000.0 + (c["origin_us"] - reference["origin_us"]) for c in clocks
        ]
        method = "wall clock"
    else:
        offsets, method = _offsets_from_collective_ends(ready, calls, warnings), "collective ends"
        if ready:
            warnings.append(
                "Some traces carry no absolute time (no baseTimeNanoseconds): ranks are aligned on the end of the "
                "collectives they share, so arrival skews are estimates."
            )
    for rank, offset in zip(ready, offsets, strict=True):
        rank["offset_us"] = offset
    spread = None
    if len(calls["key"]):
        end_us = calls["end_ns"] / NS_PER_US + np.array(offsets)[calls["rank"]]
        spread_per_key = _group_max(calls["key"], end_us) - _group_min(calls["key"], end_us)
        shared = np.bincount(calls["key"]) > 1
        if shared.any():
            spread = float(np.median(spread_per_key[shared]))
    return {"method": method, "median_end_spread_us": spread}


def _offsets_from_collective_ends(
    ready: list[dict[str, Any]], calls: dict[str, np.ndarray], warnings: list[str]
) -> list[float]:
    if not ready:
        return []
    counts = np.bincount(calls["rank"], minlength=len(ready)) if len(calls["rank"]) else np.zeros(len(ready), int)
    reference = int(np.argmax(counts))
    ref_mask = calls["rank"] == reference
    ref_end = dict(zip(calls["key"][ref_mask].tolist(), calls["end_ns"][ref_mask].tolist(), strict=True))
    offsets = []
    for position in range(len(ready)):
        mask = calls["rank"] == position
        pairs = zip(calls["key"][mask].tolist(), calls["end_ns"][mask].tolist(), strict=True)
        diffs = [ref_end[k] - end for k, end in pairs if k in ref_end]
        if diffs:
            offsets.append(float(np.median(diffs)) / NS_PER_US)
        else:
            offsets.append(0.0)
            if position != reference:
                warnings.append(
                    f"{ready[position]['worker']} shares no collective with the others: it cannot be aligned."
                )
    return offsets


def _group_min(key: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.full(int(key.max()) + 1 if len(key) else 0, np.inf)
    np.minimum.at(out, key, values)
    return out


def _group_max(key: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.full(int(key.max()) + 1 if len(key) else 0, -np.inf)
    np.maximum.at(out, key, values)
    return out


def _match(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], warnings: list[str]) -> dict[str, Any]:
    """Per call: the minimum duration of the same call across ranks (its data transfer time)."""
    key = calls["key"]
    keys = int(key.max()) + 1 if len(key) else 0
    present = np.bincount(key, minlength=keys) if keys else np.zeros(0, dtype=np.int64)
    min_dur = np.full(keys, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(min_dur, key, calls["dur_ns"])
    expected = _expected_participants(ready, calls, keys)
    report: dict[str, Any] = {"calls": len(key), "collectives": keys, "ranks": len(ready)}
    if keys:
        complete = present >= expected
        report["complete"] = int(complete.sum())
        report["partial"] = int((~complete & (present > 1)).sum())
        report["single"] = int((~complete & (present == 1)).sum())
        per_rank_missing = []
        for position, rank in enumerate(ready):
            mine = np.zeros(keys, dtype=bool)
            mine[key[calls["rank"] == position]] = True
            lonely = int((mine & (present == 1) & (expected > 1)).sum())
            if lonely:
                per_rank_missing.append(f"{rank['worker']}: {lonely} call(s) no other rank made")
        if report["partial"] or report["single"]:
            detail = "; ".join(per_rank_missing[:10])
            warnings.append(
                f"{report['complete']} of {keys} collectives were found on every rank of their group; "
                f"{report['partial']} on only some ranks and {report['single']} on one rank only"
                + (f" ({detail})" if detail else "")
                + ". Unmatched calls count as all data transfer (no synchronizing time can be measured)."
            )
        mismatched = _size_mismatches(calls, keys)
        if mismatched:
            warnings.append(
                f"{mismatched} matched collective(s) have different sizes on different ranks "
                "(expected for all-to-all and uneven splits; otherwise the calls may be mis-paired)."
            )
    return {"present": present, "min_dur": min_dur, "expected": expected, "report": report}


def _expected_participants(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], keys: int) -> np.ndarray:
    """How many of the ranks present should make each call: its group's members that have a trace."""
    present_ranks = {r["rank"] for r in ready}
    expected = np.full(keys, len(ready), dtype=np.int64)
    if not keys:
        return expected
    for position, rank in enumerate(ready):
        groups = rank["summary"]["process_groups"]
        mask = (calls["rank"] == position) & (calls["pg_local"] >= 0)
        for group_index in np.unique(calls["pg_local"][mask]).tolist():
            members = groups[group_index].get("ranks")
            if isinstance(members, list):
                count = len(present_ranks.intersection(members))
                expected[np.unique(calls["key"][mask & (calls["pg_local"] == group_index)])] = max(count, 1)
    return expected


def _size_mismatches(calls: dict[str, np.ndarray], keys: int) -> int:
    known = calls["bytes"] >= 0
    if not known.any():
        return 0
    key = calls["key"][known]
    size = calls["bytes"][known].astype(np.float64)
    low, high = _group_min(key, size), _group_max(key, size)
    valid = np.isfinite(low) & (np.bincount(key, minlength=len(low)) > 1)
    kinds = _group_max(key, calls["kind"][known].astype(np.float64))
    all_to_all = np.zeros(len(low), dtype=bool)
    names = list(calls["kind_names"])
    if "all_to_all" in names:
        all_to_all = kinds == names.index("all_to_all")
    return int((valid & (low != high) & ~all_to_all).sum())


def _rank_row(rank: dict[str, Any], calls: dict[str, np.ndarray], matched: dict[str, Any]) -> dict[str, Any]:
    """The rank's four-way breakdown and synchronizing / data transfer time, per step and on average."""
    summary = rank["summary"]
    row: dict[str, Any] = {
        "worker": rank["worker"],
        "rank": rank["rank"],
        "rank_source": rank["rank_source"],
        "span": rank["span"],
        "file": rank["file"],
        "parallel": rank["parallel"],
        "state": "ready" if summary else "error",
        "error": rank["error"],
    }
    keys = ("computation_us", "overlapping_us", "communication_us", "other_us", "data_transfer_us", "synchronizing_us")
    if summary is None:
        return {**row, **dict.fromkeys(keys), "steps": []}
    position = rank["position"]
    steps = summary["steps"]
    mask = (calls["rank"] == position) & (calls["step"] >= 0)
    start, end = calls["start_ns"][mask], calls["end_ns"][mask]
    transfer = np.minimum(matched["min_dur"][calls["key"][mask]], end - start)
    step_starts = np.array([s["start_ns"] for s in steps], dtype=np.int64)
    step_ends = np.array([s["end_ns"] for s in steps], dtype=np.int64)
    comm = intervals.total_within(intervals.merge(start, end), step_starts, step_ends)
    real = intervals.total_within(intervals.merge(end - transfer, end), step_starts, step_ends)
    step_rows = []
    for i, step in enumerate(steps):
        step_rows.append(
            {
                "step": step["name"],
                "start_us": step["start_ns"] / NS_PER_US,
                "total_us": (step["end_ns"] - step["start_ns"]) / NS_PER_US,
                "computation_us": step["computation_ns"] / NS_PER_US,
                "overlapping_us": step["overlapping_ns"] / NS_PER_US,
                "communication_us": step["communication_ns"] / NS_PER_US,
                "other_us": step["other_ns"] / NS_PER_US,
                "data_transfer_us": int(real[i]) / NS_PER_US,
                "synchronizing_us": int(comm[i] - real[i]) / NS_PER_US,
            }
        )
    average = {k: (sum(s[k] for s in step_rows) / len(step_rows)) if step_rows else None for k in keys}
    identity = summary["identity"]
    return {
        **row,
        **average,
        "steps": step_rows,
        "mode": summary["mode"],
        "backend": identity["backend"],
        "world_size": identity["world_size"],
        "calls": int((calls["rank"] == position).sum()),
        "hta": _hta_us(summary.get("hta")),
        "warnings": summary.get("warnings", []),
    }


def _hta_us(hta: dict[str, Any] | None) -> dict[str, Any] | None:
    if not hta:
        return None
    temporal = {k.replace("_ns", "_us"): v / NS_PER_US for k, v in hta["temporal"].items()}
    idle = hta["idle"]
    return {
        "temporal": temporal,
        "idle": {
            "host_wait_us": idle["host_wait_ns"] / NS_PER_US,
            "kernel_wait_us": idle["kernel_wait_ns"] / NS_PER_US,
            "other_us": idle["other_ns"] / NS_PER_US,
            "streams": [
                {
                    "device": s["device"],
                    "stream": s["stream"],
                    "host_wait_us": s["host_wait_ns"] / NS_PER_US,
                    "kernel_wait_us": s["kernel_wait_ns"] / NS_PER_US,
                    "other_us": s["other_ns"] / NS_PER_US,
                }
                for s in idle["streams"]
            ],
            "kernel_wait_threshold_us": idle["kernel_wait_threshold_ns"] / NS_PER_US,
        },
        "comm_comp_overlap_ratio": hta["comm_comp_overlap_ratio"],
        "kernel_types": {
            label: {
                "time_us": value["time_ns"] / NS_PER_US,
                "count": value["count"],
                "top": [
                    {
                        "name": k["name"],
                        "count": k["count"],
                        "total_us": k["total_ns"] / NS_PER_US,
                        "mean_us": k["mean_ns"] / NS_PER_US,
                        "min_us": k["min_ns"] / NS_PER_US,
                        "max_us": k["max_ns"] / NS_PER_US,
                    }
                    for k in value["top"]
                ],
            }
            for label, value in hta["kernel_types"].items()
        },
    }


def _call_name(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], index: int) -> str:
    table = ready[int(calls["rank"][index])]["summary"]["collectives"]
    return table["names"][int(calls["name_local"][index])]


def _op_stats(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], matched: dict[str, Any]) -> list[dict]:
    """torch-tb-profiler's Communication Operations Stats, per rank and op name."""
    rows = []
    for position, rank in enumerate(ready):
        table = rank["summary"]["collectives"]
        mask = calls["rank"] == position
        names = calls["name_local"][mask]
        start, end, size = calls["start_ns"][mask], calls["end_ns"][mask], calls["bytes"][mask]
        transfer = np.minimum(matched["min_dur"][calls["key"][mask]], end - start)
        for index in np.unique(names).tolist():
            of = names == index
            calls_count = int(of.sum())
            known = size[of] >= 0
            total_bytes = int(size[of][known].sum()) if known.any() else None
            latency = intervals.total(intervals.merge(start[of], end[of])) / NS_PER_US
            real = intervals.total(intervals.merge(end[of] - transfer[of], end[of])) / NS_PER_US
            rows.append(
                {
                    "worker": rank["worker"],
                    "rank": rank["rank"],
                    "name": table["names"][index],
                    "calls": calls_count,
                    "total_bytes": total_bytes,
                    "avg_bytes": total_bytes / int(known.sum()) if total_bytes is not None else None,
                    "total_latency_us": latency,
                    "avg_latency_us": latency / calls_count,
                    "data_transfer_us": real,
                    "avg_data_transfer_us": real / calls_count,
                    "synchronizing_us": latency - real,
                }
            )
    return rows


def _process_groups(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], matched: dict[str, Any]) -> list[dict]:
    """Per process group: members, what it is (from its description), and its collectives' cost."""
    groups: dict[str, dict[str, Any]] = {}
    for position, rank in enumerate(ready):
        for index, group in enumerate(rank["summary"]["process_groups"]):
            key = _group_key(group)
            entry = groups.setdefault(
                key,
                {
                    "name": group.get("name"),
                    "desc": group.get("desc"),
                    "ranks": group.get("ranks"),
                    "size": group.get("size"),
                    "backend": group.get("backend"),
                    "dimension": _dimension(group.get("desc") or ""),
                    "ranks_with_trace": [],
                    "_local": [],
                },
            )
            entry["ranks_with_trace"].append(rank["rank"])
            entry["_local"].append((position, index))
    unknown = {"name": None, "desc": "(no process group recorded)", "ranks": None, "size": None, "backend": None,
               "dimension": None, "ranks_with_trace": [r["rank"] for r in ready],
               "_local": [(p, -1) for p in range(len(ready))]}  # fmt: skip
    if (calls["pg_local"] < 0).any():
        groups["\0unknown"] = unknown
    rows = []
    duration = calls["dur_ns"]
    transfer = np.minimum(matched["min_dur"][calls["key"]], duration) if len(duration) else duration
    for entry in groups.values():
        mask = np.zeros(len(duration), dtype=bool)
        for position, index in entry.pop("_local"):
            mask |= (calls["rank"] == position) & (calls["pg_local"] == index)
        sizes = calls["bytes"][mask]
        kinds = sorted({calls["kind_names"][k] for k in np.unique(calls["kind"][mask]).tolist()})
        rows.append(
            {
                **entry,
                "collective_types": kinds,
                "calls": int(mask.sum()),
                "collectives": len(np.unique(calls["key"][mask])),
                "total_us": float(duration[mask].sum()) / NS_PER_US,
                "data_transfer_us": float(transfer[mask].sum()) / NS_PER_US,
                "synchronizing_us": float((duration[mask] - transfer[mask]).sum()) / NS_PER_US,
                "total_bytes": int(sizes[sizes >= 0].sum()) if (sizes >= 0).any() else None,
            }
        )
    rows.sort(key=lambda r: -r["total_us"])
    return rows


def _dimension(desc: str) -> str | None:
    """What a process group is for, when its description says (``mesh_tp``, ``dp_replicate``...)."""
    if desc == "default_pg":
        return "world"
    found = _GROUP_DIMENSION.search(desc)
    return found.group(1).lower() if found else None


def _stragglers(
    ready: list[dict[str, Any]], calls: dict[str, np.ndarray], matched: dict[str, Any], alignment: dict[str, Any]
) -> tuple[list[dict], list[dict]]:
    """Who arrives last at each collective, how often, and how long the others wait for them."""
    key = calls["key"]
    count = len(key)
    keys = len(matched["present"])
    offsets = np.array([r.get("offset_us", 0.0) for r in ready], dtype=np.float64)
    start_us = calls["start_ns"] / NS_PER_US + (offsets[calls["rank"]] if count else 0.0)
    end_us = calls["end_ns"] / NS_PER_US + (offsets[calls["rank"]] if count else 0.0)
    shared = matched["present"] > 1
    first = _group_min(key, start_us) if count else np.zeros(0)
    last = _group_max(key, start_us) if count else np.zeros(0)
    skew = start_us - first[key] if count else np.zeros(0)
    wait = last[key] - start_us if count else np.zeros(0)
    lost = np.zeros(keys)
    np.add.at(lost, key, wait)
    # the last arrival of every shared collective (ties: the later end, then the lower rank)
    order = np.lexsort((-calls["rank"], end_us, start_us, key)) if count else np.zeros(0, dtype=np.int64)
    last_call = np.full(keys, -1, dtype=np.int64)
    if count:
        last_call[key[order]] = order
    per_rank = []
    for position, rank in enumerate(ready):
        mine = calls["rank"] == position
        in_shared = mine & shared[key] if count else mine
        is_last = np.zeros(keys, dtype=bool)
        late = shared & (last > first) if count else np.zeros(0, dtype=bool)
        if count:
            is_last[late] = calls["rank"][last_call[late]] == position
        worst = int(np.argmax(np.where(is_last, lost, -1.0))) if is_last.any() else None
        per_rank.append(
            {
                "worker": rank["worker"],
                "rank": rank["rank"],
                "shared_calls": int(in_shared.sum()),
                "last_count": int(is_last.sum()),
                "last_pct": 100.0 * int(is_last.sum()) / max(int(late.sum()), 1) if count else 0.0,
                "lost_us": float(lost[is_last].sum()),
                "mean_skew_us": float(skew[in_shared].mean()) if in_shared.any() else None,
                "max_skew_us": float(skew[in_shared].max()) if in_shared.any() else None,
                "worst": _collective_row(ready, calls, matched, worst, start_us, end_us, lost)
                if worst is not None
                else None,
            }
        )
    ranked = np.argsort(-lost, kind="stable")
    listed = [int(k) for k in ranked[:MAX_COLLECTIVES_LISTED].tolist() if shared[k] and lost[k] > 0]
    collectives = [_collective_row(ready, calls, matched, k, start_us, end_us, lost) for k in listed]
    slowest = max(per_rank, key=lambda r: (r["lost_us"], r["last_count"]), default=None)
    for row in per_rank:
        row["slowest"] = slowest is not None and row is slowest and row["lost_us"] > 0
    return per_rank, collectives


def _collective_row(
    ready: list[dict[str, Any]],
    calls: dict[str, np.ndarray],
    matched: dict[str, Any],
    key_id: int,
    start_us: np.ndarray,
    end_us: np.ndarray,
    lost: np.ndarray,
) -> dict[str, Any]:
    members = np.flatnonzero(calls["key"] == key_id)
    members = members[np.lexsort((calls["rank"][members], start_us[members]))]
    first_start = float(start_us[members].min())
    last_index = members[-1]
    arrivals = [
        {
            "worker": ready[int(calls["rank"][i])]["worker"],
            "rank": ready[int(calls["rank"][i])]["rank"],
            "skew_us": float(start_us[i] - first_start),
            "duration_us": float(calls["dur_ns"][i]) / NS_PER_US,
            "wait_us": float(start_us[last_index] - start_us[i]),
        }
        for i in members.tolist()
    ]
    pg_name = calls["pg_names"][int(calls["pg"][last_index])]
    window_start = first_start
    window_end = float(end_us[members].max())
    pad = max((window_end - window_start) * 0.1, 10.0)
    # Trace view link: the late rank first, then the first to arrive, then the others by rank
    late = arrivals[-1]["worker"]
    others = sorted(arrivals[:-1], key=lambda a: (a is not arrivals[0], a["rank"]))
    workers = [late, *[a["worker"] for a in others]][:MAX_TRACE_WORKERS]
    lead = next(r for r in ready if r["worker"] == late)
    sizes = calls["bytes"][members]
    return {
        "key": int(key_id),
        "name": _call_name(ready, calls, int(last_index)),
        "kind": str(calls["kind_names"][int(calls["kind"][last_index])]),
        "process_group": pg_name or None,
        "seq": int(calls["order"][last_index]) if calls["by_seq"][last_index] else None,
        "ordinal": None if calls["by_seq"][last_index] else int(calls["order"][last_index]),
        "ranks": len(members),
        "expected_ranks": int(matched["expected"][key_id]),
        "bytes": int(sizes.max()) if (sizes >= 0).any() else None,
        "last_worker": late,
        "last_rank": arrivals[-1]["rank"],
        "skew_us": float(start_us[last_index] - first_start),
        "lost_us": float(lost[key_id]),
        "data_transfer_us": float(matched["min_dur"][key_id]) / NS_PER_US,
        "arrivals": arrivals,
        "trace": {
            "workers": workers,
            "start_us": window_start - pad - lead.get("offset_us", 0.0),
            "end_us": window_end + pad - lead.get("offset_us", 0.0),
        },
    }


def _topology(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes -> processes -> GPUs (torch-tb-profiler's Device information panel)."""
    nodes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rank in ranks:
        summary = rank["summary"] or {}
        host = (summary.get("host") or {}).get("hostname")
        pid = (summary.get("host") or {}).get("pid")
        if not host:
            match = _NODE_PROCESS.match(rank["worker"])
            host = match.group(1) if match else None
            pid = pid or (match.group(2) if match else None)
        nodes[host or "unknown host"].append(
            {"worker": rank["worker"], "rank": rank["rank"], "pid": pid, "gpus": summary.get("devices", [])}
        )
    return [{"host": host, "processes": processes} for host, processes in nodes.items()]
