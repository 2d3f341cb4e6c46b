"""Small hand-written Nsight Systems SQLite exports, for the cases the corpus lacks.

The tables and columns are those of a real export (``nsys export --type sqlite``, schema 3.x, as in
the corpus files), with only the rows a test needs. ``Export`` collects rows; ``write`` creates the
database. Times are nanoseconds since the session start, like nsys writes them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

PID = 4242
TID = 4243
GLOBAL_PID = (1 << 48) | (PID << 24)  # nsys: (hardware id << 48) | (pid << 24) | tid
GLOBAL_TID = GLOBAL_PID | TID

_TABLES = {
    "StringIds": "id INTEGER PRIMARY KEY, value TEXT NOT NULL",
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
    "ThreadNames": "nameId INTEGER, priority INTEGER, globalTid INTEGER",
    "META_DATA_EXPORT": "name TEXT, value TEXT",
    "TARGET_INFO_SESSION_START_TIME": "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT",
    "TARGET_INFO_GPU": "vmId INTEGER, id INTEGER, name TEXT, totalMemory INTEGER, smCount INTEGER, "
    "computeMajor INTEGER, computeMinor INTEGER, maxWarpsPerSm INTEGER, threadsPerWarp INTEGER, "
    "maxThreadsPerBlock INTEGER, maxRegistersPerSm INTEGER, maxShmemPerSm INTEGER",
    "CUPTI_ACTIVITY_KIND_KERNEL": 'start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER, '
    "contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, "
    "shortName INTEGER, mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER, "
    "gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER, "
    "staticSharedMemory INTEGER, dynamicSharedMemory INTEGER, localMemoryPerThread INTEGER, "
    "localMemoryTotal INTEGER, gridId INTEGER, sharedMemoryExecuted INTEGER, graphNodeId INTEGER, "
    "sharedMemoryLimitConfig INTEGER, graphId INTEGER",
    "CUPTI_ACTIVITY_KIND_RUNTIME": 'start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER, '
    "globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMCPY": 'start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER, '
    "contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, "
    "copyKind INTEGER, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, "
    "srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER, "
    "graphNodeId INTEGER, virtualAddress INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMSET": 'start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER, '
    "contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, value INTEGER, "
    "bytes INTEGER, graphNodeId INTEGER, memKind INTEGER",
    "NVTX_EVENTS": 'start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, '
    "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, "
    "domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, "
    "int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": 'start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER, '
    "contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, graphId INTEGER, "
    "graphExecId INTEGER",
    "CUDA_GPU_MEMORY_USAGE_EVENTS": "start INTEGER NOT NULL, globalPid INTEGER, deviceId INTEGER, "
    "contextId INTEGER, address INTEGER, pc INTEGER, bytes INTEGER, memKind INTEGER, "
    "memoryOperationType INTEGER, name TEXT, correlationId INTEGER",
}


_OPTIONAL = ("TARGET_INFO_GPU", "CUDA_GPU_MEMORY_USAGE_EVENTS", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


@dataclass
class Export:
    """Rows of one export. ``kernel``/``launch``/``nvtx``... append; ``write`` makes the file."""

    device: int = 0
    stream: int = 7
    strings: list[str] = field(default_factory=list)
    rows: dict[str, list[tuple]] = field(default_factory=dict)
    _correlation: int = 0

    def string(self, text: str) -> int:
        if text not in self.strings:
            self.strings.append(text)
        return self.strings.index(text)

    def _add(self, table: str, row: tuple) -> None:
        self.rows.setdefault(table, []).append(row)

    def launch(self, start: int, end: int, api: str = "cudaLaunchKernel_v7000", driver: bool = False) -> int:
        """A runtime (or driver) call on the main thread; returns its correlation id."""
        self._correlation += 1
        self._add(
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            (start, end, 1 if driver else 0, GLOBAL_TID, self._correlation, self.string(api), 0, None),
        )
        return self._correlation

    def kernel(self, start: int, end: int, name: str, correlation: int, graph_node: int | None = None) -> None:
        name_id = self.string(name)
        self._add(
            "CUPTI_ACTIVITY_KIND_KERNEL",
            (start, end, self.device, 1, self.stream, correlation, GLOBAL_PID, name_id, name_id, name_id, 1, 0, 32,
             128, 2, 1, 256, 1, 1, 1024, 2048, 0, 0, 0, 0, graph_node, 0, 1 if graph_node is not None else None),
        )  # fmt: skip

    def memcpy(self, start: int, end: int, nbytes: int, copy_kind: int, src: int, dst: int, correlation: int) -> None:
        self._add(
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            (start, end, self.device, 1, self.stream, correlation, GLOBAL_PID, nbytes, copy_kind, None, src, dst,
             None, None, None, None, 0, None, None),
        )  # fmt: skip

    def memset(self, start: int, end: int, nbytes: int, correlation: int) -> None:
        self._add(
            "CUPTI_ACTIVITY_KIND_MEMSET",
            (start, end, self.device, 1, self.stream, correlation, GLOBAL_PID, 0, nbytes, None, 2),
        )

    def nvtx(self, start: int, end: int | None, text: str, inline: bool = True, domain: int = 0) -> None:
        """A push/pop range (``end`` None: a mark); the text inline or through StringIds, as nsys does both."""
        event_type = 59 if end is not None else 34
        text_id = None if inline else self.string(text)
        self._add(
            "NVTX_EVENTS",
            (start, end, event_type, None, None, None, text if inline else None, GLOBAL_TID, None, text_id, domain)
            + (None,) * 8,
        )

    def graph_execution(self, start: int, end: int, graph: int, correlation: int) -> None:
        """A whole graph run (``--cuda-graph-trace=graph``): one row, no kernel rows for its nodes."""
        self._add(
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
            (start, end, self.device, 1, self.stream, correlation, GLOBAL_PID, graph, graph + 100),
        )

    def memory(self, start: int, address: int, nbytes: int, free: bool = False) -> None:
        self._add(
            "CUDA_GPU_MEMORY_USAGE_EVENTS",
            (start, GLOBAL_PID, self.device, 1, address, 0, nbytes, 2, 1 if free else 0, None, 0),
        )

    def gpu(self, name: str, total_memory: int) -> None:
        self._add("TARGET_INFO_GPU", (0, self.device, name, total_memory, 132, 9, 0, 64, 32, 1024, 65536, 233472))

    def write(self, path: Path, session_start_ns: int = 1_700_000_000_000_000_000) -> Path:
        self.string("python3")
        with sqlite3.connect(path) as connection:
            for table, columns in _TABLES.items():
                if table in _OPTIONAL and table not in self.rows:
                    continue  # optional tables: absent unless used, as in exports without them
                connection.execute(f"CREATE TABLE {table} ({columns})")
            rows = {
                **self.rows,
                "StringIds": list(enumerate(self.strings)),
                "PROCESSES": [(GLOBAL_PID, PID, "python3")],
                "ThreadNames": [(self.strings.index("python3"), 0, GLOBAL_TID)],
                "META_DATA_EXPORT": [("EXPORT_SCHEMA_VERSION", "3.25.0"), ("EXPORT_PRODUCT_VERSION", "test")],
                "TARGET_INFO_SESSION_START_TIME": [(session_start_ns, "", "")],
            }
            for table, table_rows in rows.items():
                marks = ", ".join("?" * len(table_rows[0]))
                connection.executemany(f"INSERT INTO {table} VALUES ({marks})", table_rows)
        connection.close()
        return path


def two_rank_nccl_run(folder: Path, steps: int = 3) -> list[Path]:
    """``job_rank0.sqlite`` and ``job_rank1.sqlite``: per step an ``iteration N`` NVTX range holding a
    GEMM and an NCCL all-reduce kernel (rank 1 is 1 ms slower to reach each all-reduce)."""
    paths = []
    for rank in (0, 1):
        export = Export(device=rank)
        step_ns = 10_000_000
        for step in range(steps):
            base = 1_000_000 + step * step_ns
            export.nvtx(base, base + 9_000_000, f"iteration {step + 1}")
            gemm = export.launch(base + 100_000, base + 110_000)
            export.kernel(base + 200_000, base + 2_200_000 + rank * 1_000_000, "sm90_xmma_gemm_bf16bf16_bf16f32", gemm)
            export.nvtx(base + 120_000, base + 140_000, "ncclAllReduce", domain=1)
            reduce = export.launch(base + 125_000, base + 135_000)
            export.kernel(base + 3_300_000, base + 6_300_000, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", reduce)
        export.gpu("NVIDIA H100 80GB HBM3", 85_000_000_000)
        paths.append(export.write(folder / f"job_rank{rank}.sqlite"))
    return paths


def emit_nvtx_ops(path: Path) -> Path:
    """``emit_nvtx(record_shapes=True)`` ranges: ``aten::mm`` (shapes, seq) launching a GEMM inside an
    ``aten::linear``; a ``FSDP::pre_forward (layer.0)`` record_function label; a mark; a memcpy, a memset."""
    export = Export()
    export.nvtx(1_000, 100_000, "FSDP::pre_forward (layer.0), op_id = 1")
    export.nvtx(10_000, 90_000, "aten::linear, seq = 7, op_id = 2, sizes = [[4, 8], [16, 8], [16]], input_op_ids = []")
    export.nvtx(
        20_000, 60_000, "aten::mm, seq = 8, op_id = 3, sizes = [[4, 8], [8, 16]], input_op_ids = [(0, 0), (0, 0)]",
        inline=False,
    )  # fmt: skip
    mm = export.launch(30_000, 35_000)
    export.kernel(40_000, 52_000, "ampere_sgemm_32x32_sliced1x4_tn", mm)
    export.nvtx(62_000, 80_000, "aten::add_, op_id = 4, sizes = [[4, 16], [16], []]")
    add = export.launch(63_000, 66_000)
    export.kernel(70_000, 73_000, "vectorized_elementwise_kernel", add)
    copy = export.launch(110_000, 115_000, "cudaMemcpyAsync_v3020")
    export.memcpy(120_000, 130_000, 4096, 1, 0, 2, copy)
    zero = export.launch(140_000, 141_000, "cudaMemsetAsync_v3020")
    export.memset(142_000, 143_000, 1024, zero)
    export.nvtx(150_000, None, "checkpoint saved")
    return export.write(path)


def cuda_graph(path: Path) -> Path:
    """One ``cudaGraphLaunch`` whose graph runs three kernel nodes (``--cuda-graph-trace=node``: each node
    is a kernel row with the launch's correlation id and a ``graphNodeId``); GPU memory usage events."""
    export = Export()
    export.nvtx(1_000, 200_000, "ProfilerStep#5")
    launch = export.launch(10_000, 20_000, "cudaGraphLaunch_v10000")
    for node in range(3):
        export.kernel(30_000 + node * 20_000, 45_000 + node * 20_000, f"graph_node_kernel_{node}", launch, node + 1)
    export.memory(5_000, 0x7F0000000000, 1 << 20)
    export.memory(6_000, 0x7F0000100000, 2 << 20)
    export.memory(150_000, 0x7F0000000000, 1 << 20, free=True)
    return export.write(path)


def cuda_graph_whole(path: Path) -> Path:
    """Two ``cudaGraphLaunch`` calls of graph 7 traced at graph level (``--cuda-graph-trace=graph``)."""
    export = Export()
    for i in range(2):
        launch = export.launch(10_000 + i * 100_000, 20_000 + i * 100_000, "cudaGraphLaunch_v10000")
        export.graph_execution(30_000 + i * 100_000, 80_000 + i * 100_000, 7, launch)
    return export.write(path)
