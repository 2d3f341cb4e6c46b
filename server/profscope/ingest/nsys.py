"""Parse an Nsight Systems SQLite export (``nsys export --type sqlite``) into ``TraceTables``.

The export is a relational database (``CUPTI_ACTIVITY_KIND_KERNEL``, ``..._MEMCPY``, ``..._RUNTIME``,
``NVTX_EVENTS``, ``StringIds``, ...). Each table is read with one query whose rows go straight into
numpy columns; strings are interned once per distinct value, never per row. What this module maps:

- kernels, memcpy, memset -> device events on ``GPU d`` / ``stream s`` tracks, with their launch
  properties in the ``kernels`` table (``bytes`` for copies and sets); whole CUDA graph executions
  (``--cuda-graph-trace=graph``) -> device events ``CUDA graph N``;
- CUDA runtime and driver calls -> RUNTIME / DRIVER events on their threads; ``correlation`` is the
  CUPTI correlation id made unique per process (one export may hold several processes), so a kernel
  links to its launch (and every node of a CUDA graph to its ``cudaGraphLaunch``);
- NVTX push/pop and start/end ranges -> host ranges on their threads (the call tree nests them by
  time); ``emit_nvtx`` texts (``aten::mm, seq = 12, op_id = 34, sizes = [[2, 3], [3, 4]]``) become
  operators named ``aten::mm`` with their shapes and sequence number; marks -> instants;
- CUDA synchronization records -> SYNC events on their stream;
- ``CUDA_GPU_MEMORY_USAGE_EVENTS`` -> the ``memory`` table (allocations positive, frees negative, the
  running total per device as allocated and reserved bytes);
- ``TARGET_INFO_GPU`` -> ``deviceProperties``; the session start -> ``baseTimeNanoseconds``.

Tables and columns differ across nsys versions: a missing optional table is skipped (and the page
that needs it says so), a renamed column is found under any of its names; a file without the tables
every export has gets a clear message.
"""

from __future__ import annotations

import re
import sqlite3
import tempfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import IO, Any

import numpy as np

from profscope import parser_versions
from profscope.ingest.bounded_read import chunks_within
from profscope.ingest.json_stream import TraceFormatError
from profscope.ingest.kineto import _sort_events
from profscope.tables import NO_ID, SCHEMA, Kind, StringTable, TraceTables, Track

SQLITE_HEADER = b"SQLite format 3\x00"

# every nsys export has StringIds; a profile without CUDA or NVTX has nothing the views could show
_STRING_TABLE = "StringIds"
_ACTIVITY_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
)
_GLOBAL_ID_PID_SHIFT = 24  # globalTid = (hardware id << 48) | (pid << 24) | tid
_ID_MASK = 0xFFFFFF
_CORRELATION_PID_SHIFT = 32  # correlation ids repeat across processes: (pid << 32) | correlationId

NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END = 34, 59, 60
_DRIVER_EVENT_CLASS = 1  # ENUM_NSYS_EVENT_CLASS: 0 CUDA runtime, 1 CUDA driver
_API_VERSION_SUFFIX = re.compile(r"_v\d+$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel, as kineto names it
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
               10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}  # fmt: skip
_MEMORY_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
                 6: "Managed Static"}  # fmt: skip
_SYNC_KINDS = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
_NO_STREAM = (-1, (1 << 32) - 1)  # streamId of records that belong to no stream (event syncs)
_CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA, as in kineto's [memory] events


class NsysExportError(TraceFormatError):
    """The file is not an nsys SQLite export, or lacks the tables every export has."""


class _Export:
    """Read access to one export: which tables and columns it has, and column queries."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self.tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        self._columns: dict[str, set[str]] = {}

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = {row[1] for row in self.connection.execute(f'PRAGMA table_info("{table}")')}
        return self._columns[table]

    def column(self, table: str, *names: str, default: str = "NULL") -> str:
        """The first of ``names`` the table has (column renames across nsys versions), else ``default``."""
        present = self.columns(table)
        return next((f'"{name}"' for name in names if name in present), default)

    def query(self, sql: str, dtypes: dict[str, str]) -> dict[str, np.ndarray]:
        """Integer columns of a query's rows (every selected column named in ``dtypes``, in order).

        Rows come in batches that become numpy right away: a tuple per row for all of a big table would
        take several times the memory of the columns.
        """
        cursor = self.connection.execute(sql)
        batches = []
        while rows := cursor.fetchmany(_FETCH_ROWS):
            batches.append(np.array(rows, dtype=np.int64).reshape(len(rows), len(dtypes)))
        table = np.concatenate(batches) if batches else np.zeros((0, len(dtypes)), dtype=np.int64)
        return {name: table[:, i].astype(dtype) for i, (name, dtype) in enumerate(dtypes.items())}

    def texts(self, sql: str) -> list[str | None]:
        """The single text column of a (small) query."""
        return [row[0] for row in self.connection.execute(sql)]


_FETCH_ROWS = 1 << 16


class _Builder:
    """Event chunks of every source table, assembled into ``TraceTables`` at the end."""

    def __init__(self, export: _Export) -> None:
        self.export = export
        self.strings = StringTable()
        self.tracks: list[Track] = []
        self._track_ids: dict[tuple[str, str], int] = {}
        self.events: list[dict[str, np.ndarray]] = []
        self.kernels: list[dict[str, np.ndarray]] = []  # "event" indexes rows of its own event chunk
        self.ops: list[dict[str, np.ndarray]] = []
        self.side: dict[str, list[dict[str, np.ndarray]]] = {"memory": [], "instants": []}
        self.warnings: dict[str, int] = {}
        self.graph_kernels = 0  # kernels run as nodes of a CUDA graph (graphNodeId set)
        self.graph_launches = 0  # whole graph executions (GRAPH_TRACE rows), when nodes were not traced
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[int, str] = {}
        self.nsys_strings = self._read_string_ids()

    # ---- strings and tracks ------------------------------------------------------------------
    def _read_string_ids(self) -> np.ndarray:
        """Our string id of every nsys StringIds id (NO_ID where the export has none)."""
        rows = self.export.connection.execute(f"SELECT id, value FROM {_STRING_TABLE}").fetchall()
        if not rows:
            return np.full(1, NO_ID, dtype=np.int64)
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        mapping = np.full(int(ids.max()) + 2, NO_ID, dtype=np.int64)  # the last entry answers NO_ID
        mapping[ids] = [self.strings.intern(value if isinstance(value, str) else str(value)) for _, value in rows]
        return mapping

    def string_ids(self, nsys_ids: np.ndarray) -> np.ndarray:
        """Our ids of nsys string ids; ids beyond StringIds (a cut export) are absent."""
        safe = np.where((nsys_ids >= 0) & (nsys_ids < len(self.nsys_strings) - 1), nsys_ids, -1)
        return self.nsys_strings[safe]

    def per_distinct(self, columns: list[np.ndarray], value_of: Callable[..., Any]) -> np.ndarray:
        """``value_of(*values)`` of each row's values, called once per distinct combination (a few per table)."""
        combos, inverse = np.unique(np.stack(columns), axis=1, return_inverse=True)
        return np.asarray([value_of(*combo) for combo in combos.T.tolist()], dtype=np.int64)[inverse.reshape(-1)]

    def named(self, columns: list[np.ndarray], name_of: Callable[..., str]) -> np.ndarray:
        """String ids of the names ``name_of(*values)`` of each row's values."""
        return self.per_distinct(columns, lambda *values: self.strings.intern(name_of(*values)))

    def track(self, pid: str, tid: str, **names: str) -> int:
        key = (pid, tid)
        found = self._track_ids.get(key)
        if found is None:
            found = self._track_ids[key] = len(self.tracks)
            self.tracks.append(Track(pid=pid, tid=tid, **names))
        return found

    def thread_tracks(self, global_tids: np.ndarray) -> np.ndarray:
        """Track of every row's thread (``globalTid``): pid and tid as the OS numbered them."""

        def thread(global_tid: int) -> int:
            pid, tid = (global_tid >> _GLOBAL_ID_PID_SHIFT) & _ID_MASK, global_tid & _ID_MASK
            names = {
                "process_name": self.process_names.get(pid, ""),
                "thread_name": self.thread_names.get(global_tid, ""),
            }
            return self.track(str(pid), str(tid), **names)

        return self.per_distinct([global_tids], thread)

    def stream_tracks(self, devices: np.ndarray, streams: np.ndarray) -> np.ndarray:
        """Track of every row's (device, stream); labelled ``GPU d`` so that sync-only streams group with it."""

        def stream_track(device: int, stream: int) -> int:
            name = "stream none (event syncs)" if stream in _NO_STREAM else f"stream {stream}"
            return self.track(str(device), name, process_name=f"GPU {device}", process_labels=f"GPU {device}")

        return self.per_distinct([devices, streams], stream_track)

    def warn(self, message: str, count: int = 1) -> None:
        self.warnings[message] = self.warnings.get(message, 0) + count

    # ---- adding rows -------------------------------------------------------------------------
    def add_events(self, **columns: np.ndarray) -> int:
        """Append an event chunk (missing columns absent); returns the chunk's index."""
        count = len(columns["ts_ns"])
        chunk = {
            name: columns.get(name, np.full(count, NO_ID)).astype(dtype) for name, dtype in SCHEMA["events"].items()
        }
        self.events.append(chunk)
        return len(self.events) - 1

    def finish(self, meta: dict[str, Any]) -> TraceTables:
        offsets = np.cumsum([0] + [len(chunk["ts_ns"]) for chunk in self.events])
        events = _concatenate(self.events, "events")
        columns: dict[str, dict[str, np.ndarray]] = {name: _empty(name) for name in SCHEMA}
        columns["events"] = events
        columns["kernels"] = _concatenate(_rebased(self.kernels, offsets), "kernels")
        columns["ops"] = _concatenate(_rebased(self.ops, offsets), "ops")
        origin_ns = int(events["ts_ns"].min()) if len(events["ts_ns"]) else 0
        events["ts_ns"] = events["ts_ns"] - origin_ns
        for name, chunks in self.side.items():
            table = _concatenate(chunks, name)
            table["ts_ns"] = table["ts_ns"] - origin_ns
            order = np.argsort(table["ts_ns"], kind="stable")
            columns[name] = {column: values[order] for column, values in table.items()}
        _sort_events(columns, np.arange(len(events["ts_ns"]), dtype=np.int64))
        meta.update(
            origin_us=origin_ns / 1000.0,
            parser_version=parser_versions.NSYS,
            event_count=len(events["ts_ns"]),
            warnings=[{"message": m, "count": c} for m, c in sorted(self.warnings.items())],
        )
        return TraceTables(columns=columns, strings=self.strings, tracks=self.tracks, meta=meta)


def _empty(table: str) -> dict[str, np.ndarray]:
    return {column: np.zeros(0, dtype=dtype) for column, dtype in SCHEMA[table].items()}


def _concatenate(chunks: list[dict[str, np.ndarray]], table: str) -> dict[str, np.ndarray]:
    if not chunks:
        return _empty(table)
    return {
        column: np.concatenate([chunk[column] for chunk in chunks]).astype(dtype, copy=False)
        for column, dtype in SCHEMA[table].items()
    }


def _rebased(chunks: list[dict[str, np.ndarray]], offsets: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Side-table chunks whose ``event`` (a row of event chunk ``chunk``) becomes a row of all events."""
    return [{**chunk, "event": chunk["event"] + offsets[chunk.pop("chunk")]} for chunk in chunks]


# ---- the readers of each export table ------------------------------------------------------------
def _read_names(builder: _Builder) -> None:
    export = builder.export
    if export.has("PROCESSES"):
        for global_pid, pid, name in export.connection.execute("SELECT globalPid, pid, name FROM PROCESSES"):
            if isinstance(name, str) and name:
                builder.process_names[int(pid) if pid is not None else (global_pid >> 24) & _ID_MASK] = name
    if export.has("ThreadNames"):
        for global_tid, name_id in export.connection.execute("SELECT globalTid, nameId FROM ThreadNames"):
            name = builder.strings[int(builder.string_ids(np.array([name_id]))[0])]
            if name:
                builder.thread_names[int(global_tid)] = name


def _process_correlation(global_ids: np.ndarray, correlation: np.ndarray) -> np.ndarray:
    """A correlation id unique across the export's processes (CUPTI numbers each process from 1)."""
    pid = (global_ids >> _GLOBAL_ID_PID_SHIFT) & _ID_MASK
    return np.where(correlation >= 0, (pid << _CORRELATION_PID_SHIFT) | correlation, NO_ID)


def _device_columns(export: _Export, table: str) -> str:
    """start, end, device, stream, correlation id, process of a device activity table (absent ones: -1 / 0)."""
    device, stream, correlation = (export.column(table, name) for name in ("deviceId", "streamId", "correlationId"))
    return (
        f'"start", "end", COALESCE({device}, -1), COALESCE({stream}, -1), '
        f"COALESCE({correlation}, -1), COALESCE({export.column(table, 'globalPid', 'processId')}, 0)"
    )


_DEVICE_DTYPES = {"start": "i8", "end": "i8", "device": "i8", "stream": "i8", "correlation": "i8", "global_pid": "i8"}


def _add_device_chunk(
    builder: _Builder, rows: dict[str, np.ndarray], kind: Kind, names: np.ndarray, category: str, extra: dict
) -> None:
    chunk = builder.add_events(
        ts_ns=rows["start"],
        dur_ns=np.maximum(rows["end"] - rows["start"], 0),
        kind=np.full(len(names), int(kind)),
        name=names,
        cat=np.full(len(names), builder.strings.intern(category)),
        track=builder.stream_tracks(rows["device"], rows["stream"]),
        correlation=_process_correlation(rows["global_pid"], rows["correlation"]),
    )
    count = len(names)
    kernels = {column: np.full(count, NO_ID, dtype=dtype) for column, dtype in SCHEMA["kernels"].items()}
    kernels.update(event=np.arange(count), device=rows["device"], stream=rows["stream"], **extra)
    kernels["blocks_per_sm"] = np.full(count, np.nan)
    kernels["est_occupancy_pct"] = np.full(count, np.nan)
    builder.kernels.append({**kernels, "chunk": chunk})


def _read_kernels(builder: _Builder) -> None:
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    export = builder.export
    if not export.has(table):
        return
    name = export.column(table, "demangledName", "shortName", "mangledName", "name", default="-1")
    launch = {
        "grid_x": ("gridX",), "grid_y": ("gridY",), "grid_z": ("gridZ",),
        "block_x": ("blockX",), "block_y": ("blockY",), "block_z": ("blockZ",),
        "registers_per_thread": ("registersPerThread",),
    }  # fmt: skip
    launch_sql = ", ".join(f"COALESCE({export.column(table, *names, default='-1')}, -1)" for names in launch.values())
    shared = (
        f"COALESCE({export.column(table, 'staticSharedMemory', default='0')}, 0) + "
        f"COALESCE({export.column(table, 'dynamicSharedMemory', default='0')}, 0)"
    )
    rows = export.query(
        f"SELECT {_device_columns(export, table)}, COALESCE({name}, -1), {launch_sql}, {shared} FROM {table}",
        {**_DEVICE_DTYPES, "name": "i8", **dict.fromkeys(launch, "i8"), "shared_memory": "i8"},
    )
    extra = {column: rows[column] for column in (*launch, "shared_memory")}
    names = builder.string_ids(rows["name"])
    if (names == NO_ID).any():
        builder.warn("kernels whose name is not in StringIds are named 'unknown kernel'", int((names == NO_ID).sum()))
        names = np.where(names == NO_ID, builder.strings.intern("unknown kernel"), names)
    _add_device_chunk(builder, rows, Kind.KERNEL, names, "kernel", extra)
    graph = export.column(table, "graphNodeId")
    if graph != "NULL":
        count = export.connection.execute(f"SELECT COUNT(*) FROM {table} WHERE {graph} IS NOT NULL").fetchone()[0]
        builder.graph_kernels = int(count)


def _read_memcpy(builder: _Builder) -> None:
    table = "CUPTI_ACTIVITY_KIND_MEMCPY"
    export = builder.export
    if not export.has(table):
        return
    rows = export.query(
        f"SELECT {_device_columns(export, table)}, COALESCE(bytes, -1), COALESCE(copyKind, 0), "
        f"COALESCE({export.column(table, 'srcKind')}, -1), COALESCE({export.column(table, 'dstKind')}, -1) "
        f"FROM {table}",
        {**_DEVICE_DTYPES, "bytes": "i8", "copy_kind": "i8", "src": "i8", "dst": "i8"},
    )
    names = builder.named([rows["copy_kind"], rows["src"], rows["dst"]], _memcpy_name)
    _add_device_chunk(builder, rows, Kind.MEMCPY, names, "gpu_memcpy", {"bytes": rows["bytes"]})


def _read_graph_launches(builder: _Builder) -> None:
    """Whole CUDA graph executions (``--cuda-graph-trace=graph``: no kernel rows for their nodes), as device
    work named ``CUDA graph N`` on their stream, linked to their ``cudaGraphLaunch`` by correlation id."""
    table = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    export = builder.export
    if not export.has(table):
        return
    rows = export.query(
        f"SELECT {_device_columns(export, table)}, COALESCE({export.column(table, 'graphId')}, -1) FROM {table}",
        {**_DEVICE_DTYPES, "graph": "i8"},
    )
    names = builder.named([rows["graph"]], lambda graph: f"CUDA graph {graph}" if graph >= 0 else "CUDA graph")
    _add_device_chunk(builder, rows, Kind.KERNEL, names, "cuda_graph", {})
    builder.graph_launches = len(names)


def _memcpy_name(copy_kind: int, src: int, dst: int) -> str:
    """kineto's name of a copy: ``Memcpy HtoD (Pageable -> Device)``."""
    direction = _COPY_KINDS.get(copy_kind, "Unknown")
    if src in _MEMORY_KINDS and dst in _MEMORY_KINDS:
        return f"Memcpy {direction} ({_MEMORY_KINDS[src]} -> {_MEMORY_KINDS[dst]})"
    return f"Memcpy {direction}"


def _read_memset(builder: _Builder) -> None:
    table = "CUPTI_ACTIVITY_KIND_MEMSET"
    export = builder.export
    if not export.has(table):
        return
    rows = export.query(
        f"SELECT {_device_columns(export, table)}, COALESCE(bytes, -1), "
        f"COALESCE({export.column(table, 'memKind', 'memoryKind')}, -1) FROM {table}",
        {**_DEVICE_DTYPES, "bytes": "i8", "mem_kind": "i8"},
    )
    names = builder.named([rows["mem_kind"]], lambda kind: f"Memset ({_MEMORY_KINDS.get(kind, 'Unknown')})")
    _add_device_chunk(builder, rows, Kind.MEMSET, names, "gpu_memset", {"bytes": rows["bytes"]})


def _read_sync(builder: _Builder) -> None:
    """Synchronization records, on the GPU of their stream.

    Their ``deviceId`` is not the stream's device (exports of a 2-GPU job write 0 for both processes'
    records), so the device is the one the same process ran kernels on in that stream, else the device of
    most of the process's kernels (event syncs have no stream: ``streamId`` 2**32 - 1).
    """
    table = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    export = builder.export
    if not export.has(table):
        return
    device = "s.deviceId"
    joins = ""
    if export.has("CUPTI_ACTIVITY_KIND_KERNEL"):
        kernels = "CUPTI_ACTIVITY_KIND_KERNEL"
        device = "COALESCE(d.device, p.device, s.deviceId)"
        joins = (
            f"LEFT JOIN (SELECT globalPid, streamId, MIN(deviceId) AS device FROM {kernels} "
            "GROUP BY globalPid, streamId) d ON d.globalPid = s.globalPid AND d.streamId = s.streamId "
            f"LEFT JOIN (SELECT globalPid, deviceId AS device, MAX(n) FROM (SELECT globalPid, deviceId, COUNT(*) AS n "
            f"FROM {kernels} GROUP BY globalPid, deviceId) GROUP BY globalPid) p ON p.globalPid = s.globalPid"
        )
    rows = export.query(
        f'SELECT s."start", s."end", COALESCE({device}, -1), COALESCE(s.streamId, -1), '
        f"COALESCE(s.correlationId, -1), COALESCE(s.globalPid, 0), COALESCE(s.syncType, 0) FROM {table} s {joins}",
        {**_DEVICE_DTYPES, "sync_type": "i8"},
    )
    count = len(rows["start"])
    builder.add_events(
        ts_ns=rows["start"],
        dur_ns=np.maximum(rows["end"] - rows["start"], 0),
        kind=np.full(count, int(Kind.SYNC)),
        name=builder.named([rows["sync_type"]], lambda kind: _SYNC_KINDS.get(kind, "Synchronization")),
        cat=np.full(count, builder.strings.intern("cuda_sync")),
        track=builder.stream_tracks(rows["device"], rows["stream"]),
        correlation=_process_correlation(rows["global_pid"], rows["correlation"]),
    )


def _read_api_calls(builder: _Builder) -> None:
    """CUDA runtime and driver calls (one table; ``eventClass`` tells them apart)."""
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    export = builder.export
    if not export.has(table):
        return
    name_id = export.column(table, "nameId")
    name_text = export.column(table, "name")
    event_class = export.column(table, "eventClass", default="0")
    # exports before nameId existed kept the call's name as text: numbered in SQL like NVTX texts
    name = f"COALESCE({name_id}, -1)" if name_id != "NULL" else f"DENSE_RANK() OVER (ORDER BY {name_text}) - 1"
    rows = export.query(
        f'SELECT "start", "end", globalTid, COALESCE(correlationId, -1), {name}, COALESCE({event_class}, 0) '
        f"FROM {table}",
        {"start": "i8", "end": "i8", "global_tid": "i8", "correlation": "i8", "name": "i8", "event_class": "i8"},
    )
    if name_id != "NULL":
        names = builder.string_ids(rows["name"])
    else:
        names = _ranked_ids(builder, export.texts(f"SELECT DISTINCT {name_text} FROM {table} ORDER BY 1"), rows["name"])
    names = builder.named([names], lambda name_id: _API_VERSION_SUFFIX.sub("", builder.strings[name_id]))
    driver = rows["event_class"] == _DRIVER_EVENT_CLASS
    builder.add_events(
        ts_ns=rows["start"],
        dur_ns=np.maximum(rows["end"] - rows["start"], 0),
        kind=np.where(driver, int(Kind.DRIVER), int(Kind.RUNTIME)),
        name=names,
        cat=np.where(driver, builder.strings.intern("cuda_driver"), builder.strings.intern("cuda_runtime")),
        track=builder.thread_tracks(rows["global_tid"]),
        correlation=_process_correlation(rows["global_tid"], rows["correlation"]),
    )


# emit_nvtx range text: "<name>[, seq = N], op_id = N[, sizes = [...]][, input_op_ids = [...]]", taken
# apart in SQL so that a million ranges cost no Python per row
_NVTX_PARTS = f"""
WITH t AS (
  SELECT n."start" AS start, n."end" AS "end", n.eventType AS type, n.globalTid AS tid, COALESCE({{text}}) AS text
  FROM NVTX_EVENTS n {{join}}
  WHERE n.eventType IN ({NVTX_MARK}, {NVTX_PUSH_POP}, {NVTX_START_END})
), p AS (
  SELECT *, instr(text, ', op_id = ') AS op_at, instr(text, ', seq = ') AS seq_at,
         instr(text, ', sizes = ') AS sizes_at, instr(text, ', input_op_ids = ') AS inputs_at FROM t
)
SELECT start, COALESCE("end", start) AS "end", type, COALESCE(tid, 0) AS tid,
  CASE WHEN op_at > 0 THEN substr(text, 1, (CASE WHEN seq_at > 0 AND seq_at < op_at THEN seq_at ELSE op_at END) - 1)
       ELSE COALESCE(text, '') END AS name,
  op_at > 0 AS is_op,
  CASE WHEN op_at > 0 AND seq_at > 0 THEN CAST(substr(text, seq_at + 8) AS INTEGER) ELSE -1 END AS seq,
  CASE WHEN op_at > 0 AND sizes_at > 0 THEN replace(
    CASE WHEN inputs_at > sizes_at THEN substr(text, sizes_at + 10, inputs_at - sizes_at - 10)
         ELSE substr(text, sizes_at + 10) END, ' ', '') END AS sizes
FROM p
"""


def _read_nvtx(builder: _Builder) -> None:
    """NVTX ranges and marks. The range texts are taken apart in SQL, and names and shapes numbered there
    (``DENSE_RANK`` over the sorted distinct texts): a million ranges bring only their distinct texts to Python."""
    export = builder.export
    if not export.has("NVTX_EVENTS"):
        return
    columns = export.columns("NVTX_EVENTS")
    texts = ["n.text"] if "text" in columns else []  # the text inline, or its id in StringIds: both occur
    join = ""
    if "textId" in columns:
        texts.append("s.value")
        join = "LEFT JOIN StringIds s ON s.id = n.textId"
    # the texts are taken apart once, into a temporary table the three queries below read
    export.connection.execute("DROP TABLE IF EXISTS temp.nvtx_parts")
    export.connection.execute(
        f"CREATE TEMP TABLE nvtx_parts AS {_NVTX_PARTS.format(text=', '.join([*texts, 'NULL']), join=join)}"
    )
    parts = "SELECT * FROM temp.nvtx_parts"
    rows = export.query(
        f"SELECT start, \"end\", type, tid, DENSE_RANK() OVER (ORDER BY name) - 1, is_op, instr(name, ' ') > 0, "
        f"seq, DENSE_RANK() OVER (ORDER BY sizes) - 1 FROM ({parts})",
        {"start": "i8", "end": "i8", "type": "i8", "global_tid": "i8", "name": "i8", "is_op": "i1", "spaced": "i1",
         "seq": "i8", "sizes": "i8"},
    )  # fmt: skip
    names = _ranked_ids(builder, export.texts(f"SELECT DISTINCT name FROM ({parts}) ORDER BY name"), rows["name"])
    tracks = builder.thread_tracks(rows["global_tid"])
    mark = rows["type"] == NVTX_MARK
    if mark.any():
        builder.side["instants"].append(
            {"ts_ns": rows["start"][mark], "track": tracks[mark], "name": names[mark],
             "cat": np.full(int(mark.sum()), builder.strings.intern("nvtx"))}
        )  # fmt: skip
    ranges = ~mark
    # record_function labels with arguments (FSDP::pre_forward (blocks.3)) carry an op_id too: annotations
    operator = ranges & (rows["is_op"] == 1) & (rows["spaced"] == 0)
    chunk = builder.add_events(
        ts_ns=rows["start"][ranges],
        dur_ns=np.maximum(rows["end"] - rows["start"], 0)[ranges],
        kind=np.where(operator, int(Kind.CPU_OP), int(Kind.USER_ANNOTATION))[ranges],
        name=names[ranges],
        cat=np.where(operator, builder.strings.intern("cpu_op"), builder.strings.intern("nvtx"))[ranges],
        track=tracks[ranges],
    )
    rows_in_chunk = np.flatnonzero((rows["is_op"] == 1)[ranges])
    if len(rows_in_chunk):
        sizes = export.texts(f"SELECT DISTINCT sizes FROM ({parts}) ORDER BY sizes")
        builder.ops.append(
            {
                "chunk": chunk,
                "event": rows_in_chunk,
                "input_dims": _ranked_ids(builder, sizes, rows["sizes"][ranges][rows_in_chunk]),
                "input_types": np.full(len(rows_in_chunk), NO_ID),
                "call_stack": np.full(len(rows_in_chunk), NO_ID),
                "sequence_number": rows["seq"][ranges][rows_in_chunk],
                "fwd_thread": np.full(len(rows_in_chunk), NO_ID),
            }
        )


def _ranked_ids(builder: _Builder, distinct: list[str | None], ranks: np.ndarray) -> np.ndarray:
    """Our string ids of texts given as ranks among their sorted distinct values (NULL: absent)."""
    ids = np.array([builder.strings.intern(t) if t is not None else NO_ID for t in distinct], dtype=np.int64)
    return ids[ranks] if len(ids) else np.full(len(ranks), NO_ID, dtype=np.int64)


def _read_memory_usage(builder: _Builder) -> None:
    """GPU memory allocations and frees (``--cuda-memory-usage=true``): bytes signed, running total per device.

    nsys sees CUDA's allocations (cudaMalloc, memory pools): for PyTorch that is the caching allocator's
    reserved memory, so the running total is both the allocated and the reserved curve.
    """
    table = "CUDA_GPU_MEMORY_USAGE_EVENTS"
    export = builder.export
    if not export.has(table):
        return
    rows = export.query(
        f'SELECT "start", COALESCE(globalPid, 0), COALESCE(deviceId, -1), COALESCE(address, -1), '
        f"COALESCE(bytes, 0), COALESCE({export.column(table, 'memoryOperationType', 'memoryOperation')}, 0) "
        f'FROM {table} ORDER BY "start"',
        {"start": "i8", "global_pid": "i8", "device": "i8", "addr": "i8", "bytes": "i8", "operation": "i8"},
    )
    signed = np.where(rows["operation"] == 1, -rows["bytes"], rows["bytes"])
    total = np.zeros(len(signed), dtype=np.int64)
    for device in np.unique(rows["device"]).tolist():
        on_device = rows["device"] == device
        total[on_device] = np.cumsum(signed[on_device])
    builder.side["memory"].append(
        {
            "ts_ns": rows["start"],
            "track": builder.thread_tracks(rows["global_pid"]),
            "addr": rows["addr"],
            "bytes": signed,
            "total_allocated": total,
            "total_reserved": total,
            "device_type": np.full(len(signed), _CUDA_DEVICE_TYPE),
            "device_id": rows["device"],
        }
    )


_READERS: tuple[Callable[[_Builder], None], ...] = (
    _read_kernels,
    _read_graph_launches,
    _read_memcpy,
    _read_memset,
    _read_sync,
    _read_api_calls,
    _read_nvtx,
    _read_memory_usage,
)


# ---- metadata ---------------------------------------------------------------------------------------
_GPU_PROPERTIES = {  # TARGET_INFO_GPU column -> kineto deviceProperties key
    "id": "id", "name": "name", "totalMemory": "totalGlobalMem", "computeMajor": "computeMajor",
    "computeMinor": "computeMinor", "smCount": "numSms", "maxThreadsPerBlock": "maxThreadsPerBlock",
    "maxRegistersPerBlock": "regsPerBlock", "maxRegistersPerSm": "regsPerMultiprocessor",
    "threadsPerWarp": "warpSize", "maxShmemPerBlock": "sharedMemPerBlock",
    "maxShmemPerSm": "sharedMemPerMultiprocessor", "maxShmemPerBlockOptin": "sharedMemPerBlockOptin",
}  # fmt: skip


def _device_properties(export: _Export) -> list[dict[str, Any]]:
    if not export.has("TARGET_INFO_GPU"):
        return []
    present = [column for column in _GPU_PROPERTIES if column in export.columns("TARGET_INFO_GPU")]
    if "id" not in present:
        return []
    select = ", ".join(f'"{column}"' for column in present)
    properties = []
    for row in export.connection.execute(f"SELECT {select} FROM TARGET_INFO_GPU ORDER BY id"):
        device = {_GPU_PROPERTIES[c]: v for c, v in zip(present, row, strict=True) if v is not None}
        properties.append(device)
    _add_threads_per_sm(export, properties)
    return properties


def _add_threads_per_sm(export: _Export, properties: list[dict[str, Any]]) -> None:
    """kineto's ``maxThreadsPerMultiprocessor`` (the occupancy estimate needs it) = warps per SM x warp size."""
    columns = export.columns("TARGET_INFO_GPU")
    if not {"maxWarpsPerSm", "threadsPerWarp"} <= columns:
        return
    warps = dict(export.connection.execute("SELECT id, maxWarpsPerSm * threadsPerWarp FROM TARGET_INFO_GPU"))
    for device in properties:
        if warps.get(device["id"]) is not None:
            device["maxThreadsPerMultiprocessor"] = int(warps[device["id"]])


def _export_info(export: _Export) -> dict[str, str]:
    """META_DATA_EXPORT (EXPORT_META_DATA before 2021): product version, schema version."""
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if export.has(table) and {"name", "value"} <= export.columns(table):
            return {str(n): str(v) for n, v in export.connection.execute(f"SELECT name, value FROM {table}")}
    return {}


def _session_start_ns(export: _Export) -> int | None:
    if not export.has("TARGET_INFO_SESSION_START_TIME") or "utcEpochNs" not in export.columns(
        "TARGET_INFO_SESSION_START_TIME"
    ):
        return None
    row = export.connection.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and isinstance(row[0], int) and row[0] > 0 else None


def _meta(export: _Export, builder: _Builder) -> dict[str, Any]:
    info = _export_info(export)
    meta: dict[str, Any] = {
        "format": "nsys",
        "deviceProperties": _device_properties(export),
        "nsys": {
            "product_version": info.get("EXPORT_PRODUCT_VERSION"),
            "schema_version": info.get("EXPORT_SCHEMA_VERSION"),
            "derived_window_ns": info.get("DERIVED_WINDOW_NS"),
            "tables": sorted(t for t in export.tables if not t.startswith("ENUM_")),
            "cuda_graph_kernels": builder.graph_kernels,
            "cuda_graph_launches": builder.graph_launches,
            "has_gpu_info": export.has("TARGET_INFO_GPU"),
            "has_memory_usage": export.has("CUDA_GPU_MEMORY_USAGE_EVENTS"),
        },
        "other": {"Framework": "Nsight Systems"},
    }
    start_ns = _session_start_ns(export)
    if start_ns is not None:
        meta["baseTimeNanoseconds"] = start_ns
    if info.get("EXPORT_SCHEMA_VERSION"):
        meta["schemaVersion"] = info["EXPORT_SCHEMA_VERSION"]
    return meta


# ---- entry points -----------------------------------------------------------------------------------
def check_export(export: _Export, label: str) -> None:
    """Refuse a database that is not an nsys export, or one without anything the views read."""
    if _STRING_TABLE not in export.tables:
        raise NsysExportError(
            f"{label} is an SQLite database but not an Nsight Systems export (it has no {_STRING_TABLE} table)"
        )
    if not any(export.has(t) for t in _ACTIVITY_TABLES):
        raise NsysExportError(
            f"{label} is an Nsight Systems export without CUDA or NVTX data (none of {', '.join(_ACTIVITY_TABLES)}): "
            "profile with `nsys profile -t cuda,nvtx` and export again"
        )


def parse_nsys_file(path: Path, label: str | None = None) -> TraceTables:
    """Tables of one nsys SQLite export on local disk (opened read-only); ``label`` names it in errors."""
    label = label or Path(path).name
    with open(path, "rb") as head:
        if head.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise NsysExportError(f"{label} is not an SQLite database (an nsys export has the SQLite header)")
    try:
        with closing(sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro&immutable=1", uri=True)) as connection:
            export = _Export(connection)
            check_export(export, label)
            builder = _Builder(export)
            _read_names(builder)
            for read in _READERS:
                read(builder)
            if not sum(len(chunk["ts_ns"]) for chunk in builder.events):
                raise NsysExportError(f"{label}: the export has no CUDA or NVTX events")
            meta = _meta(export, builder)
            _add_blocks_per_sm(builder, meta["deviceProperties"])
            return builder.finish(meta)
    except sqlite3.DatabaseError as exc:
        raise NsysExportError(f"{label}: cannot read the SQLite database ({exc})") from exc


def _add_blocks_per_sm(builder: _Builder, devices: list[dict[str, Any]]) -> None:
    """kineto's ``blocks per SM`` (grid blocks / the GPU's SM count), where TARGET_INFO_GPU gives the count."""
    sm_count = {int(d["id"]): int(d["numSms"]) for d in devices if d.get("numSms")}
    if not sm_count:
        return
    for chunk in builder.kernels:
        blocks = chunk["grid_x"] * chunk["grid_y"] * chunk["grid_z"]
        devices, row_device = np.unique(chunk["device"], return_inverse=True)
        sms = np.array([sm_count.get(int(d), 0) for d in devices.tolist()], dtype=np.int64)[row_device.reshape(-1)]
        known = (blocks > 0) & (sms > 0)
        chunk["blocks_per_sm"] = np.where(known, blocks / np.maximum(sms, 1), np.nan)


def parse_nsys(
    raw: IO[bytes],
    on_progress: Callable[[int], None] | None = None,
    max_trace_bytes: int = 64 << 30,
) -> TraceTables:
    """Tables of an export read from a stream: SQLite needs a real file, so it is copied to a temporary one.

    The copy stops (and fails the file) past ``max_trace_bytes``, the same limit as for traces.
    """
    with tempfile.TemporaryDirectory(prefix="profscope-nsys-") as folder:
        path = Path(folder) / "export.sqlite"
        with open(path, "wb") as copy:
            _copy_limited(raw, copy, max_trace_bytes, on_progress)
        return parse_nsys_file(path, label="the file")


def _copy_limited(raw: IO[bytes], out: IO[bytes], limit: int, on_progress: Callable[[int], None] | None) -> None:
    def too_large() -> NsysExportError:
        return NsysExportError(f"the export is larger than the limit of {limit:,} bytes (--max-trace-bytes)")

    for chunk in chunks_within(raw, limit, on_progress, too_large):
        out.write(chunk)
