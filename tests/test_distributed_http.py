"""/api/distributed over real HTTP: spans aligned across ranks, the same numbers as the analysis,
a missing or unreadable rank reported without hiding the view, 202 while ranks are parsed."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import pytest

from conftest import corpus_file
from profscope.analysis.distributed import build_distributed, summary_from_json
from profscope.catalog import build_runs
from profscope.ingest.request import IngestRequest
from profscope.sources import LocalSource, ObjectInfo
from profscope.views.registry import queries
from serving import appear, running_server, wait_for
from test_distributed import GLOO, GLOO_SPANS, summary_of

TRACE_FILTER = "hta/trace_filter"


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("roots") / "traces"
    shutil.copytree(corpus_file(GLOO), root / "ddp")
    (root / "ddp_missing").mkdir()
    for name in (GLOO_SPANS[1][0], GLOO_SPANS[1][1], GLOO_SPANS[1][3]):  # rank 2 is missing
        shutil.copy(corpus_file(f"{GLOO}/{name}.pt.trace.json.gz"), root / "ddp_missing")
    (root / "ddp_broken").mkdir()
    for name in GLOO_SPANS[1][:3]:
        shutil.copy(corpus_file(f"{GLOO}/{name}.pt.trace.json.gz"), root / "ddp_broken")
    truncated = corpus_file(f"{GLOO}/{GLOO_SPANS[1][3]}.pt.trace.json.gz").read_bytes()[:5000]
    (root / "ddp_broken" / f"{GLOO_SPANS[1][3]}.pt.trace.json.gz").write_bytes(truncated)
    shutil.copytree(corpus_file(TRACE_FILTER), root / "filter")
    return root


@pytest.fixture(scope="module")
def base(roots: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with running_server([roots], tmp_path_factory.mktemp("cache") / "c") as url:
        wait_for(lambda: all(r["state"] != "parsing" for r in httpx.get(f"{url}/api/runs").json()["runs"]), 120)
        yield url


def _get(base: str, **params: str) -> httpx.Response:
    return httpx.get(f"{base}/api/distributed", params=params, timeout=30)


def test_every_span_of_every_rank_is_one_view(base: str) -> None:
    runs = {r["run"]: r for r in httpx.get(f"{base}/api/runs").json()["runs"]}
    assert "distributed" in runs["ddp"]["views"]
    first = _get(base, run="ddp").json()
    assert first["span_position"] == 1 and first["span"] == GLOO_SPANS[1][0].split(".")[1]
    assert [(r["worker"], r["rank"], r["span"]) for r in first["ranks"]] == [
        (f"rank{i}", i, GLOO_SPANS[1][i].split(".")[1]) for i in range(4)
    ]
    # any rank's id of the second span, or "#2", is the second window of every rank
    by_rank2 = _get(base, run="ddp", span=GLOO_SPANS[2][2].split(".")[1]).json()
    by_position = _get(base, run="ddp", span="#2").json()
    assert by_rank2["span_position"] == by_position["span_position"] == 2
    assert by_rank2["ranks"] == by_position["ranks"]
    assert [r["span"] for r in by_rank2["ranks"]] == [GLOO_SPANS[2][i].split(".")[1] for i in range(4)]
    assert _get(base, run="ddp", span="123").status_code == 404
    assert _get(base, run="nope").status_code == 404


def test_numbers_over_http_equal_the_analysis(base: str) -> None:
    body = _get(base, run="ddp").json()
    items = []
    for name in GLOO_SPANS[1]:
        summary, _ = summary_from_json(summary_of(f"{GLOO}/{name}.pt.trace.json.gz"))
        items.append(
            {"worker": name.split(".")[0], "span": name.split(".")[1], "file": f"ddp/{name}", "summary": summary}
        )
    expected = orjson.loads(orjson.dumps(build_distributed(items), option=orjson.OPT_SERIALIZE_NUMPY))
    keys = ("computation_us", "overlapping_us", "communication_us", "other_us", "data_transfer_us", "synchronizing_us")
    for mine, theirs in zip(body["ranks"], expected["ranks"], strict=True):
        assert {k: mine[k] for k in keys} == {k: theirs[k] for k in keys}
        assert mine["file"] == f"ddp/{mine['worker']}.{mine['span']}.pt.trace.json.gz"
    assert [s["lost_us"] for s in body["stragglers"]] == [s["lost_us"] for s in expected["stragglers"]]
    assert body["warnings"] == []


def test_trace_links_follow_the_timeline_contract(base: str) -> None:
    body = _get(base, run="ddp").json()
    slowest = next(s for s in body["stragglers"] if s["slowest"])
    worst = slowest["worst"]
    url = urlsplit(worst["trace_url"])
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert url.path == "/trace" and query["run"] == "ddp"
    workers = query["workers"].split(",")
    assert workers[0] == slowest["worker"] and sorted(workers) == ["rank0", "rank1", "rank2", "rank3"]
    lead = next(r for r in body["ranks"] if r["worker"] == workers[0])
    assert query["span"] == lead["span"]  # the span id of the FIRST listed worker
    start, end = float(query["start_us"]), float(query["end_us"])
    assert start == pytest.approx(worst["trace"]["start_us"], abs=1e-3)
    # the window holds the late rank's own call: its start relative to its trace origin is known
    (call,) = [a for a in worst["arrivals"] if a["worker"] == workers[0]]
    steps = lead["steps"]
    assert start < end and start < steps[-1]["start_us"] + steps[-1]["total_us"]
    assert end - start >= call["duration_us"]


def test_a_missing_rank_is_a_warning(base: str) -> None:
    body = _get(base, run="ddp_missing").json()
    assert [r["rank"] for r in body["ranks"]] == [0, 1, 3]
    assert any("3 of 4 ranks" in w and "missing: 2" in w for w in body["warnings"])
    assert all(r["data_transfer_us"] is not None for r in body["ranks"])


def test_an_unreadable_rank_is_a_warning(base: str) -> None:
    response = _get(base, run="ddp_broken")
    assert response.status_code == 200
    body = response.json()
    states = {r["worker"]: r["state"] for r in body["ranks"]}
    assert states == {"rank0": "ready", "rank1": "ready", "rank2": "ready", "rank3": "error"}
    assert any(w.startswith("rank3 (ddp_broken/rank3.") and "could not be read" in w for w in body["warnings"])


def test_two_nccl_ranks_of_a_bigger_job(base: str) -> None:
    body = _get(base, run="filter").json()
    assert [(r["worker"], r["rank"], r["mode"]) for r in body["ranks"]] == [
        ("sampled_rank-0", 0, "device"),
        ("sampled_rank-1", 1, "device"),
    ]
    assert body["collectives"] and all(c["trace_url"].startswith("/trace?") for c in body["collectives"])
    assert any("2 of 128 ranks" in w for w in body["warnings"])


def test_openapi_documents_the_route(base: str) -> None:
    route = httpx.get(f"{base}/openapi.json").json()["paths"]["/api/distributed"]["get"]
    assert route["summary"]
    params = {p["name"]: p for p in route["parameters"]}
    assert set(params) == {"run", "span", "format", "table"} and all(p.get("description") for p in params.values())
    assert "202" in route["responses"]


def test_202_while_ranks_are_parsed(tmp_path: Path) -> None:
    staged = tmp_path / "staged" / "slow"
    staged.mkdir(parents=True)
    shutil.copy(corpus_file(f"{GLOO}/{GLOO_SPANS[1][0]}.pt.trace.json.gz"), staged / "rank0.1.pt.trace.json.gz")
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5}
        for i in range(400_000)
    ]
    (staged / "rank1.1.pt.trace.json.gz").write_bytes(gzip.compress(orjson.dumps({"traceEvents": events}), 1))
    root = tmp_path / "roots"
    root.mkdir()
    with running_server([root], tmp_path / "cache", "--rescan-seconds", "0.5", workers=1) as url:
        appear(staged, root / "slow")  # both ranks at once
        seen = []

        def done() -> bool:
            response = httpx.get(f"{url}/api/distributed", params={"run": "slow"}, timeout=30)
            seen.append((response.status_code, response.json()))
            return response.status_code == 200

        wait_for(done, timeout=120, interval=0.05)
    parsing = [body for status, body in seen if status == 202]
    assert parsing, "the first requests should have been answered 202 while a rank was parsed"
    assert all(b["ranks_total"] == 2 and b["state"] == "parsing" and 0 <= b["progress"] < 1 for b in parsing)
    final = seen[-1][1]
    assert [r["rank"] for r in final["ranks"]] == [0, 1]
    assert final["ranks"][1]["calls"] == 0  # the synthetic rank made no collective call


TINYGPT_CPU = "generated/tinygpt_cpu"  # two single-process CPU traces: no distributedInfo


def test_a_trace_alone_in_its_run_gets_its_rank_summary_once_another_rank_joins(tmp_path: Path) -> None:
    """A trace alone in its run, and not a rank of a bigger job (no distributedInfo), has no Distributed view, so
    its parse leaves out the rank summary (~0.3 s of a 1 GB trace's ingest, bench/RESULTS.md run 30). Once a second
    rank's trace joins the run, the view applies, asks for both, and the store computes the first one's from its
    stored tables: the same numbers as the analysis of each trace."""
    traces = sorted(corpus_file(TINYGPT_CPU).iterdir())
    root, staged = tmp_path / "roots", tmp_path / "staged"
    (root / "job").mkdir(parents=True)
    staged.mkdir()
    shutil.copy(traces[0], root / "job" / "rank0.1.pt.trace.json.gz")
    shutil.copy(traces[1], staged / "rank1.1.pt.trace.json.gz")
    cache = tmp_path / "cache"
    with running_server([root], cache, "--rescan-seconds", "0.5", workers=1) as url:

        def run() -> dict:
            return next(r for r in httpx.get(f"{url}/api/runs").json()["runs"] if r["run"] == "job")

        wait_for(lambda: run()["state"] == "ready", timeout=120)
        assert "distributed" not in run()["views"]
        assert list(cache.rglob("views/overview.v*.json")) and not list(cache.rglob("views/distributed.rank.v*"))

        appear(staged / "rank1.1.pt.trace.json.gz", root / "job" / "rank1.1.pt.trace.json.gz")
        wait_for(lambda: (r := run())["state"] == "ready" and "distributed" in r["views"], timeout=120)
        assert len(list(cache.rglob("views/distributed.rank.v*.json"))) == 1  # the second rank's, at its parse
        body = wait_for(lambda: (r := _get(url, run="job")).status_code == 200 and r.json(), timeout=60)
    assert len(list(cache.rglob("views/distributed.rank.v*.json"))) == 2  # the first one's, computed on request
    items = [
        {"worker": f"rank{i}", "span": "1", "file": f"job/rank{i}.1.pt.trace.json.gz", "summary": summary}
        for i, trace in enumerate(traces)
        for summary, _ in [summary_from_json(summary_of(f"{TINYGPT_CPU}/{trace.name}"))]
    ]
    expected = orjson.loads(orjson.dumps(build_distributed(items), option=orjson.OPT_SERIALIZE_NUMPY))
    keys = ("computation_us", "communication_us", "other_us", "calls")
    assert [r["worker"] for r in body["ranks"]] == ["rank0", "rank1"]
    assert [{k: r[k] for k in keys} for r in body["ranks"]] == [{k: r[k] for k in keys} for r in expected["ranks"]]
    assert body["ranks"][0]["computation_us"] > 0


def test_only_a_trace_alone_in_its_run_and_not_a_rank_of_a_job_leaves_out_the_rank_summary(tmp_path: Path) -> None:
    """``IngestRequest.for_its_run``: the Distributed view's query is left out only when the run holds no trace of
    another worker and the trace's own distributedInfo does not make it a rank of a bigger job (world size > 1)."""
    trace = corpus_file(f"{TINYGPT_CPU}/worker0.1795315486519085323.pt.trace.json.gz")
    file = build_runs([("t", "file:///t", [ObjectInfo(key=f"job/{trace.name}", size=1, version="1")])])["job"].files[0]
    source, every_query = LocalSource(tmp_path), queries("trace")
    requests = {
        alone: IngestRequest.for_file(file, source, tmp_path, every_query, 1 << 30, alone_in_run=alone)
        for alone in (True, False)
    }

    def names(request: IngestRequest, distributed: object) -> set[str]:
        return {q.name for q in request.for_its_run({"distributed": distributed}).queries}

    every = {q.name for q in requests[True].queries}
    assert "distributed.rank" in every and "overview" in every
    assert names(requests[True], None) == every - {"distributed.rank"}
    assert names(requests[True], {"rank": 0, "world_size": 1}) == every - {"distributed.rank"}
    assert names(requests[True], {"rank": 3, "world_size": 4}) == every  # one rank of a 4-rank job: its view applies
    assert names(requests[False], None) == every
