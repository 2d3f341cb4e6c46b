"""Snapshot views on real snapshots: what is drawn adds up to what was allocated; hand-built OOM."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

from conftest import CORPUS
from profscope.analysis.snapshot_allocations import build_allocations, device_memory
from profscope.analysis.snapshot_stacks import stack_tree, top_allocations
from profscope.analysis.snapshot_state import fragmentation, oom_moments, segment_state
from profscope.analysis.snapshot_timeline import timeline
from profscope.ingest.snapshot import parse_snapshot, parse_snapshot_file
from profscope.snapshot_tables import SnapshotTables

TRAINING = "memory-snapshots/Wedsonlin_assignment2-systems/results/medium_512_training_memory_snapshot.pickle"


def _tables(relative: str) -> SnapshotTables:
    tables = parse_snapshot_file(CORPUS / relative)
    tables.columns["allocations"] = build_allocations(tables)
    return tables


@pytest.fixture(scope="module")
def training() -> SnapshotTables:
    return _tables(TRAINING)


def _stacked_total(view: dict, sample: int) -> int:
    """Summarized band + every shown band live at one sample of the timeline."""
    x = view["summarized"]["x"][sample]
    total = view["summarized"]["y"][sample]
    for band in view["bands"]:
        if band["x"] and band["x"][0] <= x and (band["x_end"] > x or band["x_end"] == view["x_range"][1]):
            total += band["size"]
    return total


@pytest.mark.parametrize("height_px", [100, 500, 2000])
def test_timeline_bands_and_small_allocations_add_up_to_the_peak(training: SnapshotTables, height_px: int) -> None:
    memory = device_memory(training, 0)
    view = timeline(training, 0, width_px=800, height_px=height_px)
    assert view["peak_allocated_bytes"] == memory.peak_allocated
    assert max(view["allocated"]["max"]) == memory.peak_allocated
    assert (
        view["bands_shown"] + view["summarized_count"] == view["allocations_in_window"] == len(memory.allocation_rows)
    )
    assert all(b["size"] >= view["bytes_per_px"] * 0.25 for b in view["bands"])
    tops = [_stacked_total(view, i) for i in range(len(view["summarized"]["x"]))]
    assert max(tops) == memory.peak_allocated  # the stack reaches the peak: no peak lost to level of detail
    # a taller plot shows smaller allocations one by one
    assert view["bytes_per_px"] == pytest.approx(memory.peak_allocated / height_px)


def test_zoomed_window_draws_only_what_overlaps_it(training: SnapshotTables) -> None:
    full = timeline(training, 0, width_px=800, height_px=400)
    low, high = full["x_range"][1] * 0.4, full["x_range"][1] * 0.5
    zoomed = timeline(training, 0, start=low, end=high, width_px=800, height_px=400)
    assert zoomed["window"] == [low, high]
    assert zoomed["allocations_in_window"] < full["allocations_in_window"]
    assert all(b["x_end"] >= low and b["x_start"] <= high for b in zoomed["bands"])
    assert all(low <= x <= high for x in zoomed["allocated"]["x"])


def test_live_bytes_at_the_peak_are_the_peak(training: SnapshotTables) -> None:
    peak = device_memory(training, 0).peak_allocated
    top = top_allocations(training, 0, "peak", limit=5)
    assert top["live_bytes"] == peak
    assert [r["size"] for r in top["rows"]] == sorted((r["size"] for r in top["rows"]), reverse=True)
    tree = stack_tree(training, 0, "peak")
    assert tree["total_bytes"] == peak and tree["values"][tree["ids"].index("all")] == peak
    children = [v for v, parent in zip(tree["values"], tree["parents"], strict=True) if parent == "all"]
    assert sum(children) == peak  # every byte is under some stack
    end = top_allocations(training, 0, "end", limit=1)
    assert end["live_bytes"] == device_memory(training, 0).end_allocated


def test_segment_state_sums_the_blocks(training: SnapshotTables) -> None:
    state = segment_state(training, 0)
    blocks = training.table("blocks")
    sizes, states = np.asarray(blocks["size"]), np.asarray(blocks["state"])
    assert state["allocated_bytes"] == int(sizes[states == 0].sum())
    assert state["cached_bytes"] == int(sizes[states == 2].sum())
    assert state["reserved_bytes"] == state["allocated_bytes"] + state["cached_bytes"] + state["pending_free_bytes"]
    assert state["fragmentation"] == pytest.approx(1 - state["largest_cached_block"] / state["cached_bytes"])
    assert fragmentation(np.array([100])) == 0.0 and fragmentation(np.array([25, 25, 50])) == 0.5


def test_oom_moment_shows_request_free_memory_and_what_was_live() -> None:
    frame = {"filename": "train.py", "line": 7, "name": "forward"}
    block = {"address": 0, "size": 1024, "requested_size": 1000, "state": "active_allocated", "frames": [frame]}
    free = {"address": 1024, "size": 3072, "requested_size": 0, "state": "inactive", "frames": []}
    snapshot = {
        "segments": [
            {
                "device": 0,
                "address": 0,
                "total_size": 4096,
                "stream": 0,
                "segment_type": "small",
                "allocated_size": 1024,
                "active_size": 1024,
                "requested_size": 1000,
                "blocks": [block, free],
            }
        ],
        "device_traces": [
            [
                {"action": "alloc", "addr": 0, "size": 1000, "stream": 0, "time_us": 10, "frames": [frame]},
                {"action": "alloc", "addr": 2048, "size": 500, "stream": 0, "time_us": 11, "frames": [frame]},
                {"action": "free_completed", "addr": 2048, "size": 500, "stream": 0, "time_us": 12, "frames": [frame]},
                {"action": "oom", "size": 1 << 30, "device_free": 12345, "stream": 0, "time_us": 13, "frames": [frame]},
            ]
        ],
    }
    tables = parse_snapshot(io.BytesIO(pickle.dumps(snapshot)), max_decoded_bytes=1 << 30)
    tables.columns["allocations"] = build_allocations(tables)
    [oom] = oom_moments(tables, 0)["ooms"]
    assert oom["requested_bytes"] == 1 << 30 and oom["device_free_bytes"] == 12345
    assert oom["allocated_bytes"] == 1000 and oom["live_count"] == 1
    assert oom["largest_live"][0]["size"] == 1000 and oom["largest_live"][0]["alloc_at_us"] == 0
    assert oom["largest_cached_block_at_snapshot"] == 3072 and oom["entries_after"] == 0
    assert oom["top_frames"] == ["train.py:7 forward"]


def test_a_snapshot_without_history_draws_what_is_live_at_its_end() -> None:
    # recorded without _record_memory_history: segments only, no trace entries
    tables = _tables("memory-snapshots/ZijianDu_Attention/memory.pickle")
    memory = device_memory(tables, 0)
    assert len(memory.rows) == 0
    view = timeline(tables, 0, width_px=400, height_px=300)
    blocks = tables.table("blocks")
    active = np.asarray(blocks["state"]) == 0
    requested = int(np.asarray(blocks["requested_size"])[active].sum())  # memory_viz draws requested sizes
    assert view["peak_allocated_bytes"] == memory.initial_allocated == requested > 0
    drawn = sum(band["size"] for band in view["bands"]) + sum(view["summarized"]["y"][:1])
    assert drawn == requested
