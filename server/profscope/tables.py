"""The columnar event model every analysis reads.

A trace is parsed once (in a worker process) into a handful of tables of numpy columns plus one
table of interned strings. Tables are written to the cache as one ``.npy`` file per column and read
back memory-mapped, so a server process touches only the columns a view needs.

Times are integer nanoseconds relative to ``meta["origin_us"]`` (the smallest timestamp in the
trace): integers make interval containment exact (float microseconds produce false overlaps), and
relative times keep every value small.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np

NO_ID = -1  # the "absent" value of every integer id / correlation column

# np.load parses each .npy header with ast.literal_eval, and CPython 3.11's compile() can fail with
# "SystemError: AST constructor recursion depth mismatch" when request threads do it at once
# (python/cpython#106905): 2 answers in 80,000 of bench/load_test.py were 500s. One header at a time.
_NPY_HEADER_LOCK = threading.Lock()


def map_npy(path: Path) -> np.ndarray:
    """A cached column, memory-mapped read-only."""
    with _NPY_HEADER_LOCK:
        return np.load(path, mmap_mode="r")


class Kind(IntEnum):
    """Normalised event category: format drift (old capitalised names, vendor runtimes) ends here."""

    OTHER = 0
    CPU_OP = 1
    USER_ANNOTATION = 2
    PYTHON_FUNCTION = 3
    RUNTIME = 4
    DRIVER = 5
    KERNEL = 6
    MEMCPY = 7
    MEMSET = 8
    GPU_USER_ANNOTATION = 9
    SPAN = 10  # cat "Trace": the profiler's own span slices
    SYNC = 11  # cuda_sync / stream wait events on a device track
    PYTHON_LEGACY = 12  # cat "Python" of very old traces


DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
HOST_OP_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY)

# Column layout of every table: name -> dtype. The parser fills them, the cache stores them.
SCHEMA: dict[str, dict[str, str]] = {
    "events": {
        "ts_ns": "i8",
        "dur_ns": "i8",
        "kind": "i1",
        "name": "i4",
        "cat": "i4",
        "track": "i4",
        "external_id": "i8",
        "correlation": "i8",
    },
    "kernels": {  # one row per KERNEL / MEMCPY / MEMSET event
        "event": "i4",
        "device": "i4",
        "stream": "i8",
        "grid_x": "i4",
        "grid_y": "i4",
        "grid_z": "i4",
        "block_x": "i4",
        "block_y": "i4",
        "block_z": "i4",
        "registers_per_thread": "i4",
        "shared_memory": "i8",
        "blocks_per_sm": "f8",
        "est_occupancy_pct": "f8",
        "bytes": "i8",
    },
    "ops": {  # one row per host op / annotation that carries shape or stack args
        "event": "i4",
        "input_dims": "i4",
        "input_types": "i4",
        "call_stack": "i4",
        "sequence_number": "i8",
        "fwd_thread": "i8",
    },
    "python": {  # python_function events
        "event": "i4",
        "python_id": "i8",
        "parent_id": "i8",
        "module_id": "i8",
    },
    "collectives": {  # record_param_comms / nccl:* / collective kernels with collective args
        "event": "i4",
        "collective_name": "i4",
        "in_nelems": "i8",
        "out_nelems": "i8",
        "group_size": "i8",
        "dtype": "i4",
        "pg_name": "i4",
        "pg_desc": "i4",
        "pg_ranks": "i4",
        "seq": "i8",
    },
    "memory": {  # "[memory]" instant events
        "ts_ns": "i8",
        "track": "i4",
        "addr": "i8",
        "bytes": "i8",
        "total_allocated": "i8",
        "total_reserved": "i8",
        "device_type": "i1",
        "device_id": "i4",
    },
    "flows": {  # ph s / t / f
        "flow_id": "i8",
        "phase": "i1",  # 0 start, 1 step, 2 finish
        "ts_ns": "i8",
        "track": "i4",
        "cat": "i4",
        "binds_enclosing": "i1",  # "bp": "e"
    },
    "counters": {  # ph C: one row per (event, series)
        "ts_ns": "i8",
        "track": "i4",
        "name": "i4",
        "series": "i4",
        "value": "f8",
    },
    "instants": {  # ph i / I other than [memory]
        "ts_ns": "i8",
        "track": "i4",
        "name": "i4",
        "cat": "i4",
    },
}

FLOW_PHASES = {"s": 0, "t": 1, "f": 2}

# Columns holding string ids, track ids and event row numbers (what must be renumbered when two
# partial tables are merged).
STRING_COLUMNS: dict[str, tuple[str, ...]] = {
    "events": ("name", "cat"),
    "ops": ("input_dims", "input_types", "call_stack"),
    "collectives": ("collective_name", "dtype", "pg_name", "pg_desc", "pg_ranks"),
    "flows": ("cat",),
    "counters": ("name", "series"),
    "instants": ("name", "cat"),
}
TRACK_TABLES = ("events", "memory", "flows", "counters", "instants")
EVENT_ROW_TABLES = ("kernels", "ops", "python", "collectives")


class StringTable:
    """Interns strings to dense int32 ids; id -1 is the absent string."""

    def __init__(self, strings: list[str] | None = None) -> None:
        self.strings: list[str] = strings if strings is not None else []
        self._ids: dict[str, int] = {s: i for i, s in enumerate(self.strings)}

    def intern(self, text: str) -> int:
        found = self._ids.get(text)
        if found is not None:
            return found
        new_id = len(self.strings)
        self._ids[text] = new_id
        self.strings.append(text)
        return new_id

    def lookup(self, text: str) -> int:
        return self._ids.get(text, NO_ID)

    def __getitem__(self, string_id: int) -> str:
        return self.strings[string_id] if string_id >= 0 else ""

    def __len__(self) -> int:
        return len(self.strings)


@dataclass
class Track:
    """A pid/tid pair of the trace: a CPU thread, or a device stream (pid = device, tid = stream)."""

    pid: str
    tid: str
    process_name: str = ""
    thread_name: str = ""
    process_sort_index: int | None = None
    thread_sort_index: int | None = None
    process_labels: str = ""

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _mapped_columns(directory: Path, layout: Mapping[str, Iterable[str]]) -> dict[str, dict[str, np.ndarray]]:
    """Each column of ``layout`` (table -> column names) as ``TraceTables.save`` wrote it to ``directory``,
    memory-mapped read-only."""
    return {
        table: {column: map_npy(directory / f"{table}.{column}.npy") for column in columns}
        for table, columns in layout.items()
    }


@dataclass
class TraceTables:
    """Everything parsed from one trace file."""

    columns: dict[str, dict[str, np.ndarray]]
    strings: StringTable
    tracks: list[Track]
    meta: dict[str, Any] = field(default_factory=dict)

    def table(self, name: str) -> dict[str, np.ndarray]:
        return self.columns[name]

    @property
    def events(self) -> dict[str, np.ndarray]:
        return self.columns["events"]

    def row_count(self, name: str) -> int:
        table = self.columns[name]
        return len(next(iter(table.values()))) if table else 0

    def name_ids(self, names: list[str] | tuple[str, ...]) -> np.ndarray:
        return np.array([self.strings.lookup(n) for n in names if self.strings.lookup(n) >= 0], dtype="i4")

    # ---- persistence -------------------------------------------------------------------------
    def save(self, directory: Path) -> None:
        """Write atomically: a reader sees either the old complete directory or the new one."""
        directory = Path(directory)
        staging = directory.with_name(directory.name + f".tmp{os.getpid()}")
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        for table_name, table in self.columns.items():
            for column_name, values in table.items():
                np.save(staging / f"{table_name}.{column_name}.npy", np.ascontiguousarray(values))
        (staging / "strings.json").write_text(json.dumps(self.strings.strings))
        (staging / "tracks.json").write_text(json.dumps([t.to_json() for t in self.tracks]))
        (staging / "meta.json").write_text(json.dumps(self.meta, default=str))
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(staging, directory)

    def release_pages(self, but: Collection[str] = (), table: str | None = None) -> None:
        """Unmap the pages of the memory-mapped columns read so far: the next read maps them again from the page
        cache. A process that runs one view after another so holds only what the current one reads. ``but``: the
        columns (``"table.column"``) whose pages stay, which the caller reads next; ``table``: only that table's."""
        if not hasattr(mmap, "MADV_DONTNEED"):  # not Linux or macOS: the pages stay
            return
        for table_name, columns in self.columns.items():
            if table is not None and table_name != table:
                continue
            for column_name, values in columns.items():
                if f"{table_name}.{column_name}" in but:
                    continue
                mapping = getattr(values, "_mmap", None)
                if mapping is not None:
                    mapping.madvise(mmap.MADV_DONTNEED)

    def mapped_from(self, directory: Path) -> TraceTables:
        """These tables with each column read from its file ``save`` wrote to ``directory``, memory-mapped: the
        columns in memory can go (the caller drops these tables). The views of a parse are computed so: a column
        takes memory only once read, from the page cache the save just filled, and shared by every process that
        reads it."""
        columns = _mapped_columns(Path(directory), self.columns)
        return TraceTables(columns=columns, strings=self.strings, tracks=self.tracks, meta=self.meta)

    @classmethod
    def load(cls, directory: Path) -> TraceTables:
        directory = Path(directory)
        columns = _mapped_columns(directory, SCHEMA)
        strings = StringTable(json.loads((directory / "strings.json").read_text()))
        tracks = [Track(**t) for t in json.loads((directory / "tracks.json").read_text())]
        meta = json.loads((directory / "meta.json").read_text())
        return cls(columns=columns, strings=strings, tracks=tracks, meta=meta)
