"""The Overview's sweeps in C (``intervals.merge_each``, ``intervals.paint``) give, on corpus traces, the category
unions and step shares of the numpy code they replace, and the same Overview, byte for byte."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from conftest import NATIVE_COMPARISON_TRACES, corpus_file
from profscope.analysis import intervals, overview
from profscope.analysis.context import TraceContext
from profscope.ingest.kineto import parse_trace_file


@pytest.mark.parametrize("relative", NATIVE_COMPARISON_TRACES)
def test_the_overview_s_sweeps_in_c_give_numpy_s_sets_and_overview(
    relative: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert intervals._native is not None
    context = TraceContext(parse_trace_file(corpus_file(relative)))
    tables, tree, steps = context.tables, context.tree, context.steps
    window = intervals.merge(steps.starts_ns, steps.ends_ns)
    ranges = overview.category_intervals(tables, tree)
    shares = intervals.paint(window, [ranges[c] for c in overview.CATEGORIES])
    payload = orjson.dumps(overview.build_overview(context, steps))
    with monkeypatch.context() as numpy_only:
        numpy_only.setattr(intervals, "_native", None)
        numpy_ranges = overview.category_intervals(tables, tree)
        numpy_shares = intervals.paint(window, [numpy_ranges[c] for c in overview.CATEGORIES])
        numpy_payload = orjson.dumps(overview.build_overview(context, steps))
    assert ranges.keys() == numpy_ranges.keys()
    for got, wanted in [
        *zip(ranges.values(), numpy_ranges.values(), strict=True),
        *zip(shares, numpy_shares, strict=True),
    ]:
        assert got[0].dtype == got[1].dtype == np.int64
        np.testing.assert_array_equal(got[0], wanted[0])
        np.testing.assert_array_equal(got[1], wanted[1])
    assert sum(len(starts) for starts, _ in ranges.values()) > 100
    assert payload == numpy_payload
