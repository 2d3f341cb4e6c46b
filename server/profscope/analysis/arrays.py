"""Small numpy helpers shared by the analyses."""

from __future__ import annotations

from typing import Any

import numpy as np


def lookup(values: np.ndarray, index: np.ndarray, missing: Any) -> np.ndarray:
    """``values[index]`` where ``index >= 0`` and ``missing`` elsewhere (also when ``values`` is empty)."""
    index = np.asarray(index)
    if len(values) == 0:
        return np.full(
            len(index), missing, dtype=np.asarray(values).dtype if np.asarray(values).dtype != bool else bool
        )
    return np.where(index >= 0, np.asarray(values)[np.maximum(index, 0)], missing)


def group_ids(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group rows by the tuple of their values in ``columns``.

    Returns ``(group, first)``: the group index of every row (groups numbered in sorted key order)
    and, for every group, the index of its first row. Equivalent to ``np.unique(np.stack(columns,
    axis=1), axis=0, return_inverse=True)`` but one 1-D ``np.unique`` per column, which is much faster.
    """
    rows = len(columns[0]) if columns else 0
    combined = np.zeros(rows, dtype=np.int64)
    for column in columns:
        _, rank = np.unique(np.asarray(column), return_inverse=True)
        rank = rank.reshape(-1).astype(np.int64)
        _, combined = np.unique(combined * (int(rank.max(initial=0)) + 1) + rank, return_inverse=True)
        combined = combined.reshape(-1).astype(np.int64)
    count = int(combined.max(initial=-1)) + 1
    first = np.full(count, rows, dtype=np.int64)
    np.minimum.at(first, combined, np.arange(rows))
    return combined, first


def match_keys(keys: np.ndarray, values: np.ndarray, queries: np.ndarray, missing: int) -> np.ndarray:
    """For each query, the value of the equal key (``keys`` sorted and unique), or ``missing``."""
    queries = np.asarray(queries)
    if len(keys) == 0:
        return np.full(len(queries), missing, dtype=np.int64)
    position = np.minimum(np.searchsorted(keys, queries), len(keys) - 1)
    return np.where(keys[position] == queries, np.asarray(values)[position], missing).astype(np.int64)


def by_level(depth: np.ndarray) -> list[np.ndarray]:
    """The nodes at each depth (0, 1, ...), each in increasing index order: the same as
    ``np.flatnonzero(depth == level)`` for every level, in one sort instead of one pass over all nodes
    per level (a deep tree has thousands of levels). Negative depths (nodes outside the tree) are left out."""
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max(initial=-1)) + 2))
    return [order[bounds[level] : bounds[level + 1]] for level in range(len(bounds) - 1)]


def depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every node of a forest given as parent indices (negative for roots)."""
    depth = np.zeros(len(parent), dtype=np.int64)
    ancestor = np.asarray(parent).copy()
    climbing = ancestor >= 0
    while climbing.any():
        depth[climbing] += 1
        ancestor[climbing] = parent[ancestor[climbing]]
        climbing = ancestor >= 0
    return depth
