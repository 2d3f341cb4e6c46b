"""The sort by time of the parsed tables: the fast path gives exactly ``np.lexsort``'s order."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest

from conftest import corpus_file
from profscope.ingest import kineto
from profscope.ingest.kineto import parse_trace, time_order

TRACES = [
    "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto-tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
]


def _check(ts: np.ndarray, *tie_keys: np.ndarray) -> None:
    np.testing.assert_array_equal(time_order(ts, *tie_keys), np.lexsort((*tie_keys, ts)))


@pytest.mark.parametrize("trace", TRACES)
def test_the_keys_of_real_traces_sort_as_lexsort(monkeypatch: pytest.MonkeyPatch, trace: str) -> None:
    keys = []
    sort_events = kineto._sort_events

    def keep_keys(columns: dict, file_order: np.ndarray, threads: int = 1) -> None:
        keys.append((columns["events"]["ts_ns"].copy(), file_order, -columns["events"]["dur_ns"]))
        sort_events(columns, file_order, threads)

    monkeypatch.setattr(kineto, "_sort_events", keep_keys)
    parse_trace(io.BytesIO(gzip.decompress(corpus_file(trace).read_bytes())), use_second_core=False)
    ts, file_order, negative_dur = keys[0]
    assert len(ts) > 1000 and len(np.unique(ts)) < len(ts)  # ties to break
    _check(ts, file_order, negative_dur)
    _check(ts[::-1].copy(), file_order, negative_dur)  # out of order
    _check(ts, negative_dur)  # ties that only row order breaks
    # the durations as given to the parse's sort: negated on the tied rows alone, the same order
    np.testing.assert_array_equal(
        time_order(ts, file_order, longest_first=-negative_dur), np.lexsort((file_order, negative_dur, ts))
    )


@pytest.mark.parametrize("size", [0, 1, 2, 1000])
def test_edge_cases_sort_as_lexsort(size: int) -> None:
    random = np.random.default_rng(size)
    _check(np.zeros(size, dtype=np.int64), random.integers(0, 3, size))  # one time for all
    _check(np.arange(size, dtype=np.int64)[::-1].copy(), random.integers(0, 3, size))  # no ties
    _check(random.integers(0, 5, size), random.integers(0, 3, size), random.integers(0, 3, size))
    _check(random.integers(-(1 << 62), 1 << 62, size), random.integers(0, 3, size))
    ts, order, dur = random.integers(0, 5, size), random.permutation(size), random.integers(0, 4, size)
    np.testing.assert_array_equal(time_order(ts, order, longest_first=dur), np.lexsort((order, -dur, ts)))
