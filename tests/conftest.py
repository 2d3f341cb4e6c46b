"""Shared fixtures: the real-trace corpus the tests read.

The corpus travels with the code in ``tests/corpus`` (see its ``NOTICE``: source, commit, path and license of
every file). ``PROFSCOPE_CORPUS`` may point elsewhere (e.g. a larger corpus for benchmarks) with the same layout.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("PROFSCOPE_CORPUS", REPO / "tests" / "corpus")).resolve()


def corpus_file(relative: str) -> Path:
    path = CORPUS / relative
    if not path.exists():
        pytest.fail(f"corpus file {path} is missing (the corpus is tests/corpus, or PROFSCOPE_CORPUS if set)")
    return path


def app_routes(routes: list[Any]) -> Iterator[Any]:
    """Every route of an app (``app.routes``), those of the routers it includes too."""
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI >= 0.13x wraps included routers
        if inner is not None:
            yield from app_routes(inner.routes)
        else:
            yield route


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.fail(f"the trace corpus is not at {CORPUS} (tests/corpus, or PROFSCOPE_CORPUS if set)")
    return CORPUS
