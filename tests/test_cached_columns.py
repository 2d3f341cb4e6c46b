"""Cached columns are memory-mapped by many request threads at once; their ``.npy`` headers are parsed one at a
time (CPython 3.11's compile(), which numpy's header parser uses, fails when threads run it together)."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import corpus_file, resident_bytes_mapped_under
from profscope.ingest.kineto import parse_trace
from profscope.tables import TraceTables, map_npy

THREADS = 4
LOADS_PER_THREAD = 5


def test_npy_headers_are_parsed_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    np.save(tmp_path / "column.npy", np.arange(7, dtype=np.int64))
    parse = ast.literal_eval
    state = {"inside": 0, "overlaps": 0, "parsed": 0}
    guard = threading.Lock()

    def watched_parse(text: str) -> object:
        with guard:
            state["inside"] += 1
            state["parsed"] += 1
            state["overlaps"] += state["inside"] > 1
        time.sleep(0.005)  # long enough for another thread to start parsing, were it allowed
        with guard:
            state["inside"] -= 1
        return parse(text)

    monkeypatch.setattr(ast, "literal_eval", watched_parse)  # what numpy's header reader calls
    loaded: list[np.ndarray] = []

    def load() -> None:
        loaded.extend(map_npy(tmp_path / "column.npy") for _ in range(LOADS_PER_THREAD))

    threads = [threading.Thread(target=load) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert state["parsed"] == THREADS * LOADS_PER_THREAD  # every header went through the watched parser
    assert state["overlaps"] == 0
    assert all(isinstance(a, np.memmap) and a.tolist() == list(range(7)) for a in loaded)


def test_released_pages_of_mapped_columns_are_unmapped_and_read_again_unchanged(tmp_path: Path) -> None:
    """A process that computes one view after another held every page of the tables any of them had read (at 1 GB,
    ~100 MB per process of the two): ``release_pages`` unmaps them, and a column read afterwards maps its pages
    again, from the page cache, with the same values."""
    path = corpus_file("kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    with open(path, "rb") as raw:
        parsed = parse_trace(raw, use_second_core=False)
    parsed.save(tmp_path / "tables")
    tables = TraceTables.load(tmp_path / "tables")
    before = {(t, c): np.array(values) for t, table in tables.columns.items() for c, values in table.items()}
    assert resident_bytes_mapped_under(tmp_path / "tables") > 1 << 20  # read in full just now: mapped
    tables.release_pages()
    assert resident_bytes_mapped_under(tmp_path / "tables") == 0
    for (t, c), values in before.items():
        assert np.array_equal(tables.columns[t][c], values, equal_nan=values.dtype.kind == "f"), (t, c)
    assert resident_bytes_mapped_under(tmp_path / "tables") > 1 << 20
    # the columns the caller reads next keep their pages (the timeline index's slices, after its counters)
    tables.release_pages(but={"events.ts_ns", "events.name"})
    kept = {path.name: resident_bytes_mapped_under(path) for path in sorted((tmp_path / "tables").glob("events.*.npy"))}
    assert kept["events.ts_ns.npy"] > 0 and kept["events.name.npy"] > 0
    assert sum(kept.values()) == kept["events.ts_ns.npy"] + kept["events.name.npy"]
    parsed.release_pages()  # columns in memory: nothing to unmap, nothing changes
    assert all(
        np.array_equal(parsed.columns[t][c], values, equal_nan=values.dtype.kind == "f")
        for (t, c), values in before.items()
    )
