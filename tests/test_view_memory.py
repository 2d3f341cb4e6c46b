"""What the shared structures (the call tree, the steps) hold while they are built from the memory-mapped tables.

At 1 GB the worker builds them beside the timeline child, and their peak and the child's made the ingest's peak."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from conftest import corpus_file, resident_bytes_mapped_under
from profscope.analysis import call_tree
from profscope.analysis.context import TraceContext
from profscope.analysis.steps import find_steps
from profscope.ingest.kineto import parse_trace
from profscope.tables import TraceTables

RESNET50 = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
TINYGPT_CPU = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"


def _saved(relative: str, directory: Path) -> TraceTables:
    with open(corpus_file(relative), "rb") as raw:
        parse_trace(raw, use_second_core=False).save(directory)
    return TraceTables.load(directory)


def test_the_tree_s_passes_run_with_the_times_and_ids_unmapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nesting reads every event's times, thread, ids (~100 MB of columns at 1 GB), the passes after it only
    names, kinds and durations: those pages are unmapped once read, not held to the end of the build, its peak."""
    tables = _saved(RESNET50, tmp_path / "tables")
    resident: dict[str, int] = {}
    pass_down = call_tree._pass_down

    def pass_down_watched(*arguments):
        for column in ("ts_ns", "track", "external_id", "correlation", "dur_ns"):
            resident[column] = resident_bytes_mapped_under(tmp_path / "tables" / f"events.{column}.npy")
        return pass_down(*arguments)

    monkeypatch.setattr(call_tree, "_pass_down", pass_down_watched)
    tree = TraceContext(tables).tree
    assert len(tree.node_event) > 1000
    assert resident["dur_ns"] > 0  # read again since, for the operators' durations: the watch sees mapped pages
    assert {c: resident[c] for c in ("ts_ns", "track", "external_id", "correlation")} == dict.fromkeys(
        ("ts_ns", "track", "external_id", "correlation"), 0
    )


def test_the_steps_make_no_array_of_every_event_s_end(tmp_path: Path) -> None:
    """Each step's search made every event's end time (8 bytes an event, 27 MB at 1 GB), twice over; only the rows
    it looks at get one now. The steps found are the same (the views' reference tests)."""
    with open(corpus_file(TINYGPT_CPU), "rb") as raw:
        tables = parse_trace(raw, use_second_core=False)
    tree = TraceContext(tables).tree
    events = len(tables.events["ts_ns"])
    tracemalloc.start()
    try:
        steps = find_steps(tables, tree)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(steps.names) >= 2 and events > 5000
    assert peak < 12 * events  # two arrays of every event's end were 16 bytes an event (17.4 with the masks)
