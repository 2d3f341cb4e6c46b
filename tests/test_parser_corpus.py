"""Every Chrome trace in the corpus ingests, and its tables agree with an independent count."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import orjson
import pytest

from conftest import CORPUS
from profscope.analysis.context import TraceContext
from profscope.ingest.json_stream import TraceFormatError
from profscope.ingest.kineto import parse_trace_file
from profscope.views.registry import queries

REFUSED = {
    "hta/execution_trace/benchmark_simple_add_et.json.gz": "execution trace",
    "hta/memory_analysis/memory_timeline.raw.gz": "memory timeline",
}


def _corpus_traces() -> list[str]:
    files = sorted(p for p in CORPUS.rglob("*") if p.name.endswith((".json", ".json.gz", ".raw.gz")))
    return [str(p.relative_to(CORPUS)) for p in files if p.name != "MANIFEST.tsv"]


def _independent_counts(path: Path) -> Counter:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    document = orjson.loads(data)
    events = document if isinstance(document, list) else document["traceEvents"]
    counts: Counter = Counter()
    for event in events:
        category = str(event.get("cat", "")).lower()
        if event.get("ph") == "X":
            counts["complete"] += 1
            if category in ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "mtia_ccp_events"):
                counts["device"] += 1
        elif event.get("ph") in ("i", "I") and event.get("name") == "[memory]":
            counts["memory"] += 1
        elif event.get("ph") in ("s", "t", "f"):
            counts["flows"] += 1
    return counts


def test_corpus_is_present(corpus: Path) -> None:
    assert len(_corpus_traces()) >= 29  # tests/corpus: see its NOTICE


@pytest.mark.parametrize("relative", _corpus_traces())
def test_every_trace_ingests_or_is_refused_with_a_reason(relative: str) -> None:
    path = CORPUS / relative
    if relative in REFUSED:
        with pytest.raises(TraceFormatError) as refused:
            parse_trace_file(path)
        assert REFUSED[relative] in str(refused.value)
        return
    tables = parse_trace_file(path)
    expected = _independent_counts(path)
    assert tables.row_count("events") == expected["complete"]
    assert tables.row_count("kernels") == expected["device"]
    assert tables.row_count("memory") == expected["memory"]
    assert tables.row_count("flows") == expected["flows"]
    context = TraceContext(tables)
    for query in queries("trace"):
        result = query.build(context)
        assert result is not None, query.name
    assert len(context.steps.names) >= 1
