"""The module tree: where the time goes by ``nn.Module`` (``docs/definitions.md`` §14.1).

Occurrences come from ``nn.Module: <Type>_<n>`` python_function events (parents along ``Python parent id``),
else from Lightning ``[pl][module]`` events; occurrences of one instance name under one parent row are a row.
Ops, runtime calls and flow starts belong to the innermost occurrence holding them on their thread; backward
ops (``fwdbwd`` flow finishes) and activation checkpointing's recomputed forwards are backward time of their
module. Everything is computed at query time from the parsed tables (no parser change).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from profscope.analysis import name_rules
from profscope.analysis.arrays import depths, is_one_of, lookup, match_keys
from profscope.analysis.autograd_links import fwdbwd_links
from profscope.analysis.call_tree import CallTree
from profscope.analysis.callstacks import FRAME, parse_frame
from profscope.analysis.context import TraceContext
from profscope.analysis.paddle_summary import model_summary_of_phases
from profscope.analysis.payloads import payload
from profscope.analysis.phases import covers_on_thread, model_phases, phase_rows
from profscope.tables import NO_ID, Kind, TraceTables

MODULE_PREFIX = "nn.Module: "
LIGHTNING_PREFIX = "[pl][module]"
HOW_TO_RECORD = (
    "This trace has no module information: record it with torch.profiler.profile(with_stack=True, "
    "with_modules=True) (eager models get their nn.Module events from the Python tracer that with_stack=True "
    "turns on), or with PyTorch Lightning's PyTorchProfiler, to see time by nn.Module."
)
TOP_ROWS = 10  # operators and kernels listed per module
_INSTANCE = re.compile(r"^(.*)_(\d+)$")


@dataclass
class Occurrences:
    """One row per module occurrence (event), in start order; ``parent`` indexes these rows (-1: none)."""

    rows: np.ndarray
    parent: np.ndarray
    names: list[str]  # the module's instance name ("Linear_3", or a Lightning dotted name)
    types: list[str]
    source: str  # "nn.Module" or "lightning"


def find_occurrences(tables: TraceTables) -> Occurrences | None:
    """The module occurrences of a trace, or None when it has no module information."""
    return _nn_module_occurrences(tables) or _lightning_occurrences(tables)


def _nn_module_occurrences(tables: TraceTables) -> Occurrences | None:
    python = tables.table("python")
    events = np.asarray(python["event"], dtype=np.int64)
    if not len(events):
        return None
    names = np.asarray(tables.events["name"])[events]
    is_module_name = _string_prefix_mask(tables, MODULE_PREFIX)
    is_module = is_module_name[names]
    if not is_module.any():
        return None
    parent = _python_parents(python)
    module_parent = _nearest_marked_ancestor(parent, is_module)
    module_python = np.flatnonzero(is_module)
    starts = np.asarray(tables.events["ts_ns"])[events[module_python]]
    durations = np.asarray(tables.events["dur_ns"])[events[module_python]]
    depth = depths(module_parent)[module_python]
    module_python = module_python[np.lexsort((depth, -durations, starts))]  # a parent before its children
    renumber = np.full(len(events), NO_ID, dtype=np.int64)
    renumber[module_python] = np.arange(len(module_python))
    instance_names = [tables.strings[int(n)][len(MODULE_PREFIX) :] for n in names[module_python]]
    return Occurrences(
        rows=events[module_python],
        parent=lookup(renumber, module_parent[module_python], NO_ID),
        names=instance_names,
        types=[_type_of_instance(name) for name in instance_names],
        source="nn.Module",
    )


def _python_parents(python: dict[str, np.ndarray]) -> np.ndarray:
    """The row (in the python table) of each python_function event's ``Python parent id``, NO_ID if absent."""
    python_ids = np.asarray(python["python_id"], dtype=np.int64)
    parent_ids = np.asarray(python["parent_id"], dtype=np.int64)
    order = np.argsort(python_ids, kind="stable")
    parent = match_keys(python_ids[order], order, parent_ids, NO_ID)
    parent[parent_ids == NO_ID] = NO_ID
    return parent


def _lightning_occurrences(tables: TraceTables) -> Occurrences | None:
    events = tables.events
    kind = np.asarray(events["kind"])
    host = is_one_of(kind, (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY))
    rows = np.flatnonzero(host & _string_prefix_mask(tables, LIGHTNING_PREFIX)[np.asarray(events["name"])])
    if not len(rows):
        return None
    rows = rows[np.lexsort((-np.asarray(events["dur_ns"])[rows], np.asarray(events["ts_ns"])[rows]))]
    parent = np.full(len(rows), NO_ID, dtype=np.int64)
    for track in np.unique(np.asarray(events["track"])[rows]).tolist():
        on_track = np.flatnonzero(np.asarray(events["track"])[rows] == track)
        parent[on_track] = _enclosing_in_sorted(events, rows[on_track], on_track)
    labels = [tables.strings[int(n)][len(LIGHTNING_PREFIX) :] for n in np.asarray(events["name"])[rows]]
    types, names = zip(*(_split_lightning(label) for label in labels), strict=True)
    return Occurrences(rows=rows, parent=parent, names=list(names), types=list(types), source="lightning")


def _split_lightning(label: str) -> tuple[str, str]:
    """``torch.nn.modules.linear.Linear: model.layer`` -> (``Linear``, ``model.layer``)."""
    module_type, _, dotted = label.partition(": ")
    return module_type.rsplit(".", 1)[-1], dotted or module_type


def _enclosing_in_sorted(events: dict[str, np.ndarray], rows: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """For rows of one thread sorted by (start, longest first): the label of the innermost row enclosing each."""
    starts = np.asarray(events["ts_ns"])[rows].tolist()
    ends = (np.asarray(events["ts_ns"])[rows] + np.asarray(events["dur_ns"])[rows]).tolist()
    found = np.full(len(rows), NO_ID, dtype=np.int64)
    stack: list[int] = []
    for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
        while stack and ends[stack[-1]] <= start:
            stack.pop()
        if stack and end <= ends[stack[-1]]:
            found[i] = labels[stack[-1]]
        stack.append(i)
    return found


def _string_prefix_mask(tables: TraceTables, prefix: str) -> np.ndarray:
    return name_rules.string_mask(tables.strings, lambda s: s.startswith(prefix))


def _type_of_instance(name: str) -> str:
    match = _INSTANCE.match(name)
    return match.group(1) if match else name


def _nearest_marked_ancestor(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """For each node, its nearest ancestor that is marked (NO_ID if none), by pointer jumping."""
    ancestor = parent.copy()
    while True:
        climbing = np.flatnonzero((ancestor >= 0) & ~marked[np.maximum(ancestor, 0)])
        if not len(climbing):
            return ancestor
        ancestor[climbing] = parent[ancestor[climbing]]


class Innermost:
    """Which of some nested event rows encloses a point (track, time): the innermost one, per thread, as a
    step function; ``of`` answers with indexes into those rows."""

    def __init__(self, tables: TraceTables, rows: np.ndarray) -> None:
        events = tables.events
        self._tracks = np.asarray(events["track"])[rows]
        starts = np.asarray(events["ts_ns"])[rows]
        ends = starts + np.asarray(events["dur_ns"])[rows]
        self._steps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for track in np.unique(self._tracks).tolist():
            on_track = np.flatnonzero(self._tracks == track)
            on_track = on_track[np.lexsort((-(ends - starts)[on_track], starts[on_track]))]
            self._steps[track] = _innermost_steps(on_track, starts[on_track], ends[on_track])

    def of(self, tracks: np.ndarray, times: np.ndarray) -> np.ndarray:
        """The row enclosing each point (start inclusive, end exclusive), NO_ID outside all of them."""
        found = np.full(len(times), NO_ID, dtype=np.int64)
        for track, (boundaries, occurrence) in self._steps.items():
            here = np.flatnonzero(tracks == track)
            segment = np.searchsorted(boundaries, times[here], side="right") - 1
            found[here] = lookup(occurrence, segment, NO_ID)
        return found


def _innermost_steps(ids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Boundaries and the innermost open occurrence after each, for nested intervals sorted by start."""
    times: list[int] = []
    inner: list[int] = []
    stack: list[tuple[int, int]] = []
    for occurrence, start, end in zip(ids.tolist(), starts.tolist(), ends.tolist(), strict=True):
        while stack and stack[-1][1] <= start:
            closed_end = stack.pop()[1]
            times.append(closed_end)
            inner.append(stack[-1][0] if stack else NO_ID)
        stack.append((occurrence, end))
        times.append(start)
        inner.append(occurrence)
    while stack:
        closed_end = stack.pop()[1]
        times.append(closed_end)
        inner.append(stack[-1][0] if stack else NO_ID)
    order = np.argsort(np.asarray(times, dtype=np.int64), kind="stable")
    return np.asarray(times, dtype=np.int64)[order], np.asarray(inner, dtype=np.int64)[order]


@dataclass
class ModuleRows:
    """The rows of the module tree (numbered parents first: a row's ``id``) and the occurrences behind them."""

    occurrences: Occurrences
    group: np.ndarray  # the row of each occurrence
    parent: np.ndarray  # the parent row of each row (NO_ID: a root)
    names: list[str]
    types: list[str]
    recompute: np.ndarray  # per occurrence: a recomputed forward (activation checkpointing)
    innermost: Innermost  # which occurrence holds a point

    @property
    def count(self) -> int:
        return len(self.names)


def find_module_rows(tables: TraceTables) -> ModuleRows | None:
    """The module rows of a trace, or None when it has no module information."""
    occurrences = find_occurrences(tables)
    if occurrences is None:
        return None
    recomputed = _recomputed_roots(tables, occurrences)
    group, parent_group, names, types, recompute = _group_occurrences(occurrences, recomputed)
    return ModuleRows(occurrences, group, parent_group, names, types, recompute, Innermost(tables, occurrences.rows))


def operator_owners(tables: TraceTables, tree: CallTree, modules: ModuleRows) -> np.ndarray:
    """The module row each call-tree node belongs to (NO_ID: none), by ``docs/definitions.md`` §14.3: a node in
    a recomputed forward belongs to its module; else a node at or below a backward op (``fwdbwd`` flow finish)
    belongs to the module of that op's forward op; else the innermost occurrence holding its start."""
    events = tables.events
    track, ts = np.asarray(events["track"])[tree.node_event], np.asarray(events["ts_ns"])[tree.node_event]
    occurrence = modules.innermost.of(track, ts)
    owner = lookup(modules.group, occurrence, NO_ID)
    backward_occurrence, backward_nodes = _backward_links(tables, tree, modules.innermost)
    linked = np.full(len(tree.node_event), NO_ID, dtype=np.int64)
    linked[backward_nodes] = backward_occurrence
    is_linked = linked >= 0
    nearest = np.where(is_linked, np.arange(len(linked)), _nearest_marked_ancestor(tree.parent, is_linked))
    backward_owner = lookup(modules.group, lookup(linked, nearest, NO_ID), NO_ID)
    in_recomputation = lookup(modules.recompute, occurrence, False)
    return np.where(~in_recomputation & (backward_owner >= 0), backward_owner, owner)


def module_tree(tables: TraceTables, tree: CallTree, modules: ModuleRows | None) -> dict[str, Any]:
    """The module rows (a forest, each with ``children``), or ``applies: False`` and how to record modules."""
    if modules is None:
        return {"applies": False, "reason": HOW_TO_RECORD, "source": None, "modules": []}
    occurrences, group, parent_group = modules.occurrences, modules.group, modules.parent
    group_names, group_types, recompute = modules.names, modules.types, modules.recompute
    count = modules.count
    innermost = modules.innermost
    sums = _occurrence_sums(tables, tree, occurrences, innermost, recompute)
    per_group = {key: np.bincount(group, weights=value, minlength=count) for key, value in sums.items()}
    totals = _subtree_totals(parent_group, per_group)
    ops, kernels = _top_rows_per_group(tables, tree, occurrences, innermost, group, parent_group)
    first = _first_occurrence(tables, occurrences, group, count)
    frames = _module_frames(tables, occurrences, group, count)
    rows = [
        {
            "id": index,
            "name": group_names[index],
            "type": group_types[index],
            "parent": int(parent_group[index]),
            "occurrences": int(per_group["occurrences"][index]),
            "recomputations": int(per_group["recomputations"][index]),
            "operators": int(totals["operators"][index]),
            "host_total_us": _us(per_group["host_total"][index]),
            "host_self_us": _us(per_group["host_self"][index]),
            "device_total_us": _us(totals["device_self"][index]),
            "device_self_us": _us(per_group["device_self"][index]),
            "backward_host_us": _us(totals["backward_host"][index]),
            "backward_device_us": _us(totals["backward_device"][index]),
            "first": first[index],
            "frame": frames[index],
            "top_operators": ops[index],
            "top_kernels": kernels[index],
            "children": [],
        }
        for index in range(count)
    ]
    roots = []
    for row in rows:
        (rows[row["parent"]]["children"] if row["parent"] >= 0 else roots).append(row)
    return {"applies": True, "reason": None, "source": occurrences.source, "modules": roots}


def _us(ns: float) -> float:
    return round(float(ns) / 1000.0, 3)


def _recomputed_roots(tables: TraceTables, occurrences: Occurrences) -> np.ndarray:
    """Occurrences without a parent module that run inside backward (``autograd::engine::evaluate_function``):
    activation checkpointing's recomputed forwards, whose Python parents lead to the autograd engine."""
    root = occurrences.parent < 0
    if not root.any():
        return root
    marks = phase_rows(tables, ("backward",))["backward"]
    events = tables.events
    ts, track = np.asarray(events["ts_ns"]), np.asarray(events["track"])
    end = ts + np.asarray(events["dur_ns"])
    inside = covers_on_thread(track[marks], ts[marks], end[marks], track[occurrences.rows], ts[occurrences.rows])
    return root & inside


def _group_occurrences(
    occurrences: Occurrences, recomputed_roots: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[str], list[str], np.ndarray]:
    """Occurrences of the same name under the same parent row become one row (rows numbered parents first).

    A recomputed forward (a root in backward, and the modules it calls) joins the row of the module instance
    of the same name (instance names are unique per module object); ``recompute`` marks those occurrences.
    """
    group = np.full(len(occurrences.rows), NO_ID, dtype=np.int64)
    recompute = np.zeros(len(occurrences.rows), dtype=bool)
    keys: dict[tuple[int, str], int] = {}
    by_instance: dict[str, int] = {}
    parents: list[int] = []
    names: list[str] = []
    types: list[str] = []
    for index, (parent, name) in enumerate(zip(occurrences.parent.tolist(), occurrences.names, strict=True)):
        recompute[index] = bool(recomputed_roots[index]) or (parent >= 0 and recompute[parent])
        if recompute[index] and name in by_instance:
            group[index] = by_instance[name]
            continue
        parent_group = int(group[parent]) if parent >= 0 else NO_ID  # a parent starts before its child
        key = (parent_group, name)
        if key not in keys:
            keys[key] = len(names)
            parents.append(parent_group)
            names.append(name)
            types.append(occurrences.types[index])
            if parent_group >= 0:
                by_instance.setdefault(name, keys[key])
        group[index] = keys[key]
    recompute &= np.asarray([names[g] in by_instance for g in group.tolist()], dtype=bool)
    return group, np.asarray(parents, dtype=np.int64), names, types, recompute


def _occurrence_sums(
    tables: TraceTables, tree: CallTree, occurrences: Occurrences, innermost: Innermost, recompute: np.ndarray
) -> dict[str, np.ndarray]:
    """Per occurrence: host total / self, device self, operators, backward host / device (all nanoseconds).

    A recomputed forward is backward work of its module: its self times go to backward, not to the forward."""
    events = tables.events
    ts, dur, track = (np.asarray(events[c]) for c in ("ts_ns", "dur_ns", "track"))
    count = len(occurrences.rows)

    def per_occurrence(owner: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        keep = owner >= 0
        counts = np.bincount(owner[keep], weights=None if weights is None else weights[keep], minlength=count)
        return counts.astype(np.float64)

    host_total = dur[occurrences.rows].astype(np.float64)
    has_parent = occurrences.parent >= 0
    child_time = np.bincount(occurrences.parent[has_parent], weights=host_total[has_parent], minlength=count)
    launched = tree.device_runtime >= 0
    runtime_rows = tree.device_runtime[launched]
    device_self = per_occurrence(
        innermost.of(track[runtime_rows], ts[runtime_rows]), dur[tree.device_rows[launched]].astype(np.float64)
    )
    node_owner = innermost.of(track[tree.node_event], ts[tree.node_event])
    parent_owner = lookup(node_owner, tree.parent, NO_ID)
    parent_is_op = lookup(tree.is_operator, tree.parent, False)
    operators = per_occurrence(node_owner[tree.is_operator & ~(parent_is_op & (parent_owner == node_owner))])
    del node_owner, parent_owner, parent_is_op  # per call-tree node: gone before the backward links' own arrays
    backward_owner, backward_nodes = _backward_links(tables, tree, innermost)
    sums = {
        "occurrences": np.ones(count),
        "recomputations": recompute.astype(np.float64),
        "host_total": host_total,
        "host_self": host_total - child_time,
        "device_self": device_self,
        "operators": operators,
        "backward_host": per_occurrence(backward_owner, dur[tree.node_event[backward_nodes]].astype(np.float64)),
        "backward_device": per_occurrence(backward_owner, tree.device_total_ns[backward_nodes].astype(np.float64)),
    }
    _move_recomputation_to_backward(tables, tree, occurrences, recompute, sums, backward_owner, backward_nodes)
    for key in ("occurrences", "host_total", "host_self", "device_self", "operators"):
        sums[key][recompute] = 0.0
    return sums


def _move_recomputation_to_backward(
    tables: TraceTables,
    tree: CallTree,
    occurrences: Occurrences,
    recompute: np.ndarray,
    sums: dict[str, np.ndarray],
    backward_owner: np.ndarray,
    backward_nodes: np.ndarray,
) -> None:
    """A recomputed forward's self times become its module's backward time, and leave the backward op that
    ran it (whose duration holds it), so that no time is counted twice."""
    sums["backward_host"] += np.where(recompute, sums["host_self"], 0.0)
    sums["backward_device"] += np.where(recompute, sums["device_self"], 0.0)
    roots = np.flatnonzero(recompute & (occurrences.parent < 0))
    if not len(roots) or not len(backward_nodes):
        return
    subtree_device = sums["device_self"].copy()
    for index in range(len(occurrences.rows) - 1, -1, -1):  # children start after their parents
        if occurrences.parent[index] >= 0:
            subtree_device[occurrences.parent[index]] += subtree_device[index]
    events = tables.events
    rows = occurrences.rows[roots]
    running = Innermost(tables, tree.node_event[backward_nodes]).of(
        np.asarray(events["track"])[rows], np.asarray(events["ts_ns"])[rows]
    )
    inside = running >= 0
    owner = backward_owner[running[inside]]
    np.subtract.at(sums["backward_host"], owner, sums["host_total"][roots[inside]])
    np.subtract.at(sums["backward_device"], owner, subtree_device[roots[inside]])


def _backward_links(tables: TraceTables, tree: CallTree, innermost: Innermost) -> tuple[np.ndarray, np.ndarray]:
    """For each backward op (``fwdbwd`` flow finish): the occurrence of its forward op, and its call-tree node."""
    links = fwdbwd_links(tables, tree)
    keep = links.backward_node >= 0
    owner = innermost.of(links.forward_track[keep], links.forward_ts[keep])
    return owner, links.backward_node[keep]


def _subtree_totals(parent: np.ndarray, per_group: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each row's value plus its descendants' (rows are numbered parents first, so children come later)."""
    totals = {key: value.copy() for key, value in per_group.items()}
    for index in range(len(parent) - 1, -1, -1):
        if parent[index] >= 0:
            for value in totals.values():
                value[parent[index]] += value[index]
    return totals


def _top_rows_per_group(
    tables: TraceTables,
    tree: CallTree,
    occurrences: Occurrences,
    innermost: Innermost,
    group: np.ndarray,
    parent_group: np.ndarray,
) -> tuple[list[list[dict[str, Any]]], list[list[dict[str, Any]]]]:
    """The operators (by name) and kernels (by name) of each row and its descendants, longest first."""
    events = tables.events
    ts, dur, track, name = (np.asarray(events[c]) for c in ("ts_ns", "dur_ns", "track", "name"))
    node_owner = lookup(group, innermost.of(track[tree.node_event], ts[tree.node_event]), NO_ID)
    parent_owner = lookup(node_owner, tree.parent, NO_ID)
    parent_is_op = lookup(tree.is_operator, tree.parent, False)
    top_op = np.flatnonzero(tree.is_operator & (node_owner >= 0) & ~(parent_is_op & (parent_owner == node_owner)))
    operators = _named_sums(
        node_owner[top_op],
        name[tree.node_event[top_op]],
        {"host_us": tree.host_total_ns[top_op], "device_us": tree.device_total_ns[top_op]},
    )
    launched = np.flatnonzero(tree.device_runtime >= 0)
    runtime_rows = tree.device_runtime[launched]
    kernel_owner = lookup(group, innermost.of(track[runtime_rows], ts[runtime_rows]), NO_ID)
    inside = kernel_owner >= 0
    kernel_rows = tree.device_rows[launched][inside]
    kernels = _named_sums(kernel_owner[inside], name[kernel_rows], {"device_us": dur[kernel_rows]})
    count = len(parent_group)
    return _rank(tables, operators, parent_group, count, "host_us"), _rank(
        tables, kernels, parent_group, count, "device_us"
    )


def _named_sums(
    owner: np.ndarray, names: np.ndarray, values: dict[str, np.ndarray]
) -> dict[tuple[int, int], dict[str, float]]:
    """Calls and summed values per (row, name)."""
    width = int(names.max(initial=0)) + 1
    combined, inverse = np.unique(owner.astype(np.int64) * width + names, return_inverse=True)  # 1-D: fast
    keys = np.stack([combined // width, combined % width], axis=1)
    inverse = inverse.reshape(-1)
    calls = np.bincount(inverse, minlength=len(keys))
    sums = {
        key: np.bincount(inverse, weights=value.astype(np.float64), minlength=len(keys))
        for key, value in values.items()
    }
    return {
        (int(k[0]), int(k[1])): {"calls": float(calls[i]), **{key: float(s[i]) for key, s in sums.items()}}
        for i, k in enumerate(keys)
    }


def _rank(
    tables: TraceTables,
    self_sums: dict[tuple[int, int], dict[str, float]],
    parent: np.ndarray,
    count: int,
    primary: str,
) -> list[list[dict[str, Any]]]:
    """Per row, its descendants' (row, name) sums folded in, the top rows by device time then ``primary``."""
    per_row: list[dict[int, dict[str, float]]] = [{} for _ in range(count)]
    for (row, name), sums in self_sums.items():
        per_row[row][name] = dict(sums)
    for index in range(count - 1, -1, -1):
        if parent[index] >= 0:
            target = per_row[parent[index]]
            for name, sums in per_row[index].items():
                into = target.setdefault(name, dict.fromkeys(sums, 0.0))
                for key, value in sums.items():
                    into[key] += value
    ranked = []
    for named in per_row:
        top = sorted(named.items(), key=lambda item: (-item[1]["device_us"], -item[1][primary]))[:TOP_ROWS]
        ranked.append(
            [
                {"name": tables.strings[name], "calls": int(sums["calls"])}
                | {key: _us(value) for key, value in sums.items() if key != "calls"}
                for name, sums in top
            ]
        )
    return ranked


def _first_occurrence(
    tables: TraceTables, occurrences: Occurrences, group: np.ndarray, count: int
) -> list[dict[str, Any]]:
    """Where each row first ran: its track and start / duration in microseconds from the trace's origin."""
    first = np.full(count, len(group), dtype=np.int64)
    np.minimum.at(first, group, np.arange(len(group)))  # occurrences are in start order
    rows = occurrences.rows[first]
    events = tables.events
    return [
        {
            "event": row,
            "track": int(np.asarray(events["track"])[row]),
            "ts_us": _us(np.asarray(events["ts_ns"])[row]),
            "dur_us": _us(np.asarray(events["dur_ns"])[row]),
        }
        for row in rows.tolist()
    ]


def _module_frames(
    tables: TraceTables, occurrences: Occurrences, group: np.ndarray, count: int
) -> list[dict[str, Any] | None]:
    """The source of each row: the ``file(line): forward`` frame its first occurrence calls (the module's
    ``forward``, a child or grandchild of the ``nn.Module`` event, under ``_call_impl``)."""
    frames: list[dict[str, Any] | None] = [None] * count
    if occurrences.source != "nn.Module":
        return frames
    python = tables.table("python")
    event_of_python = np.asarray(python["event"], dtype=np.int64)
    names = np.asarray(tables.events["name"])
    is_forward = name_rules.string_mask(
        tables.strings, lambda s: s.endswith(": forward") and FRAME.match(s) is not None
    )
    parent = _python_parents(python)
    order = np.argsort(event_of_python, kind="stable")
    module_python = order[np.searchsorted(event_of_python[order], occurrences.rows)]
    occurrence_of_python = np.full(len(event_of_python), NO_ID, dtype=np.int64)
    occurrence_of_python[module_python] = np.arange(len(module_python))
    forward = np.flatnonzero(is_forward[names[event_of_python]])
    owner = lookup(occurrence_of_python, parent[forward], NO_ID)
    grand_owner = lookup(occurrence_of_python, lookup(parent, parent[forward], NO_ID), NO_ID)
    owner = np.where(owner >= 0, owner, grand_owner)
    forward, owner = forward[owner >= 0], owner[owner >= 0]
    ts = np.asarray(tables.events["ts_ns"])[event_of_python[forward]]
    for python_row, occurrence in zip(forward[np.lexsort((ts, owner))].tolist(), np.sort(owner).tolist(), strict=True):
        row = int(group[occurrence])
        if frames[row] is None:  # occurrences are in start order: the row's first one with a frame
            frames[row] = parse_frame(tables.strings[int(names[event_of_python[python_row]])])
    return frames


@payload("modules", version=2)
def module_view(context: TraceContext) -> dict[str, Any]:
    """The Module page: the module tree, the model phases of every step and their Model Summary (Paddle's table)."""
    phases = model_phases(context.tables, context.tree, context.steps)
    phases["model_summary"] = model_summary_of_phases(phases["steps"])
    return module_tree(context.tables, context.tree, module_rows(context)) | {"phases": phases}


def module_rows(context: TraceContext) -> ModuleRows | None:
    """The module rows of a trace, found once for every query that needs them."""
    return context.memo("module_rows", lambda: find_module_rows(context.tables))
