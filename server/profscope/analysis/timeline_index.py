"""What the Trace view needs precomputed, built once per trace at ingest and read memory-mapped.

Slices are laid out in *lanes*: one lane per (timeline track, depth). Within a lane slices never
overlap, so their starts and their ends are both sorted, and "the slices of this lane that touch
[s, e)" is two binary searches. Depth is the nesting level (properly nested tracks) or, where
slices overlap without nesting (kernels sharing a stream, misnested annotations), the lowest row
free at that time — so overlapping slices are stacked, never dropped.

Level of detail: level *k* partitions each lane into items, contiguous runs of slices each
narrower than a threshold ``g_k`` separated by gaps narrower than ``g_k`` (a wider slice is an item
of its own). Thresholds grow by 4x, so level *k+1*'s items are unions of level *k*'s. A window
request at resolution ``px`` ns per pixel starts from the coarsest level with ``g_k <= px`` and
merges neighbouring items whose gap is under a pixel: exactly the result of merging the raw slices
at ``px``, from a bounded number of items. Every item is a range of raw slice positions, so counts
and busy time (from a cumulative sum) stay exact when an item is clipped to a window.

Counters are step functions ``(t_ns, value)`` per series: GPU utilization and estimated SM
efficiency per device (drawn as per-pixel means), memory allocated / reserved per device, queued
launches per stream and the trace's own counter events (drawn as per-pixel min and max, so a
peak is never lost).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profscope.analysis import intervals
from profscope.analysis.arrays import is_one_of, rows_by_value, stable_argsort, unique_values
from profscope.analysis.device_activity import busy_by_device, device_kernels
from profscope.analysis.name_rules import is_profiler_step, string_mask
from profscope.analysis.native import call_tree_sweep
from profscope.tables import DEVICE_KINDS, NO_ID, Kind, TraceTables, Track, map_npy

_call_tree_sweep = call_tree_sweep()  # None: numpy does what it would (analysis/native.py)

INDEX_VERSION = 1
LEVEL_BASE_NS = 1_000
LEVEL_FACTOR = 4
STEPS_TRACK = "steps"
_BLOCK = 1 << 16  # slices per block: their keys, busy times and names, and the levels' merge
LEVEL_STATE = 10  # int64 per level carried from block to block by _call_tree_sweep.merge_levels

# the events' columns the slices' layout reads: their pages stay mapped while the build reads them again
_SLICE_COLUMNS = frozenset(f"events.{name}" for name in ("ts_ns", "dur_ns", "track", "kind", "name"))

KIND_NAMES = {kind.value: kind.name.lower() for kind in Kind}
HOST_RUNTIME_KINDS = (Kind.RUNTIME, Kind.DRIVER)


@dataclass
class TimelineIndex:
    arrays: dict[str, np.ndarray]
    info: dict[str, Any]

    def save(self, directory: Path) -> None:
        staging = _staging(Path(directory))
        for name, values in self.arrays.items():
            np.save(staging / f"{name}.npy", np.ascontiguousarray(values))
        _publish(staging, self.info, Path(directory))

    @classmethod
    def load(cls, directory: Path) -> TimelineIndex:
        directory = Path(directory)
        info = json.loads((directory / "info.json").read_text())
        arrays = {name: map_npy(directory / f"{name}.npy") for name in info["arrays"]}
        return cls(arrays=arrays, info=info)

    # ---- lanes and levels ------------------------------------------------------------------
    @property
    def stride(self) -> int:
        return int(self.info["stride"])

    def level_for(self, px_ns: float) -> int:
        """The coarsest stored level whose threshold is at most one pixel (0 = the raw slices)."""
        best = 0
        for level, threshold in zip(self.info["levels"], self.info["thresholds_ns"], strict=True):
            if threshold <= px_ns:
                best = level
        return best


def _staging(directory: Path) -> Path:
    staging = directory.with_name(directory.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _publish(staging: Path, info: dict[str, Any], directory: Path) -> None:
    """The index written in ``staging`` replaces ``directory`` whole: a reader never sees half of one."""
    (staging / "info.json").write_text(json.dumps(info))
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(staging, directory)


def write_timeline_index(tables: TraceTables, directory: Path) -> TimelineIndex:
    """Build the index into ``directory``, each array written as soon as it is final and from then on only
    memory-mapped: the build's peak memory is its temporaries, not those plus the arrays already finished
    (the same files as ``build_timeline_index(tables).save(directory)``)."""
    directory = Path(directory)
    staging = _staging(directory)
    index = build_timeline_index(tables, spill_to=staging)
    _publish(staging, index.info, directory)
    return TimelineIndex.load(directory)


# ---- building -------------------------------------------------------------------------------
def build_timeline_index(tables: TraceTables, spill_to: Path | None = None) -> TimelineIndex:
    """``spill_to``: a folder where each finished array is written (and then memory-mapped) at once."""
    arrays: dict[str, np.ndarray] = {}

    def finished(name: str, values: np.ndarray) -> None:
        if spill_to is None:
            arrays[name] = values
            return
        path = spill_to / f"{name}.npy"
        np.save(path, np.ascontiguousarray(values))
        arrays[name] = map_npy(path)

    def growing(name: str, dtype: type, length: int) -> _GrowingArray:
        return _GrowingArray(dtype, length, spill_to / f"{name}.npy" if spill_to is not None else None, name, arrays)

    events = tables.events
    start = np.asarray(events["ts_ns"], dtype=np.int64)
    end = _Ends(start, np.asarray(events["dur_ns"], dtype=np.int64))
    track = np.asarray(events["track"])
    kind = np.asarray(events["kind"])
    names = np.asarray(events["name"])

    step_rows = _profiler_step_rows(tables, kind)
    groups, tracks = _layout(tables, track, kind, len(step_rows) > 0)
    # the counters first: their temporaries come and go before the slices' arrays exist
    counters = _counter_series(tables, tracks, groups, kind, start, end)
    for name in list(counters):
        finished(name, counters.pop(name))  # each dropped once written
    del counters
    tables.release_pages(but=_SLICE_COLUMNS)  # the columns only the counters read go

    track_rows = rows_by_value(track, np.int32)  # 13 MB at 1 GB through the depths and the lanes, not 27
    depth = _event_depths(track_rows, start, end)
    step_depth = lane_depths(start[step_rows], end[step_rows]) if len(step_rows) else np.zeros(0, np.int32)
    raw_event, lane_offsets, lane_track, lane_depth = _lanes(tracks, track_rows, depth, step_rows, step_depth)
    del track_rows  # views of one order of all rows: gone only once the last one is
    duration_ns = end.max()
    stride = duration_ns + 2
    if len(lane_track) and stride * (len(lane_track) + 1) >= 2**62:
        raise ValueError("trace too long to index for the timeline")
    finished("lane_offsets", lane_offsets)
    finished("lane_track", np.asarray(lane_track, dtype=np.int32))
    finished("lane_depth", np.asarray(lane_depth, dtype=np.int32))
    finished("event_depth", depth)
    del depth
    # the slices in lane order a block at a time: their keys (a slice's time plus its lane's base: the levels only
    # compare times within a lane), their busy time summed over the slices before them, their names
    total = len(raw_event)
    start_key, end_key = (growing(name, np.int64, total) for name in ("raw_start_key", "raw_end_key"))
    busy_cum = growing("busy_cum", np.int64, total + 1)
    busy_cum.append(np.zeros(1, np.int64))
    raw_name = np.empty(total, dtype=np.int32)
    busy_before = 0
    for first in range(0, total, _BLOCK):
        rows = raw_event[first : first + _BLOCK]
        slice_start, slice_end = start[rows], end[rows]
        summed = np.cumsum(slice_end - slice_start)
        summed += busy_before
        busy_before = int(summed[-1])
        busy_cum.append(summed)
        base = _lane_bases(lane_offsets, first, len(rows), stride)
        start_key.append(slice_start + base)
        end_key.append(slice_end + base)
        raw_name[first : first + len(rows)] = names[rows]
    del start, end, names
    busy_cum.done()
    finished("raw_event", raw_event)
    del raw_event
    tables.release_pages()  # every column is read: their pages go before the levels' merge

    def slices(first: int, last: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return start_key.read(first, last), end_key.read(first, last), raw_name[first:last]

    def keep_level(level: int, count: int) -> tuple[_GrowingArray, _GrowingArray]:
        return growing(f"level{level}_cuts", np.int64, count + 1), growing(f"level{level}_name", np.int32, count)

    kept_levels, thresholds = _build_levels(lane_offsets, slices, duration_ns, keep_level)
    start_key.done()
    end_key.done()
    info = {
        "version": INDEX_VERSION,
        "stride": stride,
        "duration_ns": duration_ns,
        "levels": kept_levels,
        "thresholds_ns": thresholds,
        "groups": groups,
        "tracks": tracks,
        "arrays": sorted(arrays),
    }
    return TimelineIndex(arrays=arrays, info=info)


class _GrowingArray:
    """An array of a known length and dtype filled a block at a time (``append``), then read back a block at a time
    (``read``) and listed as ``arrays[name]`` (``done``). Written to ``path`` as it grows when one is given (the
    bytes ``np.save`` writes; read back without mapping it, and memory-mapped once done), held in memory otherwise."""

    def __init__(self, dtype: type, length: int, path: Path | None, name: str, arrays: dict[str, np.ndarray]) -> None:
        self.dtype, self.length, self.filled = np.dtype(dtype), length, 0
        self._path, self._name, self._arrays = path, name, arrays
        self._values = np.empty(length, dtype=self.dtype) if path is None else None
        self._file = open(path, "w+b") if path is not None else None  # noqa: SIM115 (closed by done)
        if self._file is not None:
            header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (length,)}
            np.lib.format.write_array_header_1_0(self._file, header)
            self._data_at = self._file.tell()

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        if self.filled + len(values) > self.length:
            raise ValueError(f"{self._name}: more than {self.length} values")
        if self._values is not None:
            self._values[self.filled : self.filled + len(values)] = values
        else:
            assert self._file is not None
            self._file.write(values.data)
        self.filled += len(values)

    def read(self, first: int, last: int) -> np.ndarray:
        """Values ``[first, last)`` of a filled array."""
        if self._values is not None:
            return self._values[first:last]
        assert self._file is not None and self.filled == self.length
        values = np.empty(max(0, min(last, self.length) - first), dtype=self.dtype)
        self._file.seek(self._data_at + first * self.dtype.itemsize)
        if self._file.readinto(values.data) != values.nbytes:
            raise OSError(f"{self._path}: short read")
        return values

    def done(self) -> None:
        if self.filled != self.length:
            raise ValueError(f"{self._name}: {self.filled} of {self.length} values")
        if self._file is not None:
            assert self._path is not None
            self._file.close()
            self._arrays[self._name] = map_npy(self._path)
        else:
            assert self._values is not None
            self._arrays[self._name] = self._values


def _lane_bases(lane_offsets: np.ndarray, first: int, count: int, stride: int) -> np.ndarray:
    """``lane * stride`` for the slices at positions ``[first, first + count)`` (slices in lane order)."""
    positions = np.arange(first, first + count, dtype=np.int64)
    return (np.searchsorted(lane_offsets, positions, side="right") - 1) * stride


class _Ends:
    """Each event's end (its start plus its duration, never negative) for the rows asked (``ends[rows]``): no
    column of every event's end (27 MB at 1 GB) is held through the build."""

    def __init__(self, start: np.ndarray, duration: np.ndarray) -> None:
        self._start, self._duration = start, duration

    def __getitem__(self, rows: np.ndarray | slice) -> np.ndarray:
        ends = np.array(self._duration[rows], dtype=np.int64)  # a copy: the ends are made in it
        np.maximum(ends, 0, out=ends)
        ends += self._start[rows]
        return ends

    def max(self) -> int:
        """The latest end, 0 for none (a block of rows at a time)."""
        latest = 0
        for first in range(0, len(self._start), _BLOCK * 16):
            latest = max(latest, int(self[slice(first, first + _BLOCK * 16)].max(initial=0)))
        return latest


def _event_depths(track_rows: dict[int, np.ndarray], start: np.ndarray, end: _Ends) -> np.ndarray:
    """Each event's depth within its track (``lane_depths`` of each track's rows, in time order)."""
    depth = np.zeros(len(start), dtype=np.int32)
    for rows in track_rows.values():
        depth[rows] = lane_depths(start[rows], end[rows])
    return depth


def _lanes(
    tracks: list[dict[str, Any]],
    track_rows: dict[int, np.ndarray],
    depth: np.ndarray,
    step_rows: np.ndarray,
    step_depth: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, list[int], list[int]]:
    """Lanes in display order, (track slot, depth), and the raw slice rows in lane order: ``(raw_event,
    lane_offsets, lane_track, lane_depth)``. Lists each slice track's lanes, depth and event count in ``tracks``."""

    def rows_of(info: dict[str, Any]) -> np.ndarray:
        return step_rows if info["id"] == STEPS_TRACK else track_rows.get(int(info["id"][1:]), np.zeros(0, np.int32))

    slice_tracks = [(slot, info) for slot, info in enumerate(tracks) if info["kind"] == "slices"]
    # every slice's row written in place, lane after lane: no list of the lanes' rows joined at the end
    raw_event = np.empty(sum(len(rows_of(info)) for _, info in slice_tracks), dtype=np.int32)
    lane_sizes: list[int] = []
    lane_track: list[int] = []
    lane_depth: list[int] = []
    for slot, info in slice_tracks:
        rows = rows_of(info)
        row_depth = step_depth if info["id"] == STEPS_TRACK else depth[rows]
        info["lanes"] = []
        info["max_depth"] = int(row_depth.max(initial=-1))
        info["events"] = len(rows)
        if not len(rows):
            continue
        by_depth = stable_argsort(row_depth)  # time order kept within each depth
        first = sum(lane_sizes)
        raw_event[first : first + len(rows)] = rows[by_depth]
        sorted_depth = row_depth[by_depth]
        del by_depth
        bounds = np.r_[0, np.flatnonzero(np.diff(sorted_depth)) + 1, len(rows)]
        for lane_d, size in zip(sorted_depth[bounds[:-1]].tolist(), np.diff(bounds).tolist(), strict=True):
            info["lanes"].append(len(lane_sizes))
            lane_sizes.append(size)
            lane_track.append(slot)
            lane_depth.append(int(lane_d))
    lane_offsets = np.zeros(len(lane_sizes) + 1, dtype=np.int64)
    lane_offsets[1:] = np.cumsum(lane_sizes)
    return raw_event, lane_offsets, lane_track, lane_depth


def lane_depths(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Depth of each slice of one track (slices in start order, longest first at equal starts).

    Nested slices get their nesting level from a count of the slices still open; when slices
    overlap without nesting, the rows are assigned greedily instead (lowest free row)."""
    count = len(start)
    if count == 0:
        return np.zeros(0, dtype=np.int32)
    if _call_tree_sweep is not None:  # the same in one pass in C, when the starts are sorted
        depth = _call_tree_sweep.lane_depths(*(np.ascontiguousarray(c, dtype=np.int64) for c in (start, end)))
        if depth is not None:
            return np.frombuffer(depth, dtype=np.int32)
    layout_end = np.maximum(end, start + 1)  # zero-length slices take a nanosecond of room
    closed_before = np.searchsorted(np.sort(layout_end), start, side="right")
    depth = (np.arange(count) - closed_before).astype(np.int32)
    if depth.min() >= 0 and _rows_are_disjoint(start, layout_end, depth):
        return depth
    return _greedy_depths(start, layout_end)


def _rows_are_disjoint(start: np.ndarray, end: np.ndarray, depth: np.ndarray) -> bool:
    # by depth, then start: slices come in start order, so a stable sort by depth alone is that order
    order = stable_argsort(depth) if bool((start[1:] >= start[:-1]).all()) else np.lexsort((start, depth))
    same_row = depth[order][1:] == depth[order][:-1]
    return bool(np.all(start[order][1:][same_row] >= end[order][:-1][same_row]))


def _greedy_depths(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    row_ends: list[int] = []
    depth = np.empty(len(start), dtype=np.int32)
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
        for row, row_end in enumerate(row_ends):
            if row_end <= s:
                row_ends[row] = e
                depth[i] = row
                break
        else:
            depth[i] = len(row_ends)
            row_ends.append(e)
    return depth


def _build_levels(
    lane_offsets: np.ndarray,
    slices: Callable[[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]],
    duration: int,
    keep: Callable[[int, int], tuple[_GrowingArray, _GrowingArray]],
    block: int = _BLOCK,
) -> tuple[list[int], list[int]]:
    """Coarser and coarser partitions of every lane; a level is kept when it halves the item count. Returns the
    kept levels and their thresholds. ``keep(level, count)`` gives the arrays a kept level's cuts (``count`` + 1:
    the last is the slice count) and names are written to.

    Level 0 is the raw slices: ``slices(first, last)`` gives the starts, ends (times, or keys: only differences
    within a lane are read) and names (int32) of those at positions ``[first, last)``. Each level merges the items
    of the one below, so an item's start, end, slice count and busy time are carried from level to level instead of
    gathered again from the raw slices.

    In C (``_call_tree_sweep.merge_levels``) the slices come a block at a time through every level at once, twice:
    the item counts first, which decide the levels kept, then the kept levels' items, written as they close. No
    level is held whole (nsres_x1GB: 37 bytes a slice, 120 MiB, were the index's peak). In numpy, every level is
    merged from the one below, whole."""
    total = int(lane_offsets[-1])  # lane_offsets: one more than the lanes, from 0
    lane_starts = lane_offsets[:-1][np.diff(lane_offsets) > 0]
    lanes = len(lane_starts)
    thresholds: list[int] = []
    threshold = LEVEL_BASE_NS
    while threshold <= max(duration, 1) * LEVEL_FACTOR:
        thresholds.append(threshold)
        threshold *= LEVEL_FACTOR
    merge_levels = _call_tree_sweep.merge_levels if _call_tree_sweep is not None else None
    if merge_levels is None:
        return _build_levels_whole(lane_starts, slices(0, total), thresholds, keep)

    def stream(kept: dict[int, int]) -> list[int]:
        """Every slice through every level: the items each level closed. ``kept``: the levels whose items are
        written, by index, with their item counts (from a first pass)."""
        counts = [0] * len(thresholds)
        state = np.zeros(len(thresholds) * LEVEL_STATE, dtype=np.int64)
        outputs = {level: keep(level + 1, count) for level, count in kept.items()}
        wanted = out_cuts = out_names = None
        if kept:
            wanted = np.zeros(len(thresholds), dtype=bool)
            wanted[list(kept)] = True
            rows = min(block, total) + len(thresholds) + 1  # what a level can close in a block: one per item, its last
            out_cuts, out_names = (
                np.empty((len(thresholds), rows), np.int64),
                np.empty((len(thresholds), rows), np.int32),
            )
        for first in range(0, max(total, 1), block):
            last = min(first + block, total)
            start, end, name = slices(first, last)
            lane_first = np.zeros(last - first, dtype=bool)
            lane_first[
                lane_starts[np.searchsorted(lane_starts, first) : np.searchsorted(lane_starts, last)] - first
            ] = True
            closed = merge_levels(
                level_thresholds,
                state,
                lane_first,
                np.ascontiguousarray(name, dtype=np.int32),
                np.ascontiguousarray(start, dtype=np.int64),
                np.ascontiguousarray(end, dtype=np.int64),
                first,
                last == total,
                wanted,
                out_cuts,
                out_names,
            )
            for level, (cuts, names) in outputs.items():
                assert out_cuts is not None and out_names is not None
                cuts.append(out_cuts[level, : closed[level]])
                names.append(out_names[level, : closed[level]])
            counts = [a + b for a, b in zip(counts, closed, strict=True)]
        for cuts, names in outputs.values():
            cuts.append(np.full(1, total, dtype=np.int64))
            cuts.done()
            names.done()
        return counts

    level_thresholds = np.asarray(thresholds, dtype=np.int64)
    counts = stream({})
    kept, kept_thresholds = _kept_levels(total, lanes, counts, thresholds)
    if kept:
        stream({level - 1: counts[level - 1] for level in kept})
    return kept, kept_thresholds


def _kept_levels(total: int, lanes: int, counts: list[int], thresholds: list[int]) -> tuple[list[int], list[int]]:
    """The levels merged (while a level has more items than there are lanes) and kept (those with at most half the
    items of the last one kept, from the raw slices), from each level's item count: ``(levels, thresholds)``."""
    kept: list[int] = []
    kept_thresholds: list[int] = []
    last_kept_size = items_below = total
    for level, (count, threshold) in enumerate(zip(counts, thresholds, strict=True), start=1):
        if items_below <= lanes:
            break
        if count <= last_kept_size // 2:
            kept.append(level)
            kept_thresholds.append(threshold)
            last_kept_size = count
        items_below = count
    return kept, kept_thresholds


def _build_levels_whole(
    lane_starts: np.ndarray,
    raw: tuple[np.ndarray, np.ndarray, np.ndarray],
    thresholds: list[int],
    keep: Callable[[int, int], tuple[_GrowingArray, _GrowingArray]],
) -> tuple[list[int], list[int]]:
    """``_build_levels`` in numpy: each level merged whole from the one below."""
    item_start, item_end = (np.array(values, dtype=np.int64) for values in raw[:2])
    item_name = np.array(raw[2], dtype=np.int32)
    total = len(item_start)
    lane_first = np.zeros(total, dtype=bool)
    lane_first[lane_starts] = True
    item_busy = item_end - item_start
    cuts = np.arange(total, dtype=np.int64)
    item_slices = np.ones(total, dtype=np.int64)
    counts: list[int] = []
    for threshold in thresholds:
        if len(cuts) <= len(lane_starts):
            break
        lane_first, item_name, item_busy, item_slices, item_start, item_end, cuts = _merge_level(
            threshold, lane_first, item_name, item_busy, item_slices, item_start, item_end, cuts
        )
        counts.append(len(cuts))
        level = len(counts)
        if level in _kept_levels(total, len(lane_starts), counts, thresholds[:level])[0]:
            cut_values, name_values = keep(level, len(cuts))
            cut_values.append(cuts)
            cut_values.append(np.full(1, total, dtype=np.int64))
            name_values.append(item_name)
            cut_values.done()
            name_values.done()
    return _kept_levels(total, len(lane_starts), counts, thresholds[: len(counts)])


def _merge_level(
    threshold: int,
    lane_first: np.ndarray,
    item_name: np.ndarray,
    item_busy: np.ndarray,
    item_slices: np.ndarray,
    item_start: np.ndarray,
    item_end: np.ndarray,
    cuts: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """The items of one level from those of the level below (the numpy path of ``_build_levels``): a lane's
    first item, a lone slice at least ``threshold`` long and a gap at least that long break; each merged item is
    named by its first item of the most busy time."""
    single_wide = (item_slices == 1) & (item_end - item_start >= threshold)
    breaks = lane_first | single_wide
    breaks[1:] |= single_wide[:-1] | (item_start[1:] - item_end[:-1] >= threshold)
    breaks[0] = True
    del single_wide
    if breaks.all():  # every item stays as it is
        return lane_first, item_name, item_busy, item_slices, item_start, item_end, cuts
    firsts = np.flatnonzero(breaks)
    last = np.empty_like(breaks)
    last[:-1], last[-1] = breaks[1:], True
    item_name = item_name[_argmax_per_group(item_busy, firsts)]
    item_busy = _sum_per_group(item_busy, firsts)
    item_slices = _sum_per_group(item_slices, firsts)
    item_start, item_end = item_start[breaks], item_end[last]
    lane_first, cuts = lane_first[breaks], cuts[breaks]
    return lane_first, item_name, item_busy, item_slices, item_start, item_end, cuts


def _argmax_per_group(values: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Index of the first largest value in each run of ``values`` (runs start at ``firsts``, sorted, the first
    at 0). A run of one is its own answer: only the longer runs are reduced (``reduceat`` pays per run, and most
    runs of the finest levels are single slices)."""
    count = len(values)
    sizes = np.diff(firsts, append=count)
    result = np.asarray(firsts, dtype=np.int64).copy()
    longer = sizes > 1
    if not longer.any():
        return result
    items = np.flatnonzero(np.repeat(longer, sizes))  # the items of the longer runs, run after run
    run_sizes = sizes[longer]
    run_firsts = np.cumsum(run_sizes) - run_sizes
    run_values = values[items]
    run_max = np.repeat(np.maximum.reduceat(run_values, run_firsts), run_sizes)
    is_max = np.where(run_values == run_max, np.arange(len(items)), len(items))
    result[longer] = items[np.minimum.reduceat(is_max, run_firsts)]
    return result


def _sum_per_group(values: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """``np.add.reduceat(values, firsts)`` for integers, from one cumulative sum (no per-run cost)."""
    total = np.cumsum(values)
    out = total[np.append(firsts[1:], len(values)) - 1]
    out[1:] -= out[:-1].copy()
    return out.astype(values.dtype, copy=False)


# ---- tracks and groups ----------------------------------------------------------------------
def _profiler_step_rows(tables: TraceTables, kind: np.ndarray) -> np.ndarray:
    is_step_name = string_mask(tables.strings, is_profiler_step)
    if not is_step_name.any():
        return np.zeros(0, dtype=np.int64)
    host = is_one_of(kind, [Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY])
    names = np.asarray(tables.events["name"])
    # a lookup per row in the mask over string ids (np.isin sorts the 3M names of a 1 GB trace: ~30 ms)
    named = is_step_name[names] if names.min(initial=0) >= 0 else np.isin(names, np.flatnonzero(is_step_name))
    return np.flatnonzero(host & named)


def _is_device_track(track: Track, kinds_on_track: set[int]) -> bool:
    device_kinds = {int(k) for k in (*DEVICE_KINDS, Kind.GPU_USER_ANNOTATION)}
    return bool(kinds_on_track & device_kinds) or track.process_labels.startswith("GPU")


def _int_or_text(value: str) -> tuple:
    return (0, int(value), "") if value.isascii() and value.lstrip("-").isdigit() else (1, 0, value)


def _layout(
    tables: TraceTables, track: np.ndarray, kind: np.ndarray, has_steps: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Groups (processes, devices) and tracks (threads, streams) in display order (``has_steps``: the trace has
    ProfilerStep ranges, shown on a track of their own)."""
    present = unique_values(track)
    kinds_by_track: dict[int, set[int]] = {int(t): set() for t in present}
    pairs = unique_values(track * 64 + kind.astype(np.int64))
    for pair in pairs.tolist():
        kinds_by_track[pair // 64].add(pair % 64)

    groups: list[dict[str, Any]] = []
    tracks: list[dict[str, Any]] = []
    if has_steps:
        groups.append({"id": "g_steps", "name": "Steps", "kind": "steps"})
        tracks.append({"id": STEPS_TRACK, "group": "g_steps", "name": "ProfilerStep", "kind": "slices"})

    by_process: dict[tuple[bool, str], list[int]] = {}
    for track_id in kinds_by_track:
        t = tables.tracks[track_id]
        by_process.setdefault((_is_device_track(t, kinds_by_track[track_id]), t.pid), []).append(track_id)

    def process_order(key: tuple[bool, str]) -> tuple:
        device, pid = key
        first = tables.tracks[by_process[key][0]]
        sort_index = first.process_sort_index if first.process_sort_index is not None else 0
        return (pid in ("Traces", ""), device, sort_index if not device else 0, _int_or_text(pid))

    for key in sorted(by_process, key=process_order):
        device, pid = key
        first = tables.tracks[by_process[key][0]]
        group_id = f"g{len(groups)}"
        if device:
            label = first.process_labels or f"GPU {pid}"
            name = label if label.startswith("GPU") else f"device {pid} ({label})"
            groups.append({"id": group_id, "name": name, "kind": "gpu", "device": pid})
        elif pid in ("Traces", ""):
            groups.append({"id": group_id, "name": "Profiler", "kind": "other"})
        elif not (pid.isascii() and pid.lstrip("-").isdigit()):  # kineto's own rows, e.g. pid "Spans"
            groups.append({"id": group_id, "name": first.process_name or pid, "kind": "other"})
        else:
            process = first.process_name or "process"
            groups.append({"id": group_id, "name": f"{process} (pid {pid})", "kind": "cpu"})

        def thread_order(track_id: int) -> tuple:
            t = tables.tracks[track_id]
            return (t.thread_sort_index if t.thread_sort_index is not None else 0, _int_or_text(t.tid))

        for track_id in sorted(by_process[key], key=thread_order):
            t = tables.tracks[track_id]
            if device:
                name = t.tid if t.tid.startswith("stream") else f"stream {t.tid}"
            elif t.thread_name:
                name = t.thread_name
            else:
                name = f"thread {t.tid}" if t.tid else (t.process_name or "events")
            tracks.append({"id": f"t{track_id}", "group": group_id, "name": name, "kind": "slices"})
    return groups, tracks


# ---- counters -------------------------------------------------------------------------------
def _counter_series(
    tables: TraceTables,
    tracks: list[dict[str, Any]],
    groups: list[dict[str, Any]],
    kind: np.ndarray,
    start: np.ndarray,
    end: _Ends,
) -> dict[str, np.ndarray]:
    series: list[tuple[dict[str, Any], np.ndarray, np.ndarray]] = []
    gpu_groups = {g["device"]: g["id"] for g in groups if g["kind"] == "gpu"}

    def group_for_device(device: str) -> str:
        if device not in gpu_groups:
            gpu_groups[device] = f"g{len(groups)}"
            groups.append({"id": gpu_groups[device], "name": f"GPU {device}", "kind": "gpu", "device": device})
        return gpu_groups[device]

    series.extend(_gpu_series(tables, start, end, group_for_device))
    series.extend(_queued_launch_series(tables, tracks, kind, start, end))
    series.extend(_memory_series(tables, groups, group_for_device))
    series.extend(_trace_counter_series(tables, tracks))

    offsets = np.zeros(len(series) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(t) for _, t, _ in series])
    for index, (info, _, v) in enumerate(series):
        if not info["group"]:
            info["group"] = _counters_group(groups)
        tracks.append(
            {
                "id": f"c{index}",
                "kind": "counter",
                "series": index,
                "min": float(v.min()) if len(v) else 0.0,
                "max": float(v.max()) if len(v) else 0.0,
                **info,
            }
        )
    time_pieces, value_pieces = [t for _, t, _ in series], [v for _, _, v in series]
    series.clear()  # each piece is held by its list alone, and dropped once joined
    times, values = _joined(time_pieces, np.int64), _joined(value_pieces, np.float64)
    integral = np.zeros(len(times), dtype=np.float64)  # integral of each series up to each point
    for i in range(len(offsets) - 1):
        lo, hi = offsets[i], offsets[i + 1]
        if hi - lo > 1:
            integral[lo + 1 : hi] = np.cumsum(np.diff(times[lo:hi]) * values[lo : hi - 1])
    return {"counter_offsets": offsets, "counter_t": times, "counter_v": values, "counter_int": integral}


def _joined(pieces: list[np.ndarray], dtype: type) -> np.ndarray:
    """The pieces end to end; the list is emptied (its pieces are dropped unless held elsewhere)."""
    joined = np.concatenate(pieces) if pieces else np.zeros(0, dtype)
    pieces.clear()
    return joined


def _gpu_series(
    tables: TraceTables, start: np.ndarray, end: _Ends, group_for_device: Callable[[str], str]
) -> list[tuple[dict[str, Any], np.ndarray, np.ndarray]]:
    """GPU utilization and estimated SM efficiency per device (its temporaries gone on return)."""
    result = []
    on_gpu = device_kernels(tables)
    busy = busy_by_device(start[on_gpu.event], end[on_gpu.event], on_gpu.device)
    for device, (busy_start, busy_end) in busy.items():
        on = on_gpu.device == device
        rows = on_gpu.event[on]
        t, v = _indicator(busy_start, busy_end, 100.0)
        group = group_for_device(str(device))
        result.append(({"name": f"GPU {device} utilization", "group": group, "unit": "%", "mode": "mean"}, t, v))
        blocks = np.asarray(tables.table("kernels")["blocks_per_sm"])[on_gpu.kernel_index[on]]
        valid = blocks > 0
        if valid.any():
            seg_start, seg_end, value = intervals.weighted_coverage(
                start[rows][valid], end[rows][valid], blocks[valid], 1.0
            )
            t, v = _pieces(seg_start, seg_end, value * 100.0)
            info = {"name": f"GPU {device} est. SM efficiency", "group": group, "unit": "%", "mode": "mean"}
            result.append((info, t, v))
    return result


def _counters_group(groups: list[dict[str, Any]]) -> str:
    for group in groups:
        if group["kind"] == "counters":
            return group["id"]
    groups.append({"id": f"g{len(groups)}", "name": "Counters", "kind": "counters"})
    return groups[-1]["id"]


def _indicator(starts: np.ndarray, ends: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    return _pieces(starts, ends, np.full(len(starts), level))


def _pieces(starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A step function from disjoint sorted pieces: each value holds on its piece, zero between."""
    t = np.empty(2 * len(starts), dtype=np.int64)
    v = np.zeros(2 * len(starts), dtype=np.float64)
    t[0::2], t[1::2] = starts, ends
    v[0::2] = values
    # pieces that touch: drop the zero between them
    keep = np.ones(len(t), dtype=bool)
    if len(starts) > 1:
        touching = starts[1:] == ends[:-1]
        keep[1:-1:2] = ~touching
    return t[keep], v[keep]


def _queued_launch_series(
    tables: TraceTables, tracks: list[dict[str, Any]], kind: np.ndarray, start: np.ndarray, end: _Ends
) -> list[tuple[dict[str, Any], np.ndarray, np.ndarray]]:
    """Launches issued on the host whose device work has not finished yet, per stream."""
    events = tables.events
    correlation = np.asarray(events["correlation"])
    track = np.asarray(events["track"])
    device_rows = np.flatnonzero(is_one_of(kind, list(DEVICE_KINDS)) & (correlation != NO_ID))
    launch_rows = np.flatnonzero(is_one_of(kind, list(HOST_RUNTIME_KINDS)) & (correlation != NO_ID))
    if not len(device_rows) or not len(launch_rows):
        return []
    # each array replaced by the next as soon as it is made (nsres_x1GB: 1.1M launches, 9 MB an array)
    launch_corr, device_corr = correlation[launch_rows], correlation[device_rows]
    del correlation
    tables.release_pages(but=_SLICE_COLUMNS)  # the correlations' pages (27 MB at 1 GB) go before the matching
    order = np.argsort(launch_corr, kind="stable")
    launch_corr = launch_corr[order]
    launch_rows = launch_rows[order]
    del order
    first = np.r_[True, launch_corr[1:] != launch_corr[:-1]]  # the first launch of each id
    launch_corr, launch_rows = launch_corr[first], launch_rows[first]
    del first
    launch_of_device = _match(launch_corr, launch_rows, device_corr)
    del launch_rows, launch_corr, device_corr
    matched = launch_of_device >= 0
    device_rows, launch_of_device = device_rows[matched], launch_of_device[matched]
    group_of_track = {t["id"]: t["group"] for t in tracks}
    stream_of_device = track[device_rows]
    result = []
    for stream in np.unique(stream_of_device).tolist():
        on = stream_of_device == stream
        t, level = _queued_launches(end[device_rows[on]], start[launch_of_device[on]])
        name = next((x["name"] for x in tracks if x["id"] == f"t{stream}"), f"stream {stream}")
        info = {"name": f"{name} queued launches", "group": group_of_track.get(f"t{stream}", ""), "unit": "count"}
        result.append(({**info, "mode": "extremes"}, t, level))
    return result


def _queued_launches(finishes: np.ndarray, launches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The count of launches not yet finished, as a step function ``(t, count)`` (one point per distinct time)."""
    # finishes first, so that at equal times a finish comes before the next launch counts
    t = np.concatenate([finishes, launches])
    order = np.argsort(t, kind="stable")
    t = t[order]
    step = (order >= len(finishes)).view(np.int8) * np.int8(2) - np.int8(1)  # a finish -1, a launch +1
    del order
    level = np.cumsum(step, dtype=np.int64)
    del step
    last = np.r_[t[1:] != t[:-1], True]
    return t[last], level[last].astype(np.float64)


def _match(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    position = np.minimum(np.searchsorted(keys, queries), len(keys) - 1)
    return np.where(keys[position] == queries, values[position], -1)


def _memory_series(
    tables: TraceTables, groups: list[dict[str, Any]], group_for_device: Any
) -> list[tuple[dict[str, Any], np.ndarray, np.ndarray]]:
    memory = tables.table("memory")
    if not len(memory["ts_ns"]):
        return []
    result = []
    device_type = np.asarray(memory["device_type"])
    device_id = np.asarray(memory["device_id"])
    ts = np.asarray(memory["ts_ns"], dtype=np.int64)
    cpu_group = None
    for dtype_, dev in sorted(set(zip(device_type.tolist(), device_id.tolist(), strict=True))):
        on = (device_type == dtype_) & (device_id == dev)
        if dtype_ == 0:  # kineto's device type 0 is the CPU
            if cpu_group is None:
                cpu_group = f"g{len(groups)}"
                groups.append({"id": cpu_group, "name": "CPU memory", "kind": "cpu"})
            label, group = "CPU", cpu_group
        else:
            label, group = f"GPU {dev}", group_for_device(str(dev))
        for column, what in (("total_allocated", "allocated"), ("total_reserved", "reserved")):
            values = np.asarray(memory[column], dtype=np.float64)[on]
            if not (values >= 0).any():
                if column == "total_reserved":
                    continue
                # old traces record only each allocation's size: allocated is their running sum
                values = np.cumsum(np.asarray(memory["bytes"], dtype=np.float64)[on])
                what = "allocated (since the trace started)"
            info = {"name": f"{label} memory {what}", "group": group, "unit": "bytes", "mode": "extremes"}
            result.append((info, ts[on], values))
    return result


def _trace_counter_series(
    tables: TraceTables, tracks: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], np.ndarray, np.ndarray]]:
    counters = tables.table("counters")
    if not len(counters["ts_ns"]):
        return []
    track = np.asarray(counters["track"])
    name = np.asarray(counters["name"])
    series_name = np.asarray(counters["series"])
    group_of_pid = {}
    for t in tracks:
        if t["id"].startswith("t"):
            group_of_pid.setdefault(tables.tracks[int(t["id"][1:])].pid, t["group"])
    result = []
    keys = np.unique(np.stack([track, name, series_name], axis=1), axis=0)
    for track_id, name_id, series_id in keys.tolist():
        on = (track == track_id) & (name == name_id) & (series_name == series_id)
        label = tables.strings[name_id]
        if series_id >= 0 and tables.strings[series_id] not in ("", label):
            label = f"{label} {tables.strings[series_id]}"
        pid = tables.tracks[track_id].pid if 0 <= track_id < len(tables.tracks) else ""
        info = {"name": label, "group": group_of_pid.get(pid, ""), "unit": "", "mode": "extremes"}
        result.append((info, np.asarray(counters["ts_ns"], dtype=np.int64)[on], np.asarray(counters["value"])[on]))
    return result
