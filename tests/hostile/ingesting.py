"""Run the whole ingest of one file (parse, every view payload, the timeline index) in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profscope.ingest.jobs import IngestRequest, run_job
from profscope.sources.local import LocalSource
from profscope.views.registry import queries


def ingest_in_process(tmp_path: Path, name: str, data: bytes, kind: str = "trace", **limits: Any) -> dict[str, Any]:
    """What the worker pool would answer for ``data`` saved as ``name``: the summary, or ``{"error": ...}``."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    (root / name).write_bytes(data)
    request = IngestRequest(
        source=LocalSource(root),
        key=name,
        size=len(data),
        cache_key=f"{kind}-{name}",
        cache_root=str(tmp_path / "cache"),
        max_trace_bytes=limits.get("max_trace_bytes", 1 << 30),
        kind=kind,
        max_snapshot_bytes=limits.get("max_snapshot_bytes", 1 << 30),
        queries=queries(kind),
    )
    return run_job(request)
