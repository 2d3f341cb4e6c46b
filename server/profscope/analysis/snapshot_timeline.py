"""Active memory timeline of a snapshot, with level of detail decided on the server.

memory_viz draws every live allocation as a band stacked over time: allocations existing before
the trace at the bottom, then in allocation order; when one is freed, those above it move down.
It draws the largest 15,000 individually in the browser, which stalls on big snapshots. Here the
server draws only what is visible at the requested window and plot height:

- bytes per pixel = the window's peak allocated bytes / plot height;
- an allocation at least ``min_px`` pixels tall (default a quarter pixel: thin bands still show
  the texture of many allocations, as memory_viz's do) gets its own band (at most ``max_bands``, largest
  first); every other allocation goes into one "small allocations" band at the bottom;
- each pixel column is represented by its entry with the most bytes allocated, so the top of the
  stack reaches every peak however far one zooms out; each shown band is also sampled where it
  starts, so a short-lived large allocation never falls between columns;
- a band's points are kept only where its position moves by half a pixel or more (up to 2 px when
  all bands together would have more than ``MAX_POINTS`` points); when they still have too many,
  only the larger half of the bands is drawn, and so on (the rest join the small allocations).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profscope.analysis.snapshot_allocations import device_memory
from profscope.analysis.snapshot_stacks import top_frames
from profscope.snapshot_tables import SnapshotTables

MAX_BANDS = 1500
MAX_POINTS = 100_000  # all bands together (~2 MB of JSON): past this, fewer bands are drawn
MAX_TOLERANCE_PX = 2.0
SAMPLE_BLOCK = 256


def entry_positions(tables: SnapshotTables, rows: np.ndarray) -> tuple[np.ndarray, str, int]:
    """x of each entry row: microseconds since the device's first entry, or the entry's index."""
    time_us = np.asarray(tables.table("entries")["time_us"])[rows]
    if tables.meta.get("has_time") and len(rows) and np.all(time_us >= 0):
        origin = int(time_us.min())
        return (time_us - origin).astype(np.float64), "time_us", origin
    return np.arange(len(rows), dtype=np.float64), "entry", 0


def _at(values: np.ndarray, rows: np.ndarray, empty: float) -> np.ndarray:
    """values[rows] with rows before the trace (-1) clipped to the first; `empty` when there are no rows."""
    if len(values) == 0:
        return np.full(len(rows), empty)
    return values[np.clip(rows, 0, len(values) - 1)]


def timeline(
    tables: SnapshotTables,
    device: int,
    start: float | None = None,
    end: float | None = None,
    width_px: int = 1200,
    height_px: int = 500,
    min_px: float = 0.25,
    max_bands: int = MAX_BANDS,
) -> dict[str, Any]:
    memory = device_memory(tables, device)
    n = len(memory.rows)
    x, axis, origin = entry_positions(tables, memory.rows)
    x_min, x_max = (float(x[0]), float(x[-1])) if n else (0.0, 1.0)
    if x_max <= x_min:
        x_max = x_min + 1.0
    x0 = x_min if start is None else max(x_min, float(start))
    x1 = x_max if end is None else min(x_max, float(end))
    if x1 <= x0:
        x1 = x0 + (x_max - x_min) / max(width_px, 1)
    r0, r1 = (int(v) for v in np.searchsorted(x, [x0, x1], side="left")) if n else (0, 0)
    r1 = int(np.searchsorted(x, x1, side="right")) if n else 0
    level_before = int(memory.allocated[r0 - 1]) if r0 > 0 else memory.initial_allocated
    in_window = memory.allocated[r0:r1]
    peak = max(level_before, int(in_window.max(initial=0)))
    bytes_per_px = max(peak / max(height_px, 1), 1.0)

    allocations = tables.table("allocations")
    rows = memory.allocation_rows
    first = int(memory.rows[0]) if n else 0
    size = np.asarray(allocations["size"])[rows]
    live_from = np.asarray(allocations["start"])[rows] - first  # -1 - first when before the trace
    live_from = np.where(np.asarray(allocations["start"])[rows] < 0, -1, live_from)
    live_to = np.asarray(allocations["end"])[rows] - first
    live_to = np.where(np.asarray(allocations["end"])[rows] < 0, n, live_to)
    # overlaps the window: live after some row in [r0 - 1, r1)
    overlaps = (live_from < r1) & (live_to > r0 - 1)
    big = np.flatnonzero(overlaps & (size >= bytes_per_px * min_px))
    big = big[np.argsort(-size[big], kind="stable")]  # largest first
    while True:
        shown = np.sort(big[:max_bands])  # stacking order = allocation order (the initial ones are first)
        samples = _sample_rows(x, memory.allocated, r0, r1, width_px, x0, x1, live_from[shown])
        allocated_at = np.where(samples >= 0, _at(memory.allocated, samples, 0), memory.initial_allocated)
        raw_bands, summarized_top = _stack(size[shown], live_from[shown], live_to[shown], samples, allocated_at)
        tolerance_px = 0.5
        bands = _thin(raw_bands, tolerance_px * bytes_per_px)
        while _points(bands) > MAX_POINTS and tolerance_px < MAX_TOLERANCE_PX:
            tolerance_px *= 2
            bands = _thin(raw_bands, tolerance_px * bytes_per_px)
        if _points(bands) <= MAX_POINTS or max_bands <= 1:
            break
        max_bands = min(max_bands, len(shown)) // 2
    sample_x = np.where(samples >= 0, _at(x, samples, x_min), x_min)
    sample_x = np.maximum(sample_x, x0)
    stack_ids = np.asarray(allocations["stack"])[rows[shown]]
    addr = np.asarray(allocations["addr"])[rows[shown]]
    stream = np.asarray(allocations["stream"])[rows[shown]]
    end_x = np.where(live_to[shown] < n, x[np.minimum(live_to[shown], n - 1)] if n else x_max, x_max)
    start_x = np.where(live_from[shown] >= 0, x[np.maximum(live_from[shown], 0)] if n else x_min, x_min)
    band_json = []
    for k, (points, heights) in enumerate(bands):
        band_json.append(
            {
                "id": int(rows[shown[k]]),
                "size": int(size[shown[k]]),
                "addr": f"0x{int(addr[k]) & (2**64 - 1):x}",
                "stream": int(stream[k]),
                "stack": int(stack_ids[k]),
                "x_start": float(start_x[k]),
                "x_end": float(end_x[k]),
                "x": sample_x[points].tolist(),
                "y": heights.tolist(),
            }
        )
    columns = _column_envelope(x, memory.allocated, r0, r1, width_px, x0, x1)
    reserved = _column_envelope(x, memory.reserved, r0, r1, width_px, x0, x1)
    stacks = {int(s): top_frames(tables, int(s)) for s in np.unique(stack_ids).tolist() if s >= 0}
    return {
        "device": device,
        "axis": axis,
        "origin_us": origin if axis == "time_us" else None,
        "x_range": [x_min, x_max],
        "window": [x0, x1],
        "width_px": width_px,
        "height_px": height_px,
        "bytes_per_px": bytes_per_px,
        "position_tolerance_px": tolerance_px,
        "peak_allocated_bytes": peak,
        "allocations_in_window": int(overlaps.sum()),
        "bands_shown": len(band_json),
        "summarized_count": int(overlaps.sum()) - len(band_json),
        "bands": band_json,
        "summarized": {"x": sample_x.tolist(), "y": summarized_top.tolist()},
        "allocated": columns,
        "reserved": reserved,
        "stacks": stacks,
    }


def _sample_rows(
    x: np.ndarray,
    allocated: np.ndarray,
    r0: int,
    r1: int,
    width_px: int,
    x0: float,
    x1: float,
    band_starts: np.ndarray,
) -> np.ndarray:
    """The state before the window, each column's fullest entry, and every shown band's own start."""
    rows = np.arange(r0, r1)
    chosen = [np.array([r0 - 1])]
    if len(rows):
        column = _column_of(x[rows], x0, x1, width_px)
        starts = np.concatenate([[0], np.flatnonzero(np.diff(column)) + 1])
        # each column's fullest entry: its maximum, then the first entry of the column that reaches it
        values = allocated[rows]
        highest = np.maximum.reduceat(values, starts)
        counts = np.diff(np.concatenate([starts, [len(rows)]]))
        at_max = np.flatnonzero(values == np.repeat(highest, counts))
        firsts = at_max[np.searchsorted(at_max, starts)]
        chosen.append(rows[firsts])
    chosen.append(band_starts[(band_starts >= r0) & (band_starts < r1)])
    return np.unique(np.concatenate(chosen)).astype(np.int64)


def _column_of(values: np.ndarray, x0: float, x1: float, width_px: int) -> np.ndarray:
    scale = width_px / (x1 - x0) if x1 > x0 else 0.0
    return np.clip(((values - x0) * scale).astype(np.int64), 0, max(width_px - 1, 0))


def _stack(
    size: np.ndarray,
    live_from: np.ndarray,
    live_to: np.ndarray,
    samples: np.ndarray,
    allocated_at: np.ndarray,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """Bottom of every shown band at every sample where it is live, and the top of the summarized band."""
    k = len(size)
    bottoms: list[list[np.ndarray]] = [[] for _ in range(k)]
    where: list[list[np.ndarray]] = [[] for _ in range(k)]
    summarized = np.zeros(len(samples), dtype=np.int64)
    for first in range(0, len(samples), SAMPLE_BLOCK):
        block = samples[first : first + SAMPLE_BLOCK]
        live = (live_from[:, None] <= block[None, :]) & (block[None, :] < live_to[:, None])
        contribution = np.where(live, size[:, None], 0)
        below = np.cumsum(contribution, axis=0) - contribution
        shown_total = contribution.sum(axis=0)
        small = allocated_at[first : first + SAMPLE_BLOCK] - shown_total
        summarized[first : first + SAMPLE_BLOCK] = small
        offsets = below + small[None, :]
        for band in np.flatnonzero(live.any(axis=1)).tolist():
            columns = np.flatnonzero(live[band])
            where[band].append(columns + first)
            bottoms[band].append(offsets[band, columns])
    bands = []
    for band in range(k):
        if not where[band]:
            bands.append((np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
        else:
            bands.append((np.concatenate(where[band]), np.concatenate(bottoms[band])))
    return bands, summarized


def _points(bands: list[tuple[np.ndarray, np.ndarray]]) -> int:
    return sum(len(points) for points, _ in bands)


def _thin(bands: list[tuple[np.ndarray, np.ndarray]], tolerance: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Keep a band's point where it moved by at least ``tolerance`` bytes since the previous point."""
    thinned = []
    for points, heights in bands:
        keep = np.ones(len(heights), bool)
        if len(heights) > 1:
            keep[1:] = np.abs(np.diff(heights)) >= tolerance
        thinned.append((points[keep], heights[keep]))
    return thinned


def _column_envelope(
    x: np.ndarray, values: np.ndarray, r0: int, r1: int, width_px: int, x0: float, x1: float
) -> dict[str, list]:
    """Per pixel column: its x, and the smallest and largest value of the entries in it."""
    if r1 <= r0:
        return {"x": [], "min": [], "max": []}
    rows = np.arange(r0, r1)
    column = _column_of(x[rows], x0, x1, width_px)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(column)) + 1])
    return {
        "x": x[rows[starts]].tolist(),
        "min": np.minimum.reduceat(values[rows], starts).tolist(),
        "max": np.maximum.reduceat(values[rows], starts).tolist(),
    }
