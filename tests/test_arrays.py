"""group_ids groups rows exactly as np.unique over stacked columns does; by_level lists nodes per depth."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from profscope.analysis.arrays import by_level, depths, group_ids, lookup


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
