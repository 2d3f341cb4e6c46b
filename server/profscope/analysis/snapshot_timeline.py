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

Choosing the band count and tolerance needs the number of points each choice would draw. Stacking
the bands is the costly part, so it is avoided where cheap bounds decide: between two consecutive
samples a band moves by exactly what the small-allocations band moves unless some shown band starts
or ends there, so the points of a band are at least its samples where the small band moves (and no
band event happens) and at most that plus its samples where a band event happens. The bands are
stacked only when the bounds straddle ``MAX_POINTS``, and for the chosen drawing: usually once.

The whole-window answer at the page's first-draw size (``DEFAULT_WIDTH_PX`` x ``DEFAULT_HEIGHT_PX``)
is computed at ingest and cached (``ingest/snapshot_job.py``), so the first draw is a file read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from profscope.analysis.snapshot_allocations import DeviceMemory, device_memory
from profscope.analysis.snapshot_stacks import top_frames
from profscope.snapshot_tables import SnapshotTables

MAX_BANDS = 1500
MAX_POINTS = 100_000  # all bands together (~2 MB of JSON): past this, fewer bands are drawn
TOLERANCES_PX = (0.5, 1.0, 2.0)  # how far a band must move for a new point, tried in this order
DEFAULT_WIDTH_PX = 1200
DEFAULT_HEIGHT_PX = 360  # the Memory page's plot area
DEFAULT_MIN_PX = 0.25
BLOCK_CELLS = 1 << 19  # bands x samples stacked at a time (a few MB per temporary)


def default_timeline_view(device: int) -> str:
    """Name of the cached whole-window timeline of a device at the default size."""
    return f"snapshot.timeline.{device}"


def is_default_request(start: float | None, end: float | None, width_px: int, height_px: int, min_px: float) -> bool:
    return (
        start is None
        and end is None
        and (width_px, height_px, min_px) == (DEFAULT_WIDTH_PX, DEFAULT_HEIGHT_PX, DEFAULT_MIN_PX)
    )


def timeline_axis(tables: SnapshotTables, device: int) -> str:
    """The x axis of a device's timeline: ``time_us`` (µs since its first entry) or ``entry`` (no times)."""
    return EntryPositions.of(tables, device_memory(tables, device)).axis


class EntryPositions:
    """x of a device's entries: microseconds since its first entry, or the entry's index without times.

    Read only where needed (a device can have millions of entries). Either way x is an integer, so
    it is exact in float64 and "x >= v" is "x >= ceil(v)": searches run on the stored integers.
    """

    def __init__(self, time_us: np.ndarray | None, count: int) -> None:
        """``time_us``: the entries' times (None or any negative: the index is the position)."""
        self.count = count
        earliest = int(np.min(time_us)) if time_us is not None and count else -1
        self.time_us = time_us if earliest >= 0 else None
        self.origin = max(earliest, 0)

    @classmethod
    def of(cls, tables: SnapshotTables, memory: DeviceMemory) -> EntryPositions:
        count = len(memory.rows)
        if not tables.meta.get("has_time") or not count:
            return cls(None, count)
        first = int(memory.rows[0])
        return cls(tables.table("entries")["time_us"][first : first + count], count)

    @property
    def axis(self) -> str:
        return "entry" if self.time_us is None else "time_us"

    def at(self, rows: np.ndarray) -> np.ndarray:
        if self.time_us is None:
            return np.asarray(rows, dtype=np.float64)
        return (np.asarray(self.time_us[rows]) - self.origin).astype(np.float64)

    def first_at_or_after(self, value: Any) -> Any:
        """Row of the first entry with x >= value (``count`` when none), for a number or an array."""
        return self._search(np.ceil(value))

    def first_after(self, value: Any) -> Any:
        """Row of the first entry with x > value."""
        return self._search(np.floor(value) + 1)

    def _search(self, whole: Any) -> Any:
        whole = np.clip(whole, -1, self.count if self.time_us is None else 2**62).astype(np.int64)
        if self.time_us is None:
            return np.clip(whole, 0, self.count)
        return np.searchsorted(self.time_us, whole + self.origin, side="left")


@dataclass
class _Candidates:
    """Allocations overlapping the window, as rows of the device's entries (live ``[live_from, live_to)``)."""

    size: np.ndarray
    live_from: np.ndarray  # -1: before the trace
    live_to: np.ndarray  # n: still allocated at the end


@dataclass
class _Layout:
    """One choice of shown bands: where they are sampled and the small-allocations band beneath them."""

    shown: np.ndarray  # indices into the candidates, in stacking (allocation) order
    samples: np.ndarray  # entry rows sampled (-1: before the first entry)
    allocated_at: np.ndarray  # allocated bytes at each sample
    first_sample: np.ndarray  # per shown band: its live samples are first_sample .. end_sample - 1
    end_sample: np.ndarray
    small: np.ndarray  # top of the small-allocations band at each sample


@dataclass
class _Stacked:
    """Bottoms of the shown bands where they are drawn, band by band in sample order."""

    band: np.ndarray
    sample: np.ndarray  # index into the layout's samples
    bottom: np.ndarray
    moved: np.ndarray  # how far the band moved since its previous sample (bytes; huge for a band's first point)

    def points(self, tolerance: float) -> int:
        return int(np.count_nonzero(self.moved >= tolerance))

    def thinned(self, tolerance: float) -> _Stacked:
        keep = self.moved >= tolerance
        return _Stacked(self.band[keep], self.sample[keep], self.bottom[keep], self.moved[keep])


def timeline(
    tables: SnapshotTables,
    device: int,
    start: float | None = None,
    end: float | None = None,
    width_px: int = DEFAULT_WIDTH_PX,
    height_px: int = DEFAULT_HEIGHT_PX,
    min_px: float = DEFAULT_MIN_PX,
    max_bands: int = MAX_BANDS,
    max_points: int = MAX_POINTS,
) -> dict[str, Any]:
    memory = device_memory(tables, device)
    n = len(memory.rows)
    positions = EntryPositions.of(tables, memory)
    x_min, x_max = tuple(positions.at(np.array([0, n - 1])).tolist()) if n else (0.0, 1.0)
    if x_max <= x_min:
        x_max = x_min + 1.0
    x0 = x_min if start is None else max(x_min, float(start))
    x1 = x_max if end is None else min(x_max, float(end))
    if x1 <= x0:
        x1 = x0 + (x_max - x_min) / max(width_px, 1)
    r0 = int(positions.first_at_or_after(x0))
    r1 = int(positions.first_after(x1))
    allocated = memory.allocated
    level_before = int(allocated[r0 - 1]) if r0 > 0 else memory.initial_allocated
    peak = max(level_before, int(np.max(allocated[r0:r1], initial=0)))
    bytes_per_px = max(peak / max(height_px, 1), 1.0)
    column_starts = _column_starts(positions, r0, r1, x0, x1, width_px)
    fullest = r0 + _first_at_column_max(np.asarray(allocated[r0:r1]), column_starts)

    allocations = tables.table("allocations")
    rows = memory.allocation_rows
    first = int(memory.rows[0]) if n else 0
    size = np.asarray(allocations["size"][rows])
    alloc_entry = np.asarray(allocations["start"][rows])
    free_entry = np.asarray(allocations["end"][rows])
    live_from = np.where(alloc_entry < 0, -1, alloc_entry - first)
    live_to = np.where(free_entry < 0, n, free_entry - first)
    # overlaps the window: live after some row in [r0 - 1, r1)
    overlaps = (live_from < r1) & (live_to > r0 - 1)
    big = np.flatnonzero(overlaps & (size >= bytes_per_px * min_px))
    big = big[np.argsort(-size[big], kind="stable")]  # largest first
    candidates = _Candidates(size, live_from, live_to)
    fixed_samples = np.concatenate([[r0 - 1], fullest])
    layout, stacked, tolerance_px = _choose_drawing(
        candidates, big, max_bands, max_points, fixed_samples, memory, r0, r1, bytes_per_px
    )

    shown = layout.shown
    sample_x = np.full(len(layout.samples), x_min)
    sampled = layout.samples >= 0
    sample_x[sampled] = positions.at(layout.samples[sampled])
    sample_x = np.maximum(sample_x, x0)
    stack_ids = np.asarray(allocations["stack"][rows[shown]])
    addr = np.asarray(allocations["addr"][rows[shown]])
    stream = np.asarray(allocations["stream"][rows[shown]])
    end_x = np.full(len(shown), x_max)
    freed = live_to[shown] < n
    end_x[freed] = positions.at(live_to[shown][freed])
    start_x = np.full(len(shown), x_min)
    started = live_from[shown] >= 0
    start_x[started] = positions.at(live_from[shown][started])
    bounds = np.searchsorted(stacked.band, np.arange(len(shown) + 1))
    band_json = []
    for k in range(len(shown)):
        points = stacked.sample[bounds[k] : bounds[k + 1]]
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
                "y": stacked.bottom[bounds[k] : bounds[k + 1]].tolist(),
            }
        )
    in_window = int(overlaps.sum())
    return {
        "device": device,
        "axis": positions.axis,
        "origin_us": positions.origin if positions.axis == "time_us" else None,
        "x_range": [x_min, x_max],
        "window": [x0, x1],
        "width_px": width_px,
        "height_px": height_px,
        "bytes_per_px": bytes_per_px,
        "position_tolerance_px": tolerance_px,
        "peak_allocated_bytes": peak,
        "allocations_in_window": in_window,
        "bands_shown": len(band_json),
        "summarized_count": in_window - len(band_json),
        "bands": band_json,
        "summarized": {"x": sample_x.tolist(), "y": layout.small.tolist()},
        "allocated": _column_envelope(positions, allocated, r0, r1, column_starts),
        "reserved": _column_envelope(positions, memory.reserved, r0, r1, column_starts),
        "stacks": {int(s): top_frames(tables, int(s)) for s in np.unique(stack_ids).tolist() if s >= 0},
    }


def _choose_drawing(
    candidates: _Candidates,
    big: np.ndarray,
    max_bands: int,
    max_points: int,
    fixed_samples: np.ndarray,
    memory: DeviceMemory,
    r0: int,
    r1: int,
    bytes_per_px: float,
) -> tuple[_Layout, _Stacked, float]:
    """The largest band count (halving from ``max_bands``) and smallest tolerance that fit ``max_points``.

    With one band left the drawing is kept at the largest tolerance whatever its size.
    """
    while True:
        layout = _layout(candidates, np.sort(big[:max_bands]), fixed_samples, memory, r0, r1)
        stacked: _Stacked | None = None
        for tolerance_px in TOLERANCES_PX:
            tolerance = tolerance_px * bytes_per_px
            fewest, most = _point_bounds(layout, tolerance)
            if fewest > max_points:
                continue
            if most > max_points:  # the bounds cannot tell: count exactly (larger tolerances keep fewer points)
                stacked = stacked or _stack(candidates, layout, tolerance)
                if stacked.points(tolerance) > max_points:
                    continue
            stacked = stacked or _stack(candidates, layout, tolerance)
            return layout, stacked.thinned(tolerance), tolerance_px
        if max_bands <= 1:
            tolerance = TOLERANCES_PX[-1] * bytes_per_px
            stacked = stacked or _stack(candidates, layout, tolerance)
            return layout, stacked.thinned(tolerance), TOLERANCES_PX[-1]
        max_bands = min(max_bands, len(layout.shown)) // 2


def _layout(
    candidates: _Candidates, shown: np.ndarray, fixed_samples: np.ndarray, memory: DeviceMemory, r0: int, r1: int
) -> _Layout:
    live_from, live_to, size = candidates.live_from[shown], candidates.live_to[shown], candidates.size[shown]
    starts_in_window = live_from[(live_from >= r0) & (live_from < r1)]
    samples = np.unique(np.concatenate([fixed_samples, starts_in_window])).astype(np.int64)
    allocated_at = np.full(len(samples), memory.initial_allocated, dtype=np.int64)
    sampled = samples >= 0
    allocated_at[sampled] = memory.allocated[samples[sampled]]
    # a band is live at the samples in [live_from, live_to): a run of consecutive samples
    first_sample = np.searchsorted(samples, live_from, side="left")
    end_sample = np.searchsorted(samples, live_to, side="left")
    change = np.zeros(len(samples) + 1, dtype=np.int64)
    np.add.at(change, first_sample, size)
    np.add.at(change, end_sample, -size)
    small = allocated_at - np.cumsum(change[:-1])
    return _Layout(shown, samples, allocated_at, first_sample, end_sample, small)


def _point_bounds(layout: _Layout, tolerance: float) -> tuple[int, int]:
    """Fewest and most points the shown bands can have after thinning at ``tolerance`` bytes.

    Between samples s - 1 and s, a band live at both moves by what the small band moves plus what
    the shown bands below it that start or end at s add: exactly the small band's move when no
    band below it has such an event (a point iff that move reaches the tolerance); otherwise maybe.
    """
    count = len(layout.shown)
    if not count:
        return 0, 0
    samples = len(layout.samples)
    small_moves = np.zeros(samples, dtype=bool)
    small_moves[1:] = np.abs(np.diff(layout.small)) >= tolerance
    band = np.arange(count)
    lowest_event = np.full(samples + 1, count)  # per sample, the lowest band starting or ending there
    np.minimum.at(lowest_event, layout.first_sample, band)
    np.minimum.at(lowest_event, layout.end_sample, band)
    lowest_event = lowest_event[:samples]
    quiet_moves = np.concatenate([[0], np.cumsum(small_moves & (lowest_event == count))])
    inner_from = layout.first_sample + 1  # a band's first sample is always a point
    inner_to = np.maximum(layout.end_sample, inner_from)
    fewest = count + int((quiet_moves[inner_to] - quiet_moves[inner_from]).sum())
    maybe = 0
    events = np.flatnonzero(lowest_event < count)
    event_moves = small_moves[events][:, None]
    below = lowest_event[events][:, None]
    step = max(1, BLOCK_CELLS // max(len(events), 1))
    for first in range(0, count, step):
        bands = band[first : first + step]
        inside = (inner_from[bands] <= events[:, None]) & (events[:, None] < inner_to[bands])
        affected = below < bands
        fewest += int(np.count_nonzero(inside & ~affected & event_moves))
        maybe += int(np.count_nonzero(inside & affected))
    return fewest, fewest + maybe


def _stack(candidates: _Candidates, layout: _Layout, tolerance: float) -> _Stacked:
    """Bottom of every shown band at every sample where it is live, kept where it moved by ``tolerance``.

    A band's bottom is the small band's top plus the sizes of the shown bands below it (allocated
    earlier) live at that sample. Computed for blocks of samples, so memory stays bounded.
    """
    count = len(layout.shown)
    size = candidates.size[layout.shown]
    first_sample, end_sample = layout.first_sample, layout.end_sample
    last_bottom = np.zeros(count, dtype=np.int64)
    seen = np.zeros(count, dtype=bool)
    never = np.iinfo(np.int64).max
    parts: list[tuple[np.ndarray, ...]] = []
    block = max(1, BLOCK_CELLS // max(count, 1))
    for first in range(0, len(layout.samples), block):
        columns = np.arange(first, min(first + block, len(layout.samples)))
        live = (first_sample[:, None] <= columns[None, :]) & (columns[None, :] < end_sample[:, None])
        contribution = np.where(live, size[:, None], 0)
        below = np.cumsum(contribution, axis=0) - contribution
        band, column = np.nonzero(live)  # band by band, each in sample order
        if not len(band):
            continue
        sample = column + first
        bottom = below[band, column] + layout.small[sample]
        previous = np.empty_like(bottom)
        previous[1:] = bottom[:-1]
        opens = np.ones(len(band), dtype=bool)  # the band's first point in this block
        opens[1:] = band[1:] != band[:-1]
        previous[opens] = last_bottom[band[opens]]
        moved = np.abs(bottom - previous)
        moved[opens & ~seen[band]] = never
        closes = np.ones(len(band), dtype=bool)
        closes[:-1] = opens[1:]
        last_bottom[band[closes]] = bottom[closes]
        seen[band] = True
        keep = moved >= tolerance
        parts.append((band[keep], sample[keep], bottom[keep], moved[keep]))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return _Stacked(empty, empty, empty, empty)
    band, sample, bottom, moved = (np.concatenate(column) for column in zip(*parts, strict=True))
    order = np.argsort(band, kind="stable")  # blocks are in sample order: band by band, in sample order
    return _Stacked(band[order], sample[order], bottom[order], moved[order])


def _column_starts(positions: EntryPositions, r0: int, r1: int, x0: float, x1: float, width_px: int) -> np.ndarray:
    """Offsets into the window's entries where a new pixel column begins (the first is 0).

    An entry's column is ``floor((x - x0) * width_px / (x1 - x0))`` (clipped to the plot); x is
    sorted, so each column's first entry is found by searching for the column's left edge, then
    moved over equal x values where rounding puts the edge on the other side of them.
    """
    if r1 <= r0:
        return np.zeros(0, dtype=np.int64)
    scale = width_px / (x1 - x0) if x1 > x0 else 0.0
    if scale == 0.0:
        return np.zeros(1, dtype=np.int64)

    def column(rows: np.ndarray) -> np.ndarray:
        return np.clip(((positions.at(rows) - x0) * scale).astype(np.int64), 0, width_px - 1)

    wanted = np.arange(1, width_px)
    first = np.clip(positions.first_at_or_after(x0 + wanted / scale), r0, r1)
    while True:
        late = np.flatnonzero((first > r0) & (column(np.maximum(first - 1, 0)) >= wanted))
        early = np.flatnonzero((first < r1) & (column(np.minimum(first, positions.count - 1)) < wanted))
        if not len(late) and not len(early):
            break
        first[late] = np.maximum(positions.first_at_or_after(positions.at(first[late] - 1)), r0)
        first[early] = np.minimum(positions.first_after(positions.at(first[early])), r1)
    return np.unique(np.concatenate([[r0], first[first < r1]])) - r0


def _first_at_column_max(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per column, the offset of its first entry holding the column's largest value."""
    if not len(starts):
        return np.zeros(0, dtype=np.int64)
    highest = np.maximum.reduceat(values, starts)
    counts = np.diff(np.concatenate([starts, [len(values)]]))
    at_max = np.flatnonzero(values == np.repeat(highest, counts))
    return at_max[np.searchsorted(at_max, starts)]


def _column_envelope(
    positions: EntryPositions, values: np.ndarray, r0: int, r1: int, starts: np.ndarray
) -> dict[str, list]:
    """Per pixel column: its x, and the smallest and largest value of the entries in it."""
    if r1 <= r0:
        return {"x": [], "min": [], "max": []}
    window = np.asarray(values[r0:r1])
    return {
        "x": positions.at(r0 + starts).tolist(),
        "min": np.minimum.reduceat(window, starts).tolist(),
        "max": np.maximum.reduceat(window, starts).tolist(),
    }
