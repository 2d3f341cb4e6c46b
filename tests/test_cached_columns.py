"""Cached columns are memory-mapped by many request threads at once; their ``.npy`` headers are parsed one at a
time (CPython 3.11's compile(), which numpy's header parser uses, fails when threads run it together)."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from profscope.tables import map_npy

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
