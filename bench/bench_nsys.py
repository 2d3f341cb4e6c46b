"""Ingest time and peak memory of a scaled Nsight Systems SQLite export.

``scale`` copies a real export and appends copies of its event rows, each copy shifted in time by the
export's span and in correlation id by its largest id (so launches still pair with their own kernels),
until the file reaches the target size; every copy is one ``INSERT ... SELECT`` per table, in SQLite.
``profscope ingest`` then runs on it under ``/usr/bin/time -v``, like ``run_bench.py`` times traces.

    python bench/bench_nsys.py --target-mb 40                       # a small run (the machine is shared)
    python bench/bench_nsys.py --target-mb 1024 --keep /tmp/nsys_1GB.sqlite   # the 1 GB measurement
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO / "tests/corpus/nsys-sqlite/GindaChen_nsys-ai/tests/fixtures/mfu_2gpu_before.sqlite"
# tables whose rows are events: (table, its time columns, whether it has a correlationId)
EVENT_TABLES = (
    ("CUPTI_ACTIVITY_KIND_KERNEL", ("start", "end"), True),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", ("start", "end"), True),
    ("CUPTI_ACTIVITY_KIND_MEMSET", ("start", "end"), True),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", ("start", "end"), True),
    ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", ("start", "end"), True),
    ("NVTX_EVENTS", ("start", "end"), False),
    ("CUDA_GPU_MEMORY_USAGE_EVENTS", ("start",), True),
)


def _tables(connection: sqlite3.Connection) -> set[str]:
    return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(connection: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]


def scale(source: Path, target: Path, target_bytes: int) -> dict[str, int]:
    """Copy ``source`` to ``target`` and grow it past ``target_bytes`` with time-shifted copies of its events."""
    shutil.copy(source, target)
    target.chmod(0o644)
    with sqlite3.connect(target) as connection:
        present = [(t, times, corr) for t, times, corr in EVENT_TABLES if t in _tables(connection)]
        span = max(connection.execute(f'SELECT MAX("{times[-1]}") - MIN(start) FROM {t}').fetchone()[0] or 0
                   for t, times, _ in present) + 1  # fmt: skip
        correlations = [connection.execute(f"SELECT MAX(correlationId) FROM {t}").fetchone()[0] or 0
                        for t, _, corr in present if corr]  # fmt: skip
        correlation_step = max(correlations, default=0) + 1
        for table, _, _ in present:  # the original rows, the pattern every copy repeats
            connection.execute(f'CREATE TEMP TABLE "orig_{table}" AS SELECT * FROM "{table}"')
        copies = 0
        while target.stat().st_size < target_bytes:
            copies += 1
            for table, times, has_correlation in present:
                columns = _columns(connection, table)
                shifted = {c: f'"{c}" + {copies * span}' for c in times}
                if has_correlation:
                    shifted["correlationId"] = f'"correlationId" + {copies * correlation_step}'
                select = ", ".join(shifted.get(c, f'"{c}"') for c in columns)
                connection.execute(f'INSERT INTO "{table}" SELECT {select} FROM "orig_{table}"')
            connection.commit()
        rows = {t: connection.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t, _, _ in present}
    connection.close()
    return {"copies": copies + 1, "bytes": target.stat().st_size, "event_rows": sum(rows.values()), **rows}


def timed_ingest(path: Path) -> dict[str, float]:
    """Wall and CPU seconds and peak RSS (MB) of ``profscope ingest`` on one file, from ``/usr/bin/time -v``."""
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "profscope.cli", "ingest", str(path)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    cpu = [float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", done.stderr)]
    assert wall and peak and len(cpu) == 2, done.stderr
    hours, minutes, seconds = int(wall.group(1) or 0), int(wall.group(2)), float(wall.group(3))
    return {
        "wall_s": hours * 3600 + minutes * 60 + seconds,
        "cpu_s": round(sum(cpu), 2),  # user + system: the steadier figure on a shared machine
        "peak_mb": int(peak.group(1)) / 1024,
        "parse_s": report["parse_s"],
        "events": report["events"],
        "kernels": report["kernels"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="a real nsys SQLite export")
    parser.add_argument("--target-mb", type=float, default=40.0, help="size of the scaled export")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="write the scaled export here (default: a temporary file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-nsys-") as folder:
        target = args.keep or Path(folder) / f"{args.source.stem}_x{args.target_mb:g}MB.sqlite"
        made = scale(args.source, target, int(args.target_mb * (1 << 20)))
        print(json.dumps({"scaled": str(target), **made}), flush=True)
        for _ in range(args.runs):
            print(json.dumps({"file": target.name, "mb": round(made["bytes"] / (1 << 20), 1), **timed_ingest(target)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
