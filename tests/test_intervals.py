"""Interval-set algebra against a brute-force model (sets of integer points)."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from profscope.analysis import intervals
from profscope.analysis.phases import PHASES, _split_windows

spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=12)


def _as_set(pairs: list[tuple[int, int]]) -> intervals.IntervalSet:
    starts = np.array([s for s, _ in pairs], dtype=np.int64)
    return intervals.merge(starts, starts + np.array([d for _, d in pairs], dtype=np.int64))


def _points(interval_set: intervals.IntervalSet) -> set[int]:
    return {t for s, e in zip(*interval_set, strict=True) for t in range(int(s), int(e))}


@settings(max_examples=300, deadline=None)
@given(spans, spans, st.integers(0, 70), st.integers(0, 30))
def test_algebra_matches_point_sets(a: list, b: list, window_start: int, window_length: int) -> None:
    set_a, set_b = _as_set(a), _as_set(b)
    points_a, points_b = _points(set_a), _points(set_b)
    assert _points(intervals.intersect(set_a, set_b)) == points_a & points_b
    assert _points(intervals.subtract(set_a, set_b)) == points_a - points_b
    assert intervals.total(set_a) == len(points_a)
    window = set(range(window_start, window_start + window_length))
    assert _points(intervals.clip(set_a, window_start, window_start + window_length)) == points_a & window
    within = intervals.total_within(set_a, np.array([window_start]), np.array([window_start + window_length]))
    assert int(within[0]) == len(points_a & window)


@settings(max_examples=200, deadline=None)
@given(spans, st.randoms(use_true_random=False))
def test_merge_of_intervals_sorted_by_start_skips_the_sort_with_the_same_union(pairs: list, random) -> None:
    """Rows of the events table come sorted by start: ``merge`` then takes them as they are (no order, no sorted
    copies). The union is the one of the same intervals in any order."""
    by_start = sorted(pairs, key=lambda pair: pair[0])
    shuffled = list(pairs)
    random.shuffle(shuffled)
    merged = _as_set(by_start)
    for other in (_as_set(shuffled), _as_set(pairs)):
        assert all(np.array_equal(x, y) and x.dtype == y.dtype == np.int64 for x, y in zip(merged, other, strict=True))
    assert intervals._is_normalised(merged) or len(merged[0]) == 0
    assert _points(merged) == {t for s, d in pairs for t in range(s, s + d)}


def test_weighted_coverage_caps_each_piece() -> None:
    starts, ends, values = intervals.weighted_coverage(np.array([0, 5]), np.array([10, 20]), np.array([0.7, 0.6]), 1.0)
    assert starts.tolist() == [0, 5, 10] and ends.tolist() == [5, 10, 20]
    np.testing.assert_allclose(values, [0.7, 1.0, 0.6])


@settings(max_examples=300, deadline=None)
@given(spans, st.integers(-5, 80), st.integers(-5, 80))
def test_clip_keeps_the_points_inside_the_window(a, start, end) -> None:
    clipped = intervals.clip(_as_set(a), start, end)
    assert _points(clipped) == {t for t in _points(_as_set(a)) if start <= t < end}
    window = (np.array([start], dtype=np.int64), np.array([end], dtype=np.int64))
    expected = intervals.intersect(_as_set(a), window) if end > start else intervals.empty()
    for got, want in zip(clipped, expected, strict=True):  # the same normalised set as the general intersection
        np.testing.assert_array_equal(got, want)


def _touching_set(cuts: list[int], kept: list[bool]) -> intervals.IntervalSet:
    """Sorted disjoint intervals between consecutive distinct cuts, some touching (not what ``merge`` joins)."""
    points = sorted(set(cuts))
    pairs = [(s, e) for (s, e), keep in zip(itertools.pairwise(points), kept, strict=False) if keep]
    return np.array([s for s, _ in pairs], dtype=np.int64), np.array([e for _, e in pairs], dtype=np.int64)


cuts = st.lists(st.integers(-(2**40), 2**40) | st.integers(0, 40), max_size=14)


@settings(max_examples=400, deadline=None)
@given(spans, spans, cuts, st.lists(st.booleans(), min_size=14, max_size=14), cuts)
def test_intersect_and_subtract_of_sorted_sets_match_the_sweep(a, b, cuts_c, kept, cuts_d) -> None:
    """The binary-search path for sorted disjoint sets gives the very arrays of the general sweep over all ends."""
    touching_c, touching_d = _touching_set(cuts_c, kept), _touching_set(cuts_d, kept[::-1])
    sets = [_as_set(a), _as_set(b), touching_c, touching_d]
    for first in sets:
        for second in sets:
            assert intervals._is_normalised(first) and intervals._is_normalised(second)
            if len(first[0]) == 0 or len(second[0]) == 0:
                continue
            for fast, want_b in ((intervals.intersect, True), (intervals.subtract, False)):
                got = fast(first, second)
                expected = intervals._coverage_segments(first, second, True, want_b, True)
                for got_part, want_part in zip(got, expected, strict=True):
                    assert got_part.dtype == want_part.dtype == np.int64
                    np.testing.assert_array_equal(got_part, want_part)


def test_overlapping_input_takes_the_sweep() -> None:
    overlapping = (np.array([0, 2], dtype=np.int64), np.array([5, 9], dtype=np.int64))
    other = (np.array([4], dtype=np.int64), np.array([6], dtype=np.int64))
    assert not intervals._is_normalised(overlapping)
    assert [p.tolist() for p in intervals.intersect(overlapping, other)] == [[4], [6]]
    assert [p.tolist() for p in intervals.subtract(overlapping, other)] == [[0, 6], [4, 9]]


@settings(max_examples=300, deadline=None)
@given(spans, st.lists(spans, max_size=8))
def test_paint_shares_a_window_by_priority_as_intersect_then_subtract(within: list, layers: list) -> None:
    window, sets = _as_set(within), [_as_set(layer) for layer in layers]
    shares = intervals.paint(window, sets)
    remaining, expected = window, []
    for layer in sets:  # the definition, one layer after the other
        taken = intervals.intersect(remaining, layer)
        expected.append(taken)
        remaining = intervals.subtract(remaining, taken)
    expected.append(remaining)
    assert len(shares) == len(sets) + 1
    for got, wanted in zip(shares, expected, strict=True):
        np.testing.assert_array_equal(got[0], wanted[0])
        np.testing.assert_array_equal(got[1], wanted[1])
    # and against points: each point of the window goes to the first layer holding it, else to the last share
    free = _points(window)
    for got, layer in zip(shares, [*sets, window], strict=True):
        assert _points(got) == free & _points(layer)
        free -= _points(got)


@settings(max_examples=150, deadline=None)
@given(spans, st.lists(spans, min_size=1, max_size=8))
def test_paint_over_times_too_far_apart_for_one_sort_key_shares_the_same(within: list, layers: list) -> None:
    """paint sorts each bound as one int64 key (time, set, side) when the times span less than 2**58 ns; beyond
    that it sorts the times with an order array: both give the same shares. A far-away interval in the last layer
    (outside the window: it takes nothing) makes the span too wide for the keys."""
    window, sets = _as_set(within), [_as_set(layer) for layer in layers]
    far = 1 << 59
    last = sets[-1]
    widened = (np.append(last[0], far).astype(np.int64), np.append(last[1], far + 5).astype(np.int64))
    near, wide = intervals.paint(window, sets), intervals.paint(window, [*sets[:-1], widened])
    for got, wanted in zip(wide, near, strict=True):
        assert got[0].dtype == got[1].dtype == np.int64
        np.testing.assert_array_equal(got[0], wanted[0])
        np.testing.assert_array_equal(got[1], wanted[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)), min_size=1, max_size=6), st.lists(spans, max_size=4))
def test_paint_of_overlapping_windows_read_per_window_is_each_windows_own(windows: list, layers: list) -> None:
    """What phases._split_windows relies on: a point goes to the same layer whichever window holds it."""
    starts = np.array([s for s, _ in windows], dtype=np.int64)
    ends = starts + np.array([d for _, d in windows], dtype=np.int64)
    sets = {phase: _as_set(layers[i]) if i < len(layers) else intervals.empty() for i, phase in enumerate(PHASES)}
    together = _split_windows(sets, starts, ends)
    for index, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        window = (np.array([start], dtype=np.int64), np.array([end], dtype=np.int64))
        alone = intervals.paint(window if end > start else intervals.empty(), [sets[p] for p in PHASES])
        for phase, share in zip((*PHASES, "other"), alone, strict=True):
            assert int(together[phase][index]) == intervals.total(share)


# ---- the C sweeps (``merge_each``, ``paint``) against the numpy code they replace --------------------------
normalised_sets = st.one_of(
    spans.map(_as_set), st.builds(_touching_set, cuts, st.lists(st.booleans(), min_size=14, max_size=14))
)


def _assert_same_sets(got: list, wanted: list) -> None:
    assert len(got) == len(wanted)
    for (got_starts, got_ends), (want_starts, want_ends) in zip(got, wanted, strict=True):
        assert got_starts.dtype == got_ends.dtype == np.int64
        np.testing.assert_array_equal(got_starts, want_starts)
        np.testing.assert_array_equal(got_ends, want_ends)


def test_the_interval_sweeps_are_built() -> None:
    assert intervals._native is not None  # else every comparison below compares numpy with itself


@settings(max_examples=400, deadline=None)
@given(normalised_sets, st.lists(normalised_sets, max_size=intervals.MAX_LAYERS))
def test_paint_in_c_gives_the_numpy_shares(within: intervals.IntervalSet, layers: list) -> None:
    """Sets with touching intervals too (an end at the next start), which ``merge`` never makes."""
    if len(within[0]) == 0:
        return
    assert intervals._native.paint_normalised([within, *layers]) is not None
    _assert_same_sets(intervals.paint(within, layers), intervals._paint_sorting_bounds([within, *layers]))


def test_paint_in_c_leaves_sets_that_are_not_normalised_to_numpy() -> None:
    window = (np.array([0], dtype=np.int64), np.array([10], dtype=np.int64))
    for starts, ends in (([0, 2], [5, 9]), ([3, 1], [4, 2]), ([2], [2])):  # overlapping, unsorted, empty
        layer = (np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))
        assert intervals._native.paint_normalised([window, layer]) is None


def _random_set(rng: np.random.Generator, count: int, span: int) -> intervals.IntervalSet:
    starts = rng.integers(0, span, count)
    return intervals.merge(starts, starts + rng.integers(0, span // max(count, 1) * 3 + 2, count))


def test_paint_in_c_gives_the_numpy_shares_on_large_random_sets() -> None:
    rng = np.random.default_rng(18)
    for round_ in range(20):
        span = int(rng.integers(1_000, 10**12))
        within = _random_set(rng, int(rng.integers(1, 400)), span)
        layers = [_random_set(rng, int(rng.integers(0, 30_000)), span) for _ in range(int(rng.integers(1, 16)))]
        shares = intervals.paint(within, layers)
        _assert_same_sets(shares, intervals._paint_sorting_bounds([within, *layers]))
        assert sum(intervals.total(share) for share in shares) == intervals.total(within), round_


@st.composite
def _flagged_rows(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Rows sorted by start (durations may be 0 or negative: empty intervals) and up to 8 masks of them."""
    rows = sorted(draw(st.lists(st.tuples(st.integers(-50, 60), st.integers(-3, 15)), max_size=40)))
    masks = draw(st.lists(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)), min_size=1, max_size=8))
    starts = np.array([s for s, _ in rows], dtype=np.int64)
    durations = np.array([d for _, d in rows], dtype=np.int64)
    return starts, durations, [np.array(mask, dtype=bool) for mask in masks]


def _merged_in_numpy(starts: np.ndarray, durations: np.ndarray, masks: list[np.ndarray]) -> list:
    return [intervals.merge(starts[mask], starts[mask] + durations[mask]) for mask in masks]


@settings(max_examples=400, deadline=None)
@given(_flagged_rows())
def test_merge_each_in_c_gives_each_mask_s_union(rows: tuple) -> None:
    starts, durations, masks = rows
    assert (
        len(starts) == 0
        or intervals._native.merge_flagged(starts, durations, np.zeros(len(starts), dtype=np.uint8), len(masks))
        is not None
    )
    got = intervals.merge_each(starts, durations, [lambda m=mask: m for mask in masks])
    _assert_same_sets(got, _merged_in_numpy(starts, durations, masks))


@settings(max_examples=200, deadline=None)
@given(_flagged_rows(), st.randoms(use_true_random=False))
def test_merge_each_of_rows_out_of_order_is_left_to_numpy(rows: tuple, random) -> None:
    starts, durations, masks = rows
    order = list(range(len(starts)))
    random.shuffle(order)
    starts, durations, masks = starts[order], durations[order], [mask[order] for mask in masks]
    got = intervals.merge_each(starts, durations, [lambda m=mask: m for mask in masks])
    _assert_same_sets(got, _merged_in_numpy(starts, durations, masks))


def test_merge_flagged_says_when_a_set_s_starts_are_not_sorted() -> None:
    starts, durations = np.array([0, 5, 3], dtype=np.int64), np.array([10, 1, 1], dtype=np.int64)
    assert intervals._native.merge_flagged(starts, durations, np.array([1, 2, 2], dtype=np.uint8), 2) is None
    assert intervals._native.merge_flagged(starts, durations, np.array([1, 2, 1], dtype=np.uint8), 2) is not None


def test_merge_each_in_c_gives_each_mask_s_union_on_large_random_rows() -> None:
    rng = np.random.default_rng(18)
    for _ in range(10):
        count = int(rng.integers(1, 200_000))
        starts = np.sort(rng.integers(0, 10**9, count))
        durations = rng.integers(-10, 10**9 // count * 4 + 1, count)
        masks = [rng.random(count) < rng.random() for _ in range(int(rng.integers(1, 9)))]
        got = intervals.merge_each(starts, durations, [lambda m=mask: m for mask in masks])
        _assert_same_sets(got, _merged_in_numpy(starts, durations, masks))
