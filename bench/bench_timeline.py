"""Trace view benchmark: ingest (with the timeline index), first window, window requests, bytes.

    python bench/bench_timeline.py bench/out/resnet50_x1GB.json.gz [--requests 200] [--width 2000]

Ingests the trace with ``profscope ingest`` into a fresh cache directory (a subprocess, as the
worker pool does), then, in this process, opens the cached tables and index memory-mapped as the
server does and times:
- the first window after ingest: open the cache + the whole trace at ``--width`` px + JSON encoding
  (the server's share of "time to the first drawn timeline");
- window requests (analysis + JSON encoding) for the whole trace, a 10% window, a 1% window and deep
  zooms (100 us - 2 ms), at random positions: p50 / p95 / max;
- response bytes at ``--width`` px (raw JSON and gzip, as sent with Accept-Encoding: gzip).
Prints one JSON line per measurement group.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson


def _percentiles(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples) * 1000.0
    return {
        "p50_ms": round(float(np.percentile(values, 50)), 1),
        "p95_ms": round(float(np.percentile(values, 95)), 1),
        "max_ms": round(float(values.max()), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--requests", type=int, default=100, help="requests per window kind")
    parser.add_argument("--width", type=int, default=2000)
    parser.add_argument("--cache-dir", type=Path, default=None, help="reuse an ingested cache (skips ingest)")
    args = parser.parse_args()

    cache_dir = args.cache_dir
    if cache_dir is None:
        cache_dir = Path(tempfile.mkdtemp(prefix="profscope-bench-timeline-"))
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "profscope.cli", "ingest", str(args.trace), "--cache-dir", str(cache_dir)],
            check=True,
            capture_output=True,
            text=True,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            json.dumps(
                {
                    "what": "ingest",
                    "trace": args.trace.name,
                    "wall_s": round(time.perf_counter() - started, 2),
                    "parse_s": round(result["parse_s"], 2),
                    "timeline_index_s": round(result["phase_s"]["timeline_index"], 2),
                    "events": result["events"],
                }
            )
        )

    from profscope.analysis import timeline
    from profscope.analysis.timeline_index import TimelineIndex
    from profscope.tables import TraceTables

    key_dir = next(p for p in cache_dir.iterdir() if (p / "timeline").is_dir())
    started = time.perf_counter()
    tables = TraceTables.load(key_dir / "tables")
    index = TimelineIndex.load(key_dir / "timeline")
    listing = orjson.dumps(timeline.track_listing(tables, index), option=orjson.OPT_SERIALIZE_NUMPY)
    duration = index.info["duration_ns"]
    first = orjson.dumps(timeline.window(tables, index, 0, duration, args.width))
    first_s = time.perf_counter() - started
    print(
        json.dumps(
            {
                "what": "first_window",
                "open_and_whole_trace_ms": round(first_s * 1000, 1),
                "tracks": len(index.info["tracks"]),
                "listing_bytes": len(listing),
                "bytes": len(first),
                "gzip_bytes": len(gzip.compress(first, 6)),
            }
        )
    )

    rng = np.random.default_rng(1)
    kinds = {
        "whole": lambda: (0, duration),
        "10%": lambda: _at(rng, duration, duration // 10),
        "1%": lambda: _at(rng, duration, duration // 100),
        "deep": lambda: _at(rng, duration, int(rng.integers(100_000, 2_000_000))),
    }
    for name, make in kinds.items():
        times, sizes, zipped = [], [], []
        for _ in range(args.requests):
            start, end = make()
            t0 = time.perf_counter()
            body = orjson.dumps(timeline.window(tables, index, start, end, args.width))
            times.append(time.perf_counter() - t0)
            sizes.append(len(body))
            if len(zipped) < 10:
                zipped.append(len(gzip.compress(body, 6)))
        print(
            json.dumps(
                {
                    "what": f"window_{name}",
                    "width_px": args.width,
                    **_percentiles(times),
                    "bytes_max": max(sizes),
                    "bytes_p50": int(np.median(sizes)),
                    "gzip_bytes_max_of_10": max(zipped),
                }
            )
        )
    return 0


def _at(rng: np.random.Generator, duration: int, length: int) -> tuple[int, int]:
    start = int(rng.integers(0, max(duration - length, 1)))
    return start, start + max(length, 1)


if __name__ == "__main__":
    sys.exit(main())
