"""Kernel, Overview and Trace pages in Chromium on Nsight Systems exports: a real 2-GPU FSDP export of
the corpus and a hand-written two-rank run whose steps are ``iteration N`` NVTX ranges."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from nsys_export import two_rank_nccl_run

from .support import (
    BARS,
    PIE_SLICES,
    TRACE_HOOK,
    Server,
    corpus_path,
    screenshot,
    scroll_to_track,
    start_server,
    wait_for_plot,
)

pytestmark = pytest.mark.browser

FSDP = "nsys-sqlite/GindaChen_nsys-ai/tests/fixtures/mfu_2gpu_before.sqlite"
HOOK = TRACE_HOOK


@pytest.fixture(scope="module")
def nsys_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("nsys-pages")
    (root / "fsdp").mkdir()
    shutil.copy(corpus_path(FSDP), root / "fsdp" / "mfu_2gpu_before.sqlite")
    (root / "job").mkdir()
    two_rank_nccl_run(root / "job")
    work = tmp_path_factory.mktemp("nsys-server")
    started = start_server([root], work / "cache", work / "server.log")
    try:
        started.wait_parsed()
        yield started
    finally:
        started.stop()


def test_kernel_page_of_an_nsys_export(page, nsys_server):
    page.goto(f"{nsys_server.url}/kernels?run=fsdp")
    table = page.get_by_test_id("kernels-table")
    table.wait_for()
    names = table.locator("tbody td.name").all_inner_texts()
    assert any("flash_fwd_kernel" in n for n in names) and any("ncclDevKernel_SendRecv" in n for n in names)
    assert wait_for_plot(page, "#pie-kernels", PIE_SLICES) >= 2
    screenshot(page, "nsys-kernels-fsdp")


def test_overview_steps_from_nvtx_iteration_ranges(page, nsys_server):
    page.goto(f"{nsys_server.url}/overview?run=job&worker=rank1")
    assert wait_for_plot(page, "#step-chart", BARS) >= 3
    notes = page.get_by_test_id("notes").inner_text()
    assert "ranges named like steps" in notes and "'iteration 1'" in notes
    screenshot(page, "nsys-overview-job")


def test_overview_of_an_export_without_steps_says_so(page, nsys_server):
    page.goto(f"{nsys_server.url}/overview?run=fsdp")
    assert wait_for_plot(page, "#step-chart", BARS) >= 1
    assert "whole trace is treated as one step" in page.get_by_test_id("notes").inner_text()
    screenshot(page, "nsys-overview-fsdp")


def test_trace_page_draws_threads_nvtx_and_streams(page, nsys_server):
    page.goto(f"{nsys_server.url}/trace?run=fsdp")
    page.wait_for_function(f"() => {HOOK} && {HOOK}.idle && {HOOK}.answerDrawn", timeout=30_000)
    tracks = {t["name"]: t["id"] for t in page.evaluate(f"() => {HOOK}.tracks(0)")}
    assert {"stream 7", "stream 15"} <= set(tracks)  # the two GPUs' compute streams
    threads = [name for name in tracks if not name.startswith("stream")]
    assert threads, tracks  # the python threads: NVTX ranges and CUDA API calls
    drawn = []
    for name in threads:  # the view opens with the GPU streams in sight: the threads are further down
        scroll_to_track(page, 0, tracks[name])
        drawn += page.evaluate(f"([i, t]) => {HOOK}.drawnSlices(i, t)", [0, tracks[name]])
    assert drawn, "no NVTX range or API call drawn on the threads"
    scroll_to_track(page, 0, tracks["stream 7"])
    assert page.evaluate(f"([i, t]) => {HOOK}.drawnSlices(i, t)", [0, tracks["stream 7"]])
    screenshot(page, "nsys-trace-fsdp")


def test_overview_steps_from_a_range_picked_in_the_page(page, nsys_server):
    page.goto(f"{nsys_server.url}/overview?run=job&worker=rank0")
    picker = page.get_by_test_id("step-range")
    picker.wait_for()
    assert picker.input_value() == ""
    picker.select_option("ncclAllReduce")
    page.wait_for_url(lambda url: "step_range=ncclAllReduce" in url)
    assert wait_for_plot(page, "#step-chart", BARS) >= 3
    assert page.get_by_test_id("step-range").input_value() == "ncclAllReduce"
    assert "3 ranges named 'ncclAllReduce'" in page.get_by_test_id("notes").inner_text()
    screenshot(page, "nsys-overview-job-step-range")


def test_operator_page_of_an_export_without_emit_nvtx_says_how_to_get_operators(page, nsys_server):
    page.goto(f"{nsys_server.url}/operators?run=job")
    empty = page.get_by_test_id("empty-state")
    empty.wait_for()
    assert "emit_nvtx(record_shapes=True)" in empty.inner_text()
    screenshot(page, "nsys-operators-job")
