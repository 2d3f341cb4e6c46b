"""The Operator view filtered to a module (issue 14, ``docs/definitions.md`` §14.3): its calls against a hand
computation from the raw events, its totals against the Module view's numbers, each call in one module, and the
HTTP answers (the filter, CSV, an unknown module)."""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import HTTPException

from conftest import corpus_file
from profscope.analysis.callstacks import MAX_STACKS_PER_OPERATOR, stacks_by_name
from profscope.analysis.context import TraceContext
from profscope.analysis.module_operators import (
    module_operator_table,
    module_stacks,
    operators_by_module,
    stacks_by_module,
)
from profscope.analysis.modules import TOP_ROWS, module_view
from profscope.analysis.operators import operators_by_name
from profscope.catalog import TraceFile
from profscope.ingest.kineto import parse_trace_file
from profscope.sources.base import ObjectInfo
from profscope.views.operators import _of_module
from serving import running_server, wait_for
from test_modules import BERT_H100, RECORDED, RESNET, RawModules, _events, _flatten

TRAINING = RECORDED / "training" / "worker0.pt.trace.json.gz"
CHECKPOINTING = RECORDED / "checkpointing" / "worker0.pt.trace.json.gz"
NESTED = RECORDED / "nested" / "worker0.pt.trace.json.gz"
NOT_ROWS = ("ProfilerStep#", "Optimizer.", "enumerate(DataLoader)")


def _computed(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The Module view, the stored query of module operators (through JSON, as served) and the unfiltered table."""
    context = TraceContext(parse_trace_file(path))
    stored = orjson.loads(orjson.dumps(operators_by_module(context)))
    return module_view(context), stored, operators_by_name(context)


def _raw_calls_of_module(events: list[dict[str, Any]], prefix: str) -> dict[str, list[float]]:
    """Per operator name, the durations of the module's calls, from the raw events: cpu_ops starting inside an
    occurrence of the module or a submodule on their thread, and the backward ops (fwdbwd flow finishes) whose
    forward op starts inside one, with every cpu_op they hold."""
    raw = RawModules(events)
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X" and not e["name"].startswith(NOT_ROWS)]
    chosen = {id(e): e for e in ops if raw.under(raw.innermost((e["pid"], e["tid"]), e["ts"]), prefix)}
    starts = {(f["id"], f["pid"], f["tid"], f["ts"]) for f in events if f.get("cat") == "fwdbwd" and f.get("ph") == "s"}
    forward_module = {flow_id: raw.innermost((pid, tid), ts) for flow_id, pid, tid, ts in starts}
    for finish in (f for f in events if f.get("cat") == "fwdbwd" and f.get("ph") == "f"):
        if not raw.under(forward_module.get(finish["id"]), prefix):
            continue
        thread = (finish["pid"], finish["tid"])
        at = [e for e in ops if (e["pid"], e["tid"]) == thread and e["ts"] == finish["ts"]]
        backward = max(at, key=lambda e: e["dur"])
        for op in ops:
            if (op["pid"], op["tid"]) == thread and backward["ts"] <= op["ts"] < backward["ts"] + backward["dur"]:
                chosen[id(op)] = op
    _drop_merged_children(ops, chosen)
    calls: dict[str, list[float]] = defaultdict(list)
    for op in chosen.values():
        calls[op["name"]].append(op["dur"])
    return calls


def _drop_merged_children(ops: list[dict[str, Any]], chosen: dict[int, dict[str, Any]]) -> None:
    """An op whose only child op has its name is one call (§3): the child is not counted again."""
    by_thread: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for op in ops:
        by_thread[(op["pid"], op["tid"])].append(op)
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        children: dict[int, list[dict[str, Any]]] = defaultdict(list)
        stack: list[dict[str, Any]] = []
        for op in thread_ops:
            while stack and op["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            if stack:
                children[id(stack[-1])].append(op)
            stack.append(op)
        for parent in thread_ops:
            kids = children[id(parent)]
            if len(kids) == 1 and kids[0]["name"] == parent["name"]:
                chosen.pop(id(kids[0]), None)


def _module_id(view: dict[str, Any], path: str) -> int:
    return _flatten(view["modules"])[path]["id"]


@pytest.mark.parametrize(
    ("path", "module"),
    [
        (TRAINING, "/TinyModel_0/Sequential_0/Block_0/Mlp_0"),
        (TRAINING, "/TinyModel_0/Sequential_0/Block_0/Attention_0/Linear_1"),
        (NESTED, "/TinyModel_0/Sequential_0/Block_0"),
    ],
)
def test_a_modules_calls_match_a_hand_computation(path: Path, module: str) -> None:
    view, stored, _ = _computed(path)
    table = module_operator_table(stored, _module_id(view, module), "operator")
    expected = _raw_calls_of_module(_events(path), module)
    assert {row["name"]: row["calls"] for row in table["rows"]} == {name: len(d) for name, d in expected.items()}
    for row in table["rows"]:
        assert row["host_total_us"] == pytest.approx(sum(expected[row["name"]]), abs=0.01), row["name"]
    assert table["module"]["path"] == module.strip("/").replace("/", " \u203a ")
    if path == TRAINING:
        assert any("Backward" in row["name"] for row in table["rows"])  # the backward work came with it


@pytest.mark.parametrize("path", [TRAINING, NESTED, corpus_file(BERT_H100)])
def test_totals_agree_with_the_module_view(path: Path) -> None:
    """Host time inside a module's operators = its top operators' host total + its backward host time; all device
    time of its calls = its device total + its backward device time (§14.3)."""
    view, stored, _ = _computed(path)
    checked = 0
    for module in _flatten(view["modules"]).values():
        accounting = module_operator_table(stored, module["id"], "operator")["accounting"]
        tolerance = 0.002 * (len(module["top_operators"]) + 2)
        assert accounting["device_total_us"] == pytest.approx(
            module["device_total_us"] + module["backward_device_us"], abs=tolerance
        )
        if len(module["top_operators"]) < TOP_ROWS:  # the list is complete
            forward = sum(op["host_us"] for op in module["top_operators"])
            assert accounting["host_in_operators_us"] == pytest.approx(
                forward + module["backward_host_us"], abs=tolerance
            )
            checked += 1
    assert checked >= 10


def test_the_device_times_of_a_gpu_module_match_its_rows() -> None:
    view, stored, _ = _computed(corpus_file(BERT_H100))
    encoder = _flatten(view["modules"])["/BertLMHeadModel_0/BertModel_0/BertEncoder_0"]
    table = module_operator_table(stored, encoder["id"], "operator")
    device_self = sum(row["device_self_us"] for row in table["rows"])
    assert device_self == pytest.approx(table["accounting"]["device_self_us"], abs=0.01)
    assert device_self + table["accounting"]["device_unattributed_us"] == pytest.approx(
        encoder["device_total_us"] + encoder["backward_device_us"], abs=0.01
    )
    assert device_self > 100  # the encoder's kernels


@pytest.mark.parametrize("path", [TRAINING, CHECKPOINTING])
def test_every_call_belongs_to_one_module_at_most(path: Path) -> None:
    """Summed over the root modules, each name's calls are at most the unfiltered table's, and each module's calls
    are its own plus its children's (no call counted twice, recomputation included)."""
    view, stored, whole = _computed(path)
    everything = {row["name"]: row for row in whole["rows"]}
    in_roots: dict[str, int] = defaultdict(int)
    for root in view["modules"]:
        for row in module_operator_table(stored, root["id"], "operator")["rows"]:
            in_roots[row["name"]] += row["calls"]
    assert all(calls <= everything[name]["calls"] for name, calls in in_roots.items())
    for module in _flatten(view["modules"]).values():
        if not module["children"]:
            continue
        own = _calls(stored, module["id"])
        children = [_calls(stored, child["id"]) for child in module["children"]]
        for name in set().union(*children):
            assert own.get(name, 0) >= sum(c.get(name, 0) for c in children), (module["name"], name)


def _calls(stored: dict[str, Any], module_id: int) -> dict[str, int]:
    return {row["name"]: row["calls"] for row in module_operator_table(stored, module_id, "operator")["rows"]}


def test_recomputed_forwards_are_operators_of_their_module() -> None:
    """A leaf module run again in backward: its table holds the calls of both runs (as its top operators in the
    Module view count them) and the backward ops of its forward ops."""
    view, stored, _ = _computed(CHECKPOINTING)
    recomputed = [m for m in _flatten(view["modules"]).values() if m["recomputations"] and not m["children"]]
    assert recomputed
    for module in recomputed:
        table = module_operator_table(stored, module["id"], "operator")
        calls = {row["name"]: row["calls"] for row in table["rows"]}
        for op in module["top_operators"]:
            assert calls[op["name"]] == op["calls"]
            assert op["calls"] % (module["occurrences"] + module["recomputations"]) == 0  # once per run
        assert any("Backward" in name for name in calls)


def test_ids_are_the_same_on_every_parse() -> None:
    first, _, _ = _computed(TRAINING)
    second, _, _ = _computed(TRAINING)
    ids = {path: row["id"] for path, row in _flatten(first["modules"]).items()}
    assert ids == {path: row["id"] for path, row in _flatten(second["modules"]).items()}
    assert sorted(ids.values()) == list(range(len(ids)))


def test_by_shape_the_rows_regroup_the_same_calls() -> None:
    view, stored, _ = _computed(TRAINING)
    module = _module_id(view, "/TinyModel_0/Sequential_0/Block_0")
    by_name = module_operator_table(stored, module, "operator")
    by_shape = module_operator_table(stored, module, "operator_input_shape")
    totals: dict[str, float] = defaultdict(float)
    for row in by_shape["rows"]:
        totals[row["name"]] += row["host_self_us"]
    assert totals == pytest.approx({row["name"]: row["host_self_us"] for row in by_name["rows"]})
    assert len(by_shape["rows"]) > len(by_name["rows"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("module_operator_runs")
    shutil.copytree(RECORDED / "training", root / "training")
    (root / "resnet").mkdir()
    shutil.copy(corpus_file(RESNET), root / "resnet" / Path(RESNET).name)
    with running_server([root], tmp_path_factory.mktemp("module_operator_server") / "cache") as base:
        wait_for(lambda: _all_ready(base), timeout=120)
        yield base


def _all_ready(base: str) -> bool:
    runs = httpx.get(f"{base}/api/runs", timeout=10).json()["runs"]
    return len(runs) == 2 and all(run["state"] == "ready" for run in runs)


def test_the_api_filters_by_module_and_says_which(server: str) -> None:
    modules = httpx.get(f"{server}/api/modules", params={"run": "training"}, timeout=30).json()
    block = _flatten(modules["modules"])["/TinyModel_0/Sequential_0/Block_0"]
    answer = httpx.get(f"{server}/api/operators", params={"run": "training", "module": block["id"]}, timeout=30)
    assert answer.status_code == 200
    body = answer.json()
    assert body["module"] == {"id": block["id"], "name": "Block_0", "type": "Block",
                              "path": "TinyModel_0 \u203a Sequential_0 \u203a Block_0"}  # fmt: skip
    whole = httpx.get(f"{server}/api/operators", params={"run": "training"}, timeout=30).json()
    assert "module" not in whole or whole["module"] is None
    assert 0 < body["accounting"]["host_self_us"] < whole["accounting"]["host_self_us"]
    searched = httpx.get(
        f"{server}/api/operators",
        params={"run": "training", "module": block["id"], "search": "addmm", "format": "csv"},
        timeout=30,
    )
    assert searched.status_code == 200 and searched.headers["content-type"].startswith("text/csv")
    lines = searched.text.strip().splitlines()
    assert len(lines) >= 3 and all("addmm" in line.lower() for line in lines[1:])  # aten::addmm, AddmmBackward0
    addmm = next(row for row in body["rows"] if row["name"] == "aten::addmm")
    stacks = httpx.get(
        f"{server}/api/operators/stacks",
        params={"run": "training", "name": "aten::addmm", "module": block["id"]},
        timeout=30,
    ).json()["stacks"]
    assert sum(stack["calls"] for stack in stacks) == addmm["calls"]
    assert all(any("Block" in frame["text"] for frame in stack["frames"]) for stack in stacks)
    assert next(line for line in lines if line.startswith("aten::addmm,")).split(",")[2] == str(addmm["calls"])


def test_an_unknown_module_or_a_trace_without_modules_is_a_clear_404(server: str) -> None:
    unknown = httpx.get(f"{server}/api/operators", params={"run": "training", "module": 9999}, timeout=30)
    assert unknown.status_code == 404 and "No module 9999" in unknown.json()["detail"]
    assert "/api/modules" in unknown.json()["detail"]
    none = httpx.get(f"{server}/api/operators", params={"run": "resnet", "module": 0}, timeout=30)
    assert none.status_code == 404 and "with_modules=True" in none.json()["detail"]
    stacks = httpx.get(
        f"{server}/api/operators/stacks", params={"run": "training", "name": "aten::addmm", "module": 9999}, timeout=30
    )
    assert stacks.status_code == 404 and "No module 9999" in stacks.json()["detail"]
    negative = httpx.get(f"{server}/api/operators", params={"run": "training", "module": -1}, timeout=30)
    assert negative.status_code == 422
    still = httpx.get(f"{server}/api/operators", params={"run": "training"}, timeout=30)
    assert still.status_code == 200  # the server and the unfiltered table are fine


def test_a_failed_query_answers_422_for_that_file_alone() -> None:
    """A file on which the query failed (its stored result is ``{error}``, see ``Query.compute``) says so."""
    trace = TraceFile("file:///traces", ObjectInfo("run/worker0.pt.trace.json", 10, "1"), "run", "worker0", "default")
    with pytest.raises(HTTPException) as raised:
        _of_module({"error": "ValueError: broken"}, trace, 0, lambda: None)
    assert raised.value.status_code == 422 and "run/worker0.pt.trace.json" in raised.value.detail
    assert "ValueError: broken" in raised.value.detail


def test_a_modules_call_stacks_hold_its_calls() -> None:
    """On a with_stack trace every call has a stack: an operator's stacks in a module sum to its row of the
    module's table, and each is one of the operator's stacks in the whole trace, with no more calls."""
    context = TraceContext(parse_trace_file(corpus_file(BERT_H100)))
    view = module_view(context)
    stored = orjson.loads(orjson.dumps(operators_by_module(context)))
    stored_stacks = orjson.loads(orjson.dumps(stacks_by_module(context)))
    everywhere = stacks_by_name(context)
    encoder = _flatten(view["modules"])["/BertLMHeadModel_0/BertModel_0/BertEncoder_0"]
    table = module_operator_table(stored, encoder["id"], "operator")
    for row in table["rows"]:
        stacks = module_stacks(stored_stacks, encoder["id"], row["name"], None)
        assert 0 < len(stacks) < MAX_STACKS_PER_OPERATOR
        assert sum(s["calls"] for s in stacks) == row["calls"]
        assert sum(s["host_self_us"] for s in stacks) == pytest.approx(row["host_self_us"], abs=0.01)
        assert sum(s["device_self_us"] for s in stacks) == pytest.approx(row["device_self_us"], abs=0.01)
        whole = {tuple(f["text"] for f in s["frames"]): s["calls"] for s in everywhere[row["name"]]}
        for stack in stacks:
            frames = tuple(f["text"] for f in stack["frames"])
            assert any("BertEncoder" in frame for frame in frames)  # the module's forward is on the stack
            assert stack["calls"] <= whole[frames]
    layer = module_stacks(stored_stacks, encoder["children"][0]["id"], "aten::addmm", None)
    assert sum(s["calls"] for s in layer) < sum(
        s["calls"] for s in module_stacks(stored_stacks, encoder["id"], "aten::addmm", None)
    )
    assert module_stacks(stored_stacks, 10_000, "aten::addmm", None) is None
