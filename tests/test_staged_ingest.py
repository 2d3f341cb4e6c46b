"""Many files at once: each file's first views (the Overview, its rank summary) come before any file's other
views (issue 18, item 4). While other files wait for their parse, a worker parses a file and computes only its
``first`` queries (stage FIRST: the entry stays unfinished, its manifest lists them); the rest of its views are
queued behind every waiting file and computed from the saved tables (stage REST), which finishes the entry.
The staged results must be byte for byte those of one ingest, and the Distributed view of a many-rank run must
be ready while the workers are held before any slower view."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import httpx

from conftest import corpus_file
from profscope.cache import TraceCache
from profscope.catalog import build_runs
from profscope.ingest.jobs import IngestRequest, run_ingest
from profscope.ingest.request import ALL, FIRST, REST
from profscope.sources import LocalSource
from profscope.views.registry import queries
from serving import running_server, wait_for

RANK = "generated/tinygpt_ddp4_gloo/rank1.1795315503666467455.pt.trace.json.gz"
DDP_RUN = "generated/tinygpt_ddp4_gloo"


def _request(tmp_path: Path, name: str, stage: str) -> IngestRequest:
    root = tmp_path / name / "root" / "run"
    root.mkdir(parents=True)
    shutil.copy(corpus_file(RANK), root / Path(RANK).name)
    source = LocalSource(root.parent)
    (trace,) = [t for run in build_runs([("root", source.uri, source.list())]).values() for t in run.traces()]
    request = IngestRequest.for_file(trace, source, tmp_path / name / "cache", queries(), 1 << 30)
    return dataclasses.replace(request, stage=stage, second_core=False)


def _views(request: IngestRequest) -> dict[str, bytes]:
    entry = TraceCache(Path(request.cache_root)).directory(request.cache_key)
    return {
        str(path.relative_to(entry)): path.read_bytes()
        for path in sorted((entry / "views").iterdir()) + sorted((entry / "timeline").iterdir())
    }


def test_first_then_rest_gives_what_one_ingest_gives(tmp_path: Path) -> None:
    whole = _request(tmp_path, "whole", ALL)
    expected_summary = run_ingest(whole)
    staged = _request(tmp_path, "staged", FIRST)
    cache = TraceCache(Path(staged.cache_root))
    assert run_ingest(staged) == {"rest_later": True}
    assert cache.summary(staged.cache_key) is None  # unfinished: served only as its manifest lists
    first = sorted(q.stored_name for q in staged.queries if q.first)
    assert sorted(cache.progress(staged.cache_key)["views"]) == first
    assert sorted(p.stem for p in (cache.directory(staged.cache_key) / "views").iterdir()) == first
    summary = run_ingest(dataclasses.replace(staged, stage=REST))
    assert cache.summary(staged.cache_key) == summary
    assert summary.keys() == expected_summary.keys() and summary["view_errors"] == {}
    assert set(summary["phase_s"]) == set(expected_summary["phase_s"])
    assert _views(staged) == _views(whole)


def test_a_rest_stage_without_its_first_stage_parses_again(tmp_path: Path) -> None:
    whole = _request(tmp_path, "whole", ALL)
    run_ingest(whole)
    orphan = _request(tmp_path, "orphan", REST)  # nothing was parsed for it (the entry was dropped meanwhile)
    summary = run_ingest(orphan)
    assert "error" not in summary and summary["events"] > 0
    assert _views(orphan) == _views(whole)


def test_every_rank_summary_comes_before_any_slower_view(tmp_path: Path, held: Path) -> None:
    """One worker, eight files of a 4-rank job (two spans), held before every view that is not ``first``: without
    the stages it would sit in the first file's slower views and the Distributed view would wait for all of them."""
    root = tmp_path / "roots"
    shutil.copytree(corpus_file(DDP_RUN), root / "ddp")
    with running_server([root], tmp_path / "cache", workers=1) as base:

        def run() -> dict:
            return httpx.get(f"{base}/api/run", params={"run": "ddp"}, timeout=30).json()

        wait_for(lambda: run()["view_states"].get("distributed") == "ready", timeout=240)
        status = run()
        assert status["state"] == "parsing"
        assert status["view_states"]["overview"] == "ready"
        assert {status["view_states"][v] for v in ("operators", "modules", "trace")} == {"computing"}
        distributed = httpx.get(f"{base}/api/distributed", params={"run": "ddp"}, timeout=60)
        assert distributed.status_code == 200 and len(distributed.json()["ranks"]) == 4
        assert httpx.get(f"{base}/api/operators", params={"run": "ddp"}, timeout=30).status_code == 202

        held.touch()
        wait_for(lambda: run()["state"] == "ready", timeout=240)
        status = run()
        assert set(status["view_states"].values()) == {"ready"} and status["errors"] == []
        assert httpx.get(f"{base}/api/operators", params={"run": "ddp"}, timeout=30).status_code == 200
        assert httpx.get(f"{base}/api/distributed", params={"run": "ddp"}, timeout=60).json() == distributed.json()
