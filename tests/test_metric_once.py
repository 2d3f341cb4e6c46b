"""A metric is defined once: the Overview's GPU utilization and the Trace view's utilization counters agree,
GPU by GPU, on every corpus trace (issue 12, item 5), also when the kernels carry no ``device`` argument."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import orjson
import pytest

from conftest import CORPUS, corpus_file
from profscope.analysis.context import TraceContext
from profscope.analysis.overview import gpu_summary
from profscope.analysis.timeline_index import build_timeline_index
from profscope.ingest.kineto import parse_trace_file
from profscope.tables import TraceTables
from test_parser_corpus import REFUSED, _corpus_traces

BERT = "traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
UTILIZATION = re.compile(r"^GPU (-?\d+) utilization$")


def _counter_mean_pct(arrays: dict[str, np.ndarray], series: int, start_ns: int, end_ns: int) -> float:
    """The mean of a step-function counter over [start, end], integrated directly from its points."""
    lo, hi = int(arrays["counter_offsets"][series]), int(arrays["counter_offsets"][series + 1])
    t = np.asarray(arrays["counter_t"][lo:hi], dtype=np.int64)
    v = np.asarray(arrays["counter_v"][lo:hi], dtype=np.float64)
    piece_end = np.append(t[1:], t[-1])  # the last point's value holds for no time
    covered = np.clip(piece_end, start_ns, end_ns) - np.clip(t, start_ns, end_ns)
    return float((covered * v).sum() / max(end_ns - start_ns, 1))


def _both_utilizations(tables: TraceTables) -> tuple[dict[int, float], dict[int, float]]:
    context = TraceContext(tables)
    overview = {gpu["device"]: gpu["utilization_pct"] for gpu in gpu_summary(tables, context.steps)}
    index = build_timeline_index(tables)
    start_ns, end_ns = context.steps.window
    counters = {}
    for track in index.info["tracks"]:
        found = UTILIZATION.match(track.get("name", "")) if track.get("kind") == "counter" else None
        if found:
            counters[int(found.group(1))] = _counter_mean_pct(index.arrays, track["series"], start_ns, end_ns)
    return overview, counters


@pytest.mark.parametrize("relative", [r for r in _corpus_traces() if r not in REFUSED])
def test_overview_and_trace_counters_agree(relative: str) -> None:
    overview, counters = _both_utilizations(parse_trace_file(CORPUS / relative))
    assert set(overview) == set(counters)
    for gpu, pct in overview.items():
        assert counters[gpu] == pytest.approx(pct, rel=1e-9, abs=1e-9), f"GPU {gpu}"


def test_kernels_without_a_device_argument_are_on_their_tracks_gpu(tmp_path: Path) -> None:
    """Kernels with no ``device`` arg run on their stream's pid: both views name GPU 0, never GPU -1."""
    document = orjson.loads(gzip.decompress(corpus_file(BERT).read_bytes()))
    on_device = [e for e in document["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert on_device and {e["pid"] for e in on_device} == {0}
    for event in on_device:
        event["args"].pop("device")
    stripped = tmp_path / "no_device.json"
    stripped.write_bytes(orjson.dumps(document))

    tables = parse_trace_file(stripped)
    assert (np.asarray(tables.table("kernels")["device"]) == -1).all()  # the parser saw no device
    overview, counters = _both_utilizations(tables)
    assert set(overview) == set(counters) == {0}
    assert 0 < overview[0] <= 100 and counters[0] == pytest.approx(overview[0], rel=1e-9)
