"""Call stacks of operators, from old ``Call stack`` args or from ``python_function`` events.

Old traces carry ``Call stack`` (``;``-separated ``file(line): func`` frames, innermost first) on
each op. ``with_stack=True`` traces since torch 1.10 instead record ``python_function`` events
whose ``Python parent id`` links form the Python stack; an op's stack is the innermost Python
function that encloses it on its thread, followed by that function's ancestors.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from profscope.analysis.call_tree import CallTree
from profscope.analysis.context import TraceContext
from profscope.analysis.operators import op_column
from profscope.analysis.payloads import payload
from profscope.tables import NO_ID, TraceTables

FRAME = re.compile(r"^(?P<path>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
MAX_STACKS_PER_OPERATOR = 50
MAX_FRAMES = 128
NS_PER_US = 1000.0


def parse_frame(text: str) -> dict[str, Any]:
    """``path.py(123): fn`` -> {text, path, line, func}; other frames keep only their text."""
    match = FRAME.match(text.strip())
    if not match:
        return {"text": text}
    return {"text": text, "path": match.group("path"), "line": int(match.group("line")), "func": match.group("func")}


def node_stacks(tables: TraceTables, tree: CallTree) -> list[str]:
    """The call stack text of every tree node ('' when the trace recorded none)."""
    events = tree.node_event
    from_args = op_column(tables, "call_stack", events)
    stacks = [tables.strings[int(s)] if s >= 0 else "" for s in from_args.tolist()]
    if tables.row_count("python") == 0:
        return stacks
    enclosing = _enclosing_python(tables, events)
    python_stack_of: dict[int, str] = {}
    for i, python_row in enumerate(enclosing.tolist()):
        if stacks[i] or python_row < 0:
            continue
        text = python_stack_of.get(python_row)
        if text is None:
            text = _python_stack(tables, python_row)
            python_stack_of[python_row] = text
        stacks[i] = text
    return stacks


def _enclosing_python(tables: TraceTables, op_events: np.ndarray) -> np.ndarray:
    """Index (into the python table) of the innermost python_function around each op, or -1."""
    events = tables.events
    python_events = np.asarray(tables.table("python")["event"])
    track = np.asarray(events["track"])
    ts = np.asarray(events["ts_ns"])
    end = ts + np.asarray(events["dur_ns"])
    rows = np.concatenate([python_events, op_events])
    is_op = np.concatenate([np.zeros(len(python_events), bool), np.ones(len(op_events), bool)])
    # python frames sort before an op that starts at the same time, so they can enclose it
    order = np.lexsort((is_op, -(end[rows] - ts[rows]), ts[rows], track[rows]))
    result = np.full(len(op_events), NO_ID, dtype=np.int64)
    starts, ends, tracks = ts[rows].tolist(), end[rows].tolist(), track[rows].tolist()
    stack: list[int] = []
    current = None
    python_count = len(python_events)
    for item in order.tolist():
        if tracks[item] != current:
            current, stack = tracks[item], []
        while stack and starts[item] >= ends[stack[-1]]:
            stack.pop()
        if item >= python_count:
            if stack and ends[item] <= ends[stack[-1]]:
                result[item - python_count] = stack[-1]
        else:
            stack.append(item)
    return result


def _python_stack(tables: TraceTables, python_index: int) -> str:
    python = tables.table("python")
    if not hasattr(tables, "_python_by_id"):
        ids = np.asarray(python["python_id"])
        tables._python_by_id = {int(v): i for i, v in enumerate(ids.tolist()) if v != NO_ID}  # type: ignore[attr-defined]
    by_id: dict[int, int] = tables._python_by_id  # type: ignore[attr-defined]
    parents = python["parent_id"]
    names = tables.events["name"]
    python_events = python["event"]
    frames = []
    current = python_index
    seen = set()
    while current is not None and current not in seen and len(frames) < MAX_FRAMES:
        seen.add(current)
        frames.append(tables.strings[int(names[int(python_events[current])])])
        current = by_id.get(int(parents[current]))
    return ";".join(frames)


def stacks_by_operator(tables: TraceTables, tree: CallTree, group_by: str) -> dict[str, list[dict[str, Any]]]:
    """``name`` (or ``name\\u0000shape``) -> the operator's distinct call stacks with their times."""
    stacks = node_stacks(tables, tree)
    nodes = np.flatnonzero(tree.is_operator)
    names = np.asarray(tables.events["name"])[tree.node_event[nodes]]
    shapes = op_column(tables, "input_dims", tree.node_event[nodes]) if group_by == "operator_input_shape" else None
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for position, node in enumerate(nodes.tolist()):
        stack = stacks[node]
        if not stack:
            continue
        name = tables.strings[int(names[position])]
        key = name if shapes is None else f"{name}\u0000{tables.strings[int(shapes[position])]}"
        entry = groups.setdefault(
            (key, stack), {"calls": 0, "host_self": 0, "host_total": 0, "device_self": 0, "device_total": 0}
        )
        entry["calls"] += 1
        entry["host_self"] += int(tree.host_self_ns[node])
        entry["host_total"] += int(tree.host_total_ns[node])
        entry["device_self"] += int(tree.device_self_ns[node])
        entry["device_total"] += int(tree.device_total_ns[node])
    result: dict[str, list[dict[str, Any]]] = {}
    for (key, stack), entry in groups.items():
        result.setdefault(key, []).append(
            {
                "frames": [parse_frame(f) for f in stack.split(";") if f],
                "calls": entry["calls"],
                "host_self_us": entry["host_self"] / NS_PER_US,
                "host_total_us": entry["host_total"] / NS_PER_US,
                "device_self_us": entry["device_self"] / NS_PER_US,
                "device_total_us": entry["device_total"] / NS_PER_US,
            }
        )
    for key, rows in result.items():
        rows.sort(key=lambda r: (-r["device_self_us"], -r["host_self_us"]))
        result[key] = rows[:MAX_STACKS_PER_OPERATOR]
    return result


@payload("operators.stacks.operator")
def stacks_by_name(context: TraceContext) -> dict[str, Any]:
    return stacks_by_operator(context.tables, context.tree, "operator")


@payload("operators.stacks.operator_input_shape")
def stacks_by_name_and_shape(context: TraceContext) -> dict[str, Any]:
    return stacks_by_operator(context.tables, context.tree, "operator_input_shape")
