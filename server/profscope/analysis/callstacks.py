"""Call stacks of operators, from old ``Call stack`` args or from ``python_function`` events.

Old traces carry ``Call stack`` (``;``-separated ``file(line): func`` frames, innermost first) on
each op. ``with_stack=True`` traces since torch 1.10 instead record ``python_function`` events
whose ``Python parent id`` links form the Python stack; an op's stack is the innermost Python
function that encloses it on its thread, followed by that function's ancestors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from profscope.analysis.arrays import first_seen_numbering, group_ids, lexsort_ints, unique_values
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


@dataclass
class NodeStacks:
    """The call stack of every tree node as an index into ``texts``, its distinct texts; ``texts[0]`` is ''
    (no stack recorded)."""

    index: np.ndarray
    texts: list[str]


def node_stacks(tables: TraceTables, tree: CallTree) -> NodeStacks:
    """The call stack of every tree node: from its ``Call stack`` arg, else from the Python functions around it.
    Each distinct string or Python frame is turned into text once, not once per node."""
    from_args = op_column(tables, "call_stack", tree.node_event).astype(np.int64)
    texts: dict[str, int] = {"": 0}
    index = np.zeros(len(from_args), dtype=np.int64)
    has_arg = from_args >= 0
    string_ids = unique_values(from_args[has_arg])
    string_text = np.array([texts.setdefault(tables.strings[s], len(texts)) for s in string_ids.tolist()], np.int64)
    index[has_arg] = string_text[np.searchsorted(string_ids, from_args[has_arg])]
    if tables.row_count("python"):
        enclosing = _enclosing_python(tables, tree.node_event)
        from_python = (index == 0) & (enclosing >= 0)
        python_rows = unique_values(enclosing[from_python])
        python_text = [texts.setdefault(_python_stack(tables, row), len(texts)) for row in python_rows.tolist()]
        position = np.searchsorted(python_rows, enclosing[from_python])
        index[from_python] = np.asarray(python_text, dtype=np.int64)[position]
    return NodeStacks(index, list(texts))


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
    order = lexsort_ints((is_op, -(end[rows] - ts[rows]), ts[rows], track[rows]))
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


def stacks_by_operator(
    tables: TraceTables, tree: CallTree, group_by: str, stacks: NodeStacks | None = None
) -> dict[str, list[dict[str, Any]]]:
    """``name`` (or ``name\\u0000shape``) -> the operator's distinct call stacks with their times."""
    stacks = node_stacks(tables, tree) if stacks is None else stacks
    nodes = np.flatnonzero(tree.is_operator)
    nodes = nodes[stacks.index[nodes] != 0]
    if len(nodes) == 0:
        return {}
    node_stack, distinct = first_seen_numbering(stacks.index[nodes])  # numbered as the stacks are first seen
    names = np.asarray(tables.events["name"])[tree.node_event[nodes]].astype(np.int64)
    shapes = (
        op_column(tables, "input_dims", tree.node_event[nodes]).astype(np.int64)
        if group_by == "operator_input_shape"
        else np.full(len(nodes), NO_ID, dtype=np.int64)
    )
    group, first = group_ids(names, shapes, node_stack)
    keys = np.stack([names[first], shapes[first], node_stack[first]], axis=1)

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(group, weights=values[nodes], minlength=len(keys)) / NS_PER_US

    calls = np.bincount(group, minlength=len(keys))
    sums = {
        "host_self_us": total(tree.host_self_ns),
        "host_total_us": total(tree.host_total_ns),
        "device_self_us": total(tree.device_self_ns),
        "device_total_us": total(tree.device_total_ns),
    }
    stack_text = [stacks.texts[i] for i in distinct.tolist()]
    result: dict[str, list[dict[str, Any]]] = {}
    for index, (name_id, shape_id, stack_id) in enumerate(keys.tolist()):
        name = tables.strings[name_id]
        if group_by == "operator_input_shape":
            name = f"{name}\u0000{tables.strings[shape_id] if shape_id >= 0 else '[]'}"
        result.setdefault(name, []).append(
            stack_entry(stack_text[stack_id], int(calls[index]), {k: float(v[index]) for k, v in sums.items()})
        )
    return {key: top_stacks(rows) for key, rows in result.items()}


def stack_entry(text: str, calls: int, times_us: dict[str, float]) -> dict[str, Any]:
    """One distinct call stack of an operator: its frames (innermost first), calls and times."""
    return {"frames": [parse_frame(f) for f in text.split(";") if f], "calls": calls, **times_us}


def top_stacks(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An operator's stacks, the longest device then host self time first, at most ``MAX_STACKS_PER_OPERATOR``."""
    return sorted(entries, key=lambda r: (-r["device_self_us"], -r["host_self_us"]))[:MAX_STACKS_PER_OPERATOR]


def memo_node_stacks(context: TraceContext) -> NodeStacks:
    """``node_stacks`` of a trace, computed once for every query that needs them."""
    return context.memo("node_stacks", lambda: node_stacks(context.tables, context.tree))


@payload("operators.stacks.operator", version=2)
def stacks_by_name(context: TraceContext) -> dict[str, Any]:
    return stacks_by_operator(context.tables, context.tree, "operator", memo_node_stacks(context))


@payload("operators.stacks.operator_input_shape", version=2)
def stacks_by_name_and_shape(context: TraceContext) -> dict[str, Any]:
    return stacks_by_operator(context.tables, context.tree, "operator_input_shape", memo_node_stacks(context))
