"""group_ids groups rows exactly as np.unique over stacked columns does, and unique_inverse / unique_values
answer as np.unique does on both of their paths (counting for small integer ranges, sorting otherwise);
by_level lists nodes per depth."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from profscope.analysis import arrays
from profscope.analysis.arrays import (
    by_level,
    depths,
    first_seen_numbering,
    group_ids,
    is_one_of,
    lookup,
    match_occurrence,
    rows_by_value,
    stable_argsort,
    unique_inverse,
    unique_values,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-(2**40), 2**40), st.integers(0, 2)), max_size=40))
def test_group_ids_matches_unique_rows(rows: list[tuple[int, int, int]]) -> None:
    columns = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(3)]
    group, first = group_ids(*columns)
    if not rows:
        assert len(group) == 0 and len(first) == 0
        return
    keys, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    assert np.array_equal(group, inverse.reshape(-1))
    assert np.array_equal(np.stack([c[first] for c in columns], axis=1), keys)
    assert all(first[g] == min(i for i in range(len(rows)) if group[i] == g) for g in range(len(keys)))


def test_lookup_handles_missing_and_empty() -> None:
    assert lookup(np.array([10, 20]), np.array([1, -1, 0]), -7).tolist() == [20, -7, 10]
    assert lookup(np.array([], dtype=np.int64), np.array([0, -1]), -7).tolist() == [-7, -7]


def test_by_level_lists_each_levels_nodes_as_a_scan_per_level_would() -> None:
    rng = np.random.default_rng(20261125)
    for size in (0, 1, 7, 500):
        depth = rng.integers(-1, 12, size) if size else np.zeros(0, np.int64)
        levels = by_level(depth)
        expected = [np.flatnonzero(depth == level) for level in range(int(depth.max(initial=-1)) + 1)]
        assert len(levels) == len(expected)
        for got, want in zip(levels, expected, strict=True):
            np.testing.assert_array_equal(got, want)  # same nodes, same (increasing) order
    deep = depths(np.arange(-1, 2999))  # one chain 3,000 levels deep
    assert [level.tolist() for level in by_level(deep)] == [[n] for n in range(3000)]


def _samples() -> list[np.ndarray]:
    """Arrays of every kind the helpers meet: empty, one value, small and huge ranges, negatives, other dtypes."""
    rng = np.random.default_rng(20261127)
    found = [np.zeros(0, np.int64), np.array([5]), np.array([-3]), np.array([7, 7, 7]), np.array([True, False, True])]
    found.append(np.array([2**64 - 1, 2**64 - 3, 2**64 - 1], dtype=np.uint64))  # a small range beyond int64
    for size in (2, 30, 1000, 100_000):
        found += [
            rng.integers(0, 20, size),  # a few distinct values: counted
            rng.integers(-50, 50, size).astype(np.int32),  # negative values
            rng.integers(0, 4 * size, size),  # range about the count limit
            rng.integers(-(2**62), 2**62, size),  # huge range: sorted
            rng.integers(0, 255, size).astype(np.uint8),
            rng.integers(0, 2**63, size, dtype=np.uint64),  # beyond int64 once offset: sorted
            rng.integers(0, 2, size).astype(bool),
            rng.normal(size=size).round(1),  # floats: sorted
            rng.integers(-128, 128, size).astype(np.int8),  # a range that overflows int8 once offset
            rng.integers(60_000, 60_000 + 2**16, size).astype(np.int32),  # just beyond 16 bits
        ]
    return found


def test_unique_inverse_and_values_match_np_unique() -> None:
    for values in _samples():
        unique, inverse = unique_inverse(values)
        expected, expected_inverse = np.unique(values, return_inverse=True)
        assert unique.dtype == expected.dtype and inverse.dtype == np.int64
        np.testing.assert_array_equal(unique, expected)
        np.testing.assert_array_equal(inverse, expected_inverse.reshape(-1))
        np.testing.assert_array_equal(stable_argsort(values), np.argsort(values, kind="stable"))
        only = unique_values(values)
        assert only.dtype == expected.dtype
        np.testing.assert_array_equal(only, expected)


def test_counting_path_is_taken_for_small_ranges_only() -> None:
    assert arrays._dense_offset(np.array([3, -2, 9])) is not None
    assert arrays._dense_offset(np.array([0, 2**40])) is None
    assert arrays._dense_offset(np.array([0.5, 1.0])) is None
    assert arrays._dense_offset(np.zeros(0, np.int64)) is None


def test_group_ids_on_large_columns_matches_unique_rows() -> None:
    rng = np.random.default_rng(7)
    size = 50_000
    for columns in (
        [rng.integers(0, 300, size), rng.integers(-5, 5, size)],  # combined key counted
        [rng.integers(0, 5000, size), rng.integers(0, 5000, size), rng.integers(0, 50, size)],  # combined key sorted
        [rng.integers(-(2**50), 2**50, size), rng.normal(size=size).round(2)],
    ):
        group, first = group_ids(*columns)
        keys, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
        np.testing.assert_array_equal(group, inverse.reshape(-1))
        np.testing.assert_array_equal(np.stack([c[first] for c in columns], axis=1), keys)
        expected_first = np.unique(inverse.reshape(-1), return_index=True)[1]
        np.testing.assert_array_equal(first, expected_first)


def test_lexsort_ints_matches_lexsort() -> None:
    rng = np.random.default_rng(11)
    for size in (0, 1, 2, 50, 20_000):
        track = rng.integers(0, 4, size).astype(np.int32)
        start = rng.integers(0, max(size // 3, 1), size) * 1000  # many equal (track, start) pairs
        duration = rng.integers(0, 5, size)
        kind = rng.integers(0, 2, size).astype(np.int8)
        for keys in (
            (np.arange(size), -duration, start, track),
            (-duration, kind, start, track),
            (start, track),
            (duration, start, rng.integers(-(2**40), 2**40, size)),  # sorting by both would overflow: lexsort
            (duration, rng.normal(size=size), track),  # float key: lexsort
            (duration, start.astype(np.uint64), track.astype(bool)),
        ):
            np.testing.assert_array_equal(arrays.lexsort_ints(keys), np.lexsort(keys))


def test_depths_of_a_random_forest() -> None:
    rng = np.random.default_rng(3)
    for size in (0, 1, 300):
        parent = np.array([rng.integers(-1, i) if i else -1 for i in range(size)], dtype=np.int64)  # parents first
        parent[rng.random(size) < 0.1] = -2  # nodes left out count as roots too
        expected = []
        for node in range(size):
            level, at = 0, parent[node]
            while at >= 0:
                level, at = level + 1, parent[at]
            expected.append(level)
        assert depths(parent).tolist() == expected


def test_rows_by_value_lists_each_values_rows() -> None:
    rng = np.random.default_rng(5)
    for values in (np.zeros(0, np.int32), np.array([4]), rng.integers(-3, 9, 1000).astype(np.int32)):
        for row_type in (np.int64, np.int32):  # int32 rows: half the memory, the same rows
            found = rows_by_value(values, row_type)
            assert sorted(found) == np.unique(values).tolist()
            for value, rows in found.items():
                assert rows.dtype == row_type
                np.testing.assert_array_equal(rows, np.flatnonzero(values == value))
    # rows past what the type holds stay int64
    assert all(rows.dtype == np.int64 for rows in rows_by_value(np.zeros(200, np.int8), np.int8).values())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-128, 127), max_size=60),
    st.lists(st.integers(-300, 300), max_size=5),
    st.sampled_from([np.int8, np.int16, np.int64]),
)
def test_is_one_of_matches_isin(values: list[int], choices: list[int], dtype: type) -> None:
    """Any integer type, choices outside its range (never equal), none at all, repeated ones."""
    column = np.array([v for v in values if np.iinfo(dtype).min <= v <= np.iinfo(dtype).max], dtype=dtype)
    for given_choices in (choices, tuple(choices), frozenset(choices), choices + choices[:1]):
        got = is_one_of(column, given_choices)
        assert got.dtype == bool and np.array_equal(got, np.isin(column, list(given_choices)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-5, 5) | st.integers(-(2**62), 2**62), max_size=50))
def test_first_seen_numbering_matches_a_setdefault_loop(values: list[int]) -> None:
    """Empty, one key, repeated keys (ties), keys of a small range (counted) and of a huge one (sorted)."""
    ids: dict[int, int] = {}
    want = [ids.setdefault(v, len(ids)) for v in values]
    number, distinct = first_seen_numbering(np.array(values, dtype=np.int64))
    assert number.tolist() == want and distinct.tolist() == list(ids)


def _occurrence_by_loop(keys: list[int], values: list[int], queries: list[int], missing: int, last: bool) -> list[int]:
    owner: dict[int, int] = {}
    for key, value in zip(keys, values, strict=True):
        if last or key not in owner:
            owner[key] = value
    return [owner.get(query, missing) for query in queries]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(-5, 40), max_size=40),
    st.lists(st.integers(-(2**62), 2**62) | st.integers(-8, 45), max_size=30),
    st.booleans(),
    st.booleans(),
)
def test_match_occurrence_is_the_first_or_last_equal_key(keys: list[int], queries: list[int], last: bool, wide: bool):
    """Both paths (counting for a small key range, sorting for a wide one) give a loop's first / last match."""
    key_array = np.array(keys, dtype=np.int64) * (2**40 if wide else 1)
    query_array = np.array(queries, dtype=np.int64) * (2**20 if wide else 1)
    values = np.arange(100, 100 + len(keys))
    got = match_occurrence(key_array, values, query_array, -7, last=last)
    assert got.dtype == np.int64
    want = _occurrence_by_loop(key_array.tolist(), values.tolist(), query_array.tolist(), -7, last)
    assert got.tolist() == want


def test_match_occurrence_on_large_dense_and_sparse_keys() -> None:
    rng = np.random.default_rng(3)
    for span in (50_000, 10**12):  # the counting path, then the sorting path
        keys = rng.integers(0, span, 200_000)
        queries = np.concatenate([rng.choice(keys, 50_000), rng.integers(-5, span + 5, 50_000)])
        values = rng.integers(0, 1000, len(keys))
        for last in (False, True):
            got = match_occurrence(keys, values, queries, -1, last=last)
            assert got.tolist() == _occurrence_by_loop(keys.tolist(), values.tolist(), queries.tolist(), -1, last)
