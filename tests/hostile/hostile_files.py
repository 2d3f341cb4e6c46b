"""Hostile and broken profiler files, built in memory: every bad input of issue #7, item 1.

Traces are written with ``json.dumps`` (not orjson) because it writes what a careless or malicious
writer would: integers beyond 64 bits, ``NaN``. Pickles are built opcode by opcode where the pickle
module would refuse to write them (nesting 100,000 levels deep, a tuple sharing itself).
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import struct
from pathlib import Path
from typing import Any

# ---- traces -------------------------------------------------------------------------------------


def trace_bytes(events: list[Any], **top_level: Any) -> bytes:
    return json.dumps({"schemaVersion": 1, **top_level, "traceEvents": events}).encode()


def op(name: str = "aten::mm", ts: float = 10, dur: float = 5, **fields: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, **fields}


# One event of each kind the parser reads args from; the argument under test is added to it.
KERNEL = {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 30, "dur": 4}
RUNTIME = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 29, "dur": 1}
PYTHON = {"ph": "X", "cat": "python_function", "name": "train.py(3): step", "pid": 1, "tid": 1, "ts": 11, "dur": 2}
MEMORY = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 12, "s": "t"}
METADATA = {"ph": "M", "name": "process_name", "pid": 1, "tid": 0}

GOOD_EVENTS = [op("ProfilerStep#1", ts=0, dur=100), op("aten::mm", ts=10, dur=5), op("aten::add", ts=20, dur=5)]


def with_event(event: dict[str, Any]) -> bytes:
    """A small valid trace with ``event`` added."""
    return trace_bytes([*GOOD_EVENTS, event])


def deeply_nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def gzip_bomb(decompressed_bytes: int) -> bytes:
    """A valid trace padded with whitespace: ~1,000x smaller compressed than decompressed."""
    head, tail = trace_bytes(GOOD_EVENTS).split(b"[", 1)
    return gzip.compress(head + b"[" + b" " * decompressed_bytes + tail, compresslevel=9)


# ---- pickles ------------------------------------------------------------------------------------


def snapshot(**extra: Any) -> dict[str, Any]:
    """A small, valid allocator snapshot: one segment, one alloc / free pair."""
    frames = [{"filename": "train.py", "line": 3, "name": "step"}]
    block = {"address": 1 << 30, "size": 1 << 20, "requested_size": 1 << 20, "state": "active_allocated"}
    free_block = {"address": (1 << 30) + (1 << 20), "size": 1 << 20, "state": "inactive"}
    segment = {
        "device": 0,
        "address": 1 << 30,
        "total_size": 2 << 20,
        "allocated_size": 1 << 20,
        "active_size": 1 << 20,
        "requested_size": 1 << 20,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": [{**block, "frames": frames}, free_block],
    }
    alloc = {"action": "alloc", "addr": 1 << 30, "size": 1 << 20, "stream": 0, "time_us": 5, "frames": frames}
    free = {**alloc, "action": "free_completed", "time_us": 9}
    return {"segments": [segment], "device_traces": [[alloc, free]], **extra}


class RunsACommand:
    """Pickles to ``os.system(...)``: loading it the ordinary way runs the command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


class SomeClass:
    pass


PLACEHOLDER = "PROFSCOPE_PLACEHOLDER"  # a string in a document, replaced by raw opcodes


def pickle_with(document: Any, raw_opcodes: bytes) -> bytes:
    """Pickle ``document`` (protocol 2) with the string ``PLACEHOLDER`` replaced by ``raw_opcodes``."""
    data = pickle.dumps(document, protocol=2)
    placeholder = b"X" + struct.pack("<I", len(PLACEHOLDER)) + PLACEHOLDER.encode()
    assert data.count(placeholder) == 1
    return data.replace(placeholder, raw_opcodes)


def nested_list_opcodes(levels: int) -> bytes:
    """``[[[...]]]`` ``levels`` deep: EMPTY_LIST ``levels`` times, then APPEND ``levels - 1`` times."""
    return b"]" * levels + b"a" * (levels - 1)


_MEMO_BASE = 1 << 20  # far above the memo slots pickle.dumps used for the rest of the document


def _memo_get(index: int) -> bytes:
    return b"j" + struct.pack("<I", _MEMO_BASE + index)


def _memo_put(index: int) -> bytes:
    return b"r" + struct.pack("<I", _MEMO_BASE + index)


def self_sharing_list_opcodes(levels: int) -> bytes:
    """``x0 = ["x"]; x(n+1) = [x(n), x(n)]``: a few bytes per level, 2**levels leaves when walked."""
    out = [b"]X\x01\x00\x00\x00xa", _memo_put(0)]
    for level in range(1, levels + 1):
        out += [b"0", b"(", _memo_get(level - 1), _memo_get(level - 1), b"l", _memo_put(level)]
    return b"".join(out)


def self_sharing_tuple_key_pickle(levels: int) -> bytes:
    """``{t: 1}`` where ``t(n+1) = (t(n), t(n))``: hashing the key (done while loading) takes 2**levels steps."""
    out = [b"\x80\x02}", b"X\x01\x00\x00\x00x\x85", _memo_put(0)]
    for level in range(1, levels + 1):
        out += [b"0", _memo_get(level - 1), _memo_get(level - 1), b"\x86", _memo_put(level)]
    return b"".join(out) + b"K\x01s."


# ---- memory.log ---------------------------------------------------------------------------------

MEMORY_LOG = """Memory State:
time: 0.5
---summary---
total_memory: 10.00 MB
params_memory: 1.00 MB, grads_memory: 2.00 MB, os_params_memory: 3.00 MB, os_state_memory: 1.00 MB, \
activation_memory: 3.00 MB
---Layout---
params_layout:
layer: param_mem, layer_mem: 0.00 MB, total_mem: 1.00 MB
layer: param_mem.layer1, layer_mem: 1.00 MB, total_mem: 1.00 MB

"""
