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
from hypothesis import settings as hypothesis_settings

# Random-input tests draw the same examples on every run (a fixed seed), so CI is reproducible; set
# PROFSCOPE_HYPOTHESIS_RANDOM=1 to explore new inputs locally (a failing example is printed to replay).
hypothesis_settings.register_profile("fixed-seed", derandomize=True, print_blob=True)
hypothesis_settings.register_profile("explore", print_blob=True)
hypothesis_settings.load_profile("explore" if os.environ.get("PROFSCOPE_HYPOTHESIS_RANDOM") else "fixed-seed")

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("PROFSCOPE_CORPUS", REPO / "tests" / "corpus")).resolve()
# traces of every shape the C paths meet (threads, nesting, NCCL, ns times, CUDA graphs): each C function is
# compared with the numpy code it replaces on them
NATIVE_COMPARISON_TRACES = [
    "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "traces/AMD-AGI_TraceLens/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "traces/AMD-AGI_TraceLens/tests/traces/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz",
]


def corpus_file(relative: str) -> Path:
    path = CORPUS / relative
    if not path.exists():
        pytest.fail(f"corpus file {path} is missing (the corpus is tests/corpus, or PROFSCOPE_CORPUS if set)")
    return path


def resident_bytes_mapped_under(path: Path) -> int:
    """Bytes of this process's mappings of the file ``path``, or of files under it, that are in its page tables now
    (``Rss`` in /proc/self/smaps): 0 when no page of them is mapped."""
    target, resident, inside = str(Path(path).resolve()), 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line; its path, if any, last
                inside = len(fields) >= 6 and (fields[-1] == target or fields[-1].startswith(target + "/"))
            elif inside and fields[0] == "Rss:":
                resident += int(fields[1]) << 10
    return resident


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


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Workers started by the test wait before every view that is not ``first`` until the returned path exists
    (``PROFSCOPE_TEST_HOLD_QUERIES``; the server's workers inherit it); it is created at the end in any case."""
    gate = tmp_path / "release"
    monkeypatch.setenv("PROFSCOPE_TEST_HOLD_QUERIES", str(gate))
    yield gate
    gate.touch()
