"""Call stacks per operator: numbered per distinct stack with no Python step per call, the same answers as
turning every node's stack into text and numbering the texts as they come (the reference below), on traces with
``Call stack`` args, with ``python_function`` events, with none, and with a stack arg that is empty."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from conftest import corpus_file
from profscope.analysis import callstacks
from profscope.analysis.callstacks import (
    NS_PER_US,
    _enclosing_python,
    _python_stack,
    node_stacks,
    stack_entry,
    stacks_by_operator,
    top_stacks,
)
from profscope.analysis.context import TraceContext
from profscope.analysis.module_operators import stacks_by_module
from profscope.analysis.operators import op_column
from profscope.ingest.kineto import parse_trace_file
from profscope.tables import NO_ID
from test_modules import BERT_H100, RESNET

NO_STACKS = "hta/negative_queue_length_values_check/rank0.json.gz"


def _reference_texts(tables: Any, tree: Any) -> list[str]:
    """Every node's stack text, one node at a time (the first implementation)."""
    from_args = callstacks.op_column(tables, "call_stack", tree.node_event)  # as patched by a test
    stacks = [tables.strings[int(s)] if s >= 0 else "" for s in from_args.tolist()]
    if tables.row_count("python") == 0:
        return stacks
    for i, python_row in enumerate(_enclosing_python(tables, tree.node_event).tolist()):
        if not stacks[i] and python_row >= 0:
            stacks[i] = _python_stack(tables, python_row)
    return stacks


def _reference_stacks(tables: Any, tree: Any, group_by: str) -> dict[str, list[dict[str, Any]]]:
    texts = _reference_texts(tables, tree)
    groups: dict[tuple[int, int, str], list[int]] = {}
    shapes = op_column(tables, "input_dims", tree.node_event)
    for node in np.flatnonzero(tree.is_operator).tolist():
        if texts[node]:
            name = int(tables.events["name"][tree.node_event[node]])
            shape = int(shapes[node]) if group_by == "operator_input_shape" else NO_ID
            groups.setdefault((name, shape, texts[node]), []).append(node)
    first_seen = {text: i for i, text in enumerate(dict.fromkeys(texts[n] for n in np.flatnonzero(tree.is_operator)))}
    result: dict[str, list[dict[str, Any]]] = {}
    for name, shape, text in sorted(groups, key=lambda key: (key[0], key[1], first_seen[key[2]])):
        nodes = groups[(name, shape, text)]
        key = tables.strings[name]
        if group_by == "operator_input_shape":
            key = f"{key}\u0000{tables.strings[shape] if shape >= 0 else '[]'}"
        times = {
            f"{what}_us": float(np.sum(getattr(tree, f"{what}_ns")[nodes], dtype=np.float64)) / NS_PER_US
            for what in ("host_self", "host_total", "device_self", "device_total")
        }
        result.setdefault(key, []).append(stack_entry(text, len(nodes), times))
    return {key: top_stacks(rows) for key, rows in result.items()}


def _assert_same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for key in want:
        assert [(s["frames"], s["calls"]) for s in got[key]] == [(s["frames"], s["calls"]) for s in want[key]]
        for mine, theirs in zip(got[key], want[key], strict=True):
            for field in ("host_self_us", "host_total_us", "device_self_us", "device_total_us"):
                assert mine[field] == pytest.approx(theirs[field], rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("trace", [RESNET, BERT_H100, NO_STACKS])
def test_stacks_by_operator_match_the_reference(trace: str) -> None:
    context = TraceContext(parse_trace_file(corpus_file(trace)))
    tables, tree = context.tables, context.tree
    stacks = node_stacks(tables, tree)
    assert [stacks.texts[i] for i in stacks.index.tolist()] == _reference_texts(tables, tree)
    # with every self time 0, an operator's stacks are all tied: they stay in the order they were first seen
    tied = dataclasses.replace(tree, host_self_ns=tree.host_self_ns * 0, device_self_ns=tree.device_self_ns * 0)
    for group_by in ("operator", "operator_input_shape"):
        _assert_same(stacks_by_operator(tables, tree, group_by, stacks), _reference_stacks(tables, tree, group_by))
        _assert_same(stacks_by_operator(tables, tied, group_by, stacks), _reference_stacks(tables, tied, group_by))
    if trace == BERT_H100:  # per module: the stacks listed as first seen over the module's calls
        listed = stacks_by_module(context)["stacks"]
        texts = _reference_texts(tables, tree)
        assert listed and set(listed) <= set(texts) and len(set(listed)) == len(listed)


def test_empty_stack_args_fall_back_to_python_and_equal_texts_are_one_stack(monkeypatch) -> None:
    """A ``Call stack`` arg that is '' counts as none (the Python functions around the op give its stack), and a
    stack arg with the same text as a Python stack is the same stack."""
    context = TraceContext(parse_trace_file(corpus_file(BERT_H100)))
    tables, tree = context.tables, context.tree
    python_text = next(text for text in _reference_texts(tables, tree) if text)
    empty, same = tables.strings.intern(""), tables.strings.intern(python_text)
    original = callstacks.op_column

    def patched(tables_: Any, column: str, rows: np.ndarray) -> np.ndarray:
        values = original(tables_, column, rows)
        if column != "call_stack":
            return values
        third = np.arange(len(values)) % 3
        return np.select([third == 0, third == 1], [empty, same], values)

    monkeypatch.setattr(callstacks, "op_column", patched)
    stacks = node_stacks(tables, tree)
    texts = _reference_texts(tables, tree)
    assert [stacks.texts[i] for i in stacks.index.tolist()] == texts
    assert len(stacks.texts) == len(set(stacks.texts)) and stacks.texts[0] == ""
    assert texts.count(python_text) > len(texts) // 3
    for group_by in ("operator", "operator_input_shape"):
        _assert_same(stacks_by_operator(tables, tree, group_by, stacks), _reference_stacks(tables, tree, group_by))


def test_an_operators_tied_stacks_keep_the_order_they_are_first_seen_in(monkeypatch) -> None:
    """Stack strings first seen in the reverse order of their ids (and of their texts): tied stacks are listed
    as first seen, not by id."""
    context = TraceContext(parse_trace_file(corpus_file(RESNET)))
    tables, tree = context.tables, context.tree
    frames = [tables.strings.intern(f"model.py({line}): forward") for line in range(7)]
    original = callstacks.op_column

    def patched(tables_: Any, column: str, rows: np.ndarray) -> np.ndarray:
        values = original(tables_, column, rows)
        return np.asarray(frames)[(len(rows) - np.arange(len(rows))) % 7] if column == "call_stack" else values

    monkeypatch.setattr(callstacks, "op_column", patched)
    tied = dataclasses.replace(tree, host_self_ns=tree.host_self_ns * 0, device_self_ns=tree.device_self_ns * 0)
    for group_by in ("operator", "operator_input_shape"):
        got = stacks_by_operator(tables, tied, group_by, node_stacks(tables, tied))
        _assert_same(got, _reference_stacks(tables, tied, group_by))
        assert any(len(rows) > 2 for rows in got.values())
