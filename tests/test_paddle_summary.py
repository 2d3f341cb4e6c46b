"""Paddle's summary tables, computed from the trace, against what ``Profiler.summary()`` printed for the same run.

Each recording in tests/data/paddle has the printout in ms and in µs next to it; every row of the
Overview, Model, Operator (with its nested rows), UserDefined and Memory tables must match within
the printout's rounding (two decimals of the unit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from paddle_printout import Section, name_matches, peaks, read_printout, statistics
from profscope.analysis.paddle_summary import paddle_summary
from profscope.ingest.paddle import parse_any_trace

PADDLE_DATA = Path(__file__).parent / "data" / "paddle"
RUNS = ("mlp", "cnn_bn", "transformer", "static_mlp")
UNIT_NS = {"ms": 1e6, "us": 1e3}
ROUNDING = 0.0051  # the printout shows two decimals


def recording(run: str) -> Path:
    (path,) = sorted((PADDLE_DATA / run).glob("*.paddle_trace.json.gz"))
    return path


@pytest.fixture(
    scope="module", params=[(run, unit) for run in RUNS for unit in UNIT_NS], ids=lambda p: f"{p[0]}-{p[1]}"
)
def case(request: pytest.FixtureRequest) -> tuple[dict[str, Any], dict[str, Section], float]:
    run, unit = request.param
    trace = recording(run)
    with open(trace, "rb") as raw:
        summary = paddle_summary(parse_any_trace(raw))
    printed = read_printout(trace.with_name(trace.name.removesuffix(".gz") + f".summary_{unit}.txt"))
    return summary, printed, UNIT_NS[unit]


def close(printed: float | None, ours_ns: float | None, unit_ns: float) -> bool:
    if printed is None or ours_ns is None:
        return printed is None and ours_ns is None
    return abs(printed - ours_ns / unit_ns) <= ROUNDING


def assert_statistics(cell: str, ours: dict[str, Any] | None, unit_ns: float, what: str) -> None:
    printed = statistics(cell)
    if ours is None:  # a row without that side (a kernel row's CPU): Paddle prints zeros or dashes
        assert all(v in (None, 0.0) for v in printed), what
        return
    expected = [ours.get("total_ns"), ours.get("avg_ns"), ours.get("max_ns"), ours.get("min_ns")]
    for value, mine in zip(printed[:4], expected, strict=True):
        assert close(value, mine, unit_ns), f"{what}: printed {cell!r}, computed {ours}"
    assert abs(printed[4] - ours["ratio_pct"]) <= ROUNDING, f"{what}: printed {cell!r}, computed {ours}"  # type: ignore[operator]


def find(rows: list[dict[str, Any]], printed_name: str) -> dict[str, Any]:
    found = [row for row in rows if name_matches(printed_name, row["name"])]
    assert len(found) == 1, f"{printed_name!r}: {[r['name'] for r in found]}"
    return found[0]


def test_overview_summary(case) -> None:  # type: ignore[no-untyped-def]
    summary, printed, unit_ns = case
    rows = printed["Overview Summary"].rows
    cpu = {row["type"]: row for row in summary["overview"]["cpu"]}
    assert [r.name for r in rows] == [row["type"] for row in summary["overview"]["cpu"]]  # same order: time desc
    for row in rows:
        ours = cpu[row.name]
        calls, time, ratio = row.cells
        assert int(calls) == ours["calls"], row
        assert close(float(time), ours["time_ns"], unit_ns), (row, ours)
        assert abs(float(ratio) - ours["ratio_pct"]) <= ROUNDING, (row, ours)
    assert summary["overview"]["gpu"] == []  # CPU recordings: the printed GPU part is empty too


def test_model_summary(case) -> None:  # type: ignore[no-untyped-def]
    summary, printed, unit_ns = case
    if "Model Summary" not in printed:
        assert summary["model"] == []
        return
    rows = printed["Model Summary"].rows
    assert [r.name for r in rows] == [row["name"] for row in summary["model"]]
    for row in rows:
        ours = find(summary["model"], row.name)
        calls, cpu, gpu = row.cells
        if row.name == "Others":
            total, *_, ratio = statistics(cpu)
            assert close(total, ours["cpu"]["total_ns"], unit_ns) and abs(ratio - ours["cpu"]["ratio_pct"]) <= ROUNDING  # type: ignore[operator]
            continue
        assert int(calls) == ours["calls"]
        assert_statistics(cpu, ours["cpu"], unit_ns, f"model {row.name} CPU")
        assert_statistics(gpu, ours["gpu"], unit_ns, f"model {row.name} GPU")


def test_operator_summary_with_its_nested_rows(case) -> None:  # type: ignore[no-untyped-def]
    summary, printed, unit_ns = case
    rows = printed["Operator Summary"].rows
    operators = summary["operators"]
    assert [r.name for r in rows if r.depth == 0] == [op["name"] for op in operators]
    parent: dict[str, Any] = {}
    for row in rows:
        calls, cpu, gpu, _flops = row.cells
        if row.depth == 0:
            ours = parent = find(operators, row.name)
        else:
            ours = find(parent["inner"], row.name)
        assert int(calls) == ours["calls"], row
        assert_statistics(cpu, ours["cpu"], unit_ns, f"operator {row.name} CPU")
        assert_statistics(gpu, ours["gpu"], unit_ns, f"operator {row.name} GPU")
    assert sum(len(op["inner"]) for op in operators) == sum(1 for r in rows if r.depth == 1)


def test_user_defined_summary(case) -> None:  # type: ignore[no-untyped-def]
    summary, printed, unit_ns = case
    rows = printed["UserDefined Summary"].rows
    assert sorted(r.name for r in rows) == sorted(row["name"] for row in summary["user_defined"])
    for row in rows:
        ours = find(summary["user_defined"], row.name)
        calls, cpu, gpu = row.cells
        assert int(calls) == ours["calls"]
        assert_statistics(cpu, ours["cpu"], unit_ns, f"user defined {row.name} CPU")
        assert_statistics(gpu, ours["gpu"], unit_ns, f"user defined {row.name} GPU")


def test_memory_summary(case) -> None:  # type: ignore[no-untyped-def]
    summary, printed, _ = case
    places = {place["place"]: place for place in summary["memory"]}
    titles = [title for title in printed if title.startswith("Memory Summary - ")]
    assert sorted(t.removeprefix("Memory Summary - ") for t in titles) == sorted(places)
    for title in titles:
        ours = places[title.removeprefix("Memory Summary - ")]
        section = printed[title]
        assert peaks(section) == {"allocated": ours["peak_allocated_bytes"], "reserved": ours["peak_reserved_bytes"]}
        assert sorted(r.name for r in section.rows) == sorted(row["name"] for row in ours["rows"])
        for row in section.rows:
            mine = find(ours["rows"], row.name)
            kind, allocations, frees, allocated, freed, increased = row.cells
            assert kind == mine["type"]
            assert [int(allocations), int(frees), int(allocated), int(freed), int(increased)] == [
                mine["allocation_count"], mine["free_count"], mine["allocation_bytes"], mine["free_bytes"],
                mine["increased_bytes"]], f"memory row {row.name}"  # fmt: skip
