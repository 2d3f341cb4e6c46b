"""Small numpy helpers shared by the analyses."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.ma  # np.unique imports it at its first call (~30 ms): here, before the workers fork


def lookup(values: np.ndarray, index: np.ndarray, missing: Any) -> np.ndarray:
    """``values[index]`` where ``index >= 0`` and ``missing`` elsewhere (also when ``values`` is empty)."""
    index = np.asarray(index)
    if len(values) == 0:
        return np.full(
            len(index), missing, dtype=np.asarray(values).dtype if np.asarray(values).dtype != bool else bool
        )
    return np.where(index >= 0, np.asarray(values)[np.maximum(index, 0)], missing)


def is_one_of(values: np.ndarray, choices: Any) -> np.ndarray:
    """``np.isin(values, choices)`` for a few integer choices (event kinds): one comparison per choice, ~15x
    faster than ``np.isin`` on millions of rows, and the call tree and the queries ask it ~20 times per trace."""
    values = np.asarray(values)
    mask = np.zeros(values.shape, dtype=bool)
    for choice in choices:
        mask |= values == int(choice)
    return mask


# A key range up to this many times the row count (or this small) is grouped by counting, O(n + range),
# instead of sorting, O(n log n); the counting arrays are then at most a few times the size of the keys.
DENSE_RANGE_PER_ROW = 4
DENSE_RANGE_MIN = 1 << 16


def _dense_offset(values: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    """``(values - min, min, range)`` for integer (or bool) values whose range is small enough to count, else None."""
    if values.dtype.kind not in "iub" or values.ndim != 1 or not len(values):
        return None
    low, high = int(values.min()), int(values.max())
    span = high - low + 1
    if high >= 2**62 or low < -(2**62) or span > max(DENSE_RANGE_PER_ROW * len(values), DENSE_RANGE_MIN):
        return None
    return values.astype(np.int64) - low, low, span


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for a 1-D array (inverse 1-D, int64), by counting when the
    values are integers of a small range: string, track and node ids are, and sorting them was ~9% of an ingest.
    Same values, same numbering (sorted order)."""
    values = np.asarray(values)
    dense = _dense_offset(values)
    if dense is None:
        unique, inverse = np.unique(values, return_inverse=True)
        return unique, inverse.reshape(-1).astype(np.int64, copy=False)
    offset, low, span = dense
    present = np.bincount(offset, minlength=span) > 0
    rank = np.cumsum(present) - 1
    return (np.flatnonzero(present) + low).astype(values.dtype), rank[offset]


def unique_values(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for a 1-D array, by counting when the values are integers of a small range."""
    values = np.asarray(values)
    dense = _dense_offset(values)
    if dense is None:
        return np.unique(values)
    offset, low, span = dense
    return (np.flatnonzero(np.bincount(offset, minlength=span)) + low).astype(values.dtype)


def stable_argsort(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, kind="stable")``; integers of a range below 2**16 are sorted as uint16, which numpy
    radix-sorts (O(n), ~7x faster than its timsort of int64 at 3M depths or thread ids). Same order."""
    values = np.asarray(values)
    if values.dtype.kind in "iu" and values.ndim == 1 and len(values):
        low, high = int(values.min()), int(values.max())
        if high - low < 1 << 16 and high < 2**63:
            return np.argsort((values.astype(np.int64) - low).astype(np.uint16), kind="stable")
    return np.argsort(values, kind="stable")


def rows_by_value(values: np.ndarray, row_type: type = np.int64) -> dict[int, np.ndarray]:
    """``{v: np.flatnonzero(values == v)}`` for every distinct integer ``v``, from one sort instead of one
    pass over all rows per value. ``row_type``: the rows' dtype (np.int32 halves them, below 2**31 rows)."""
    values = np.asarray(values)
    if not len(values):
        return {}
    order = stable_argsort(values)
    if np.iinfo(row_type).max >= len(values):
        order = order.astype(row_type, copy=False)
    ordered = values[order]
    bounds = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    return dict(zip(ordered[np.r_[0, bounds]].tolist(), np.split(order, bounds), strict=True))


def first_seen_numbering(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(number, distinct)``: each key numbered 0, 1, ... in the order its value first appears in ``keys``, and
    the distinct values in that order: what ``[ids.setdefault(key, len(ids)) for key in keys]`` gives, without a
    Python step per row (call stacks number ~0.5M operator calls)."""
    keys = np.asarray(keys)
    unique, inverse = unique_inverse(keys)
    first = np.full(len(unique), len(keys), dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(len(keys)))
    by_first = np.argsort(first, kind="stable")
    rank = np.empty(len(unique), dtype=np.int64)
    rank[by_first] = np.arange(len(unique))
    return rank[inverse], unique[by_first]


def group_ids(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group rows by the tuple of their values in ``columns``.

    Returns ``(group, first)``: the group index of every row (groups numbered in sorted key order)
    and, for every group, the index of its first row. Equivalent to ``np.unique(np.stack(columns,
    axis=1), axis=0, return_inverse=True)`` but one 1-D ``unique_inverse`` per column, which is much faster.
    """
    rows = len(columns[0]) if columns else 0
    combined = np.zeros(rows, dtype=np.int64)
    for index, column in enumerate(columns):
        _, rank = unique_inverse(np.asarray(column).reshape(-1))
        if index == 0:  # the first column's ranks number its groups already
            combined = rank
            continue
        combined *= int(rank.max(initial=0)) + 1  # in place: no key of every row held twice
        combined += rank
        del rank
        _, combined = unique_inverse(combined)
    count = int(combined.max(initial=-1)) + 1
    first = np.full(count, rows, dtype=np.int64)
    np.minimum.at(first, combined, np.arange(rows))
    return combined, first


def lexsort_ints(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """``np.lexsort(keys)`` (the last key primary) for integer keys, faster when the two most significant
    ones fit together in one int64 (a thread and a time do): one stable argsort of that key, on rows that
    are mostly in time order already, then the remaining keys order the few runs of equal values. lexsort
    sorts every key over all rows, the first of them (the least significant: durations) in no useful order."""
    *rest, minor, major = (np.asarray(key) for key in keys)
    if major.dtype.kind not in "iub" or minor.dtype.kind not in "iub" or not len(major):
        return np.lexsort(keys)
    ranks, major_rank = unique_inverse(major)
    low, high = int(minor.min()), int(minor.max())
    span = high - low + 1
    if len(ranks) * span >= 2**62 or low < -(2**62) or high >= 2**62:
        return np.lexsort(keys)
    combined = major_rank * span + (minor.astype(np.int64) - low)
    order = stable_argsort(combined)
    if not rest:
        return order
    ordered = combined[order]
    tie = ordered[1:] == ordered[:-1]
    in_run = np.zeros(len(order), dtype=bool)
    in_run[1:] = tie
    in_run[:-1] |= tie
    positions = np.flatnonzero(in_run)
    if not len(positions):
        return order
    run = np.cumsum(~np.append(False, tie))[positions]  # positions of a run are contiguous, rows in index order
    tied = order[positions]
    order[positions] = tied[np.lexsort((*(np.asarray(key)[tied] for key in rest), run))]
    return order


def match_keys(keys: np.ndarray, values: np.ndarray, queries: np.ndarray, missing: int) -> np.ndarray:
    """For each query, the value of the equal key (``keys`` sorted and unique), or ``missing``."""
    queries = np.asarray(queries)
    if len(keys) == 0:
        return np.full(len(queries), missing, dtype=np.int64)
    position = np.minimum(np.searchsorted(keys, queries), len(keys) - 1)
    return np.where(keys[position] == queries, np.asarray(values)[position], missing).astype(np.int64)


def match_occurrence(
    keys: np.ndarray, values: np.ndarray, queries: np.ndarray, missing: int, last: bool = False
) -> np.ndarray:
    """For each query, ``values[i]`` of the first (``last``: the last) ``i`` whose key equals it, else ``missing``
    (int64): ``match_keys`` of the keys' first or last occurrences. Integer keys of a small range (event ids:
    External id, correlation) are found by counting, O(n), instead of a sort of the keys and a binary search per
    query: ~2x less CPU matching resnet50_x1GB's 0.4M runtime calls to the External ids of its 0.7M ops."""
    keys, queries = np.asarray(keys), np.asarray(queries)
    dense = _dense_offset(keys) if queries.dtype.kind in "iub" else None
    if dense is None:
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        change = ordered[1:] != ordered[:-1]
        pick = np.append(change, True) if last else np.append(True, change)
        del change
        pick = pick[: len(keys)]
        unique_keys = ordered[pick]
        del ordered  # each array of every key goes as soon as it is read: this runs at the call tree's peak
        picked = np.asarray(values)[order[pick]]
        del order, pick
        return match_keys(unique_keys, picked, queries, missing)
    offset, low, span = dense
    count = len(keys)
    position = np.full(span, -1 if last else count, dtype=np.int64)
    (np.maximum if last else np.minimum).at(position, offset, np.arange(count, dtype=np.int64))
    inside = (queries >= low) & (queries < low + span)
    found = position[np.where(inside, queries.astype(np.int64) - low, 0)]
    found = np.where(inside & (found >= 0) & (found < count), found, -1)
    return lookup(np.asarray(values), found, missing).astype(np.int64)


def by_level(depth: np.ndarray) -> list[np.ndarray]:
    """The nodes at each depth (0, 1, ...), each in increasing index order: the same as
    ``np.flatnonzero(depth == level)`` for every level, in one sort instead of one pass over all nodes
    per level (a deep tree has thousands of levels). Negative depths (nodes outside the tree) are left out."""
    order = stable_argsort(depth)
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max(initial=-1)) + 2))
    return [order[bounds[level] : bounds[level + 1]] for level in range(len(bounds) - 1)]


def depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every node of a forest given as parent indices (negative for roots).

    Each step climbs one level for the nodes still below an ancestor only: the cost is the sum of the
    depths, not the node count times the deepest depth."""
    parent = np.asarray(parent)
    depth = np.zeros(len(parent), dtype=np.int64)
    nodes = np.flatnonzero(parent >= 0)
    ancestor = parent[nodes]
    while len(nodes):
        depth[nodes] += 1
        ancestor = parent[ancestor]
        climbing = ancestor >= 0
        nodes, ancestor = nodes[climbing], ancestor[climbing]
    return depth
