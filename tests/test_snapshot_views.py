"""Snapshot views on real snapshots: what is drawn adds up to what was allocated; hand-built OOM."""

from __future__ import annotations

import io
import pickle
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest

from conftest import CORPUS
from profscope.analysis.snapshot_allocations import build_allocations, device_memory, replay_device_memory
from profscope.analysis.snapshot_stacks import stack_tree, top_allocations
from profscope.analysis.snapshot_state import fragmentation, oom_moments, segment_state
from profscope.analysis.snapshot_timeline import (
    DEFAULT_HEIGHT_PX,
    DEFAULT_WIDTH_PX,
    MAX_BANDS,
    TOLERANCES_PX,
    EntryPositions,
    _column_starts,
    default_timeline_view,
    timeline,
)
from profscope.cache import TraceCache, dumps
from profscope.ingest.jobs import IngestRequest
from profscope.ingest.snapshot import parse_snapshot, parse_snapshot_file
from profscope.ingest.snapshot_job import ingest_snapshot
from profscope.snapshot_tables import SnapshotTables
from profscope.sources import LocalSource
from profscope.views.registry import queries

TRAINING = "memory-snapshots/ZidongLiu_DeComFL/memory.pickle"  # a training loop's history: 23,105 entries, 61 segments
SNAPSHOTS = sorted(str(p.relative_to(CORPUS)) for p in (CORPUS / "memory-snapshots").rglob("*.pickle"))


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
    assert oom["time_us"] == 13 and oom["at_us"] == 3  # on the timeline's axis: since the first entry (10 µs)


@pytest.mark.parametrize("relative", SNAPSHOTS)
def test_every_corpus_snapshot_draws_a_timeline_that_reaches_its_peak(relative: str) -> None:
    tables = _tables(relative)
    for device in tables.meta["devices"]:
        memory = device_memory(tables, device)
        view = timeline(tables, device)
        assert view["peak_allocated_bytes"] == memory.peak_allocated
        tops = [_stacked_total(view, i) for i in range(len(view["summarized"]["x"]))]
        assert max(tops) == memory.peak_allocated
        assert view["bands_shown"] + view["summarized_count"] == len(memory.allocation_rows)


def _reference_drawing(tables: SnapshotTables, device: int, width_px: int, height_px: int, max_points: int) -> dict:
    """The whole-window drawing chosen the plain way: every candidate band count (halving from MAX_BANDS)
    and tolerance in turn, each band's bottom at each sample stacked densely as allocated bytes minus the
    bands at and above it. Returns the chosen count, tolerance and bands' (x, y), and the counts tried."""
    memory = replay_device_memory(tables, device)
    n = len(memory.rows)
    time_us = np.asarray(tables.table("entries")["time_us"])[memory.rows]
    x = (time_us - time_us.min()).astype(np.float64)
    allocated = np.asarray(memory.allocated)
    bytes_per_px = max(max(memory.initial_allocated, int(allocated.max())) / height_px, 1.0)
    column = np.clip(((x - x[0]) * (width_px / (x[-1] - x[0]))).astype(np.int64), 0, width_px - 1)
    fullest = []
    for c in np.unique(column):
        in_column = np.flatnonzero(column == c)
        fullest.append(in_column[np.argmax(allocated[in_column])])  # argmax: the first of the largest
    allocations = tables.table("allocations")
    rows = memory.allocation_rows
    first = int(memory.rows[0])
    size = np.asarray(allocations["size"])[rows]
    start, end = np.asarray(allocations["start"])[rows], np.asarray(allocations["end"])[rows]
    live_from = np.where(start < 0, -1, start - first)
    live_to = np.where(end < 0, n, end - first)
    big = np.flatnonzero(size >= bytes_per_px * 0.25)
    big = big[np.argsort(-size[big], kind="stable")]
    tried = []
    max_bands = MAX_BANDS
    while True:
        shown = np.sort(big[:max_bands])
        samples = np.unique(np.concatenate([[-1], fullest, live_from[shown][live_from[shown] >= 0]]))
        allocated_at = np.where(samples >= 0, allocated[np.maximum(samples, 0)], memory.initial_allocated)
        live = (live_from[shown][:, None] <= samples[None, :]) & (samples[None, :] < live_to[shown][:, None])
        at_and_above = np.cumsum(np.where(live, size[shown][:, None], 0)[::-1], axis=0)[::-1]
        bottom = allocated_at[None, :] - at_and_above
        moved = np.full(live.shape, np.inf)
        moved[:, 1:] = np.where(live[:, :-1], np.abs(np.diff(bottom, axis=1)), np.inf)
        for tolerance_px in TOLERANCES_PX:
            kept = live & (moved >= tolerance_px * bytes_per_px)
            tried.append((len(shown), tolerance_px, int(kept.sum())))
            if kept.sum() <= max_points or (max_bands <= 1 and tolerance_px == TOLERANCES_PX[-1]):
                sample_x = np.where(samples >= 0, x[np.maximum(samples, 0)], 0.0)
                bands = [(sample_x[kept[b]].tolist(), bottom[b][kept[b]].tolist()) for b in range(len(shown))]
                return {"bands": len(shown), "tolerance_px": tolerance_px, "drawn": bands, "tried": tried}
        max_bands = min(max_bands, len(shown)) // 2


# Budgets around the exact counts of this snapshot at 800 x 2000 px (1,500 bands: 32,580 points at half a
# pixel, 22,215 at two; 750: 11,939 at half a pixel, 10,595 at one, 10,489 at two; 23: 397 / 387): where the
# cheap bounds on the count decide alone, and where they straddle the budget and the bands must be stacked.
@pytest.mark.parametrize("max_points", [400, 10_500, 11_940, 22_300])
def test_the_drawing_is_the_most_bands_and_finest_tolerance_within_the_points_budget(
    training: SnapshotTables, max_points: int
) -> None:
    width_px, height_px = 800, 2000
    view = timeline(training, 0, width_px=width_px, height_px=height_px, max_points=max_points)
    reference = _reference_drawing(training, 0, width_px, height_px, max_points)
    assert len(reference["tried"]) > 1  # the budget is binding: band count or tolerance had to give
    assert (view["bands_shown"], view["position_tolerance_px"]) == (reference["bands"], reference["tolerance_px"])
    assert [(band["x"], band["y"]) for band in view["bands"]] == reference["drawn"]
    assert sum(len(band["x"]) for band in view["bands"]) <= max_points


def _check_columns(times: np.ndarray, with_times: bool, x0: float, x1: float, width_px: int) -> None:
    count = len(times)
    positions = EntryPositions(times if with_times else None, count)
    x = (times - times.min()).astype(np.float64) if with_times else np.arange(count, dtype=np.float64)
    r0, r1 = int(positions.first_at_or_after(x0)), int(positions.first_after(x1))
    assert (r0, r1) == (np.searchsorted(x, x0, side="left"), np.searchsorted(x, x1, side="right"))
    column = np.clip(((x[r0:r1] - x0) * (width_px / (x1 - x0))).astype(np.int64), 0, width_px - 1)
    expected = np.concatenate([[0], np.flatnonzero(np.diff(column)) + 1]) if r1 > r0 else []
    assert _column_starts(positions, r0, r1, x0, x1, width_px).tolist() == list(expected), (x0, x1, width_px)


# Windows where a column's left edge, computed as x0 + c * (x1 - x0) / width, rounds to the other side of
# an entry than the column formula puts it (found by search): entries every `step` from 0.
ROUNDING_WINDOWS = [
    (1, 0.0, 62.0, 50),
    (1, 9.9, 34.2, 12),
    (1, 19.1, 218.1, 60),
    (3, 9.4, 293.4, 85),
    (4, 16.1, 295.1, 40),
]


@pytest.mark.parametrize("with_times", [True, False])
def test_pixel_columns_begin_where_the_column_formula_changes(with_times: bool) -> None:
    for step, x0, x1, width_px in ROUNDING_WINDOWS:
        times = 1_700_000_000_000_000 + np.arange(0, 400 * step, step)
        _check_columns(times if with_times else np.arange(0, 400 * step, step), with_times, x0, x1, width_px)
    random = np.random.default_rng(4)
    for _ in range(300):
        count = int(random.integers(1, 2000))
        span = int(random.integers(1, 10**7))
        times = np.sort(random.integers(1_700_000_000_000_000, 1_700_000_000_000_000 + span, count))
        x = (times - times.min()).astype(np.float64) if with_times else np.arange(count, dtype=np.float64)
        # windows that start and end on entries and between them
        x0 = float(random.choice([x[random.integers(count)], random.uniform(x[0] - 3, x[-1])]))
        x1 = float(random.choice([x[random.integers(count)], x0 + random.uniform(1e-6, x[-1] - x0 + 5)]))
        _check_columns(times, with_times, x0, x1 if x1 > x0 else x0 + 0.5, int(random.integers(10, 4000)))


def test_the_cached_first_timeline_is_the_computed_one(tmp_path: Path) -> None:
    """Ingest stores the levels and the whole-window timeline at the default size; reading them back
    gives exactly what computing them from the stored tables gives."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(CORPUS / TRAINING, root / "training.pickle")
    cache = TraceCache(tmp_path / "cache")
    request = IngestRequest(
        source=LocalSource(root),
        key="training.pickle",
        size=(root / "training.pickle").stat().st_size,
        cache_key="training",
        cache_root=str(cache.root),
        max_trace_bytes=1 << 30,
        kind="snapshot",
        queries=queries("snapshot"),
    )
    summary = ingest_snapshot(request, lambda _bytes: None)
    assert not summary["view_errors"]
    tables = SnapshotTables.load(cache.tables_dir("training"))
    stored, replayed = device_memory(tables, 0), replay_device_memory(tables, 0)
    assert isinstance(stored.allocated, np.memmap)  # read from the stored levels, not replayed
    assert np.array_equal(stored.allocated, replayed.allocated)
    assert np.array_equal(stored.reserved, replayed.reserved)
    assert stored.initial_allocated == replayed.initial_allocated
    assert stored.initial_reserved == replayed.initial_reserved
    assert np.array_equal(stored.allocation_rows, replayed.allocation_rows)
    cached = orjson.loads(cache.read_view("training", default_timeline_view(0)))
    computed = orjson.loads(dumps(timeline(tables, 0, width_px=DEFAULT_WIDTH_PX, height_px=DEFAULT_HEIGHT_PX)))
    assert cached == computed
    assert cached["bands_shown"] > 100 and cached["peak_allocated_bytes"] == replayed.peak_allocated


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
