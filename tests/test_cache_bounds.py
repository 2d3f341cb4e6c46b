"""The local cache stays bounded, on a real server over HTTP: entries of files deleted or overwritten are dropped,
and beyond --cache-max-bytes the least recently used entries no served run needs are evicted."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from conftest import corpus_file
from serving import get_json, running_server, wait_for

SPANS = [
    "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz",
    "generated/tinygpt_cpu/worker0.1795315486718467596.pt.trace.json.gz",
]
RANK0 = "generated/tinygpt_ddp4_gloo/rank0.1795315503706026973.pt.trace.json.gz"


def _entries(cache: Path) -> set[str]:
    folder = cache / "traces"
    return {p.name for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()


def _metric(base: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"no {name} {labels} in /metrics")


def _parsed(base: str, files: int) -> bool:
    runs = get_json(f"{base}/api/runs")[1]["runs"]  # type: ignore[index]
    states = [f["state"] for run in runs for f in run["files"]]
    return len(states) == files and all(state == "ready" for state in states)


def _entry_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_entries_of_overwritten_and_deleted_files_are_dropped(tmp_path: Path) -> None:
    run = tmp_path / "root" / "job"
    run.mkdir(parents=True)
    first, second = (run / Path(span).name for span in SPANS)
    for span, target in zip(SPANS, (first, second), strict=True):
        shutil.copy(corpus_file(span), target)
    cache = tmp_path / "cache"
    with running_server([tmp_path / "root"], cache, "--rescan-seconds", "0.2") as base:
        wait_for(lambda: _parsed(base, 2), timeout=90)
        before = _entries(cache)
        assert len(before) == 2

        shutil.copy(corpus_file(RANK0), first)  # overwritten: other content, same name
        wait_for(lambda: _parsed(base, 2) and len(_entries(cache) - before) == 1, timeout=90)
        assert len(_entries(cache)) == 2  # the old entry of the overwritten file is gone, the new one is there
        second.unlink()
        wait_for(lambda: len(_entries(cache)) == 1, timeout=30)
        assert _entries(cache) - before == _entries(cache)  # what is left is the new entry
        assert _metric(base, "profscope_cache_entries_removed_total", reason="gone") == 2
        assert _metric(base, "profscope_cache_entries_removed_total", reason="size") == 0
        overview = httpx.get(f"{base}/api/overview", params={"run": "job"}, timeout=30)
        assert overview.status_code == 200


def test_beyond_the_limit_the_least_recently_used_entries_no_run_needs_are_evicted(tmp_path: Path) -> None:
    """A cache filled by a server of other folders (two entries), then a server of one new folder with a limit
    only the more recently used of those two fits in: the older is evicted, the newer and the served run kept."""
    cache = tmp_path / "cache"
    earlier = tmp_path / "earlier" / "job"
    earlier.mkdir(parents=True)
    for span in SPANS:
        shutil.copy(corpus_file(span), earlier / Path(span).name)
    with running_server([earlier.parent], cache) as base:
        wait_for(lambda: _parsed(base, 2), timeout=90)
    older, newer = sorted(_entries(cache))
    now = time.time()
    os.utime(cache / "traces" / older, (now - 3600, now - 3600))  # used an hour ago
    os.utime(cache / "traces" / newer, (now - 60, now - 60))  # a minute ago
    limit = _entry_bytes(cache / "traces" / newer) + 1000

    served = tmp_path / "now" / "job"
    served.mkdir(parents=True)
    shutil.copy(corpus_file(RANK0), served / Path(RANK0).name)
    with running_server([served.parent], cache, "--cache-max-bytes", str(limit)) as base:
        wait_for(lambda: _parsed(base, 1), timeout=90)
        entries = _entries(cache)
        assert older not in entries and newer in entries and len(entries) == 2  # + the served file's
        assert _metric(base, "profscope_cache_entries_removed_total", reason="size") == 1
        assert _metric(base, "profscope_cache_entries_removed_total", reason="gone") == 0
        assert _metric(base, "profscope_cache_max_bytes") == limit
