"""The Trace view's index and queries on real traces.

The level-of-detail answer is checked against a direct computation from the raw events: for random
windows and widths, every lane's slices and merged blocks must be exactly what merging the raw
slices at that resolution gives — nothing lost, nothing counted twice.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import corpus_file
from profscope.analysis import timeline
from profscope.analysis.timeline_index import build_timeline_index, lane_depths, write_timeline_index
from profscope.ingest.kineto import parse_trace
from profscope.tables import Kind

TRACES = {
    "resnet50_v100": "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "tinygpt_cpu": "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz",
    "negative_queue_a100": "hta/negative_queue_length_values_check/rank0.json.gz",
    "bert_h100": "traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
}


@pytest.fixture(scope="module", params=sorted(TRACES))
def indexed(request):
    path = corpus_file(TRACES[request.param])
    with open(path, "rb") as raw:
        tables = parse_trace(raw, use_second_core=False)
    return tables, build_timeline_index(tables)


def _ns(value_us: float) -> int:
    return round(value_us * 1000)


def _expected_lane(start: np.ndarray, end: np.ndarray, ids: np.ndarray, px: float) -> tuple[set, list]:
    """Merge one lane's raw slices at ``px`` ns per pixel, the plain way."""
    slices, blocks = set(), []
    current = None
    for s, e, i in zip(start.tolist(), end.tolist(), ids.tolist(), strict=True):
        if e - s >= px:
            slices.add(i)
            current = None
            continue
        if current is not None and s - current["end"] < px:
            current["end"] = max(current["end"], e)
            current["count"] += 1
            current["busy"] += e - s
        else:
            current = {"start": s, "end": e, "count": 1, "busy": e - s}
            blocks.append(current)
    return slices, [(b["start"], b["end"], b["count"], b["busy"]) for b in blocks]


def test_level_of_detail_loses_nothing(indexed):
    tables, index = indexed
    events = tables.events
    start = np.asarray(events["ts_ns"])
    end = start + np.asarray(events["dur_ns"])
    track = np.asarray(events["track"])
    depth = np.asarray(index.arrays["event_depth"])
    duration = index.info["duration_ns"]
    rng = np.random.default_rng(7)
    windows = [(0, duration, 2000), (0, duration, 300)]
    for _ in range(40):
        a, b = sorted(rng.integers(0, duration, size=2).tolist())
        windows.append((a, max(b, a + 1), int(rng.choice([50, 700, 2000, 4000]))))
    for _ in range(20):  # deep zooms
        a = int(rng.integers(0, duration))
        windows.append((a, a + int(rng.integers(1_000, 200_000)), 1500))
    checked_lanes = 0
    for window_start, window_end, width in windows:
        px = (window_end - window_start) / width
        answer = timeline.window(tables, index, window_start, window_end, width)
        by_id = {t["id"]: t for t in answer["tracks"]}
        for info in index.info["tracks"]:
            if info["kind"] != "slices" or info["id"] == "steps":
                continue
            got = by_id[info["id"]]
            track_rows = np.flatnonzero(track == int(info["id"][1:]))
            for lane_depth in range(info["max_depth"] + 1):
                rows = track_rows[depth[track_rows] == lane_depth]
                rows = rows[(start[rows] < window_end) & (end[rows] > window_start)]
                rows = rows[np.argsort(start[rows], kind="stable")]
                want_slices, want_blocks = _expected_lane(start[rows], end[rows], rows, px)
                got_slices = {s["id"] for s in got["slices"] if s["depth"] == lane_depth}
                got_blocks = [
                    (_ns(m["start_us"]), _ns(m["start_us"]) + _ns(m["dur_us"]), m["count"], _ns(m["busy_us"]))
                    for m in got["merged"]
                    if m["depth"] == lane_depth
                ]
                assert got_slices == want_slices, (info["name"], lane_depth, window_start, window_end, width)
                assert sorted(got_blocks) == sorted(want_blocks), (info["name"], lane_depth, window_start, width)
                assert len(got_slices) + sum(b[2] for b in got_blocks) == len(rows)
                checked_lanes += 1
    assert checked_lanes > 100


def test_answer_size_is_bounded_by_width(indexed):
    tables, index = indexed
    duration = index.info["duration_ns"]
    for width in (100, 1000):
        answer = timeline.window(tables, index, 0, duration, width)
        for t in answer["tracks"]:
            if t["kind"] == "slices":
                for depth in {s["depth"] for s in t["slices"]} | {m["depth"] for m in t["merged"]}:
                    items = [s for s in t["slices"] if s["depth"] == depth] + [
                        m for m in t["merged"] if m["depth"] == depth
                    ]
                    assert len(items) <= 2 * width + 1
            else:
                assert len(t["points"]) <= 2 * width + 2


def test_lanes_never_overlap_and_nest_children_below_parents(indexed):
    tables, index = indexed
    arrays = index.arrays
    stride = index.stride
    starts = (
        np.asarray(arrays["raw_start_key"])
        - np.repeat(np.arange(len(arrays["lane_depth"])), np.diff(arrays["lane_offsets"])) * stride
    )
    ends = (
        np.asarray(arrays["raw_end_key"])
        - np.repeat(np.arange(len(arrays["lane_depth"])), np.diff(arrays["lane_offsets"])) * stride
    )
    offsets = arrays["lane_offsets"]
    for lane in range(len(arrays["lane_depth"])):
        s, e = starts[offsets[lane] : offsets[lane + 1]], ends[offsets[lane] : offsets[lane + 1]]
        assert np.all(s[1:] >= e[:-1]), f"lane {lane} has overlapping slices"
    # every raw event is in exactly one lane of its own track (the steps track repeats steps)
    thread_lanes = [lane for t in index.info["tracks"] if t["id"] != "steps" for lane in t.get("lanes", [])]
    positions = np.concatenate([np.arange(offsets[lane], offsets[lane + 1]) for lane in thread_lanes])
    assert sorted(arrays["raw_event"][positions].tolist()) == list(range(tables.row_count("events")))


def test_depth_is_nesting_level_for_nested_slices():
    start = np.array([0, 0, 10, 20, 20, 50, 60])
    end = np.array([100, 40, 15, 30, 20, 90, 70])
    # parent 0-100; child 0-40 with grandchildren 10-15 and 20-30 (and a zero-length one at 20);
    # child 50-90 with grandchild 60-70
    assert lane_depths(start, end).tolist() == [0, 1, 2, 2, 3, 1, 2]


def test_overlapping_slices_are_stacked_not_dropped():
    start = np.array([0, 5, 12, 30])
    end = np.array([10, 20, 25, 40])  # 0-10 and 5-20 overlap without nesting, so do 5-20 and 12-25
    depth = lane_depths(start, end)
    assert depth.tolist() == [0, 1, 0, 0]


def test_kernel_details_follow_correlation_to_its_launch():
    path = corpus_file(TRACES["resnet50_v100"])
    with open(path, "rb") as raw:
        tables = parse_trace(raw, use_second_core=False)
    index = build_timeline_index(tables)
    events = tables.events
    kinds = np.asarray(events["kind"])
    kernel = int(np.flatnonzero(kinds == Kind.KERNEL)[100])
    details = timeline.slice_details(tables, index, kernel)
    launch = next(r for r in details["related"] if r["relation"] == "launched by")
    assert int(events["correlation"][launch["id"]]) == int(events["correlation"][kernel])
    assert kinds[launch["id"]] == Kind.RUNTIME
    assert details["args"]["grid"][0] > 0 and "stream" in details["args"]
    # and back: the launch lists the kernel
    back = timeline.slice_details(tables, index, launch["id"])
    assert kernel in [r["id"] for r in back["related"] if r["relation"] == "launches"]
    # the launching operator encloses the runtime call on the same thread
    op = next(r for r in details["related"] if r["relation"] == "launched by operator")
    assert (
        op["start_us"] <= launch["start_us"] and op["start_us"] + op["dur_us"] >= launch["start_us"] + launch["dur_us"]
    )


def test_forward_op_links_to_its_backward_op():
    path = corpus_file(TRACES["tinygpt_cpu"])
    with open(path, "rb") as raw:
        tables = parse_trace(raw, use_second_core=False)
    index = build_timeline_index(tables)
    flows = tables.table("flows")
    fwdbwd = tables.strings.lookup("fwdbwd")
    starts = np.flatnonzero((np.asarray(flows["cat"]) == fwdbwd) & (np.asarray(flows["phase"]) == 0))
    assert len(starts) > 0
    flow = int(starts[0])
    forward = timeline.slice_at(tables, index, int(flows["track"][flow]), int(flows["ts_ns"][flow]))
    details = timeline.slice_details(tables, index, forward)
    backward = [r for r in details["related"] if r["relation"] == "backward"]
    assert backward, details["related"]
    finish = np.flatnonzero(
        (np.asarray(flows["flow_id"]) == int(flows["flow_id"][flow])) & (np.asarray(flows["phase"]) != 0)
    )
    assert (
        backward[0]["start_us"]
        <= int(flows["ts_ns"][finish[0]]) / 1000
        <= backward[0]["start_us"] + backward[0]["dur_us"]
    )
    assert backward[0]["start_us"] > details["start_us"]  # backward runs after forward


def test_counters_keep_peaks_and_means():
    path = corpus_file(TRACES["resnet50_v100"])
    with open(path, "rb") as raw:
        tables = parse_trace(raw, use_second_core=False)
    index = build_timeline_index(tables)
    duration = index.info["duration_ns"]
    tracks = {t["name"]: t for t in index.info["tracks"] if t["kind"] == "counter"}
    util = tracks["GPU 0 utilization"]
    points = timeline.counter_points(index, util, 0, duration, 200)
    # the mean of the per-bucket means is the busy fraction of the whole trace
    kernels = np.asarray(tables.events["kind"]) == Kind.KERNEL
    s = np.asarray(tables.events["ts_ns"])[kernels]
    e = s + np.asarray(tables.events["dur_ns"])[kernels]
    from profscope.analysis import intervals

    busy = intervals.total(intervals.merge(s, e))
    assert np.mean([v for _, v in points]) == pytest.approx(100.0 * busy / duration, rel=1e-6)
    launches = next(t for name, t in tracks.items() if name.endswith("queued launches"))
    lo, hi = (
        index.arrays["counter_offsets"][launches["series"]],
        index.arrays["counter_offsets"][launches["series"] + 1],
    )
    true_peak = float(np.max(index.arrays["counter_v"][lo:hi]))
    drawn = timeline.counter_points(index, launches, 0, duration, 100)
    assert max(v for _, v in drawn) == true_peak
    assert len(drawn) <= 2 * 50 + 1


def test_area_summary_and_export_on_a_window():
    path = corpus_file(TRACES["resnet50_v100"])
    with open(path, "rb") as raw:
        tables = parse_trace(raw, use_second_core=False)
    index = build_timeline_index(tables)
    duration = index.info["duration_ns"]
    a, b = duration // 3, duration // 3 + duration // 20
    summary = timeline.area_summary(tables, index, a, b, {"t2"})  # the GPU stream only
    events = tables.events
    start = np.asarray(events["ts_ns"])
    end = start + np.asarray(events["dur_ns"])
    on = (np.asarray(events["track"]) == 2) & (start < b) & (end > a)
    clipped = np.minimum(end[on], b) - np.maximum(start[on], a)
    assert summary["slices"] == int(on.sum())
    assert sum(_ns(n["total_us"]) for n in summary["by_name"]) == pytest.approx(
        int(clipped.sum()), abs=len(summary["by_name"])
    )
    (stream,) = summary["by_track"]
    assert _ns(stream["busy_us"]) == int(clipped.sum())  # kernels on one stream do not overlap here
    runtime = np.flatnonzero(np.asarray(events["kind"]) == Kind.RUNTIME)
    a = int(start[runtime[len(runtime) // 2]])  # a window where launches and their kernels both run
    b = a + duration // 20
    exported = timeline.export_chrome_trace(tables, index, a, b, None, 1_000_000)
    text = json.dumps(exported)
    again = json.loads(text)
    complete = [e for e in again["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == exported["profscope"]["slices"]
    flows = [e for e in again["traceEvents"] if e["ph"] in ("s", "f")]
    assert flows and len([f for f in flows if f["ph"] == "s"]) == len([f for f in flows if f["ph"] == "f"])
    # the exported file parses back into the same slices
    from io import BytesIO

    reparsed = parse_trace(BytesIO(text.encode()), use_second_core=False)
    assert reparsed.row_count("events") == len(complete)


def test_search_counts_and_orders_matches(indexed):
    tables, index = indexed
    names = tables.strings.strings
    needle = "aten::"
    rows = timeline.search_rows(tables, needle)
    expected = [i for i, n in enumerate(np.asarray(tables.events["name"]).tolist()) if needle in names[n].lower()]
    assert rows.tolist() == expected
    if len(rows) > 1:
        first, second = (timeline.search_match(tables, index, rows, i) for i in (0, 1))
        assert first["start_us"] <= second["start_us"]
        assert timeline.search_match(tables, index, rows, len(rows)) == first  # wraps around


def _reference_levels(lane_offsets, raw_start, raw_end, raw_name, duration):
    """The levels as first written: every level gathers its items' bounds and busy time from the raw slices."""
    total = len(raw_start)
    busy_cum = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(raw_end - raw_start, out=busy_cum[1:])
    lane_first = np.zeros(total, dtype=bool)
    lane_first[lane_offsets[:-1][np.diff(lane_offsets) > 0]] = True
    cuts, item_name = np.arange(total, dtype=np.int64), np.asarray(raw_name, dtype=np.int32)
    kept, thresholds, last_kept_size = [], [], total
    level, threshold = 0, 1_000
    while len(cuts) > int(lane_first.sum()) and threshold <= max(duration, 1) * 4:
        level += 1
        bounds = np.append(cuts, total)
        item_start, item_end = raw_start[cuts], raw_end[bounds[1:] - 1]
        single_wide = (bounds[1:] - bounds[:-1] == 1) & (item_end - item_start >= threshold)
        breaks = lane_first[cuts] | single_wide
        breaks[1:] |= single_wide[:-1] | (item_start[1:] - item_end[:-1] >= threshold)
        breaks[0] = True
        parent = np.cumsum(breaks) - 1
        busy = busy_cum[bounds[1:]] - busy_cum[bounds[:-1]]
        dominant: list[int] = []  # per merged item, its first sub-item of the most busy time
        for item, (group, item_busy) in enumerate(zip(parent.tolist(), busy.tolist(), strict=True)):
            if group == len(dominant):
                dominant.append(item)
            elif item_busy > busy[dominant[group]]:
                dominant[group] = item
        item_name, cuts = item_name[dominant], cuts[breaks]
        if len(cuts) <= last_kept_size // 2:
            kept.append((level, (np.append(cuts, total), item_name.astype(np.int32))))
            thresholds.append(threshold)
            last_kept_size = len(cuts)
        threshold *= 4
    return kept, thresholds


def _kept_levels(lane_offsets, start, end, name, duration, block=None):
    """``(kept, thresholds)`` as ``_reference_levels`` gives them: each level as the build writes it (in memory),
    the raw slices handed ``block`` at a time (the build's own block when None)."""
    from profscope.analysis.timeline_index import _build_levels, _GrowingArray

    arrays, handed = {}, []

    def keep(level, count):
        handed.append(level)
        return (
            _GrowingArray(np.int64, count + 1, None, f"level{level}_cuts", arrays),
            _GrowingArray(np.int32, count, None, f"level{level}_name", arrays),
        )

    def slices(first, last):
        return start[first:last], end[first:last], name[first:last]

    levels, thresholds = _build_levels(lane_offsets, slices, duration, keep, **({"block": block} if block else {}))
    assert levels == handed
    return [(level, (arrays[f"level{level}_cuts"], arrays[f"level{level}_name"])) for level in levels], thresholds


def _levels_match(lane_offsets, start, end, name):
    start, end = np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64)
    lane_offsets, name = np.asarray(lane_offsets, dtype=np.int64), np.asarray(name, dtype=np.int32)
    duration = int(end.max(initial=0))
    want = _reference_levels(lane_offsets, start, end, name, duration)
    # the index merges over its keys (each lane's times moved past the lanes before it): the same levels; and the
    # same whatever the blocks the slices come in (in C: a level's open item is carried from block to block)
    lane_base = np.repeat(np.arange(len(lane_offsets) - 1, dtype=np.int64) * (duration + 2), np.diff(lane_offsets))
    got = _kept_levels(lane_offsets, start, end, name, duration)
    for keyed, block in ((False, 1), (False, 3), (True, None), (True, 64)):
        base = lane_base if keyed else 0
        again = _kept_levels(lane_offsets, start + base, end + base, name, duration, block)
        assert again[1] == got[1] and len(again[0]) == len(got[0])
        for (level, (cuts, names)), (again_level, (again_cuts, again_names)) in zip(got[0], again[0], strict=True):
            assert level == again_level and np.array_equal(cuts, again_cuts) and np.array_equal(names, again_names)
    assert got[1] == want[1]
    assert [level for level, _ in got[0]] == [level for level, _ in want[0]]
    for (_, (cuts, names)), (_, (want_cuts, want_names)) in zip(got[0], want[0], strict=True):
        assert cuts.dtype == np.int64 and names.dtype == np.int32
        assert np.array_equal(cuts, want_cuts) and np.array_equal(names, want_names)
    return got


@pytest.fixture(params=["native", "numpy"])
def merge_path(request, monkeypatch):
    """The levels merged in C, streamed (``_call_tree_sweep.merge_levels``), or in numpy, whole (``_merge_level``)."""
    from profscope.analysis import timeline_index

    if request.param == "numpy":
        monkeypatch.setattr(timeline_index, "_call_tree_sweep", None)
    else:
        assert timeline_index._call_tree_sweep is not None
    return request.param


@pytest.mark.parametrize("name", ["tinygpt_cpu", "negative_queue_a100"])
def test_levels_match_the_reference_on_real_traces(name, merge_path):
    """Levels carried from level to level are the levels gathered from the raw slices at each level."""
    with open(corpus_file(TRACES[name]), "rb") as raw:
        tables = parse_trace(raw, use_second_core=False)
    index = build_timeline_index(tables)
    raw_event, busy_cum = index.arrays["raw_event"], index.arrays["busy_cum"]
    start = np.asarray(tables.events["ts_ns"], dtype=np.int64)[raw_event]
    end = start + np.diff(busy_cum)
    name_of = np.asarray(tables.events["name"])[raw_event]
    levels, _ = _levels_match(index.arrays["lane_offsets"], start, end, name_of)
    assert levels  # the trace has coarser levels to compare


def test_levels_match_the_reference_on_edge_cases(merge_path):
    _levels_match([0], [], [], [])
    _levels_match([0, 1], [5], [10], [3])
    _levels_match([0, 0, 1, 1], [0], [5_000_000], [2])  # empty lanes around a lone wide slice
    # ties: equal busy times within a merged item, the first one names it; one slice per lane, zero lengths
    _levels_match([0, 4, 5, 8], [0, 10, 20, 30, 0, 0, 0, 5], [5, 15, 25, 35, 0, 0, 5, 5], [7, 8, 9, 7, 1, 2, 3, 4])
    rng = np.random.default_rng(7)
    for _ in range(20):
        count = int(rng.integers(1, 400))
        gaps, lengths = rng.integers(0, 3_000, count), rng.integers(0, 2_000, count) * rng.integers(0, 2, count)
        start = np.cumsum(gaps + np.r_[0, lengths[:-1]])
        cuts = np.sort(rng.choice(np.arange(1, count), size=min(count - 1, int(rng.integers(0, 5))), replace=False))
        lane_offsets = np.r_[0, cuts, count]
        # each lane's slices in time order from 0 (lanes hold disjoint slices, but any order is indexed the same)
        _levels_match(lane_offsets, start, start + lengths, rng.integers(0, 4, count))


def test_an_index_written_as_it_is_built_is_the_index_saved_at_the_end(indexed, tmp_path):
    """The ingest writes each array as soon as it is final (``write_timeline_index``, for its peak memory):
    the same files, byte for byte, as building the whole index and saving it."""
    tables, index = indexed
    index.save(tmp_path / "saved")
    written = write_timeline_index(tables, tmp_path / "written")
    saved_files = sorted(p.name for p in (tmp_path / "saved").iterdir())
    assert saved_files == sorted(p.name for p in (tmp_path / "written").iterdir())
    assert len(saved_files) == len(index.arrays) + 1  # and info.json
    for name in saved_files:
        assert (tmp_path / "saved" / name).read_bytes() == (tmp_path / "written" / name).read_bytes(), name
    assert written.info == index.info and not list(tmp_path.glob("*.tmp*"))  # no staging folder left


def _numpy_lane_depths(start, end, monkeypatch):
    from profscope.analysis import timeline_index

    with monkeypatch.context() as numpy_only:
        numpy_only.setattr(timeline_index, "_call_tree_sweep", None)
        return lane_depths(start, end)


@pytest.mark.parametrize("name", ["tinygpt_cpu", "negative_queue_a100"])
def test_native_lane_depths_match_numpy_on_real_traces(name, monkeypatch):
    """The one-pass C lane depths (``_call_tree_sweep.lane_depths``) are numpy's on every track of real traces."""
    from profscope.analysis import timeline_index
    from profscope.analysis.arrays import rows_by_value

    assert timeline_index._call_tree_sweep is not None
    with open(corpus_file(TRACES[name]), "rb") as raw:
        tables = parse_trace(raw, use_second_core=False)
    start = np.asarray(tables.events["ts_ns"], dtype=np.int64)
    end = start + np.maximum(np.asarray(tables.events["dur_ns"], dtype=np.int64), 0)
    for rows in rows_by_value(np.asarray(tables.events["track"])).values():
        native, numpy_depth = (
            lane_depths(start[rows], end[rows]),
            _numpy_lane_depths(start[rows], end[rows], monkeypatch),
        )
        assert native.dtype == numpy_depth.dtype == np.int32 and np.array_equal(native, numpy_depth)


def test_native_lane_depths_match_numpy_on_edge_cases(monkeypatch):
    """Nested, misnested (kept count or greedy rows), zero lengths, equal starts and ends, unsorted starts."""
    cases = [
        ([], []),
        ([5], [5]),
        ([0, 0, 0], [0, 0, 0]),  # zero lengths at one time: each takes a nanosecond, so they stack
        ([0, 0, 10, 10], [10, 10, 10, 20]),
        ([0, 2, 3], [5, 4, 8]),  # the third starts inside the first and ends after it
        ([0, 5, 1], [10, 6, 3]),  # starts out of order: numpy's own path
    ]
    rng = np.random.default_rng(11)
    for _ in range(300):
        count = int(rng.integers(1, 60))
        start = np.sort(rng.integers(0, int(rng.integers(1, 80)), count))
        end = start + rng.integers(0, 30, count) * rng.integers(0, 2, count)
        nested = np.sort(rng.integers(0, 50, count))  # mostly nesting: a parent covers its next few starts
        cases.append((start, end))
        cases.append((nested, nested + rng.integers(0, 3, count) * (count - np.arange(count))))
        cases.append((rng.integers(0, 40, count), rng.integers(40, 80, count)))  # unsorted
    for start, end in cases:
        start, end = np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64)
        native, numpy_depth = lane_depths(start, end), _numpy_lane_depths(start, end, monkeypatch)
        assert native.dtype == numpy_depth.dtype == np.int32, (start, end)
        assert np.array_equal(native, numpy_depth), (start.tolist(), end.tolist())


def test_the_index_build_holds_each_array_only_while_it_is_needed(monkeypatch, tmp_path):
    """At 1 GB the index's build ran in a helper beside the call tree's, and its peak was the two's: the counters
    and the order of every row by track (whose last view a loop variable kept), held to the end of the build,
    added ~40 MB to it. Now each is gone once written, before the levels are merged."""
    import gc
    import weakref

    from profscope.analysis import timeline_index

    with open(corpus_file(TRACES["resnet50_v100"]), "rb") as raw:
        tables = parse_trace(raw, use_second_core=False)
    watched: dict[str, list[weakref.ref]] = {"rows by track": [], "counters": []}
    rows_by_value, counter_series, build_levels = (
        timeline_index.rows_by_value,
        timeline_index._counter_series,
        timeline_index._build_levels,
    )

    def rows_watched(values, *row_type):
        rows = rows_by_value(values, *row_type)
        watched["rows by track"].extend(weakref.ref(r.base if r.base is not None else r) for r in rows.values())
        return rows

    def counters_watched(*arguments):
        arrays = counter_series(*arguments)
        watched["counters"].extend(weakref.ref(values) for values in arrays.values())
        return arrays

    alive: list[dict[str, int]] = []

    def count_alive(when: str) -> None:
        gc.collect()
        alive.append({when: sum(ref() is not None for refs in watched.values() for ref in refs)})

    def levels_watched(lane_offsets, slices, duration, keep):
        def keep_watched(level, count):
            count_alive(f"level {level}")
            return keep(level, count)

        count_alive("levels start")
        return build_levels(lane_offsets, slices, duration, keep_watched)

    monkeypatch.setattr(timeline_index, "rows_by_value", rows_watched)
    monkeypatch.setattr(timeline_index, "_counter_series", counters_watched)
    monkeypatch.setattr(timeline_index, "_build_levels", levels_watched)
    index = write_timeline_index(tables, tmp_path / "index")
    assert len(index.info["levels"]) >= 2 and watched["rows by track"] and len(watched["counters"]) == 4
    assert alive == [{"levels start": 0}] + [{f"level {level}": 0} for level in index.info["levels"]]


def test_the_levels_are_merged_with_no_page_of_the_tables_mapped(monkeypatch, tmp_path):
    """The index is built from the memory-mapped tables, beside the call tree, and its peak is the levels' merge:
    the events' pages it had read (~130 MB at 1 GB) stayed mapped through it. They are unmapped once read; the
    index is the same as the one built from the tables in memory."""
    from conftest import resident_bytes_mapped_under
    from profscope.analysis import timeline_index
    from profscope.tables import TraceTables

    with open(corpus_file(TRACES["resnet50_v100"]), "rb") as raw:
        parsed = parse_trace(raw, use_second_core=False)
    parsed.save(tmp_path / "tables")
    mapped_at_levels: list[int] = []
    build_levels = timeline_index._build_levels

    def levels_watched(*arguments):
        mapped_at_levels.append(resident_bytes_mapped_under(tmp_path / "tables"))
        return build_levels(*arguments)

    monkeypatch.setattr(timeline_index, "_build_levels", levels_watched)
    tables = TraceTables.load(tmp_path / "tables")
    assert np.asarray(tables.events["ts_ns"]).sum() and resident_bytes_mapped_under(tmp_path / "tables") > 0
    write_timeline_index(tables, tmp_path / "mapped")
    assert mapped_at_levels == [0]
    build_timeline_index(parsed).save(tmp_path / "in_memory")
    files = sorted(p.name for p in (tmp_path / "in_memory").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "mapped").iterdir()) and len(files) > 10
    for name in files:
        assert (tmp_path / "mapped" / name).read_bytes() == (tmp_path / "in_memory" / name).read_bytes(), name


def test_the_levels_are_merged_a_block_of_slices_at_a_time(monkeypatch, tmp_path):
    """Every level merged whole from the one below held 37 bytes per slice at once (120 MiB of nsres_x1GB's index,
    its build's peak). Streamed through every level a block at a time, the merge holds the block's arrays and
    each level's open item: here less than one int64 per slice, with the slices in blocks of 256. The index is the
    one merged level by level in numpy."""
    import tracemalloc

    from profscope.analysis import timeline_index

    with open(corpus_file(TRACES["resnet50_v100"]), "rb") as raw:
        tables = parse_trace(raw, use_second_core=False)
    build_levels, peaks = timeline_index._build_levels, []

    def levels_measured(lane_offsets, slices, duration, keep):
        tracemalloc.start()
        try:
            return build_levels(lane_offsets, slices, duration, keep, block=256)
        finally:
            peaks.append((tracemalloc.get_traced_memory()[1], int(lane_offsets[-1])))
            tracemalloc.stop()

    monkeypatch.setattr(timeline_index, "_build_levels", levels_measured)
    streamed = write_timeline_index(tables, tmp_path / "streamed")
    [(peak, slices)] = peaks
    assert slices > 40_000 and len(streamed.info["levels"]) >= 3
    assert peak < 8 * slices
    monkeypatch.setattr(timeline_index, "_call_tree_sweep", None)
    whole = write_timeline_index(tables, tmp_path / "whole")
    assert peaks[1][0] > 37 * slices  # the numpy path, whole: what the test would see without the stream
    assert streamed.info == whole.info
    for name in streamed.info["arrays"]:
        assert np.array_equal(streamed.arrays[name], whole.arrays[name]), name
