"""Shared fixtures: the real-trace corpus (by path, never copied into the repo)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("PROFSCOPE_CORPUS", REPO.parent / "shared" / "corpus")).resolve()


def corpus_file(relative: str) -> Path:
    path = CORPUS / relative
    if not path.exists():
        pytest.fail(f"corpus file {path} is missing: set PROFSCOPE_CORPUS to the shared corpus folder")
    return path


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.fail(f"the trace corpus is not at {CORPUS}: set PROFSCOPE_CORPUS")
    return CORPUS
