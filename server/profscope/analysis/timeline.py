"""The Trace view's queries over one trace's tables and its timeline index (see ``timeline_index``).

Every answer is bounded by what can be drawn: a window request returns at most a few items per
pixel column and lane, whatever the size of the trace. Times in answers are microseconds relative
to the trace origin, as everywhere in the API.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from profscope.analysis import intervals
from profscope.analysis.callstacks import parse_frame
from profscope.analysis.timeline_index import HOST_RUNTIME_KINDS, KIND_NAMES, TimelineIndex
from profscope.tables import DEVICE_KINDS, NO_ID, Kind, TraceTables

NS_PER_US = 1000.0
MAX_RELATED = 200
MAX_SUMMARY_NAMES = 200
HOST_OP_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY, Kind.PYTHON_FUNCTION, Kind.OTHER)
COUNTER_BUCKET_PX = 2


def us(ns: Any) -> float:
    return round(float(ns) / NS_PER_US, 3)


def track_listing(tables: TraceTables, index: TimelineIndex) -> dict[str, Any]:
    meta = tables.meta
    origin_us = float(meta.get("origin_us", 0.0))
    base_ns = meta.get("baseTimeNanoseconds")
    if isinstance(base_ns, int | float) and base_ns > 0:
        wall_start_us: float | None = base_ns / NS_PER_US + origin_us
    elif origin_us > 1e15:  # timestamps were already microseconds since the epoch
        wall_start_us = origin_us
    else:
        wall_start_us = None
    distributed = meta.get("distributedInfo") or {}
    tracks = [{k: v for k, v in t.items() if k not in ("lanes", "series")} for t in index.info["tracks"]]
    return {
        "duration_us": us(index.info["duration_ns"]),
        "wall_start_us": wall_start_us,
        "rank": distributed.get("rank") if isinstance(distributed, dict) else None,
        "groups": index.info["groups"],
        "tracks": tracks,
    }


# ---- windows with level of detail -----------------------------------------------------------
def window(
    tables: TraceTables,
    index: TimelineIndex,
    start_ns: int,
    end_ns: int,
    width_px: int,
    track_ids: set[str] | None = None,
) -> dict[str, Any]:
    """Slices at least a pixel wide as themselves, narrower neighbours merged, counters downsampled."""
    end_ns = max(end_ns, start_ns + 1)
    px = (end_ns - start_ns) / width_px
    chosen = [t for t in index.info["tracks"] if track_ids is None or t["id"] in track_ids]
    lanes = np.asarray([lane for t in chosen if t["kind"] == "slices" for lane in t["lanes"]], dtype=np.int64)
    per_lane = lane_items(tables, index, lanes, start_ns, end_ns, px)
    answer = []
    for t in chosen:
        if t["kind"] == "slices":
            slices, merged = [], []
            for lane in t["lanes"]:
                lane_slices, lane_merged = per_lane.get(lane, ([], []))
                slices.extend(lane_slices)
                merged.extend(lane_merged)
            answer.append({"id": t["id"], "name": t["name"], "kind": "slices", "slices": slices, "merged": merged})
        else:
            points = counter_points(index, t, start_ns, end_ns, width_px)
            answer.append({"id": t["id"], "name": t["name"], "kind": "counter", "points": points})
    return {"start_us": us(start_ns), "end_us": us(end_ns), "width_px": width_px, "tracks": answer}


def lane_ranges(index: TimelineIndex, lanes: np.ndarray, start_ns: int, end_ns: int) -> tuple[np.ndarray, ...]:
    """For each lane, the raw positions ``[first, stop)`` of its slices overlapping [start, end)."""
    stride = index.stride
    # a key is lane * stride + time: a time outside [0, stride) would reach into the neighbouring lanes
    start_ns, end_ns = (min(max(t, -1), stride - 1) for t in (start_ns, end_ns))
    first = np.searchsorted(index.arrays["raw_end_key"], lanes * stride + start_ns, side="right")
    stop = np.searchsorted(index.arrays["raw_start_key"], lanes * stride + end_ns, side="left")
    keep = stop > first
    return lanes[keep], first[keep], stop[keep]


def lane_items(
    tables: TraceTables, index: TimelineIndex, lanes: np.ndarray, start_ns: int, end_ns: int, px: float
) -> dict[int, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Per lane: (slices wider than a pixel, merged blocks of the narrower ones)."""
    arrays = index.arrays
    lanes, first, stop = lane_ranges(index, lanes, start_ns, end_ns)
    if not len(lanes):
        return {}
    level = index.level_for(px)
    if level == 0:
        item_first, item_last = first, stop - 1
    else:
        cuts = arrays[f"level{level}_cuts"]
        item_first = np.searchsorted(cuts, first, side="right") - 1
        item_last = np.searchsorted(cuts, stop - 1, side="right") - 1
    counts = item_last - item_first + 1
    lane_of = np.repeat(np.arange(len(lanes)), counts)
    offsets = np.cumsum(counts) - counts
    item = np.arange(int(counts.sum())) - np.repeat(offsets, counts) + np.repeat(item_first, counts)
    if level == 0:
        lo, hi = item, item + 1
    else:
        lo = np.maximum(cuts[item], first[lane_of])
        hi = np.minimum(cuts[item + 1], stop[lane_of])
    lane_base = lanes[lane_of] * index.stride
    item_start = arrays["raw_start_key"][lo] - lane_base
    item_end = arrays["raw_end_key"][hi - 1] - lane_base
    count = hi - lo
    busy = arrays["busy_cum"][hi] - arrays["busy_cum"][lo]
    raw_event = arrays["raw_event"]
    event_names = np.asarray(tables.events["name"])
    name = event_names[raw_event[lo]]
    if level:
        name = np.where(count == 1, name, arrays[f"level{level}_name"][item])

    wide = (count == 1) & (item_end - item_start >= px)
    breaks = np.ones(len(item), dtype=bool)
    breaks[1:] = (lane_of[1:] != lane_of[:-1]) | wide[1:] | wide[:-1] | (item_start[1:] - item_end[:-1] >= px)
    result: dict[int, tuple[list, list]] = {int(lane): ([], []) for lane in lanes}
    strings = tables.strings
    kinds = np.asarray(tables.events["kind"])
    lane_depth = arrays["lane_depth"]

    for pos in np.flatnonzero(wide).tolist():
        event = int(raw_event[lo[pos]])
        lane = int(lanes[lane_of[pos]])
        result[lane][0].append(
            {
                "id": event,
                "name": strings[int(name[pos])],
                "start_us": us(item_start[pos]),
                "dur_us": us(item_end[pos] - item_start[pos]),
                "depth": int(lane_depth[lane]),
                "kind": KIND_NAMES.get(int(kinds[event]), "other"),
            }
        )
    narrow = np.flatnonzero(~wide)
    if len(narrow):
        group_start = np.flatnonzero(breaks[narrow])
        group_of = np.cumsum(breaks[narrow]) - 1
        g_first = narrow[group_start]
        g_last = narrow[np.append(group_start[1:], len(narrow)) - 1]
        g_count = hi[g_last] - lo[g_first]
        g_busy = arrays["busy_cum"][hi[g_last]] - arrays["busy_cum"][lo[g_first]]
        dominant = narrow[_argmax_in_runs(busy[narrow], group_of)]
        for f, last, c, b, d in zip(
            g_first.tolist(), g_last.tolist(), g_count.tolist(), g_busy.tolist(), dominant.tolist(), strict=True
        ):
            lane = int(lanes[lane_of[f]])
            result[lane][1].append(
                {
                    "start_us": us(item_start[f]),
                    "dur_us": us(item_end[last] - item_start[f]),
                    "depth": int(lane_depth[lane]),
                    "count": int(c),
                    "busy_us": us(b),
                    "name": strings[int(name[d])],
                }
            )
    return result


def _argmax_in_runs(values: np.ndarray, run: np.ndarray) -> np.ndarray:
    """Position of the largest value within each run of equal ``run`` labels (labels 0..n-1 in order)."""
    starts = np.flatnonzero(np.r_[True, run[1:] != run[:-1]])
    run_max = np.maximum.reduceat(values, starts)
    candidates = np.flatnonzero(values == run_max[run])
    first = np.r_[True, run[candidates][1:] != run[candidates][:-1]]
    return candidates[first]


def counter_points(
    index: TimelineIndex, track: dict[str, Any], start_ns: int, end_ns: int, width_px: int
) -> list[list[float]]:
    """A step function's points in the window: raw when few, else per-bucket means or min/max."""
    arrays = index.arrays
    lo, hi = int(arrays["counter_offsets"][track["series"]]), int(arrays["counter_offsets"][track["series"] + 1])
    t, v = arrays["counter_t"][lo:hi], arrays["counter_v"][lo:hi]
    if not len(t):
        return []
    first = max(int(np.searchsorted(t, start_ns, side="right")) - 1, 0)
    stop = int(np.searchsorted(t, end_ns, side="left"))
    buckets = max(width_px // COUNTER_BUCKET_PX, 1)
    if stop - first <= 2 * buckets:
        return [
            [us(max(a, start_ns) if i == 0 else a), float(b)]
            for i, (a, b) in enumerate(zip(t[first:stop].tolist(), v[first:stop].tolist(), strict=True))
        ]
    edges = start_ns + (end_ns - start_ns) * np.arange(buckets + 1) / buckets
    if track.get("mode") == "mean":
        integral = arrays["counter_int"][lo:hi]
        at = np.searchsorted(t, edges, side="right") - 1
        inside = at >= 0
        value_at = np.where(inside, np.asarray(v)[np.maximum(at, 0)], 0.0)
        area = np.where(inside, np.asarray(integral)[np.maximum(at, 0)] + value_at * (edges - t[np.maximum(at, 0)]), 0)
        means = np.diff(area) / np.diff(edges)
        return [[us(e), round(float(m), 4)] for e, m in zip(edges[:-1].tolist(), means.tolist(), strict=True)]
    # extremes: the smallest and largest point of every bucket, in time order, so peaks survive
    times = np.asarray(t[first:stop])
    values = np.asarray(v[first:stop])
    bucket = np.clip(((times - start_ns) * buckets) // max(end_ns - start_ns, 1), 0, buckets - 1).astype(np.int64)
    run = np.cumsum(np.r_[True, bucket[1:] != bucket[:-1]]) - 1
    high = _argmax_in_runs(values, run)
    low = _argmax_in_runs(-values, run)
    keep = np.unique(np.concatenate([high, low, [0]]))
    return [[us(max(a, start_ns)), float(b)] for a, b in zip(times[keep].tolist(), values[keep].tolist(), strict=True)]


# ---- one slice --------------------------------------------------------------------------------
def _lane_of_depth(index: TimelineIndex, track_id: str) -> dict[int, int]:
    track = next((t for t in index.info["tracks"] if t["id"] == track_id), None)
    if track is None:
        return {}
    return {int(index.arrays["lane_depth"][lane]): lane for lane in track["lanes"]}


def _covering(index: TimelineIndex, lane: int, start_ns: int, end_ns: int) -> int:
    """The event of ``lane`` that starts at or before ``start_ns`` and ends at or after ``end_ns``, or -1."""
    arrays = index.arrays
    position = int(np.searchsorted(arrays["raw_start_key"], lane * index.stride + start_ns, side="right")) - 1
    lane_lo = int(arrays["lane_offsets"][lane])
    if position < lane_lo:
        return -1
    if int(arrays["raw_end_key"][position]) - lane * index.stride < end_ns:
        return -1
    return int(arrays["raw_event"][position])


def ancestors(tables: TraceTables, index: TimelineIndex, event: int) -> list[int]:
    """The slices enclosing ``event`` on its track, innermost first."""
    events = tables.events
    start = int(events["ts_ns"][event])
    end = start + max(int(events["dur_ns"][event]), 0)
    lanes = _lane_of_depth(index, f"t{int(events['track'][event])}")
    result = []
    for depth in range(int(index.arrays["event_depth"][event]) - 1, -1, -1):
        if depth in lanes:
            found = _covering(index, lanes[depth], start, end)
            if found >= 0:
                result.append(found)
    return result


def slice_at(tables: TraceTables, index: TimelineIndex, track: int, ts_ns: int) -> int:
    """The deepest slice of ``track`` around time ``ts_ns``, or -1."""
    lanes = _lane_of_depth(index, f"t{track}")
    for depth in sorted(lanes, reverse=True):
        found = _covering(index, lanes[depth], ts_ns, ts_ns)
        if found >= 0:
            return found
    return -1


def _brief(tables: TraceTables, index: TimelineIndex, event: int, relation: str) -> dict[str, Any]:
    events = tables.events
    return {
        "relation": relation,
        "id": int(event),
        "name": tables.strings[int(events["name"][event])],
        "track": f"t{int(events['track'][event])}",
        "start_us": us(events["ts_ns"][event]),
        "dur_us": us(events["dur_ns"][event]),
        "depth": int(index.arrays["event_depth"][event]),
    }


def _side_row(tables: TraceTables, table: str, event: int) -> int:
    rows = tables.table(table)["event"]
    position = int(np.searchsorted(rows, event))
    return position if position < len(rows) and int(rows[position]) == event else -1


def _args(tables: TraceTables, event: int) -> dict[str, Any]:
    events, strings = tables.events, tables.strings
    args: dict[str, Any] = {}
    if int(events["external_id"][event]) != NO_ID:
        args["External id"] = int(events["external_id"][event])
    if int(events["correlation"][event]) != NO_ID:
        args["correlation"] = int(events["correlation"][event])
    row = _side_row(tables, "kernels", event)
    if row >= 0:
        k = tables.table("kernels")
        args["device"] = int(k["device"][row])
        args["stream"] = int(k["stream"][row])
        if int(k["grid_x"][row]) >= 0:
            args["grid"] = [int(k["grid_x"][row]), int(k["grid_y"][row]), int(k["grid_z"][row])]
            args["block"] = [int(k["block_x"][row]), int(k["block_y"][row]), int(k["block_z"][row])]
        for column, label in (
            ("registers_per_thread", "registers per thread"),
            ("shared_memory", "shared memory"),
            ("bytes", "bytes"),
        ):
            if int(k[column][row]) >= 0:
                args[label] = int(k[column][row])
        for column, label in (("blocks_per_sm", "blocks per SM"), ("est_occupancy_pct", "est. achieved occupancy %")):
            value = float(k[column][row])
            if math.isfinite(value) and value >= 0:
                args[label] = value
    row = _side_row(tables, "ops", event)
    if row >= 0:
        ops = tables.table("ops")
        for column, label in (("input_dims", "Input Dims"), ("input_types", "Input type")):
            if int(ops[column][row]) >= 0:
                args[label] = strings[int(ops[column][row])]
        if int(ops["sequence_number"][row]) != NO_ID:
            args["Sequence number"] = int(ops["sequence_number"][row])
        if int(ops["fwd_thread"][row]) != NO_ID:
            args["Fwd thread id"] = int(ops["fwd_thread"][row])
    row = _side_row(tables, "collectives", event)
    if row >= 0:
        c = tables.table("collectives")
        for column, label in (
            ("collective_name", "Collective name"),
            ("dtype", "dtype"),
            ("pg_name", "Process Group Name"),
            ("pg_desc", "Process Group Description"),
            ("pg_ranks", "Process Group Ranks"),
        ):
            if int(c[column][row]) >= 0:
                args[label] = strings[int(c[column][row])]
        for column, label in (
            ("in_nelems", "In msg nelems"),
            ("out_nelems", "Out msg nelems"),
            ("group_size", "Group size"),
            ("seq", "Seq"),
        ):
            if int(c[column][row]) != NO_ID:
                args[label] = int(c[column][row])
    return args


def _stack(tables: TraceTables, index: TimelineIndex, event: int) -> list[dict[str, Any]]:
    """Python frames around the event, innermost first: the old ``Call stack`` argument of the event
    or of the innermost operator around it, else the ``python_function`` slices enclosing it."""
    around = ancestors(tables, index, event)
    ops = tables.table("ops")
    for candidate in [event, *around]:
        row = _side_row(tables, "ops", candidate)
        if row >= 0 and int(ops["call_stack"][row]) >= 0:
            text = tables.strings[int(ops["call_stack"][row])]
            return [parse_frame(frame) for frame in text.split(";") if frame.strip()]
    kinds = tables.events["kind"]
    frames = [a for a in around if int(kinds[a]) == Kind.PYTHON_FUNCTION]
    return [parse_frame(tables.strings[int(tables.events["name"][a])]) for a in frames]


def slice_details(tables: TraceTables, index: TimelineIndex, event: int) -> dict[str, Any]:
    events, strings = tables.events, tables.strings
    kind = int(events["kind"][event])
    track = int(events["track"][event])
    related = _related(tables, index, event)
    stack_of = event
    if kind in DEVICE_KINDS:
        launchers = [r["id"] for r in related if r["relation"] == "launched by"]
        stack_of = launchers[0] if launchers else event
    track_name = next((t["name"] for t in index.info["tracks"] if t["id"] == f"t{track}"), "")
    return {
        **{k: v for k, v in _brief(tables, index, event, "").items() if k != "relation"},
        "category": strings[int(events["cat"][event])],
        "kind": KIND_NAMES.get(kind, "other"),
        "track_name": track_name,
        "args": _args(tables, event),
        "related": related,
        "stack": _stack(tables, index, stack_of),
    }


def _related(tables: TraceTables, index: TimelineIndex, event: int) -> list[dict[str, Any]]:
    """Slices linked to ``event`` by flows: kernel <-> launching runtime call (correlation), the
    kernels an operator launched, and forward <-> backward operators (``fwdbwd`` flows)."""
    events = tables.events
    kind = int(events["kind"][event])
    correlation = int(events["correlation"][event])
    kinds = np.asarray(events["kind"])
    result: list[dict[str, Any]] = []
    if kind in DEVICE_KINDS and correlation != NO_ID:
        for row in _with_correlation(tables, [correlation], HOST_RUNTIME_KINDS)[:MAX_RELATED]:
            result.append(_brief(tables, index, row, "launched by"))
            result.extend(_brief(tables, index, op, "launched by operator") for op in ancestors(tables, index, row)[:1])
    elif kind in HOST_RUNTIME_KINDS and correlation != NO_ID:
        for row in _with_correlation(tables, [correlation], DEVICE_KINDS)[:MAX_RELATED]:
            result.append(_brief(tables, index, row, "launches"))
    elif kind in HOST_OP_KINDS:
        start = int(events["ts_ns"][event])
        end = start + int(events["dur_ns"][event])
        ts = events["ts_ns"]
        lo, hi = int(np.searchsorted(ts, start, side="left")), int(np.searchsorted(ts, end, side="right"))
        inside = np.arange(lo, hi)
        inside = inside[
            (np.asarray(events["track"][lo:hi]) == int(events["track"][event]))
            & np.isin(kinds[lo:hi], HOST_RUNTIME_KINDS)
            & (np.asarray(events["correlation"][lo:hi]) != NO_ID)
        ]
        correlations = np.asarray(events["correlation"])[inside[: MAX_RELATED * 4]]
        for row in _with_correlation(tables, correlations.tolist(), DEVICE_KINDS)[:MAX_RELATED]:
            result.append(_brief(tables, index, row, "kernels"))
    result.extend(_fwdbwd(tables, index, event))
    return result


def _with_correlation(tables: TraceTables, correlations: list[int], kinds: tuple) -> list[int]:
    if not correlations:
        return []
    events = tables.events
    rows = np.flatnonzero(np.isin(np.asarray(events["correlation"]), correlations))
    return [int(r) for r in rows if int(events["kind"][r]) in kinds]


def _fwdbwd(tables: TraceTables, index: TimelineIndex, event: int) -> list[dict[str, Any]]:
    flows = tables.table("flows")
    if not len(flows["flow_id"]):
        return []
    events = tables.events
    track = int(events["track"][event])
    start = int(events["ts_ns"][event])
    end = start + int(events["dur_ns"][event])
    fwdbwd = tables.strings.lookup("fwdbwd")
    if fwdbwd < 0:
        return []
    cat = np.asarray(flows["cat"])
    flow_ts = np.asarray(flows["ts_ns"])
    flow_track = np.asarray(flows["track"])
    mine = np.flatnonzero((cat == fwdbwd) & (flow_track == track) & (flow_ts >= start) & (flow_ts <= end))
    result = []
    for row in mine.tolist()[:MAX_RELATED]:
        if slice_at(tables, index, track, int(flow_ts[row])) != event:
            continue  # the flow belongs to a slice nested inside this one
        phase = int(flows["phase"][row])
        partners = np.flatnonzero(
            (np.asarray(flows["flow_id"]) == int(flows["flow_id"][row]))
            & (cat == fwdbwd)
            & (np.asarray(flows["phase"]) != phase)
        )
        for partner in partners.tolist():
            other = slice_at(tables, index, int(flow_track[partner]), int(flow_ts[partner]))
            if other >= 0 and other != event:
                result.append(_brief(tables, index, other, "backward" if phase == 0 else "forward"))
    return result


# ---- search, area summary --------------------------------------------------------------------
def matching_names(tables: TraceTables, query: str) -> np.ndarray:
    needle = query.lower()
    return np.asarray([i for i, s in enumerate(tables.strings.strings) if needle in s.lower()], dtype=np.int32)


def search_rows(tables: TraceTables, query: str) -> np.ndarray:
    """Rows of the events whose name contains ``query`` (case-insensitive), in time order."""
    if not query:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.isin(np.asarray(tables.events["name"]), matching_names(tables, query)))


def search_match(tables: TraceTables, index: TimelineIndex, rows: np.ndarray, position: int) -> dict[str, Any] | None:
    if not len(rows):
        return None
    event = int(rows[position % len(rows)])
    return {k: v for k, v in _brief(tables, index, event, "").items() if k != "relation"}


def _window_events(
    index: TimelineIndex, start_ns: int, end_ns: int, track_ids: set[str] | None
) -> tuple[np.ndarray, np.ndarray]:
    """(event rows, timeline track slot) of every slice overlapping the window on the chosen tracks."""
    tracks = index.info["tracks"]
    lanes = np.asarray(
        [
            lane
            for t in tracks
            if t["kind"] == "slices" and (track_ids is None or t["id"] in track_ids)
            for lane in t["lanes"]
        ],
        dtype=np.int64,
    )
    lanes, first, stop = lane_ranges(index, lanes, start_ns, end_ns)
    counts = stop - first
    positions = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    return index.arrays["raw_event"][positions].astype(np.int64), index.arrays["lane_track"][np.repeat(lanes, counts)]


def area_summary(
    tables: TraceTables, index: TimelineIndex, start_ns: int, end_ns: int, track_ids: set[str] | None
) -> dict[str, Any]:
    """What runs in a time range: clipped time per name and busy time per track (Perfetto's area selection)."""
    rows, slots = _window_events(index, start_ns, end_ns, track_ids)
    events = tables.events
    starts = np.asarray(events["ts_ns"])[rows]
    ends = starts + np.asarray(events["dur_ns"])[rows]
    clipped_start, clipped_end = np.maximum(starts, start_ns), np.minimum(ends, end_ns)
    clipped = clipped_end - clipped_start
    unique_rows, first = np.unique(rows, return_index=True)  # the steps track repeats its thread's slices
    names = np.asarray(events["name"])[unique_rows]
    name_ids, inverse = np.unique(names, return_inverse=True)
    totals = np.bincount(inverse, weights=clipped[first], minlength=len(name_ids))
    counts = np.bincount(inverse, minlength=len(name_ids))
    kind_of_name = np.zeros(len(name_ids), dtype=np.int64)
    kind_of_name[inverse] = np.asarray(events["kind"])[unique_rows]
    order = np.argsort(-totals, kind="stable")[:MAX_SUMMARY_NAMES]
    by_name = [
        {
            "name": tables.strings[int(name_ids[i])],
            "kind": KIND_NAMES.get(int(kind_of_name[i]), "other"),
            "count": int(counts[i]),
            "total_us": us(totals[i]),
            "avg_us": us(totals[i] / counts[i]),
        }
        for i in order.tolist()
    ]
    window_ns = max(end_ns - start_ns, 1)
    by_track = []
    tracks = index.info["tracks"]
    for slot in np.unique(slots).tolist():
        on = slots == slot
        busy = intervals.total(intervals.merge(clipped_start[on], clipped_end[on]))
        by_track.append(
            {
                "track": tracks[slot]["id"],
                "name": tracks[slot]["name"],
                "count": int(on.sum()),
                "busy_us": us(busy),
                "busy_pct": round(100.0 * busy / window_ns, 2),
            }
        )
    by_track.sort(key=lambda t: -t["busy_us"])
    return {
        "start_us": us(start_ns),
        "end_us": us(end_ns),
        "slices": len(unique_rows),
        "names": len(name_ids),
        "by_name": by_name,
        "by_track": by_track,
    }


# ---- export ---------------------------------------------------------------------------------
def export_chrome_trace(
    tables: TraceTables, index: TimelineIndex, start_ns: int, end_ns: int, track_ids: set[str] | None, limit: int
) -> dict[str, Any]:
    """The slices overlapping the window as a Chrome trace (loads in Perfetto and chrome://tracing)."""
    rows, _ = _window_events(index, start_ns, end_ns, track_ids)
    rows = np.unique(rows)
    truncated = len(rows) > limit
    rows = rows[:limit]
    events, strings = tables.events, tables.strings
    origin_us = float(tables.meta.get("origin_us", 0.0))
    trace_events: list[dict[str, Any]] = []
    used_tracks = np.unique(np.asarray(events["track"])[rows]).tolist()
    for track_id in used_tracks:
        t = tables.tracks[track_id]
        pid, tid = _chrome_id(t.pid), _chrome_id(t.tid)
        if t.process_name or t.process_labels:
            name = t.process_name or t.process_labels
            trace_events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        if t.process_labels:
            labels = {"labels": t.process_labels}
            trace_events.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": labels})
        thread = t.thread_name or (t.tid if isinstance(tid, str) else "")
        if thread:
            trace_events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}})
    kinds = np.asarray(events["kind"])
    runtime_at: dict[int, tuple[Any, Any, float]] = {}
    ts_column, dur_column, track_column = events["ts_ns"], events["dur_ns"], events["track"]
    for row in rows.tolist():
        t = tables.tracks[int(track_column[row])]
        pid, tid = _chrome_id(t.pid), _chrome_id(t.tid)
        ts = origin_us + int(ts_column[row]) / NS_PER_US
        trace_events.append(
            {
                "ph": "X",
                "cat": strings[int(events["cat"][row])],
                "name": strings[int(events["name"][row])],
                "pid": pid,
                "tid": tid,
                "ts": round(ts, 3),
                "dur": round(int(dur_column[row]) / NS_PER_US, 3),
                "args": _args(tables, row),
            }
        )
        if int(kinds[row]) in HOST_RUNTIME_KINDS and int(events["correlation"][row]) != NO_ID:
            runtime_at[int(events["correlation"][row])] = (pid, tid, round(ts, 3))
    for row in rows.tolist():  # ac2g flows for launches whose both ends are in the window
        correlation = int(events["correlation"][row])
        if int(kinds[row]) not in DEVICE_KINDS or correlation not in runtime_at:
            continue
        pid, tid, ts = runtime_at[correlation]
        t = tables.tracks[int(track_column[row])]
        kernel_ts = round(origin_us + int(ts_column[row]) / NS_PER_US, 3)
        trace_events.append(
            {"ph": "s", "id": correlation, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g", "name": "ac2g"}
        )
        trace_events.append(
            {
                "ph": "f",
                "bp": "e",
                "id": correlation,
                "pid": _chrome_id(t.pid),
                "tid": _chrome_id(t.tid),
                "ts": kernel_ts,
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
    result: dict[str, Any] = {"traceEvents": trace_events, "displayTimeUnit": "ms"}
    for key in ("deviceProperties", "distributedInfo", "schemaVersion"):
        if key in tables.meta:
            result[key] = tables.meta[key]
    result["profscope"] = {"window_us": [us(start_ns), us(end_ns)], "slices": len(rows), "truncated": truncated}
    return result


def _chrome_id(value: str) -> int | str:
    return int(value) if value.isascii() and value.lstrip("-").isdigit() else value
