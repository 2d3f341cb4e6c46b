"""A small valid kineto trace with very many threads: the shape that made one area summary cost seconds.

Each of ``threads`` threads runs ``ops_per_thread`` short ``cpu_op`` slices, all threads at the same
times: a window over the first slice of each holds ``threads`` slices on ``threads`` tracks.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

SLICE_PERIOD_US = 100.0
SLICE_US = 50.0


def write_many_threads_trace(path: Path, threads: int, ops_per_thread: int) -> Path:
    base_us = 1_700_000_000_000.0
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{k}", "pid": 1, "tid": 1000 + t,
         "ts": base_us + k * SLICE_PERIOD_US, "dur": SLICE_US, "args": {}}
        for t in range(threads)
        for k in range(ops_per_thread)
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": events}).encode(), 1))
    return path
