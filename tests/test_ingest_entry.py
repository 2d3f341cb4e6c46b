"""One ingest entry point for serve, index and ingest, knowing every file kind (issue 12, item 4)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import orjson

from conftest import corpus_file
from profscope.analysis.payloads import query_of
from profscope.analysis.snapshot_stacks import snapshot_summary
from profscope.cache import TraceCache
from profscope.catalog import MEMORY_LOG, SNAPSHOT, TRACE, build_runs
from profscope.config import Settings
from profscope.ingest.memory_log_job import MEMORY_LOG_VIEW
from profscope.sources import LocalSource
from profscope.views.registry import queries

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
SNAPSHOT_FILE = "memory-snapshots/ZijianDu_Attention/memory.pickle"
MEMORY_LOG_FILE = Path(__file__).resolve().parent / "data/internlm/memory_trace/rank0_dp0_tp0/memory.log"


def _profscope(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "profscope.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def test_index_caches_a_trace_a_snapshot_and_a_memory_log(tmp_path: Path) -> None:
    run = tmp_path / "root" / "job"
    run.mkdir(parents=True)
    shutil.copy(corpus_file(TINYGPT), run / Path(TINYGPT).name)
    shutil.copy(corpus_file(SNAPSHOT_FILE), run / "rank0_memory.pickle")
    shutil.copy(MEMORY_LOG_FILE, run / "memory.log")
    cache = tmp_path / "cache"

    done = _profscope("index", str(tmp_path / "root"), "--cache-dir", str(cache))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["parsed"] == report["in_shard"] == 3 and report["failed"] == 0

    source = LocalSource(tmp_path / "root")
    files = [file for r in build_runs([("root", source.uri, source.list())]).values() for file in r.files]
    assert sorted(file.kind for file in files) == sorted([TRACE, SNAPSHOT, MEMORY_LOG])
    entries = TraceCache(Settings(cache_dir=cache).traces_cache)
    for file in files:
        summary = entries.summary(file.cache_key)
        assert summary is not None, f"{file.key} ({file.kind}) is not in the cache"
        assert summary.get("kind", TRACE) == file.kind
    by_kind = {file.kind: file for file in files}
    for query in (q for q in queries(TRACE) if q.at_ingest):  # the others wait for their first request
        assert entries.read_view(by_kind[TRACE].cache_key, query.stored_name) is not None, query.name
    stored = entries.read_view(by_kind[SNAPSHOT].cache_key, query_of(snapshot_summary).stored_name)
    assert orjson.loads(stored)["devices"]
    assert orjson.loads(entries.read_view(by_kind[MEMORY_LOG].cache_key, MEMORY_LOG_VIEW))

    again = _profscope("index", str(tmp_path / "root"), "--cache-dir", str(cache))
    assert json.loads(again.stdout.strip().splitlines()[-1])["already_cached"] == 3  # the server would parse none


def test_ingest_reads_a_snapshot_and_refuses_an_unknown_file_by_name(tmp_path: Path) -> None:
    snapshot = tmp_path / "memory.pickle"
    shutil.copy(corpus_file(SNAPSHOT_FILE), snapshot)
    (tmp_path / "notes.txt").write_text("hello")
    done = _profscope("ingest", str(snapshot), str(tmp_path / "notes.txt"), "--cache-dir", str(tmp_path / "c"))
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["file"] == str(snapshot) and lines[0]["kind"] == "snapshot" and "error" not in lines[0]
    assert lines[0]["allocations"] > 0 and not lines[0]["view_errors"]
    assert lines[1] == {"file": str(tmp_path / "notes.txt"), "error": "not a trace, allocator snapshot or memory.log"}
    assert done.returncode == 1  # one of the two files is not one profscope reads
