"""``profscope serve`` starts a parse worker before it builds the app (ingest/jobs.py prestart_workers): the
worker imports the parsers while the server imports the web framework, and the ingest manager parses with it."""

from __future__ import annotations

import os
from pathlib import Path

from profscope.cache import TraceCache
from profscope.ingest import jobs
from profscope.ingest.jobs import IngestManager, WorkerLimits, prestart_workers
from profscope.sources import LocalSource


def _manager(tmp_path: Path, workers: int, memory_bytes: int = 0) -> IngestManager:
    return IngestManager(
        TraceCache(tmp_path / "cache"),
        workers,
        1 << 30,
        source_for=lambda _: LocalSource(tmp_path),
        limits=WorkerLimits(memory_bytes=memory_bytes),
    )


def test_the_manager_parses_with_the_prestarted_worker(tmp_path: Path) -> None:
    prestart_workers(2)
    pool = jobs._prestarted[0]
    worker_pids = {process.pid for process in pool._processes.values()}
    assert len(worker_pids) == 1 and os.getpid() not in worker_pids
    manager = _manager(tmp_path, 2)
    try:
        assert manager._pool is pool and jobs._prestarted is None  # taken over once
        assert manager._ensure_pool() is pool
    finally:
        manager.close()


def test_other_worker_settings_start_a_pool_of_their_own(tmp_path: Path) -> None:
    prestart_workers(2, memory_bytes=0)
    pool = jobs._prestarted[0]
    manager = _manager(tmp_path, 2, memory_bytes=8 << 30)  # the prestarted workers have no memory cap
    try:
        assert manager._pool is None and jobs._prestarted is None
        assert pool._shutdown_thread  # stopped, not left running
    finally:
        manager.close()
