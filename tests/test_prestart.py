"""``profscope serve`` starts a parse worker before it builds the app (ingest/jobs.py prestart_workers): the
worker imports the parsers while the server imports the web framework, and the ingest manager parses with it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("threads", [1, 2])
def test_the_manager_parses_with_the_prestarted_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    """With no other thread (``serve``, after its imports) the workers are forked, all at once, their imports
    done; once another thread runs, a fork could copy a lock it holds: one worker is spawned."""
    import shutil
    import time

    from conftest import corpus_file
    from profscope.catalog import build_runs

    monkeypatch.setattr(jobs.threading, "active_count", lambda: threads)
    prestart_workers(2)
    pool = jobs._prestarted[0]
    worker_pids = {process.pid for process in pool._processes.values()}
    assert os.getpid() not in worker_pids
    assert pool._mp_context.get_start_method() == ("fork" if threads == 1 else "spawn")
    assert len(worker_pids) == (2 if threads == 1 else 1)
    root = tmp_path / "root" / "run"
    root.mkdir(parents=True)
    trace = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
    shutil.copy(corpus_file(trace), root / Path(trace).name)
    manager = IngestManager(TraceCache(tmp_path / "cache"), 2, 1 << 30, source_for=lambda _: LocalSource(root.parent))
    try:
        assert manager._pool is pool and jobs._prestarted is None  # taken over once
        assert manager._ensure_pool() is pool
        source = LocalSource(root.parent)
        (file,) = [t for run in build_runs([("root", source.uri, source.list())]).values() for t in run.traces()]
        manager.request(file)
        deadline = time.monotonic() + 120
        while manager.state(file).state not in ("ready", "error") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert manager.state(file).state == "ready"
        assert {process.pid for process in pool._processes.values()} >= worker_pids  # the same pool parsed it
    finally:
        manager.close()


def test_workers_that_no_manager_takes_are_stopped() -> None:
    prestart_workers(1)
    pool = jobs._prestarted[0]
    jobs.stop_prestarted_workers()
    assert jobs._prestarted is None and pool._shutdown_thread


def test_other_worker_settings_start_a_pool_of_their_own(tmp_path: Path) -> None:
    prestart_workers(2, memory_bytes=0)
    pool = jobs._prestarted[0]
    manager = _manager(tmp_path, 2, memory_bytes=8 << 30)  # the prestarted workers have no memory cap
    try:
        assert manager._pool is None and jobs._prestarted is None
        assert pool._shutdown_thread  # stopped, not left running
    finally:
        manager.close()


def test_one_core_per_parse_keeps_a_lone_parse_on_one_process(tmp_path: Path) -> None:
    """``--cores-per-parse 1``: a parse alone on the machine gets no second process (the lowest peak memory)."""
    import shutil
    from concurrent.futures import Future

    from conftest import corpus_file
    from profscope.catalog import build_runs
    from profscope.config import Settings

    trace = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
    root = tmp_path / "root" / "run"
    root.mkdir(parents=True)
    shutil.copy(corpus_file(trace), root / Path(trace).name)
    source = LocalSource(root.parent)
    (file,) = [t for run in build_runs([("root", source.uri, source.list())]).values() for t in run.traces()]

    class Recorded:  # the pool, seen from the manager: what it was asked to run
        def __init__(self) -> None:
            self.requests: list = []

        def submit(self, job: object, request: object) -> Future:
            self.requests.append(request)
            return Future()

    assert Settings().cores_per_parse == 2  # the server's default
    for cores, second_core in ((1, False), (2, True)):
        manager = _manager(tmp_path / str(cores), 1)
        manager.limits = WorkerLimits(cores=cores)
        manager._pool = pool = Recorded()
        manager.request(file)
        assert [request.second_core for request in pool.requests] == [second_core]
        manager._pool = None
        manager.close()


def test_the_first_parse_is_handed_out_before_the_metrics_library_is_imported(tmp_path: Path) -> None:
    """``serve`` builds its state and hands out the first parses before prometheus_client is imported (~40 ms,
    state.Profscope.metrics): that import happens while the parse runs, and the parse is still counted."""
    import shutil
    import subprocess
    import sys

    from conftest import corpus_file

    root = tmp_path / "root" / "run"
    root.mkdir(parents=True)
    trace = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
    shutil.copy(corpus_file(trace), root / Path(trace).name)
    script = f"""
import sys, time
running_at_import = []

class Watch:  # notes, when prometheus_client is first imported, how many parses were handed out
    def find_spec(self, name, path=None, target=None):
        if name == "prometheus_client":
            running_at_import.append(len(state.ingest._running) if "state" in globals() else None)
        return None

sys.meta_path.insert(0, Watch())
from profscope.config import Settings
from profscope.state import Profscope
assert "prometheus_client" not in sys.modules
state = Profscope(Settings(roots=[{str(root.parent)!r}], cache_dir={str(tmp_path / "cache")!r}, workers=1))
assert "prometheus_client" not in sys.modules
state.start()
deadline = time.monotonic() + 120
while not state.cache.is_ready(next(iter(state.ingest._states))) and time.monotonic() < deadline:
    time.sleep(0.05)
state.stop()
print(running_at_import, state.metrics.ingest.started._value.get(), state.metrics.ingest.finished._value.get())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[1]", "1.0", "1.0"]


@pytest.mark.parametrize("moment", ["workers forked", "server runs"])
def test_serve_imports_without_collection_and_turns_it_back_on(tmp_path: Path, moment: str) -> None:
    """``serve`` pauses the cyclic garbage collector while it imports (malloc_tuning.collection_paused): it is on
    again when the parse workers are forked from it (they inherit it) and when the server starts answering."""
    import subprocess
    import sys

    patched = (
        "import profscope.ingest.jobs as target; name = 'prestart_workers'"
        if moment == "workers forked"
        else "import uvicorn as u; target = u.Server; name = 'run'"
    )
    script = f"""
import gc, os, sys
{patched}
def seen(*args, **kwargs):
    print("collection on:", gc.isenabled(), "during imports:", paused, flush=True)
    os._exit(0)
setattr(target, name, seen)
from profscope import cli
from profscope.ingest import malloc_tuning
paused = []
collection_paused = malloc_tuning.collection_paused
def watched():
    manager = collection_paused()
    class Watch:
        def __enter__(self):
            manager.__enter__(); paused.append(gc.isenabled())
        def __exit__(self, *exc):
            return manager.__exit__(*exc)
    return Watch()
malloc_tuning.collection_paused = watched
cli.main(["serve", {str(tmp_path)!r}, "--port", "0", "--cache-dir", {str(tmp_path / "cache")!r}])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    paused = "[False]" if moment == "workers forked" else "[False, False]"
    assert done.stdout.strip() == f"collection on: True during imports: {paused}"


def test_glibc_is_opened_by_its_soname_without_a_subprocess(monkeypatch):
    """``ctypes.util.find_library`` runs ``ldconfig -p`` in a subprocess (~11 ms on ``serve``'s way to its first
    parse): the malloc tuning opens glibc by its soname, as every glibc Linux names it."""
    import ctypes.util

    from profscope.ingest import malloc_tuning

    def no_subprocess(name: str) -> None:
        raise AssertionError(f"find_library({name!r}) runs ldconfig in a subprocess")

    monkeypatch.setattr(ctypes.util, "find_library", no_subprocess)
    malloc_tuning._libc.cache_clear()
    try:
        libc = malloc_tuning._libc()
        assert libc is not None and libc.malloc_trim(0) in (0, 1)
    finally:
        malloc_tuning._libc.cache_clear()
