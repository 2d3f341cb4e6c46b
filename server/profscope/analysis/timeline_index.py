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
_KEY_BLOCK = 1 << 18  # slices per block when the lanes' bases are added to their times

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

    events = tables.events
    start = np.asarray(events["ts_ns"], dtype=np.int64)
    end = start + np.maximum(np.asarray(events["dur_ns"], dtype=np.int64), 0)
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

    track_rows = rows_by_value(track)
    depth = _event_depths(track_rows, start, end)
    step_depth = lane_depths(start[step_rows], end[step_rows]) if len(step_rows) else np.zeros(0, np.int32)
    raw_event, lane_offsets, lane_track, lane_depth = _lanes(tracks, track_rows, depth, step_rows, step_depth)
    del track_rows  # views of one order of all rows: gone only once the last one is
    duration_ns = int(end.max(initial=0))
    stride = duration_ns + 2
    if len(lane_track) and stride * (len(lane_track) + 1) >= 2**62:
        raise ValueError("trace too long to index for the timeline")
    finished("lane_offsets", lane_offsets)
    finished("lane_track", np.asarray(lane_track, dtype=np.int32))
    finished("lane_depth", np.asarray(lane_depth, dtype=np.int32))
    finished("event_depth", depth)
    del depth
    # each gather once the arrays it reads are the only ones left: the slices' times, then their names
    raw_end = end[raw_event]
    del end
    raw_start = start[raw_event]
    del start
    # a slice's busy time summed over the slices before it, computed in its own array (spilled, then dropped)
    busy_cum = np.zeros(len(raw_start) + 1, dtype=np.int64)
    np.subtract(raw_end, raw_start, out=busy_cum[1:])
    np.cumsum(busy_cum[1:], out=busy_cum[1:])
    finished("busy_cum", busy_cum)
    del busy_cum
    raw_name = np.asarray(names[raw_event], dtype=np.int32)
    del names
    tables.release_pages()  # every column is read: their pages go before the levels' merge, the build's peak
    finished("raw_event", raw_event)
    del raw_event
    busy = raw_end - raw_start
    # the levels merge in place over the raw slices' arrays: a slice's key is its time plus its lane's base, and
    # the levels only compare times within a lane
    _add_lane_bases((raw_start, raw_end), lane_offsets, stride)  # raw_start and raw_end are copies
    finished("raw_start_key", raw_start)
    finished("raw_end_key", raw_end)
    if spill_to is None:  # the keys are the index's own arrays: the levels get copies to merge over
        raw_start, raw_end = raw_start.copy(), raw_end.copy()

    def keep_level(level: int, cuts: np.ndarray, dominant: np.ndarray) -> None:
        finished(f"level{level}_cuts", cuts)
        finished(f"level{level}_name", dominant)

    kept_levels, thresholds = _build_levels(lane_offsets, raw_start, raw_end, raw_name, busy, duration_ns, keep_level)
    del raw_start, raw_end, raw_name, busy
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


def _event_depths(track_rows: dict[int, np.ndarray], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each event's depth within its track (``lane_depths`` of each track's rows, in time order)."""
    depth = np.zeros(len(start), dtype=np.int32)
    for rows in track_rows.values():
        depth[rows] = lane_depths(start[rows], end[rows])
    return depth


def _add_lane_bases(keys: tuple[np.ndarray, ...], lane_offsets: np.ndarray, stride: int) -> None:
    """Add ``lane * stride`` to each slice's value in each of ``keys`` (slices in lane order), in place, a block
    of slices at a time: no per-slice array of bases."""
    count = int(lane_offsets[-1])  # lane_offsets: one more than the lanes, from 0
    for first in range(0, count, _KEY_BLOCK):
        positions = np.arange(first, min(first + _KEY_BLOCK, count), dtype=np.int64)
        base = (np.searchsorted(lane_offsets, positions, side="right") - 1) * stride
        for values in keys:
            values[first : first + len(positions)] += base


def _lanes(
    tracks: list[dict[str, Any]],
    track_rows: dict[int, np.ndarray],
    depth: np.ndarray,
    step_rows: np.ndarray,
    step_depth: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, list[int], list[int]]:
    """Lanes in display order, (track slot, depth), and the raw slice rows in lane order: ``(raw_event,
    lane_offsets, lane_track, lane_depth)``. Lists each slice track's lanes, depth and event count in ``tracks``."""
    lane_rows: list[np.ndarray] = []
    lane_track: list[int] = []
    lane_depth: list[int] = []
    for slot, info in enumerate(tracks):
        if info["kind"] != "slices":
            continue
        if info["id"] == STEPS_TRACK:
            rows, row_depth = step_rows, step_depth
        else:
            rows = track_rows.get(int(info["id"][1:]), np.zeros(0, dtype=np.int64))
            row_depth = depth[rows]
        info["lanes"] = []
        info["max_depth"] = int(row_depth.max(initial=-1))
        info["events"] = len(rows)
        by_depth = stable_argsort(row_depth)  # time order kept within each depth
        sorted_rows, sorted_depth = rows[by_depth].astype(np.int32), row_depth[by_depth]
        if not len(sorted_rows):
            continue
        bounds = np.flatnonzero(np.diff(sorted_depth)) + 1
        for lane, lane_d in zip(np.split(sorted_rows, bounds), sorted_depth[np.r_[0, bounds]].tolist(), strict=True):
            info["lanes"].append(len(lane_rows))
            lane_rows.append(lane)
            lane_track.append(slot)
            lane_depth.append(int(lane_d))

    raw_event = np.concatenate(lane_rows) if lane_rows else np.zeros(0, np.int32)
    lane_offsets = np.zeros(len(lane_rows) + 1, dtype=np.int64)
    lane_offsets[1:] = np.cumsum([len(r) for r in lane_rows])
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
    item_start: np.ndarray,
    item_end: np.ndarray,
    item_name: np.ndarray,
    item_busy: np.ndarray,
    duration: int,
    keep: Callable[[int, np.ndarray, np.ndarray], None],
) -> tuple[list[int], list[int]]:
    """Coarser and coarser partitions of every lane; a level is kept when it halves the item count: handed to
    ``keep(level, cuts, names)`` as soon as it is merged (the index writes it then, and holds one level at a time).
    Returns the kept levels and their thresholds.

    Level 0 is the raw slices: ``item_start`` / ``item_end`` (times, or keys: only differences within a lane are
    read), ``item_name`` (int32) and ``item_busy`` (their durations). The levels are merged over these arrays,
    which are overwritten: the caller passes arrays it no longer needs.

    Each level merges the items of the one below, so an item's start, end, slice count and busy time are
    carried from level to level instead of gathered again from the raw slices:
    ~2x less CPU and memory than re-reading all rows for each level."""
    total = len(item_start)
    lane_first = np.zeros(total, dtype=bool)
    lane_first[lane_offsets[:-1][np.diff(lane_offsets) > 0]] = True
    lanes = int(lane_first.sum())
    # level 0: every raw slice is an item
    cuts = np.arange(total, dtype=np.int32 if total < 2**31 else np.int64)
    item_slices = np.ones(total, dtype=np.int32 if total < 2**31 else np.int64)
    kept: list[int] = []
    thresholds: list[int] = []
    last_kept_size = total
    level, threshold = 0, LEVEL_BASE_NS
    # in C each level is merged in one pass over the items, in place
    merge_level = _call_tree_sweep.merge_level if _call_tree_sweep is not None else None
    if merge_level is not None:
        columns = (lane_first, item_name, item_busy, item_slices, item_start, item_end, cuts)
    while len(cuts) > lanes and threshold <= max(duration, 1) * LEVEL_FACTOR:
        level += 1
        if merge_level is not None:
            count = merge_level(threshold, len(cuts), *columns)
            lane_first, item_name, item_busy, item_slices, item_start, item_end, cuts = (c[:count] for c in columns)
        else:
            lane_first, item_name, item_busy, item_slices, item_start, item_end, cuts = _merge_level(
                threshold, lane_first, item_name, item_busy, item_slices, item_start, item_end, cuts
            )
        if len(cuts) <= last_kept_size // 2:
            keep(level, np.append(cuts, total).astype(np.int64), item_name.astype(np.int32))
            kept.append(level)
            thresholds.append(threshold)
            last_kept_size = len(cuts)
        threshold *= LEVEL_FACTOR
    return kept, thresholds


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
    """The items of one level from those of the level below (``_call_tree_sweep.merge_level`` in numpy): a lane's
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
    end: np.ndarray,
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
    tables: TraceTables, start: np.ndarray, end: np.ndarray, group_for_device: Callable[[str], str]
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
    tables: TraceTables, tracks: list[dict[str, Any]], kind: np.ndarray, start: np.ndarray, end: np.ndarray
) -> list[tuple[dict[str, Any], np.ndarray, np.ndarray]]:
    """Launches issued on the host whose device work has not finished yet, per stream."""
    events = tables.events
    correlation = np.asarray(events["correlation"])
    track = np.asarray(events["track"])
    device_rows = np.flatnonzero(is_one_of(kind, list(DEVICE_KINDS)) & (correlation != NO_ID))
    launch_rows = np.flatnonzero(is_one_of(kind, list(HOST_RUNTIME_KINDS)) & (correlation != NO_ID))
    if not len(device_rows) or not len(launch_rows):
        return []
    launch_corr = correlation[launch_rows]
    order = np.argsort(launch_corr, kind="stable")
    sorted_corr = launch_corr[order]
    first = np.flatnonzero(np.r_[True, sorted_corr[1:] != sorted_corr[:-1]])  # the first launch of each id
    launch_of_device = _match(sorted_corr[first], launch_rows[order][first], correlation[device_rows])
    del launch_rows, launch_corr, order, sorted_corr, first
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
    step = np.ones(len(t), dtype=np.int8)
    step[: len(finishes)] = -1
    level = np.cumsum(step[order], dtype=np.int64)
    del order, step
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
