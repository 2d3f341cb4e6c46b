"""The Module view and model phases (issue 14) against hand computations from the raw events.

The expected numbers are computed here from the trace JSON with plain loops (time containment, Python
parent ids, correlation ids), independently of ``analysis/modules.py`` and ``analysis/phases.py``.
"""

from __future__ import annotations

import bisect
import gzip
import io
import json
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from conftest import corpus_file
from profscope.analysis.context import TraceContext
from profscope.analysis.modules import HOW_TO_RECORD, module_view
from profscope.ingest.kineto import parse_trace, parse_trace_file

BERT_H100 = "traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
B200 = "traces/AMD-AGI_TraceLens/tests/traces/b200/eager_trace.json.gz"
NS_RESOLUTION = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
RESNET = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RECORDED = Path(__file__).resolve().parent / "data" / "modules"
AUTOGRAD_NODE = re.compile(r"^(torch::autograd::AccumulateGrad|\w+Backward\d*)$")
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}


def _events(path: Path, exact: bool = False) -> list[dict[str, Any]]:
    """The trace's events; ``exact``: numbers as Decimal (epoch microseconds lose 0.25 µs as floats)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        document = json.load(handle, parse_float=Decimal if exact else float)
    return [e for e in document["traceEvents"] if isinstance(e, dict)]


def _view(path: Path) -> dict[str, Any]:
    return module_view(TraceContext(parse_trace_file(path)))


def _flatten(rows: list[dict[str, Any]], parent: str = "") -> dict[str, dict[str, Any]]:
    flat = {}
    for row in rows:
        path = f"{parent}/{row['name']}"
        flat[path] = row
        flat.update(_flatten(row["children"], path))
    return flat


class RawModules:
    """Module occurrences from the raw JSON: path of module names from the root, interval, thread."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        python = [e for e in events if e.get("cat") == "python_function"]
        by_id = {e["args"]["Python id"]: e for e in python}
        self.occurrences = []
        for event in python:
            if not event["name"].startswith("nn.Module: "):
                continue
            names, ancestor = [], event
            while ancestor is not None:
                if ancestor["name"].startswith("nn.Module: "):
                    names.append(ancestor["name"][len("nn.Module: ") :])
                ancestor = by_id.get(ancestor["args"].get("Python parent id"))
            self.occurrences.append(
                {
                    "path": "/" + "/".join(reversed(names)),
                    "start": event["ts"],
                    "end": event["ts"] + event["dur"],
                    "thread": (event["pid"], event["tid"]),
                }
            )

    def innermost(self, thread: tuple, ts: float) -> str | None:
        """The path of the innermost occurrence holding ``ts`` on ``thread``."""
        holding = [o for o in self.occurrences if o["thread"] == thread and o["start"] <= ts < o["end"]]
        return max(holding, key=lambda o: o["start"])["path"] if holding else None

    def under(self, path: str | None, prefix: str) -> bool:
        return path is not None and (path == prefix or path.startswith(prefix + "/"))


def _device_by_module(events: list[dict[str, Any]], raw: RawModules) -> dict[str | None, float]:
    """Device time per innermost module path: kernels joined to their runtime call by correlation."""
    runtime = {}
    for event in events:
        if event.get("cat") in RUNTIME_CATS and event.get("ph") == "X":
            runtime[event["args"].get("correlation")] = event
    device: dict[str | None, float] = defaultdict(float)
    for event in events:
        if event.get("cat") in DEVICE_CATS and event.get("ph") == "X":
            call = runtime.get(event["args"].get("correlation"))
            if call is not None:
                device[raw.innermost((call["pid"], call["tid"]), call["ts"])] += event["dur"]
    return device


def _trace(name: str) -> Path:
    """A corpus file, or one of the traces scripts/record_module_traces.py recorded (``recorded:<run>``)."""
    if name.startswith("recorded:"):
        return RECORDED / name.split(":")[1] / "worker0.pt.trace.json.gz"
    return corpus_file(name)


@pytest.mark.parametrize("name", [BERT_H100, B200, TINYGPT, "recorded:nested", "recorded:training"])
def test_module_times_match_a_hand_computation(name: str) -> None:
    events = _events(_trace(name))
    raw = RawModules(events)
    device = _device_by_module(events, raw)
    modules = _flatten(_view(_trace(name))["modules"])
    assert set(modules) == {o["path"] for o in raw.occurrences}
    checked_device = 0
    for path, row in modules.items():
        mine = [o for o in raw.occurrences if o["path"] == path]
        children = [o for o in raw.occurrences if o["path"].rsplit("/", 1)[0] == path]
        assert row["occurrences"] == len(mine)
        assert row["host_total_us"] == pytest.approx(sum(o["end"] - o["start"] for o in mine), abs=0.01)
        host_self = sum(o["end"] - o["start"] for o in mine) - sum(o["end"] - o["start"] for o in children)
        assert row["host_self_us"] == pytest.approx(host_self, abs=0.01)
        assert row["device_self_us"] == pytest.approx(device.get(path, 0.0), abs=0.01)
        subtree = sum(value for key, value in device.items() if raw.under(key, path))
        assert row["device_total_us"] == pytest.approx(subtree, abs=0.01)
        checked_device += subtree > 0
    on_gpu = any(e.get("cat") == "kernel" for e in events)
    assert (checked_device > 5) == on_gpu  # the GPU traces launch kernels from many modules
    assert len(modules) >= 6


def test_operators_of_the_root_module_are_its_top_level_ops() -> None:
    events = _events(corpus_file(BERT_H100))
    raw = RawModules(events)
    root = raw.occurrences[0]
    ops = [
        e
        for e in events
        if e.get("cat") == "cpu_op"
        and (e["pid"], e["tid"]) == root["thread"]
        and root["start"] <= e["ts"]
        and e["ts"] + e["dur"] <= root["end"]
    ]
    top_level = [
        op
        for op in ops
        if not any(
            o is not op
            and o["ts"] <= op["ts"]
            and op["ts"] + op["dur"] <= o["ts"] + o["dur"]
            and (o["dur"], -o["ts"]) > (op["dur"], -op["ts"])
            for o in ops
        )
    ]
    (row,) = _view(corpus_file(BERT_H100))["modules"]
    assert row["name"] == root["path"].strip("/")
    assert row["operators"] == len(top_level)


def _backward_by_module(events: list[dict[str, Any]], raw: RawModules) -> dict[str | None, float]:
    """Host time of each backward op (a ``fwdbwd`` flow's finish), by the module of its forward op."""
    starts = {e["id"]: e for e in events if e.get("cat") == "fwdbwd" and e["ph"] == "s"}
    ops_at = defaultdict(list)
    for event in events:
        if event.get("cat") in ("cpu_op", "user_annotation") and event.get("ph") == "X":
            ops_at[(event["pid"], event["tid"], event["ts"])].append(event)
    backward: dict[str | None, float] = defaultdict(float)
    for finish in (e for e in events if e.get("cat") == "fwdbwd" and e["ph"] == "f"):
        forward = starts[finish["id"]]
        owner = raw.innermost((forward["pid"], forward["tid"]), forward["ts"])
        backward[owner] += max(ops_at[(finish["pid"], finish["tid"], finish["ts"])], key=lambda e: e["dur"])["dur"]
    return backward


@pytest.mark.parametrize(("name", "root"), [(TINYGPT, "/TinyGPT_0"), ("recorded:training", "/TinyModel_0")])
def test_backward_work_is_attached_to_the_module_of_its_forward_op(name: str, root: str) -> None:
    events = _events(_trace(name))
    raw = RawModules(events)
    backward = _backward_by_module(events, raw)
    modules = _flatten(_view(_trace(name))["modules"])
    for path, row in modules.items():
        expected = sum(value for key, value in backward.items() if raw.under(key, path))
        assert row["backward_host_us"] == pytest.approx(expected, abs=0.01), path
    assert modules[root]["backward_host_us"] > 1000


def test_activation_checkpointing_recomputation_is_backward_work_of_its_module() -> None:
    """Recomputed forwards run inside backward with no parent module: they join their module instance's row
    as backward time (the backward op that ran them gives that time up), and make no rows of their own."""
    events = _events(_trace("recorded:checkpointing"))
    raw = RawModules(events)
    backward = _backward_by_module(events, raw)
    view = _view(_trace("recorded:checkpointing"))
    assert [row["name"] for row in view["modules"]] == ["TinyModel_0"]
    (root,) = view["modules"]
    in_modules = sum(value for owner, value in backward.items() if owner is not None)  # not the loss's backward
    assert root["backward_host_us"] == pytest.approx(in_modules, abs=0.05)
    modules = _flatten(view["modules"])
    recomputed_roots = {o["path"] for o in raw.occurrences if o["path"].count("/") == 1} - {"/TinyModel_0"}
    assert recomputed_roots  # LayerNorm / Attention / Mlp of each Block, run again during backward
    for path in recomputed_roots:
        (row,) = [r for p, r in modules.items() if p.endswith(path)]
        assert row["recomputations"] == sum(o["path"] == path for o in raw.occurrences) == row["occurrences"]
    blocks = [r for p, r in modules.items() if p.endswith("/Block_0") or p.endswith("/Block_1")]
    assert [b["recomputations"] for b in blocks] == [0, 0]  # checkpoint() wraps the body, not the Block call


def _union_within(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    clipped = sorted((max(a, start), min(b, end)) for a, b in intervals if min(b, end) > max(a, start))
    covered, reach = 0.0, start
    for a, b in clipped:
        if b > reach:
            covered += b - max(a, reach)
            reach = b
    return covered


def test_phases_of_a_cpu_training_step_match_a_hand_computation() -> None:
    events = _events(corpus_file(TINYGPT))
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    spans = defaultdict(list)
    for event in events:
        if event.get("ph") != "X":
            continue
        name = event["name"]
        if name.startswith("enumerate(DataLoader)#"):
            spans["dataloader"].append((event["ts"], event["ts"] + event["dur"]))
        elif name.startswith("Optimizer."):
            spans["optimizer"].append((event["ts"], event["ts"] + event["dur"]))
    phases = _view(corpus_file(TINYGPT))["phases"]
    assert [row["step"] for row in phases["steps"]] == [s["name"].split("#")[1] for s in steps]
    for step, row in zip(steps, phases["steps"], strict=True):
        window = (step["ts"], step["ts"] + step["dur"])
        assert row["host_us"] == pytest.approx(step["dur"], abs=0.01)
        assert row["dataloader_us"] == pytest.approx(_union_within(spans["dataloader"], *window), abs=0.01)
        assert row["optimizer_us"] == pytest.approx(_union_within(spans["optimizer"], *window), abs=0.01)
        assert row["backward_us"] > 0 and row["forward_us"] > 0 and row["dataloader_us"] > 0


@pytest.mark.parametrize(
    "name", [TINYGPT, BERT_H100, NS_RESOLUTION, "recorded:nested", "recorded:training", "recorded:checkpointing"]
)
def test_phases_sum_to_the_step(name: str) -> None:
    phases = _view(_trace(name))["phases"]
    assert phases["applies"] and phases["steps"]
    for row in [*phases["steps"], phases["average"]]:
        host = sum(row[f"{p}_us"] for p in ("dataloader", "forward", "backward", "optimizer", "other"))
        assert host == pytest.approx(row["host_us"], abs=0.01)
        device = sum(row[f"device_{p}_us"] for p in ("dataloader", "forward", "backward", "optimizer", "other"))
        assert device == pytest.approx(row["device_busy_us"], abs=0.01)


def test_device_phases_of_an_inference_step() -> None:
    """BERT on H100: one step, every kernel launched inside the model's forward."""
    events = _events(corpus_file(BERT_H100))
    kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in DEVICE_CATS)
    (row,) = _view(corpus_file(BERT_H100))["phases"]["steps"]
    busy = _union_within(kernels, kernels[0][0], max(end for _, end in kernels))
    assert row["device_busy_us"] == pytest.approx(busy, abs=0.01)
    assert row["device_forward_us"] == pytest.approx(busy, abs=0.01)


def test_a_trace_without_modules_says_how_to_record_them() -> None:
    view = _view(corpus_file(RESNET))
    assert view["applies"] is False and view["modules"] == []
    assert "with_modules=True" in view["reason"] and view["reason"] == HOW_TO_RECORD


def test_a_trace_without_steps_has_no_phases() -> None:
    phases = _view(corpus_file(B200))["phases"]
    assert phases["applies"] is False and "ProfilerStep" in phases["reason"]


def _lightning_trace() -> dict[str, Any]:
    """A PyTorch Lightning profile's shape: ``[pl][module]<type>: <dotted name>`` annotations, no python_function."""

    def event(name: str, ts: float, dur: float, cat: str = "user_annotation") -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}

    return {
        "traceEvents": [
            event("ProfilerStep#1", 1000.0, 1000.0),
            event("[pl][module]lit.Net: model", 1010.0, 800.0),
            event("[pl][module]torch.nn.modules.linear.Linear: model.layer.0", 1020.0, 200.0),
            event("aten::linear", 1030.0, 150.0, "cpu_op"),
            event("aten::addmm", 1040.0, 100.0, "cpu_op"),
            event("[pl][module]torch.nn.modules.linear.Linear: model.layer.1", 1300.0, 300.0),
            event("aten::linear", 1310.0, 250.0, "cpu_op"),
            event("aten::relu", 1700.0, 50.0, "cpu_op"),
        ]
    }


def test_lightning_module_events_make_the_tree_when_there_are_no_nn_module_events() -> None:
    tables = parse_trace(io.BytesIO(json.dumps(_lightning_trace()).encode()))
    view = module_view(TraceContext(tables))
    assert view["applies"] and view["source"] == "lightning"
    (model,) = view["modules"]
    assert (model["name"], model["type"], model["host_total_us"]) == ("model", "Net", 800.0)
    assert model["host_self_us"] == 800.0 - 200.0 - 300.0
    assert model["operators"] == 3  # aten::linear twice (addmm is inside one) and aten::relu
    assert [(c["name"], c["type"], c["host_total_us"], c["operators"]) for c in model["children"]] == [
        ("model.layer.0", "Linear", 200.0, 1),
        ("model.layer.1", "Linear", 300.0, 1),
    ]
    (step,) = view["phases"]["steps"]
    assert (step["host_us"], step["forward_us"], step["other_us"]) == (1000.0, 800.0, 200.0)


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _holds(merged: list[tuple[float, float]], point: float) -> bool:
    index = bisect.bisect_right([a for a, _ in merged], point) - 1
    return index >= 0 and point < merged[index][1]


def test_device_phases_of_a_gpu_training_step_match_a_hand_computation() -> None:
    """HTA's ns-resolution training trace (with ``## forward ##`` / ``## backward ##`` / ``## optimizer ##``
    annotations): kernels by the phase of the op that launched them."""
    events = _events(corpus_file(NS_RESOLUTION), exact=True)
    timed = [e for e in events if e.get("ph") == "X"]
    by_thread: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for event in timed:
        name, span = event["name"], (event["ts"], event["ts"] + event["dur"])
        if name.startswith("Optimizer.") or name == "## optimizer ##":
            by_thread[(event["pid"], event["tid"])]["optimizer"].append(span)
        elif (
            name.startswith("autograd::engine::evaluate_function")
            or AUTOGRAD_NODE.match(name)
            or name == "## backward ##"
        ):
            by_thread[(event["pid"], event["tid"])]["backward"].append(span)
    marks = {thread: {phase: _merged(spans) for phase, spans in phases.items()} for thread, phases in by_thread.items()}
    runtime = {e["args"]["correlation"]: e for e in timed if e.get("cat") == "cuda_runtime"}
    steps = sorted((e for e in timed if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    kernels: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for event in timed:
        call = runtime.get(event.get("args", {}).get("correlation")) if event.get("cat") in DEVICE_CATS else None
        if call is None:
            continue
        step = [
            i for i, s in enumerate(steps) if s["ts"] <= call["ts"] and call["ts"] + call["dur"] <= s["ts"] + s["dur"]
        ]
        thread = marks.get((call["pid"], call["tid"]), {})
        phase = next((p for p in ("optimizer", "backward") if _holds(thread.get(p, []), call["ts"])), "rest")
        if step:
            kernels[(step[0], phase)].append((event["ts"], event["ts"] + event["dur"]))
    rows = _view(corpus_file(NS_RESOLUTION))["phases"]["steps"]
    assert len(rows) == len(steps) == 5
    for index, row in enumerate(rows):
        optimizer = _merged(kernels[(index, "optimizer")])
        backward = _merged(kernels[(index, "backward")])
        backward_only = sum(
            b - a - sum((max(Decimal(0), min(b, d) - max(a, c)) for c, d in optimizer), Decimal(0)) for a, b in backward
        )
        assert row["device_optimizer_us"] == pytest.approx(float(sum(b - a for a, b in optimizer)), abs=0.002)
        assert row["device_backward_us"] == pytest.approx(float(backward_only), abs=0.002)
        assert row["device_backward_us"] > row["device_forward_us"] > 0
