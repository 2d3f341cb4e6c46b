"""Interval sets as pairs of sorted numpy arrays: union, intersection, difference, length.

An interval set is ``(starts, ends)`` of disjoint, sorted, non-empty half-open intervals. Every
function accepts arbitrary (overlapping, unsorted) input where noted and returns a normalised set.

``merge_each`` and ``paint`` run in C when the analysis extension is built (``_call_tree_sweep.c``); the numpy
code each replaces stays, with the same results (tests/test_intervals.py compares them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import numpy as np

from profscope.analysis.native import call_tree_sweep

IntervalSet = tuple[np.ndarray, np.ndarray]
_native = call_tree_sweep()  # None: numpy does what it would (analysis/native.py)
MAX_FLAGGED_SETS = 8  # merge_each's sets: one bit each of a byte per row


def empty() -> IntervalSet:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)


def merge(starts: np.ndarray, ends: np.ndarray) -> IntervalSet:
    """Union of arbitrary intervals (zero-length ones vanish). Intervals that come sorted by start (rows of the
    events table, which is in time order) are not sorted again: no order and no sorted copies, a third less
    memory for the millions of host ops of a 1 GB trace."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    del keep
    if len(starts) == 0:
        return empty()
    if not bool((starts[1:] >= starts[:-1]).all()):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    return _union_sorted(starts, ends)


def merge_each(
    starts: np.ndarray, durations: np.ndarray, masks: Sequence[Callable[[], np.ndarray]]
) -> list[IntervalSet]:
    """``merge(starts[mask], starts[mask] + durations[mask])`` for the mask each of ``masks`` makes (called one at a
    time: no mask of every row is held beside another). In C, rows sorted by start (the events table's) are read
    once for up to 8 masks, each row's sets as the bits of a byte, without a copy of any set's times; else (or
    when a set's starts are not sorted) each set is merged in numpy."""
    if _native is not None and 0 < len(masks) <= MAX_FLAGGED_SETS and len(starts):
        flags = np.zeros(len(starts), dtype=np.uint8)
        for bit, mask_of in enumerate(masks):
            np.bitwise_or(flags, np.uint8(1 << bit), out=flags, where=mask_of())
        merged = _native.merge_flagged(
            np.ascontiguousarray(starts, dtype=np.int64),
            np.ascontiguousarray(durations, dtype=np.int64),
            flags,
            len(masks),
        )
        del flags
        if merged is not None:
            return _as_sets(merged)
    return [_merge_rows(starts, durations, mask_of()) for mask_of in masks]


def _as_sets(pairs: list[tuple[bytearray, bytearray]]) -> list[IntervalSet]:
    """The C functions' interval sets (int64 bytearrays) as arrays, without a copy."""
    return [(np.frombuffer(starts, dtype=np.int64), np.frombuffer(ends, dtype=np.int64)) for starts, ends in pairs]


def _merge_rows(starts: np.ndarray, durations: np.ndarray, mask: np.ndarray) -> IntervalSet:
    """The union of the rows ``mask`` selects: only their times are gathered."""
    chosen = np.asarray(starts)[mask]
    ends = np.asarray(durations)[mask]
    del mask
    ends += chosen
    return merge(chosen, ends)


def _union_sorted(starts: np.ndarray, ends: np.ndarray) -> IntervalSet:
    """Union of non-empty intervals sorted by start."""
    if len(starts) == 0:
        return empty()
    running_end = np.maximum.accumulate(ends)
    # a new group starts where the interval begins after everything before it has ended
    new_group = np.empty(len(starts), dtype=bool)
    new_group[0] = True
    new_group[1:] = starts[1:] > running_end[:-1]
    group_starts = starts[new_group]
    last_of_group = np.append(np.flatnonzero(new_group)[1:] - 1, len(starts) - 1)
    return group_starts, running_end[last_of_group]


def _coverage_segments(a: IntervalSet, b: IntervalSet, want_a: bool, want_b: bool, need_b: bool) -> IntervalSet:
    """Segments where (a covers) == want_a and (b covers) == want_b; normalised sets in and out."""
    points = np.concatenate([a[0], a[1], b[0], b[1]])
    if len(points) == 0:
        return empty()
    delta_a = np.concatenate([np.ones(len(a[0])), -np.ones(len(a[1])), np.zeros(len(b[0]) * 2)]).astype(np.int64)
    delta_b = np.concatenate([np.zeros(len(a[0]) * 2), np.ones(len(b[0])), -np.ones(len(b[1]))]).astype(np.int64)
    order = np.argsort(points, kind="stable")
    points, delta_a, delta_b = points[order], delta_a[order], delta_b[order]
    is_last = _last_of_each_value(points)
    unique_points = points[is_last]
    cum_a = np.cumsum(delta_a)
    cum_b = np.cumsum(delta_b)
    # coverage after all deltas at each unique point
    in_a = cum_a[is_last] > 0
    in_b = cum_b[is_last] > 0
    selected = (in_a == want_a) & ((in_b == want_b) if need_b else True)
    selected = selected[:-1]
    return merge(unique_points[:-1][selected], unique_points[1:][selected])


def _last_of_each_value(sorted_points: np.ndarray) -> np.ndarray:
    """Where each distinct value of a sorted array occurs for the last time (a mask).

    ``np.unique`` would sort the already sorted points again: at 1 GB that was most of the overview.
    """
    is_last = np.empty(len(sorted_points), dtype=bool)
    np.not_equal(sorted_points[1:], sorted_points[:-1], out=is_last[:-1])
    is_last[-1:] = True
    return is_last


def _is_normalised(a: IntervalSet) -> bool:
    """Sorted, disjoint (touching allowed) and non-empty int64 intervals: what ``merge`` returns."""
    starts, ends = a
    if starts.dtype != np.int64 or ends.dtype != np.int64:
        return False
    return bool((ends > starts).all() and (starts[1:] >= ends[:-1]).all())


def _overlaps(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Intersection of two normalised sets: each interval of ``a`` meets a run of ``b`` found by binary search,
    so the cost is the sets' sizes plus the pieces, without sorting all their ends together again."""
    (a_starts, a_ends), (b_starts, b_ends) = a, b
    first = np.searchsorted(b_ends, a_starts, side="right")  # the first b ending after a starts
    count = np.maximum(np.searchsorted(b_starts, a_ends, side="left") - first, 0)  # b starting before a ends
    a_index = np.repeat(np.arange(len(a_starts)), count)
    b_index = np.arange(int(count.sum())) + np.repeat(first - (np.cumsum(count) - count), count)
    starts = np.maximum(a_starts[a_index], b_starts[b_index])
    ends = np.minimum(a_ends[a_index], b_ends[b_index])
    keep = ends > starts
    return _union_sorted(starts[keep], ends[keep])


def _complement(a: IntervalSet) -> IntervalSet:
    """The gaps of a normalised set, with the two unbounded ones (zero-length gaps where intervals touch)."""
    bounds = np.iinfo(np.int64)
    return np.append(bounds.min, a[1]), np.append(a[0], bounds.max)


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    if len(a[0]) == 0 or len(b[0]) == 0:
        return empty()
    if _is_normalised(a) and _is_normalised(b):
        return _overlaps(a, b)
    return _coverage_segments(a, b, True, True, True)


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    if _is_normalised(a) and _is_normalised(b):
        return _overlaps(a, _complement(b))
    return _coverage_segments(a, b, True, False, True)


MAX_LAYERS = 15  # paint's coverage bitmask: the window and the layers, one bit each, in a small lookup table


def paint(within: IntervalSet, layers: list[IntervalSet]) -> list[IntervalSet]:
    """``within`` shared out among ``layers`` by priority, first layer first: for each layer the part of
    ``within`` it covers and no earlier layer does, then the part no layer covers (all normalised sets).

    The same as ``intersect`` with what is left, then ``subtract`` what was taken, layer after layer, in one
    sweep: every set's bounds are sorted together once (each set's starts and ends are sorted runs, which a
    stable sort merges), and one running sum of +/- 2**set gives, after the last bound at each point, the
    bitmask of the sets covering the segment that starts there (each normalised set covers a point 0 or 1
    times). The bounds are sorted by value alone: the order of equal bounds does not change the sum after the
    last of them. In C (``paint_normalised``) the same sweep reads each set's bounds in order, already sorted,
    without a sort, a key per bound or a mask per segment."""
    if len(layers) > MAX_LAYERS:
        raise ValueError(f"paint takes at most {MAX_LAYERS} layers")
    sets = [within, *layers]
    if len(within[0]) == 0:
        return [empty() for _ in range(len(layers) + 1)]
    if _native is not None:
        as_int64 = [(np.ascontiguousarray(a, dtype=np.int64), np.ascontiguousarray(b, dtype=np.int64)) for a, b in sets]
        shares = _native.paint_normalised(as_int64)
        if shares is not None:
            return _as_sets(shares)
    return _paint_sorting_bounds(sets)


def _paint_sorting_bounds(sets: list[IntervalSet]) -> list[IntervalSet]:
    """``paint``'s sweep in numpy: every bound sorted, the coverage after each (``_sorted_bounds_and_coverage``)."""
    layers = sets[1:]
    points, mask = _sorted_bounds_and_coverage(sets)
    is_last = _last_of_each_value(points)
    unique_points = points[is_last]
    del points
    owner = _owner_of_mask(len(layers))[mask[is_last][:-1]]  # per [unique_points[i], unique_points[i + 1])
    del mask, is_last
    seg_starts, seg_ends = unique_points[:-1], unique_points[1:]
    shares = []
    for layer in range(len(layers) + 1):  # the segments tile the line: a share is each run of its segments
        taken = owner == layer
        first, last = taken.copy(), taken
        first[1:] &= ~taken[:-1]
        last[:-1] &= ~taken[1:]
        shares.append((seg_starts[first], seg_ends[last]))
    return shares


_SET_BITS = 5  # a bound's set (0-15) and whether it is an end (16), packed below its time in one sort key


def _sorted_bounds_and_coverage(sets: list[IntervalSet]) -> tuple[np.ndarray, np.ndarray]:
    """Every bound of ``sets`` in increasing order, and after each the running bitmask of the sets covering it
    (+2**set at a start, -2**set at an end). When the times span less than 2**58 ns (always, for a trace), each
    bound is one int64 key, its time shifted up with its set and side below: one sort of the keys in place, no
    order array and no gathered copies (paint of a 1 GB trace's categories: ~35 MB less at its peak)."""
    sizes = [len(starts) for starts, _ in sets]
    count = sum(sizes)
    low = min(int(starts[0]) for starts, _ in sets if len(starts))
    high = max(int(ends[-1]) for _, ends in sets if len(ends))
    if high - low >= 1 << (63 - _SET_BITS):
        bit = np.repeat(np.left_shift(1, np.arange(len(sets), dtype=np.int32)), sizes)
        points = np.concatenate([*(starts for starts, _ in sets), *(ends for _, ends in sets)])
        order = np.argsort(points, kind="stable")
        delta = np.concatenate([bit, -bit])
        return points[order], np.cumsum(delta[order], dtype=np.int32)
    keys = np.concatenate([*(starts for starts, _ in sets), *(ends for _, ends in sets)]).astype(np.int64)
    keys -= low
    keys <<= _SET_BITS
    which = np.repeat(np.arange(len(sets), dtype=np.int64), sizes)
    keys[:count] |= which
    which |= 1 << (_SET_BITS - 1)
    keys[count:] |= which
    del which
    keys.sort(kind="stable")  # timsort: the sets are sorted runs, which it merges
    side = np.empty(len(keys), dtype=np.int8)
    np.bitwise_and(keys, (1 << _SET_BITS) - 1, out=side, casting="unsafe")
    keys >>= _SET_BITS
    keys += low
    delta = np.left_shift(1, side & ((1 << (_SET_BITS - 1)) - 1), dtype=np.int32)
    np.negative(delta, out=delta, where=side >= 1 << (_SET_BITS - 1))
    del side
    np.cumsum(delta, out=delta)
    return keys, delta


@cache
def _owner_of_mask(layers: int) -> np.ndarray:
    """For each coverage bitmask (bit 0: the window, bit k: layer k - 1), the layer its segment goes to: the
    first one covering it, ``layers`` when none does; -1 outside the window."""
    owner = np.full(1 << (layers + 1), -1, dtype=np.int8)
    for value in range(1, 1 << (layers + 1), 2):  # the window covers it
        layer_bits = value >> 1
        owner[value] = (layer_bits & -layer_bits).bit_length() - 1 if layer_bits else layers
    owner.flags.writeable = False  # shared by every call
    return owner


def total(a: IntervalSet) -> int:
    return int((a[1] - a[0]).sum())


def total_within(a: IntervalSet, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Covered length of the normalised set ``a`` inside each window ``[starts[i], ends[i])``, vectorised."""
    return _covered_before(a, np.asarray(ends, dtype=np.int64)) - _covered_before(a, np.asarray(starts, dtype=np.int64))


def _covered_before(a: IntervalSet, times: np.ndarray) -> np.ndarray:
    """Length of ``a`` that lies before each time."""
    a_starts, a_ends = a
    if len(a_starts) == 0:
        return np.zeros(len(times), dtype=np.int64)
    cumulative = np.concatenate([[0], np.cumsum(a_ends - a_starts)])
    first_not_ended = np.searchsorted(a_ends, times, side="left")  # intervals before it end at or before t
    covered = cumulative[first_not_ended]
    inside = first_not_ended < len(a_starts)
    index = np.minimum(first_not_ended, len(a_starts) - 1)
    partial = np.where(inside, np.clip(times - a_starts[index], 0, None), 0)
    return covered + partial


def clip(a: IntervalSet, start: int, end: int) -> IntervalSet:
    """``a`` within ``[start, end)``; a normalised ``a``'s overlapping intervals are found by binary search, so
    clipping a whole trace's set to each of its steps costs the steps' intervals, not the trace's each time."""
    first = int(np.searchsorted(a[1], start, side="right"))
    last = int(np.searchsorted(a[0], end, side="left"))
    starts = np.maximum(a[0][first:last], start)
    ends = np.minimum(a[1][first:last], end)
    keep = ends > starts
    return starts[keep], ends[keep]


def weighted_coverage(starts: np.ndarray, ends: np.ndarray, values: np.ndarray, cap: float) -> tuple:
    """Piecewise-constant sum of ``values`` over overlapping intervals, each piece capped at ``cap``.

    Returns ``(seg_starts, seg_ends, seg_values)`` for the pieces with a positive sum — the "merged
    ranges with value" of torch-tb-profiler's SM-efficiency estimate.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    if len(starts) == 0:
        return (*empty(), np.zeros(0))
    points = np.concatenate([starts, ends])
    deltas = np.concatenate([values, -values])
    order = np.argsort(points, kind="stable")
    points, deltas = points[order], deltas[order]
    is_last = _last_of_each_value(points)
    unique_points = points[is_last]
    level_after = np.cumsum(deltas)[is_last][:-1]
    seg_starts, seg_ends = unique_points[:-1], unique_points[1:]
    positive = level_after > 1e-12
    return seg_starts[positive], seg_ends[positive], np.minimum(level_after[positive], cap)
