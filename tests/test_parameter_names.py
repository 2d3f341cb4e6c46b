"""Same parameter names on pages and API (issue 12, item 6; docs/ARCHITECTURE.md, "Parameter names"), over real
HTTP: a snapshot timeline's window is named for its axis (``start_us`` / ``end_us``, or ``start_entry`` /
``end_entry`` for a snapshot without times); the old ``start`` / ``end`` still answer the same."""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Iterator

import httpx
import pytest

from conftest import corpus_file
from serving import running_server, wait_for

TIMED = "memory-snapshots/ZidongLiu_DeComFL/memory.pickle"  # a training loop's history, with times
TIMELINE = "/api/memory/snapshot/timeline"


def _untimed_snapshot() -> dict:
    """Twelve allocations and frees recorded without ``time_us``: the timeline's axis is the entry index."""
    frame = {"filename": "train.py", "line": 7, "name": "forward"}
    entries = []
    for i in range(6):
        entries.append({"action": "alloc", "addr": i * 4096, "size": 1000 * (i + 1), "stream": 0, "frames": [frame]})
    for i in range(6):
        entries.append(
            {"action": "free_completed", "addr": i * 4096, "size": 1000 * (i + 1), "stream": 0, "frames": [frame]}
        )
    segment = {"device": 0, "address": 0, "total_size": 1 << 20, "allocated_size": 0, "active_size": 0,
               "requested_size": 0, "stream": 0, "segment_type": "large",
               "blocks": [{"size": 1 << 20, "requested_size": 0, "state": "inactive", "frames": []}]}  # fmt: skip
    return {"segments": [segment], "device_traces": [entries]}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("names")
    run = work / "root" / "job"
    run.mkdir(parents=True)
    shutil.copy(corpus_file(TIMED), run / "timed.pickle")
    (run / "untimed.pickle").write_bytes(pickle.dumps(_untimed_snapshot(), protocol=4))
    with running_server([work / "root"], work / "cache") as url:

        def parsed() -> bool:
            runs = httpx.get(f"{url}/api/runs").json()["runs"]
            return bool(runs) and all(s["state"] == "ready" for s in runs[0]["snapshots"])

        wait_for(parsed, timeout=120)
        yield url


def _timeline(base: str, snapshot: str, **window: float) -> httpx.Response:
    return httpx.get(f"{base}{TIMELINE}", params={"run": "job", "snapshot": snapshot, "width_px": 400, **window})


@pytest.mark.parametrize(("snapshot", "axis", "new", "other"), [
    ("timed", "time_us", ("start_us", "end_us"), ("start_entry", "end_entry")),
    ("untimed", "entry", ("start_entry", "end_entry"), ("start_us", "end_us")),
])  # fmt: skip
def test_a_snapshot_window_by_its_new_names_and_its_old_ones_is_the_same(
    base: str, snapshot: str, axis: str, new: tuple[str, str], other: tuple[str, str]
) -> None:
    whole = _timeline(base, snapshot).json()
    assert whole["axis"] == axis
    low, high = whole["x_range"]
    start, end = int(low + (high - low) * 0.25), int(low + (high - low) * 0.75)
    by_new = _timeline(base, snapshot, **{new[0]: start, new[1]: end})
    by_old = _timeline(base, snapshot, start=start, end=end)
    assert by_new.status_code == by_old.status_code == 200, by_new.text
    assert by_new.json() == by_old.json()
    assert by_new.json()["window"] == [start, end] != whole["window"]  # the window was applied, not ignored
    both = _timeline(base, snapshot, **{new[0]: start, new[1]: end}, start=low, end=high)
    assert both.json() == by_new.json()  # the new names win over the old ones
    wrong = _timeline(base, snapshot, **{other[0]: start, other[1]: end})
    assert wrong.status_code == 422 and " / ".join(new) in wrong.json()["detail"]


def test_the_old_window_names_are_documented_as_deprecated(base: str) -> None:
    parameters = httpx.get(f"{base}/openapi.json").json()["paths"][TIMELINE]["get"]["parameters"]
    deprecated = {p["name"] for p in parameters if p.get("deprecated")}
    assert deprecated == {"start", "end"}
    assert {"start_us", "end_us", "start_entry", "end_entry"} <= {p["name"] for p in parameters}
