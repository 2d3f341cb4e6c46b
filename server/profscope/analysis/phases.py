"""Model phases: per training step, the time in data loading, forward, backward, optimizer and other
(``docs/definitions.md`` §14.2), the way Paddle's Model Summary splits a step.

A phase is marked by events (data loading: ``enumerate(DataLoader)#…``; optimizer: ``Optimizer.…#…``; backward:
``autograd::engine::evaluate_function: …`` and autograd nodes ``…Backward``; forward: ``nn.Module`` and Lightning
module events and the forward ops of ``fwdbwd`` flows; ``## forward ##``-style annotations). Host: the wall time
the events cover in the step, overlaps going to the first of data loading, optimizer, backward, forward; device:
the activities launched from inside each phase's events on their thread. Both sum to the step (busy time on the
device) with "other".
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from profscope.analysis import intervals, name_rules
from profscope.analysis.arrays import is_one_of, stable_argsort
from profscope.analysis.autograd_links import fwdbwd_links
from profscope.analysis.call_tree import CallTree
from profscope.analysis.steps import Steps
from profscope.tables import Kind, TraceTables

PHASES = ("dataloader", "optimizer", "backward", "forward")  # the order that settles overlaps
NO_STEPS = "This trace has no ProfilerStep#N events, so it has no steps to split into phases."
_AUTOGRAD_NODE = re.compile(r"^(torch::autograd::AccumulateGrad|[A-Za-z0-9_]+Backward\d*)$")  # old traces
_ANNOTATION = re.compile(r"^##\s*(forward|backward|optimizer|dataloader)\s*##$", re.IGNORECASE)


def _phase_of_name(name: str) -> str | None:
    annotation = _ANNOTATION.match(name)
    if annotation:
        return annotation.group(1).lower()
    if name_rules.is_dataloader(name):
        return "dataloader"
    if name_rules.is_optimizer(name):
        return "optimizer"
    if name.startswith("autograd::engine::evaluate_function") or _AUTOGRAD_NODE.match(name):
        return "backward"
    if name.startswith("nn.Module: ") or name.startswith("[pl][module]"):
        return "forward"
    return None


def phase_rows(tables: TraceTables, phases: tuple[str, ...] = PHASES) -> dict[str, np.ndarray]:
    """The event rows that mark each phase."""
    events = tables.events
    kind = np.asarray(events["kind"])
    names = np.asarray(events["name"])
    timed = is_one_of(kind, (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY, Kind.PYTHON_FUNCTION))
    result = {}
    for phase in phases:
        mask = name_rules.string_mask(tables.strings, lambda s, phase=phase: _phase_of_name(s) == phase)
        result[phase] = np.flatnonzero(timed & mask[names])
    return result


def model_phases(tables: TraceTables, tree: CallTree, steps: Steps) -> dict[str, Any]:
    """Per step and on average: host and device time of each phase, in microseconds."""
    if not steps.from_profiler_steps:
        return {"applies": False, "reason": NO_STEPS, "steps": [], "average": None}
    events = tables.events
    rows = phase_rows(tables)
    forward_ops = fwdbwd_links(tables, tree).forward_node  # before the end of every event: the links' peak is apart
    rows["forward"] = np.union1d(rows["forward"], tree.node_event[forward_ops[forward_ops >= 0]])
    ts = np.asarray(events["ts_ns"])
    end = ts + np.asarray(events["dur_ns"])
    track = np.asarray(events["track"])
    host_sets = {phase: intervals.merge(ts[r], end[r]) for phase, r in rows.items()}
    device_phase, device_step, device_rows = _device_phase_and_step(tables, tree, steps, rows, ts, end, track)
    result_steps = []
    by_step = stable_argsort(device_step)  # each step's device rows, found without a pass over all
    step_bounds = np.searchsorted(device_step[by_step], np.arange(len(steps.names) + 1))
    host_by_step = _split_windows(host_sets, steps.host_starts_ns, steps.host_ends_ns)
    for index, name in enumerate(steps.names):
        window = (int(steps.host_starts_ns[index]), int(steps.host_ends_ns[index]))
        host = {phase: int(lengths[index]) for phase, lengths in host_by_step.items()}
        in_step = by_step[step_bounds[index] : step_bounds[index + 1]]
        step_rows, step_phase = device_rows[in_step], device_phase[in_step]
        device_sets = {phase: _union(step_rows[step_phase == i], ts, end) for i, phase in enumerate(PHASES)}
        busy = _union(step_rows, ts, end)
        device = _split(device_sets, busy)
        result_steps.append(
            {"step": name, "host_us": _us(window[1] - window[0])}
            | {f"{phase}_us": _us(host[phase]) for phase in (*PHASES, "other")}
            | {"device_busy_us": _us(intervals.total(busy))}
            | {f"device_{phase}_us": _us(device[phase]) for phase in (*PHASES, "other")}
        )
    return {"applies": True, "reason": None, "steps": result_steps, "average": _average(result_steps)}


def _union(rows: np.ndarray, ts: np.ndarray, end: np.ndarray) -> intervals.IntervalSet:
    return intervals.merge(ts[rows], end[rows])


def _split(sets: dict[str, intervals.IntervalSet], whole: intervals.IntervalSet) -> dict[str, int]:
    """Length of each phase inside ``whole``, earlier phases first; ``other`` is the rest."""
    shares = intervals.paint(whole, [sets[phase] for phase in PHASES])
    return {phase: intervals.total(share) for phase, share in zip((*PHASES, "other"), shares, strict=True)}


def _split_windows(
    sets: dict[str, intervals.IntervalSet], starts: np.ndarray, ends: np.ndarray
) -> dict[str, np.ndarray]:
    """``_split`` of each window ``[starts[i], ends[i])``, all at once: a point goes to the same phase whichever
    window holds it, so the union of the windows is shared out once and each window's share read off it."""
    shares = intervals.paint(intervals.merge(starts, ends), [sets[phase] for phase in PHASES])
    return {
        phase: intervals.total_within(share, starts, ends)
        for phase, share in zip((*PHASES, "other"), shares, strict=True)
    }


def _device_phase_and_step(
    tables: TraceTables,
    tree: CallTree,
    steps: Steps,
    rows: dict[str, np.ndarray],
    ts: np.ndarray,
    end: np.ndarray,
    track: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each launched device activity: its phase index (len(PHASES) = other), its step (-1 = none), its row."""
    launched = tree.device_runtime >= 0
    runtime = tree.device_runtime[launched]
    device_rows = tree.device_rows[launched]
    step = np.searchsorted(steps.host_starts_ns, ts[runtime], side="right") - 1
    inside = (step >= 0) & (end[runtime] <= steps.host_ends_ns[np.maximum(step, 0)])
    step = np.where(inside, step, -1)
    phase = np.full(len(runtime), len(PHASES), dtype=np.int64)
    for index in range(len(PHASES) - 1, -1, -1):  # the first phase in the order wins: assign it last
        marks = rows[PHASES[index]]
        covered = covers_on_thread(track[marks], ts[marks], end[marks], track[runtime], ts[runtime])
        phase[covered] = index
    return phase, step, device_rows


def covers_on_thread(
    tracks: np.ndarray, starts: np.ndarray, ends: np.ndarray, point_tracks: np.ndarray, points: np.ndarray
) -> np.ndarray:
    """Whether an interval on the same thread holds each point."""
    covered = np.zeros(len(points), dtype=bool)
    for thread in np.unique(tracks).tolist():
        merged_starts, merged_ends = intervals.merge(starts[tracks == thread], ends[tracks == thread])
        if not len(merged_starts):
            continue
        here = np.flatnonzero(point_tracks == thread)
        index = np.searchsorted(merged_starts, points[here], side="right") - 1
        covered[here] = (index >= 0) & (points[here] < merged_ends[np.maximum(index, 0)])
    return covered


def _average(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not steps:
        return None
    keys = [key for key in steps[0] if key != "step"]
    return {"step": "average"} | {key: round(sum(s[key] for s in steps) / len(steps), 3) for key in keys}


def _us(ns: float) -> float:
    return round(float(ns) / 1000.0, 3)
