"""A small valid kineto trace built to attack the pages: every name a page shows carries markup.

Kernel, operator, annotation, thread and process names, argument keys and values, input types, call
stack frames and their file names, device and collective names hold ``<script>`` elements, ``<img
onerror>`` handlers, quotes and ampersands, and very long names. Two ranks of a "distributed" job so the
Distributed page has data too; the run folder and the workers are named with markup as well.

``write_attack_memory`` adds a CUDA snapshot (a real one, its frames' names and files rewritten) and an
InternLM memory.log (a real layout, its layer names rewritten) to the run, for the Memory page's views.

A page that builds HTML from these strings runs ``window.__pwned = 1`` or creates an ``img[src=x]``;
escaped, the text shows literally.
"""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path
from typing import Any

SCRIPT = "<script>window.__pwned=1</script>"
IMG = "<img src=x onerror=window.__pwned=1>"
QUOTES = "\"'&<>"
MARKUP = "<b>b</b><i>i</i>"  # markup in a name: drawn as text it shows its tags; read as HTML they would vanish
PAYLOADS = (SCRIPT, IMG, QUOTES, MARKUP)
LONG = "aten::" + "very_long_name_" * 400 + SCRIPT  # 6,000 characters, markup at the far end
# File and folder names cannot hold "/": the run and the workers carry the payloads without one.
RUN = f"attack{IMG}{QUOTES}"
WORKERS = (f"rank0{IMG}", f"rank1{QUOTES}")

ANNOTATION = f"annotation {SCRIPT}"
OPS = (f"aten::mm{SCRIPT}", f"aten::add{IMG}", f"aten::{QUOTES}", f"aten::{MARKUP}", LONG)
KERNELS = (f"void gemm<{SCRIPT}>(float*)", f"elementwise_kernel{IMG}", f"kernel{QUOTES}", f"k{MARKUP}")
NCCL_KERNEL = f"ncclKernel_AllReduce_RING_LL_Sum_float{IMG}"
FRAMES = (f"{IMG}.py(12): forward{SCRIPT}", f"train{QUOTES}.py(7): <module>")
ARG_KEY, ARG_VALUE = f"note{SCRIPT}", f"value{IMG}{QUOTES}"
DEVICE_NAME = f"GPU{IMG}"
GROUP_DESC = f"default_pg{SCRIPT}"

STEP_US = 10_000.0
STEPS = 2


def attack_trace(rank: int) -> dict[str, Any]:
    """One rank's trace: 2 profiler steps of 4 ops, each launching a kernel, plus memory and a collective."""
    pid, tid, base = 100 + rank, 100 + rank, 1_700_000_000_000.0
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"python{SCRIPT}"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"thread{IMG}"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": f"gpu{QUOTES}"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": f"stream 7 {SCRIPT}"}},
    ]
    correlation = 1000 * (rank + 1)
    for step in range(STEPS):
        start = base + step * STEP_US
        events.append(_x("user_annotation", f"ProfilerStep#{step + 1}", pid, tid, start, STEP_US - 10, {}))
        events.append(_x("user_annotation", ANNOTATION, pid, tid, start + 10, 8000, {}))
        events.append(_x("gpu_user_annotation", ANNOTATION, 0, 7, start + 50, 7000, {}))
        events.append(
            _x(
                "python_function",
                FRAMES[1],
                pid,
                tid,
                start + 20,
                9000,
                {"Python id": 10 * step + 1, "Python parent id": None},
            )
        )
        events.append(
            _x(
                "python_function",
                FRAMES[0],
                pid,
                tid,
                start + 30,
                8500,
                {"Python id": 10 * step + 2, "Python parent id": 10 * step + 1},
            )
        )
        for i, op in enumerate(OPS):
            op_start = start + 100 + i * 1500
            correlation += 1
            args = {
                "External id": correlation,
                "Input Dims": [[64, 64], [64, 64]],
                "Input type": [f"float{IMG}", QUOTES],
                "Call stack": ";".join(FRAMES),
                ARG_KEY: ARG_VALUE,
            }
            events.append(_x("cpu_op", op, pid, tid, op_start, 1000, args))
            events.append(
                _x(
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    pid,
                    tid,
                    op_start + 100,
                    50,
                    {"External id": correlation, "correlation": correlation},
                )
            )
            kernel = KERNELS[i % len(KERNELS)]
            events.append(
                _x(
                    "kernel",
                    kernel,
                    0,
                    7,
                    op_start + 200,
                    600 + 100 * i,
                    {
                        "External id": correlation,
                        "correlation": correlation,
                        "device": 0,
                        "stream": 7,
                        "grid": [80, 1, 1],
                        "block": [256, 1, 1],
                        "registers per thread": 32,
                        "shared memory": 0,
                        "blocks per SM": 1.0,
                        "warps per SM": 8.0,
                        "est. achieved occupancy %": 50,
                        ARG_KEY: ARG_VALUE,
                    },
                )
            )
            events.append(
                {
                    "ph": "i",
                    "cat": "cpu_instant_event",
                    "s": "t",
                    "name": "[memory]",
                    "pid": pid,
                    "tid": tid,
                    "ts": op_start + 10,
                    "args": {
                        "Total Reserved": 1 << 22,
                        "Total Allocated": (i + 1) << 20,
                        "Bytes": 1 << 20,
                        "Device Id": 0,
                        "Device Type": 1,
                        "Addr": 1 << 30 | i << 20,
                    },
                }
            )
        correlation += 1
        collective_start = start + 7000
        comm_args = {
            "External id": correlation,
            "Collective name": f"allreduce{IMG}",
            "Process Group Name": "0",
            "Process Group Description": GROUP_DESC,
            "Process Group Ranks": [0, 1],
            "Group size": 2,
            "In msg nelems": 4096,
            "Out msg nelems": 4096,
            "dtype": "Float",
            "Seq": step,
        }
        events.append(_x("cpu_op", "record_param_comms", pid, tid, collective_start, 500, comm_args))
        events.append(
            _x(
                "cuda_runtime",
                "cudaLaunchKernel",
                pid,
                tid,
                collective_start + 50,
                40,
                {"External id": correlation, "correlation": correlation},
            )
        )
        events.append(
            _x(
                "kernel",
                NCCL_KERNEL,
                0,
                7,
                collective_start + 100,
                1500,
                {
                    "External id": correlation,
                    "correlation": correlation,
                    "device": 0,
                    "stream": 7,
                    **{k: v for k, v in comm_args.items() if k != "External id"},
                },
            )
        )
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": DEVICE_NAME,
                "totalGlobalMem": 42_505_273_344,
                "computeMajor": 8,
                "computeMinor": 0,
                "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048,
                "regsPerBlock": 65536,
                "regsPerMultiprocessor": 65536,
                "warpSize": 32,
                "sharedMemPerBlock": 49152,
                "sharedMemPerMultiprocessor": 167936,
                "numSms": 108,
                "sharedMemPerBlockOptin": 166912,
            }
        ],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": events,
        "traceName": f"{SCRIPT}.pt.trace.json",
    }


def _x(cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_attack_run(root: Path) -> Path:
    """The run folder ``root/RUN`` with one trace per rank; returns the folder."""
    run = root / RUN
    run.mkdir(parents=True, exist_ok=True)
    for rank, worker in enumerate(WORKERS):
        with gzip.open(run / f"{worker}.{1_795_000_000_000_000_000 + rank}.pt.trace.json.gz", "wt") as out:
            json.dump(attack_trace(rank), out)
    return run


def write_attack_sources(root: Path) -> Path:
    """A source root holding the file the first frame names, whose lines carry markup too."""
    root.mkdir(parents=True, exist_ok=True)
    lines = [f"# line {n} {QUOTES}" for n in range(1, 31)]
    lines[11] = f"    return {SCRIPT!r}  # {IMG}"  # line 12: the frame's line
    (root / f"{IMG}.py").write_text("\n".join(lines) + "\n")
    return root


SNAPSHOT = f"snapshot{QUOTES}"  # the snapshot's name on the Memory page (its file name without .pickle)
LAYER = f"layer1{MARKUP}"  # a memory.log layer name: no "." (the path separator) nor ","


def write_attack_memory(run: Path, snapshot: Path, memory_log: Path) -> None:
    """Copies of a real snapshot and a real memory.log into ``run``, every frame and layer name with markup."""
    data = pickle.loads(snapshot.read_bytes())  # a corpus file: plain data, read here by the test itself
    for entries in data.get("device_traces", []):
        for entry in entries:
            entry["frames"] = [_hostile_frame(frame) for frame in entry.get("frames", [])]
    for segment in data.get("segments", []):
        for block in segment.get("blocks", []):
            block["frames"] = [_hostile_frame(frame) for frame in block.get("frames", [])]
    (run / f"{SNAPSHOT}.pickle").write_bytes(pickle.dumps(data, protocol=4))
    (run / "memory.log").write_text(memory_log.read_text().replace("layer1", LAYER))


def _hostile_frame(frame: dict[str, Any]) -> dict[str, Any]:
    return {**frame, "name": f"{frame.get('name', '')}{SCRIPT}", "filename": f"{IMG}{frame.get('filename', '')}"}
