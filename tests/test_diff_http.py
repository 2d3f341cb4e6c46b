"""GET /api/diff over real HTTP on real pairs: two resnet50 runs (num_workers 0 vs 4: the DataLoader time
drops), two ranks of hta/trace_filter, two spans of one CPU-only worker; calls and kernel times checked against
an independent count of the raw JSON; the bad pairs (same trace, a failed side, CPU-only vs GPU)."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import httpx
import pytest

from conftest import corpus_file
from profscope.views.responses import Diff
from serving import appear, running_server, wait_for

RESNET0 = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RESNET4 = "kineto-tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"
RANK0 = "hta/trace_filter/sampled_rank-0.json.gz"
RANK1 = "hta/trace_filter/sampled_rank-1.json.gz"
TINY_SPAN1 = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
TINY_SPAN2 = "generated/tinygpt_cpu/worker0.1795315486718467596.pt.trace.json.gz"
RUNS = {"r0": [RESNET0], "r4": [RESNET4], "hta": [RANK0, RANK1], "tiny": [TINY_SPAN1, TINY_SPAN2]}
DDP = "generated/tinygpt_ddp4_gloo"  # 4 gloo ranks, two spans each
OPERATOR_CATEGORIES = ("Operator", "cpu_op")
KERNEL_CATEGORIES = ("Kernel", "kernel")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("roots") / "traces"
    for run, files in RUNS.items():
        (root / run).mkdir(parents=True)
        for relative in files:
            shutil.copy(corpus_file(relative), root / run / Path(relative).name)
    shutil.copytree(corpus_file(DDP), root / "ddp")
    (root / "broken").mkdir()
    (root / "broken" / "worker0.1.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "name": ')
    cache = tmp_path_factory.mktemp("cache") / "c"
    with running_server([root], cache) as base:
        wait_for(lambda: _settled(base), timeout=300)
        yield base


def _settled(base: str) -> bool:
    runs = httpx.get(f"{base}/api/runs").json()["runs"]
    return len(runs) == len(RUNS) + 2 and all(run["state"] in ("ready", "error") for run in runs)


def _get(base: str, path: str, **query: str) -> tuple[int, dict]:
    response = httpx.get(f"{base}{path}", params=query, timeout=60)
    return response.status_code, response.json()


def _diff(base: str, **query: str) -> tuple[int, dict]:
    return _get(base, "/api/diff", **query)


def _raw(relative: str) -> list[dict]:
    with gzip.open(corpus_file(relative)) as raw:
        return json.load(raw)["traceEvents"]


def _counts(events: list[dict], categories: tuple[str, ...]) -> Counter[str]:
    return Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") in categories)


def _kernel_time_us(events: list[dict], name: str) -> float:
    return sum(
        e["dur"] for e in events if e.get("ph") == "X" and e.get("cat") in KERNEL_CATEGORIES and e["name"] == name
    )


def test_two_resnet_runs_dataloader_drops_and_counts_match_the_raw_json(server) -> None:  # type: ignore[no-untyped-def]
    status, body = _diff(server, run="r4", base_run="r0")
    assert status == 200, body
    Diff.model_validate(body)
    assert body["base"]["run"] == "r0" and body["run"] == "r4" and not body["same_trace"]
    steps = body["steps"]
    assert steps["base_steps"] == steps["target_steps"] == 6 and body["normalisation"] == "total"
    # num_workers=4 loads in background processes: the DataLoader share of a step nearly vanishes
    assert steps["delta"]["dataloader_us"] < -0.9 * steps["base"]["dataloader_us"] < 0
    assert steps["delta"]["total_us"] == pytest.approx(steps["target"]["total_us"] - steps["base"]["total_us"])
    assert sum(steps["delta"][k] for k in steps["delta"] if k != "total_us") == pytest.approx(
        steps["delta"]["total_us"]
    )
    assert steps["gpus"]["base"][0]["utilization_pct"] > 0 and steps["gpus"]["target"][0]["utilization_pct"] > 0

    base_events, target_events = _raw(RESNET0), _raw(RESNET4)
    base_ops, target_ops = _counts(base_events, OPERATOR_CATEGORIES), _counts(target_events, OPERATOR_CATEGORIES)
    operators = {row["name"]: row for row in body["operators"]}
    for name in ("aten::conv2d", "aten::batch_norm", "aten::addmm", "aten::copy_"):
        assert (operators[name]["base_calls"], operators[name]["target_calls"]) == (base_ops[name], target_ops[name])
    assert operators["aten::copy_"]["status"] == "changed"  # 588 -> 12 calls: no more copies in the main process
    changes = [abs(row["delta_us"]) for row in body["operators"]]
    assert changes == sorted(changes, reverse=True)

    kernels = {row["name"]: row for row in body["kernels"]}
    base_kernels, target_kernels = _counts(base_events, KERNEL_CATEGORIES), _counts(target_events, KERNEL_CATEGORIES)
    for name in [row["name"] for row in body["kernels"][:3]]:
        row = kernels[name]
        assert (row["base_calls"], row["target_calls"]) == (base_kernels[name], target_kernels[name])
        assert row["base_total_us"] == pytest.approx(_kernel_time_us(base_events, name))
        assert row["target_total_us"] == pytest.approx(_kernel_time_us(target_events, name))
        assert row["delta_us"] == pytest.approx(row["target_total_us"] - row["base_total_us"])
    assert {kernels[name]["status"] for name in set(base_kernels) - set(target_kernels)} <= {"removed"}
    assert {kernels[name]["status"] for name in set(target_kernels) - set(base_kernels)} <= {"added"}


def test_tree_drill_down_finds_the_dataloader_change(server) -> None:  # type: ignore[no-untyped-def]
    _, top = _diff(server, run="r4", base_run="r0")
    step = next(row for row in top["tree"]["children"] if row["name"] == "ProfilerStep#*")
    assert step["base_calls"] == step["target_calls"] == 6 and step["has_children"]
    _, level1 = _diff(server, run="r4", base_run="r0", tree_path="ProfilerStep#*")
    assert level1["tree"]["node"]["name"] == "ProfilerStep#*"
    statuses = {row["name"]: row["status"] for row in level1["tree"]["children"]}
    assert statuses["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] == "removed"
    assert statuses["enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"] == "added"
    drill = next(row for row in level1["tree"]["children"] if row["has_children"] and row["status"] != "removed")
    response = httpx.get(
        f"{server}/api/diff", params=[("run", "r4"), ("base_run", "r0"), ("tree_path", "ProfilerStep#*"),
                                      ("tree_path", drill["name"])], timeout=60)  # fmt: skip
    level2 = response.json()["tree"]
    assert level2["found"] and level2["node"]["name"] == drill["name"] and level2["children"]


def test_two_ranks_of_one_job(server) -> None:  # type: ignore[no-untyped-def]
    status, body = _diff(server, run="hta", worker="sampled_rank-1", base_run="hta", base_worker="sampled_rank-0")
    assert status == 200, body
    Diff.model_validate(body)
    base_events, target_events = _raw(RANK0), _raw(RANK1)
    base_ops, target_ops = _counts(base_events, OPERATOR_CATEGORIES), _counts(target_events, OPERATOR_CATEGORIES)
    operators = {row["name"]: row for row in body["operators"]}
    for name in ("aten::mm", "aten::addmm", "aten::linear", "aten::copy_"):  # 231 vs 229 mm calls, ...
        assert (operators[name]["base_calls"], operators[name]["target_calls"]) == (base_ops[name], target_ops[name])
        assert operators[name]["status"] == "changed"
    base_kernels = _counts(base_events, KERNEL_CATEGORIES)
    for row in body["kernels"][:3]:
        assert row["base_calls"] == base_kernels[row["name"]]
        assert row["base_total_us"] == pytest.approx(_kernel_time_us(base_events, row["name"]))
        assert row["target_total_us"] == pytest.approx(_kernel_time_us(target_events, row["name"]))
    assert body["distributed"] is None  # two ranks of one job: the Distributed view compares them


def test_two_spans_of_one_cpu_only_worker(server) -> None:  # type: ignore[no-untyped-def]
    spans = [Path(p).name.split(".")[1] for p in (TINY_SPAN1, TINY_SPAN2)]
    status, body = _diff(server, run="tiny", span=spans[1], base_run="tiny", base_span=spans[0])
    assert status == 200, body
    Diff.model_validate(body)
    assert body["device_columns"]["base"] is False and body["device_columns"]["target"] is False
    assert "no GPU activity" in body["device_columns"]["note"]
    assert body["kernels"] == []
    base_ops, target_ops = (
        _counts(_raw(TINY_SPAN1), OPERATOR_CATEGORIES),
        _counts(_raw(TINY_SPAN2), OPERATOR_CATEGORIES),
    )
    for row in body["operators"][:5]:
        assert row["base_device_self_us"] is None and row["target_device_total_us"] is None
        assert (row["base_calls"], row["target_calls"]) == (base_ops[row["name"]], target_ops[row["name"]])
        assert row["delta_us"] == pytest.approx(row["target_host_self_us"] - row["base_host_self_us"])


def test_cpu_only_against_gpu_explains_the_device_columns(server) -> None:  # type: ignore[no-untyped-def]
    status, body = _diff(server, run="tiny", base_run="r0")
    assert status == 200, body
    Diff.model_validate(body)
    assert body["device_columns"]["base"] is True and body["device_columns"]["target"] is False
    assert body["device_columns"]["note"].startswith("The target recorded no GPU activity")
    assert all(row["target_device_self_us"] is None for row in body["operators"])
    assert any(row["base_device_self_us"] for row in body["operators"])
    steps = body["steps"]
    assert (steps["base_steps"], steps["target_steps"]) == (6, 3) and body["normalisation"] == "per_step"
    conv = next(row for row in body["operators"] if row["name"] == "aten::conv2d")
    assert conv["base_calls"] == 318 / 6 and conv["target_calls"] == 0 and conv["status"] == "removed"


def test_same_trace_is_an_empty_diff_that_says_so(server) -> None:  # type: ignore[no-untyped-def]
    status, body = _diff(server, run="r0", base_run="r0")
    assert status == 200
    Diff.model_validate(body)
    assert body["same_trace"] and "same trace" in body["message"]
    assert body["operators"] == [] and body["kernels"] == [] and body["steps"] is None


def test_a_failed_side_is_422_with_its_reason_and_side(server) -> None:  # type: ignore[no-untyped-def]
    status, body = _diff(server, run="r0", base_run="broken")
    assert status == 422
    assert body["side"] == "base" and body["run"] == "broken" and "truncated" in body["error"]
    status, body = _diff(server, run="broken", base_run="r0")
    assert status == 422 and body["side"] == "target"
    status, body = _diff(server, run="r0", base_run="no-such-run")
    assert status == 404


def test_two_multi_rank_runs_get_per_rank_deltas(server) -> None:  # type: ignore[no-untyped-def]
    """Each side's numbers are its run's Distributed view (the span group of the chosen span), joined on rank."""
    status, body = _diff(server, run="ddp", base_run="hta")
    assert status == 200, body
    Diff.model_validate(body)
    _, target_view = _get(server, "/api/distributed", run="ddp", span=body["span"])
    _, base_view = _get(server, "/api/distributed", run="hta", span=body["base"]["span"])
    rows = body["distributed"]["ranks"]
    expected = {r["rank"] for r in target_view["ranks"]} | {r["rank"] for r in base_view["ranks"]}
    assert {row["rank"] for row in rows} == expected and body["distributed"]["note"] is None
    for side, view in (("target", target_view), ("base", base_view)):
        for rank in view["ranks"]:
            row = next(r for r in rows if r["rank"] == rank["rank"])
            assert row[f"{side}_worker"] == rank["worker"]
            for key in ("computation_us", "communication_us", "synchronizing_us"):
                assert row[f"{side}_{key}"] == pytest.approx(rank[key])
    both = [row for row in rows if row["base_worker"] and row["target_worker"]]
    assert both
    for row in both:
        assert row["delta_synchronizing_us"] == pytest.approx(
            row["target_synchronizing_us"] - row["base_synchronizing_us"]
        )


def test_a_side_still_parsing_is_202_with_its_progress(tmp_path: Path) -> None:
    """A big generated target (400,000 ops) against a small real baseline: /api/diff answers the target's parse
    progress, saying which side, until both sides are parsed; then the diff."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5}
        for i in range(400_000)
    ]
    staged = tmp_path / "staged"
    (staged / "big").mkdir(parents=True)
    (staged / "big" / "w.1.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    (staged / "small").mkdir()
    shutil.copy(corpus_file(TINY_SPAN1), staged / "small" / Path(TINY_SPAN1).name)
    root = tmp_path / "roots"
    root.mkdir()
    with running_server([root], tmp_path / "cache", "--rescan-seconds", "0.5", workers=1) as base:
        appear(staged / "big", root / "big")
        appear(staged / "small", root / "small")
        seen = []

        def done() -> bool:
            status, body = _diff(base, run="big", base_run="small")
            seen.append((status, body))
            return status == 200

        wait_for(done, timeout=180, interval=0.05)
    parsing = [body for status, body in seen if status == 202]
    assert parsing, "the first requests should have been answered 202 while the big trace was parsed"
    assert all(body["state"] in ("parsing", "pending") and "progress" in body for body in parsing)
    assert all(body["run"] == {"target": "big", "base": "small"}[body["side"]] for body in parsing)
    final = seen[-1][1]
    assert {row["name"] for row in final["operators"] if row["status"] == "added"} >= {"aten::op0", "aten::op49"}


def test_finer_groupings_add_up_to_the_name_rows(server) -> None:  # type: ignore[no-untyped-def]
    status, body = _diff(server, run="r4", base_run="r0", group_by="operator_input_shape", kernel_group_by="kernel_op")
    assert status == 200, body
    Diff.model_validate(body)
    _, by_name = _diff(server, run="r4", base_run="r0")
    conv = [row for row in body["operators"] if row["name"] == "aten::conv2d"]
    assert len(conv) > 1 and all(row["input_shape"] for row in conv)  # resnet's convolutions have several shapes
    assert sum(row["base_calls"] for row in conv) == 318
    kernel = by_name["kernels"][0]
    launches = [row for row in body["kernels"] if row["name"] == kernel["name"]]
    assert all(row["operator"] for row in launches)
    assert sum(row["base_calls"] for row in launches) == kernel["base_calls"]
    assert sum(row["target_total_us"] for row in launches) == pytest.approx(kernel["target_total_us"])
