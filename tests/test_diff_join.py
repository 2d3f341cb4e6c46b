"""The Diff view's join (analysis/diff.py) on small hand-made results, and the folded call tree on a real trace,
its calls counted independently from the raw JSON."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from conftest import corpus_file
from profscope.analysis import diff
from profscope.analysis.context import TraceContext
from profscope.analysis.op_tree import STEP_NAME, fold_call_tree
from profscope.ingest.kineto import parse_trace_file

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"


def _op(name: str, calls: int, host_self: float, device_self: float = 0.0, shape: str = "") -> dict:
    return {
        "name": name,
        "input_shape": shape,
        "calls": calls,
        "host_self_us": host_self,
        "host_total_us": host_self * 2,
        "device_self_us": device_self,
        "device_total_us": device_self,
    }


def test_operators_join_by_name_with_status_delta_ratio_and_order() -> None:
    base = [_op("mm", 10, 100.0, 50.0), _op("add", 4, 8.0, 2.0), _op("gone", 1, 5.0, 1.0)]
    target = [_op("mm", 10, 110.0, 80.0), _op("add", 4, 8.0, 2.01), _op("new", 3, 9.0, 40.0)]
    rows = diff.diff_operators(base, target, False, (1.0, 1.0), (True, True))
    by_name = {r["name"]: r for r in rows}
    assert [r["name"] for r in rows] == ["new", "mm", "gone", "add"]  # |delta| 40, 30, 1, 0.01
    assert by_name["mm"]["delta_us"] == pytest.approx(30.0) and by_name["mm"]["ratio"] == pytest.approx(1.6)
    assert by_name["mm"]["status"] == "changed"
    assert by_name["add"]["status"] == "same"  # equal calls, 0.5% change
    assert by_name["new"]["status"] == "added" and by_name["new"]["base_calls"] == 0.0
    assert by_name["new"]["ratio"] is None
    assert by_name["gone"]["status"] == "removed" and by_name["gone"]["target_device_self_us"] == 0.0
    assert by_name["mm"]["base_host_total_us"] == 200.0 and by_name["mm"]["input_shape"] is None


def test_shapes_kept_apart_and_calls_differ_means_changed() -> None:
    base = [_op("mm", 2, 10.0, shape="[[2,2]]"), _op("mm", 1, 10.0, shape="[[4,4]]")]
    target = [_op("mm", 3, 10.0, shape="[[2,2]]"), _op("mm", 1, 10.0, shape="[[4,4]]")]
    by_shape = {r["input_shape"]: r for r in diff.diff_operators(base, target, True, (1.0, 1.0), (False, False))}
    assert by_shape["[[2,2]]"]["status"] == "changed"  # same time, one more call
    assert by_shape["[[4,4]]"]["status"] == "same"
    by_name = diff.diff_operators(base, target, False, (1.0, 1.0), (False, False))
    assert len(by_name) == 1 and by_name[0]["base_calls"] == 3 and by_name[0]["target_calls"] == 4


def test_cpu_only_side_has_no_device_values_and_changes_on_host_time() -> None:
    rows = diff.diff_operators([_op("mm", 1, 10.0)], [_op("mm", 1, 30.0, 99.0)], False, (1.0, 1.0), (False, True))
    assert rows[0]["base_device_self_us"] is None and rows[0]["base_device_total_us"] is None
    assert rows[0]["target_device_self_us"] == 99.0
    assert rows[0]["delta_us"] == 20.0  # host self, the time both sides have


def test_per_step_normalisation_divides_by_each_sides_steps() -> None:
    assert diff.normalisation(4, 4) == "total" and diff.normalisation(2, 4) == "per_step"
    assert diff.normalisation(0, 4) == "total"  # no steps on one side: totals, nothing to divide by
    kernel = {"name": "k", "calls": 8, "total_us": 80.0}
    rows = diff.diff_kernels([kernel], [kernel], False, (2.0, 4.0))
    assert rows[0]["base_calls"] == 4.0 and rows[0]["target_calls"] == 2.0
    assert rows[0]["delta_us"] == -20.0 and rows[0]["status"] == "changed"


def test_kernels_by_name_and_launching_op_sum_the_launch_configurations() -> None:
    base = [
        {"name": "k", "operator": "mm", "calls": 2, "total_us": 4.0},
        {"name": "k", "operator": "mm", "calls": 1, "total_us": 3.0},  # another grid of the same op
        {"name": "k", "operator": "add", "calls": 1, "total_us": 1.0},
    ]
    rows = {r["operator"]: r for r in diff.diff_kernels(base, [], True, (1.0, 1.0))}
    assert rows["mm"]["base_calls"] == 3 and rows["mm"]["base_total_us"] == 7.0 and rows["mm"]["status"] == "removed"
    assert rows["add"]["base_total_us"] == 1.0


def test_steps_side_by_side() -> None:
    def overview(dataloader: float, steps: int) -> dict:
        average = dict.fromkeys(diff.STEP_KEYS, 1.0) | {"dataloader_us": dataloader}
        return {"average": average, "steps": [{}] * steps, "gpus": []}

    steps = diff.diff_steps(overview(50.0, 3), overview(5.0, 3))
    assert steps["delta"]["dataloader_us"] == -45.0 and steps["delta"]["kernel_us"] == 0.0
    assert steps["base_steps"] == steps["target_steps"] == 3


def _nodes(*rows: tuple[int, str, str, int, float]) -> dict:
    columns: dict[str, list] = {k: [] for k in ("parent", "name", "kind", *diff.TREE_VALUES)}
    for parent, name, kind, calls, time in rows:
        for key, value in zip(("parent", "name", "kind", "calls"), (parent, name, kind, calls), strict=True):
            columns[key].append(value)
        for key in diff.TREE_VALUES[1:]:
            columns[key].append(time)
    return columns


def test_tree_level_by_level() -> None:
    base = _nodes((-1, "step", "op", 2, 100.0), (0, "forward", "op", 2, 60.0), (1, "mm", "op", 2, 50.0),
                  (2, "gemm", "kernel", 2, 40.0))  # fmt: skip
    target = _nodes((-1, "step", "op", 2, 130.0), (0, "forward", "op", 2, 90.0), (1, "mm", "op", 2, 80.0),
                    (2, "gemm", "kernel", 2, 70.0), (0, "backward", "op", 2, 10.0))  # fmt: skip
    top = diff.diff_tree(base, target, [], (1.0, 1.0), (True, True))
    assert top["node"] is None and [c["name"] for c in top["children"]] == ["step"]
    assert top["children"][0]["has_children"] and top["children"][0]["delta_us"] == 30.0
    level1 = diff.diff_tree(base, target, ["step"], (1.0, 1.0), (True, True))
    assert level1["node"]["name"] == "step"
    assert {c["name"]: c["status"] for c in level1["children"]} == {"forward": "changed", "backward": "added"}
    level3 = diff.diff_tree(base, target, ["step", "forward", "mm"], (1.0, 1.0), (True, True))
    assert level3["children"][0]["kind"] == "kernel" and level3["children"][0]["delta_us"] == 30.0
    assert not level3["children"][0]["has_children"]
    missing = diff.diff_tree(base, target, ["step", "nothing"], (1.0, 1.0), (True, True))
    assert not missing["found"] and missing["children"] == []


def test_ranks_joined_on_rank() -> None:
    base = [{"rank": 0, "worker": "a", "computation_us": 10.0, "synchronizing_us": 5.0}]
    target = [{"rank": 0, "worker": "b", "computation_us": 12.0, "synchronizing_us": 1.0}, {"rank": 1, "worker": "c"}]
    rows = diff.diff_ranks(base, target)
    assert rows[0]["delta_computation_us"] == 2.0 and rows[0]["delta_synchronizing_us"] == -4.0
    assert rows[0]["base_worker"] == "a" and rows[0]["target_worker"] == "b"
    assert rows[1]["rank"] == 1 and rows[1]["base_computation_us"] is None and rows[1]["delta_computation_us"] is None


def test_folded_tree_counts_match_the_raw_trace() -> None:
    """Every profiler step folds into one node; the calls of an op directly under the steps equal its
    events inside the ProfilerStep# ranges on the same thread, counted from the JSON."""
    path = corpus_file(TINYGPT)
    tables = parse_trace_file(path, use_second_core=False)
    nodes = fold_call_tree(tables, TraceContext(tables).tree)
    with gzip.open(path) as raw:
        events = json.load(raw)["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    top = [i for i, p in enumerate(nodes["parent"]) if p == -1]
    step_node = next(i for i in top if nodes["name"][i] == STEP_NAME)
    assert nodes["calls"][step_node] == len(steps)
    assert sum(nodes["name"][i] == STEP_NAME for i in top) == 1
    children = {nodes["name"][i]: nodes["calls"][i] for i, p in enumerate(nodes["parent"]) if p == step_node}
    assert children and children == _direct_children_of_steps(events)


def _direct_children_of_steps(events: list[dict]) -> dict[str, int]:
    """Host ops whose innermost enclosing host op (same thread, by time containment) is a ProfilerStep#."""
    hosts = sorted(
        (e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")),
        key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]),
    )
    counts: Counter[str] = Counter()
    stack: list[dict] = []
    for event in hosts:
        while stack and (
            (stack[-1]["pid"], stack[-1]["tid"]) != (event["pid"], event["tid"])
            or stack[-1]["ts"] + stack[-1]["dur"] < event["ts"] + event["dur"]
        ):
            stack.pop()
        if stack and stack[-1]["name"].startswith("ProfilerStep#"):
            counts[event["name"]] += 1
        stack.append(event)
    return dict(counts)
