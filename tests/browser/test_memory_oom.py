"""A snapshot taken at an out-of-memory opens on the device and the moment that ran out, and the Runs page
marks it: a real snapshot (DeComFL, one GPU) made into a 3-GPU one whose second GPU records an ``oom`` entry (as the
allocator writes it: the request's size, what the driver had free, the failing call's frames)."""

from __future__ import annotations

import copy
import csv
import io
import pickle
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import POLYGONS, Server, corpus_path, get_json, parsed_server, query_of, screenshot, wait_for_plot

SOURCE = "memory-snapshots/ZidongLiu_DeComFL/memory.pickle"  # Apache-2.0, with allocation history
OOM_DEVICE = 1


def three_gpu_snapshot_with_an_oom_on_gpu1() -> dict:
    with open(corpus_path(SOURCE), "rb") as f:
        snapshot = pickle.load(f)  # the corpus is trusted: the plain unpickler writes the test's own pickle
    trace = snapshot["device_traces"][0]
    snapshot["device_traces"] = [trace, copy.deepcopy(trace), copy.deepcopy(trace)]
    snapshot["segments"] += [{**segment, "device": d} for d in (1, 2) for segment in snapshot["segments"]]
    failing = snapshot["device_traces"][OOM_DEVICE]
    failing.append({"action": "oom", "addr": 0, "size": 8 << 30, "stream": 0, "device_free": 50 << 20,
                    "time_us": failing[-1]["time_us"] + 10, "frames": failing[-1]["frames"]})  # fmt: skip
    return snapshot


@pytest.fixture(scope="module")
def oom_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("oom")
    (work / "job").mkdir()
    (work / "job" / "oom_snapshot.pickle").write_bytes(pickle.dumps(three_gpu_snapshot_with_an_oom_on_gpu1()))
    with parsed_server([work / "job"], work) as server:
        yield server


def test_runs_page_marks_the_snapshot_that_ran_out_of_memory(page, oom_server: Server) -> None:
    _, runs = get_json(f"{oom_server.url}/api/runs")
    (run,) = runs["runs"]
    assert [s["oom_devices"] for s in run["snapshots"]] == [[OOM_DEVICE]]
    page.goto(oom_server.url)
    badge = page.get_by_test_id("snapshot-link").get_by_test_id("oom-badge")
    badge.wait_for()
    assert badge.inner_text() == "OOM" and badge.get_attribute("title") == "Ran out of memory on cuda:1"
    screenshot(page, "runs-oom-badge")


def test_memory_page_opens_on_the_oom_device_and_moment(page, oom_server: Server) -> None:
    page.goto(f"{oom_server.url}/memory?run=job")
    moment = page.get_by_test_id("oom-moment")
    moment.wait_for()
    assert query_of(page.url)["device"] == str(OOM_DEVICE)
    assert page.locator("#sel-device").input_value() == str(OOM_DEVICE)
    banner = page.get_by_test_id("oom-banner")
    assert "cuda:1 ran out of memory at " in banner.inner_text()
    assert "8.0 GiB" in moment.inner_text() and "50.0 MiB" in moment.inner_text()
    page.wait_for_function("() => document.querySelector('#oom').getBoundingClientRect().top < innerHeight / 2")
    wait_for_plot(page, "#snapshot-timeline", POLYGONS)
    _, summary = get_json(f"{oom_server.url}/api/memory/snapshot?run=job&device={OOM_DEVICE}")
    info = next(d for d in summary["devices"] if d["device"] == OOM_DEVICE)
    _, ooms = get_json(f"{oom_server.url}/api/memory/snapshot/oom?run=job&device={OOM_DEVICE}")
    assert info["oom_count"] == 1 and info["first_oom_at_us"] == ooms["ooms"][0]["at_us"]
    assert "OOM" in page.locator("#snapshot-timeline text.vline-text").all_text_contents()
    screenshot(page, "memory-opens-on-oom")


def test_another_device_points_at_the_one_that_ran_out(page, oom_server: Server) -> None:
    page.goto(f"{oom_server.url}/memory?run=job&device=0")
    banner = page.get_by_test_id("oom-banner")
    banner.wait_for()
    assert page.get_by_test_id("oom-moment").count() == 0
    banner.get_by_role("button", name="cuda:1 ran out of memory").click()
    page.get_by_test_id("oom-moment").wait_for()
    assert query_of(page.url)["device"] == str(OOM_DEVICE)


def test_a_snapshot_without_oom_opens_on_its_first_device(page, tmp_path: Path) -> None:
    with open(corpus_path(SOURCE), "rb") as f:
        snapshot = pickle.load(f)
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "snapshot.pickle").write_bytes(pickle.dumps(snapshot))
    with parsed_server([tmp_path / "plain"], tmp_path) as server:
        page.goto(f"{server.url}/memory?run=plain")
        wait_for_plot(page, "#snapshot-timeline", POLYGONS)
        assert query_of(page.url)["device"] == "0"
        assert page.get_by_test_id("oom-banner").count() == 0
        _, runs = get_json(f"{server.url}/api/runs")
        assert runs["runs"][0]["snapshots"][0]["oom_devices"] == []


def test_a_segments_only_snapshot_says_it_has_no_timeline(page, tmp_path: Path) -> None:
    """A snapshot without allocation history (ZijianDu_Attention: segments only) drew a meaningless 0-1 axis."""
    (tmp_path / "segments").mkdir()
    shutil.copy(corpus_path("memory-snapshots/ZijianDu_Attention/memory.pickle"), tmp_path / "segments")
    with parsed_server([tmp_path / "segments"], tmp_path) as server:
        page.goto(f"{server.url}/memory?run=segments")
        timeline = page.get_by_test_id("snapshot-timeline")
        timeline.get_by_test_id("empty-state").wait_for()
        assert "No allocation history in this snapshot" in timeline.inner_text()
        assert timeline.locator("svg.chart-svg").count() == 0
        page.get_by_test_id("top-allocations").locator("tbody tr").first.wait_for()  # what was live is shown
        screenshot(page, "memory-segments-only")


def test_largest_live_allocations_download_as_csv(page, oom_server: Server) -> None:
    """The page's CSV and the JSON twin's format=csv list the same allocations, largest first."""
    page.goto(f"{oom_server.url}/memory?run=job&device=0")
    top = page.get_by_test_id("top-allocations")
    top.locator("tbody tr").first.wait_for()
    with page.expect_download() as info:
        top.locator(".csv-download").click()
    header, *rows = csv.reader(io.StringIO(Path(info.value.path()).read_text(encoding="utf-8")))
    assert header[:2] == ["Size", "Address"]
    url = f"{oom_server.url}/api/memory/snapshot/top?run=job&device=0&limit={len(rows)}&format=csv"
    with urllib.request.urlopen(url) as response:
        api_header, *api_rows = csv.reader(io.StringIO(response.read().decode()))
    addr, size = api_header.index("addr"), api_header.index("size")
    assert [(r[addr], r[size]) for r in api_rows] == [(r[1], r[0]) for r in rows]
