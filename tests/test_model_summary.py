"""Paddle's Model Summary table for PyTorch traces (issue 15, ``docs/definitions.md`` §14.4): the rows are made
from the model phases' per-step values by Paddle's own ``model_summary``; their totals are the sums of those
values, and the phases with Others add up to the steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import corpus_file
from profscope.analysis.context import TraceContext
from profscope.analysis.modules import module_view
from profscope.analysis.paddle_summary import MODEL_PHASES, paddle_summary
from profscope.ingest.kineto import parse_trace_file
from profscope.ingest.paddle import parse_any_trace
from test_modules import B200, NS_RESOLUTION, RECORDED, TINYGPT

PHASE_OF_ROW = {"Dataloader": "dataloader", "Forward": "forward", "Backward": "backward", "Optimization": "optimizer"}
TRACES = [
    corpus_file(TINYGPT),
    corpus_file(NS_RESOLUTION),
    RECORDED / "training" / "worker0.pt.trace.json.gz",
    RECORDED / "checkpointing" / "worker0.pt.trace.json.gz",
]


def _phases(path: Path) -> dict[str, Any]:
    return module_view(TraceContext(parse_trace_file(path)))["phases"]


def _ns(values: list[float]) -> list[int]:
    return [round(value * 1000) for value in values]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.name)
def test_each_rows_total_is_the_sum_of_its_phase_per_step(path: Path) -> None:
    phases = _phases(path)
    rows = {row["name"]: row for row in phases["model_summary"]}
    steps = phases["steps"]
    assert list(rows) == ["ProfileStep", *[name for name in MODEL_PHASES if name in rows], "Others"]
    step_cpu, step_gpu = _ns([s["host_us"] for s in steps]), _ns([s["device_busy_us"] for s in steps])
    assert rows["ProfileStep"]["calls"] == len(steps) >= 2
    assert rows["ProfileStep"]["cpu"]["total_ns"] == sum(step_cpu)
    assert rows["ProfileStep"]["gpu"]["total_ns"] == sum(step_gpu)
    for name, phase in PHASE_OF_ROW.items():
        cpu, gpu = _ns([s[f"{phase}_us"] for s in steps]), _ns([s[f"device_{phase}_us"] for s in steps])
        taken = [i for i in range(len(steps)) if cpu[i] or gpu[i]]
        if not taken:
            assert name not in rows
            continue
        row = rows[name]
        assert row["calls"] == len(taken)
        assert row["cpu"]["total_ns"] == sum(cpu)
        assert row["gpu"]["total_ns"] == sum(gpu)
        assert row["cpu"]["max_ns"] == max(cpu[i] for i in taken)
        assert row["cpu"]["min_ns"] == min(cpu[i] for i in taken)
        assert row["cpu"]["avg_ns"] == pytest.approx(sum(cpu) / len(taken))
        assert row["cpu"]["ratio_pct"] == pytest.approx(100.0 * sum(cpu) / sum(step_cpu))
    assert rows["Others"]["cpu"]["total_ns"] == sum(_ns([s["other_us"] for s in steps]))
    assert rows["Others"]["gpu"]["total_ns"] == sum(_ns([s["device_other_us"] for s in steps]))


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.name)
def test_phases_and_others_add_up_to_the_steps(path: Path) -> None:
    rows = _phases(path)["model_summary"]
    step = rows[0]
    for side in ("cpu", "gpu"):
        assert sum(row[side]["total_ns"] for row in rows[1:]) == pytest.approx(step[side]["total_ns"], abs=len(rows))
        if step[side]["total_ns"]:
            assert sum(row[side]["ratio_pct"] for row in rows[1:]) == pytest.approx(100.0, abs=0.01)


def test_a_gpu_training_trace_has_device_time_in_its_phases() -> None:
    rows = {row["name"]: row for row in _phases(corpus_file(NS_RESOLUTION))["model_summary"]}
    assert rows["ProfileStep"]["gpu"]["total_ns"] > 0
    assert rows["Forward"]["gpu"]["total_ns"] > 0 and rows["Backward"]["gpu"]["total_ns"] > 0


def test_the_rows_are_paddles_rows() -> None:
    """The same function makes a Paddle trace's Model Summary: the same names and the same columns."""
    with next((RECORDED.parent / "paddle" / "mlp").glob("*.paddle_trace.json.gz")).open("rb") as raw:
        paddle = paddle_summary(parse_any_trace(raw))["model"]
    torch = _phases(corpus_file(TINYGPT))["model_summary"]
    assert [row["name"] for row in torch] == [row["name"] for row in paddle]
    for ours, theirs in zip(torch, paddle, strict=True):
        assert ours.keys() == theirs.keys()
        assert ours["cpu"].keys() == theirs["cpu"].keys() and ours["gpu"].keys() == theirs["gpu"].keys()


def test_a_trace_without_steps_has_no_model_summary() -> None:
    phases = _phases(corpus_file(B200))
    assert not phases["applies"] and phases["model_summary"] == []
