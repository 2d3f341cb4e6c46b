"""Training steps: found from ``ProfilerStep#N`` and re-timed to device time.

torch-tb-profiler's rules (``docs/definitions.md`` §1):
- steps are ``ProfilerStep#N`` host events (``cpu_op``, legacy ``Operator`` or ``user_annotation``);
  without them, host ranges named like steps (``iteration 12``, ``step_3``: ``name_rules.step_range_number``,
  how Nsight Systems runs mark their steps with NVTX), or the ranges of a name the user picks
  (``step_range``), numbered in time order; with none, one step ``0`` spans all host ops;
- when anything was launched on a device, each step starts at max(previous step end, host start)
  and ends at max(host end, end of the last device activity launched by runtime calls inside it);
- trailing steps that launched nothing are dropped, and so is the last step if it launched fewer
  than 80% of the device activities of the step before (the profiler may have cut it short).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from profscope.analysis import name_rules
from profscope.analysis.arrays import is_one_of
from profscope.analysis.call_tree import DeviceLaunches
from profscope.tables import Kind, TraceTables


@dataclass
class Steps:
    names: list[str]
    starts_ns: np.ndarray
    ends_ns: np.ndarray
    host_starts_ns: np.ndarray
    host_ends_ns: np.ndarray
    from_profiler_steps: bool
    notes: list[str] = field(default_factory=list)

    @property
    def window(self) -> tuple[int, int]:
        return int(self.starts_ns[0]), int(self.ends_ns[-1])


def find_steps(tables: TraceTables, launches: DeviceLaunches, step_range: str | None = None) -> Steps:
    """``launches``: the device rows and the runtime call that launched each (``call_tree.runtime_launches``; the
    call tree holds them too)."""
    events = tables.events
    kind = np.asarray(events["kind"])
    ts = np.asarray(events["ts_ns"])
    name = np.asarray(events["name"])
    host = is_one_of(kind, (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY))
    notes: list[str] = []
    if step_range is not None:
        return _steps_of_named_ranges(tables, launches, step_range, host)
    step_name_mask = name_rules.string_mask(tables.strings, name_rules.is_profiler_step)
    candidates = np.flatnonzero(host & step_name_mask[name])
    if not len(candidates):
        candidates = np.flatnonzero(host & name_rules.string_mask(tables.strings, name_rules.is_step_range)[name])
        if len(candidates):
            examples = _examples(tables, name[candidates])
            notes.append(f"No ProfilerStep#N events: steps are the ranges named like steps ({examples}).")
    by_name: dict[int, int] = {}  # a candidate's position in candidates
    starts_of, ends_of = ts[candidates], _ends(events, candidates)
    for i, row in enumerate(candidates.tolist()):  # a step recorded twice (two threads) counts once, its longest
        previous = by_name.get(int(name[row]))
        if previous is None or ends_of[i] - starts_of[i] > ends_of[previous] - starts_of[previous]:
            by_name[int(name[row])] = i
    picked = np.array(sorted(by_name.values(), key=lambda i: (starts_of[i], -ends_of[i])), dtype=np.int64)
    if len(picked):
        step_names = [name_rules.step_range_number(tables.strings[int(name[r])]) or "" for r in candidates[picked]]
        host_starts, host_ends = starts_of[picked], ends_of[picked]
        from_steps = True
    else:
        host_kinds = is_one_of(kind, (Kind.CPU_OP, Kind.PYTHON_LEGACY))
        if not host_kinds.any():
            host_kinds = np.ones(len(kind), dtype=bool)
        if not host_kinds.any():
            raise ValueError("the trace has no timed events")
        step_names = ["0"]
        host_starts = np.array([ts[host_kinds].min()], dtype=np.int64)
        host_ends = np.array([_ends(events, host_kinds).max()], dtype=np.int64)
        from_steps = False
        notes.append("No ProfilerStep#N events: the whole trace is treated as one step.")

    starts, ends, keep = _retime_to_device(tables, launches, host_starts, host_ends)
    if keep < len(step_names):
        notes.append(
            f"The last {len(step_names) - keep} step(s) were left out: they launched fewer device activities "
            "than the step before, so the profiler probably did not capture all of their kernels."
        )
    return Steps(
        names=step_names[:keep],
        starts_ns=starts[:keep],
        ends_ns=ends[:keep],
        host_starts_ns=host_starts[:keep],
        host_ends_ns=host_ends[:keep],
        from_profiler_steps=from_steps,
        notes=notes,
    )


def _ends(events: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """End times of ``rows`` (indices or a mask) alone: an array of every event's end is 27 MB at 1 GB."""
    return np.asarray(events["ts_ns"])[rows] + np.asarray(events["dur_ns"])[rows]


def _examples(tables: TraceTables, name_ids: np.ndarray) -> str:
    unique = np.unique(name_ids)
    return ", ".join(repr(tables.strings[int(i)]) for i in unique[:3]) + (", ..." if len(unique) > 3 else "")


def _steps_of_named_ranges(tables: TraceTables, launches: DeviceLaunches, step_range: str, host: np.ndarray) -> Steps:
    """Steps from every host range named ``step_range``, numbered 1.. in time order (the user's pick)."""
    events = tables.events
    name_id = tables.strings.lookup(step_range)
    rows = np.flatnonzero(host & (np.asarray(events["name"]) == name_id)) if name_id >= 0 else np.zeros(0, np.int64)
    if not len(rows):
        raise ValueError(f"no host range is named {step_range!r}")
    host_starts, host_ends = np.asarray(events["ts_ns"])[rows], _ends(events, rows)
    starts, ends, keep = _retime_to_device(tables, launches, host_starts, host_ends)
    names = [str(i + 1) for i in range(keep)]
    return Steps(
        names=names,
        starts_ns=starts[:keep],
        ends_ns=ends[:keep],
        host_starts_ns=host_starts[:keep],
        host_ends_ns=host_ends[:keep],
        from_profiler_steps=True,
        notes=[f"Steps are the {len(rows)} ranges named {step_range!r}, numbered in time order."],
    )


def _retime_to_device(
    tables: TraceTables, launches: DeviceLaunches, host_starts: np.ndarray, host_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    events = tables.events
    ts = np.asarray(events["ts_ns"])
    step_count = len(host_starts)
    launched = launches.device_runtime >= 0
    device_rows = launches.device_rows[launched]
    runtime_rows = launches.device_runtime[launched]
    # a runtime call belongs to the step that contains it entirely
    step_of = np.searchsorted(host_starts, ts[runtime_rows], side="right") - 1
    inside = (step_of >= 0) & (_ends(events, runtime_rows) <= host_ends[np.maximum(step_of, 0)])
    matched_count = np.bincount(step_of[inside], minlength=step_count)
    starts = host_starts.copy()
    ends = host_ends.copy()
    if not inside.any():
        return starts, ends, step_count
    device_max_end = np.full(step_count, np.iinfo(np.int64).min, dtype=np.int64)
    device_min_start = np.full(step_count, np.iinfo(np.int64).max, dtype=np.int64)
    np.maximum.at(device_max_end, step_of[inside], _ends(events, device_rows[inside]))
    np.minimum.at(device_min_start, step_of[inside], ts[device_rows[inside]])

    previous_end = int(host_starts[0])
    if matched_count[0] > 0:
        # device work launched before the first step that finished before its kernels started
        unmatched = np.ones(len(launches.device_rows), dtype=bool)
        unmatched[np.flatnonzero(launched)[inside]] = False
        unmatched_ends = _ends(events, launches.device_rows[unmatched])
        earlier = unmatched_ends[unmatched_ends < device_min_start[0]]
        if len(earlier):
            previous_end = max(previous_end, int(earlier.max()))
    for i in range(step_count):
        start = max(previous_end, int(host_starts[i]))
        if matched_count[i] > 0:
            step_end = max(int(host_ends[i]), int(device_max_end[i]))
        else:
            step_end = max(int(host_ends[i]), start)
        starts[i], ends[i] = start, max(step_end, start)
        previous_end = int(ends[i])

    keep = step_count
    if step_count > 1:
        with_device = np.flatnonzero(matched_count > 0)
        last = int(with_device[-1])
        keep = last + 1
        if last > 0 and matched_count[last - 1] * 0.8 > matched_count[last]:
            keep = last
    return starts, ends, keep
