"""Runs, workers and spans from the file layouts people really have."""

from __future__ import annotations

import pytest

from profscope.catalog import MEMORY_LOG, build_runs, classify, classify_memory_log, classify_snapshot, moved_run
from profscope.sources.base import ObjectInfo


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("run/worker0.1623143089861.pt.trace.json.gz", ("run", "worker0", "1623143089861", None)),
        (
            "a/b/host-1.example.com_4025559.1732704788383329918.pt.trace.json",
            ("a/b", "host-1.example.com_4025559", "1732704788383329918", None),
        ),
        ("r/rank0.pt.trace.json", ("r", "rank0", "default", None)),
        ("hta/rank-3.json.gz", ("hta", "rank-3", "default", None)),
        ("job/traces/rank5_dp1_tp0_pp1/step_20.json", ("job/traces", "rank5_dp1_tp0_pp1", "step_20", None)),
        ("job/traces/rank5_dp1_tp0_pp1/w.17.pt.trace.json", ("job/traces", "rank5_dp1_tp0_pp1", "17", None)),
        ("top.json", ("", "top", "default", None)),
        ("notes.txt", None),
    ],
)
def test_classify(key: str, expected: tuple | None) -> None:
    assert classify(key) == expected


def test_nsys_reports_are_listed_with_how_to_export_them() -> None:
    for name in ("x/prof.nsys-rep", "x/old.qdrep"):
        found = classify(name)
        assert found is not None and "nsys export --type sqlite" in (found[3] or "")
    assert classify("x/prof.sqlite") is None  # an export: classify_nsys's, read by the nsys parser


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("exp/memory_snapshot.pickle", ("exp", "memory_snapshot", "memory_snapshot")),
        ("job/oom_rank-3_host_123.pickle", ("job", "rank3", "oom_rank-3_host_123")),
        ("job/snapshot_rank_12.pkl", ("job", "rank12", "snapshot_rank_12")),
        ("job/traces/rank5_dp1_tp0/mem.pickle", ("job/traces", "rank5_dp1_tp0", "mem")),
        ("job/frankly.pickle", ("job", "frankly", "frankly")),
        ("job/trace.json", None),
    ],
)
def test_snapshots_join_their_run_with_the_rank_as_worker(key: str, expected: tuple | None) -> None:
    assert classify_snapshot(key) == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        # InternLM's older layout (memory_trace/ beside train.py) and the trainer's RUN/ layout: the rank folder is
        # the worker, memory_trace/ the run
        ("memory_trace/rank0_dp0_tp0/memory.log", ("memory_trace", "rank0_dp0_tp0", "memory.log")),
        (
            "RUN/job/05-01-10-00-00/memory_trace/rank3_dp1_wp0_tp1/memory.log",
            ("RUN/job/05-01-10-00-00/memory_trace", "rank3_dp1_wp0_tp1", "memory.log"),
        ),
        ("rank2_dp0_tp0/memory.log", ("", "rank2_dp0_tp0", "memory.log")),  # the root is memory_trace/ itself
        # beside traces: the traces' run; the worker is the rank in the folder's name, else the folder
        ("job/memory.log", ("job", "job", "memory.log")),
        ("job/node_rank-7/memory.log", ("job/node_rank-7", "rank7", "memory.log")),
        ("memory.log", ("", "memory", "memory.log")),
        ("job/train.log", None),
        ("job/memory.log.1", None),
    ],
)
def test_memory_logs_join_the_run_of_their_folder(key: str, expected: tuple | None) -> None:
    assert classify_memory_log(key) == expected


def test_a_memory_log_beside_traces_joins_their_run() -> None:
    runs = build_runs(
        [
            (
                "root",
                "/data",
                [
                    _info("job/rank0_dp0_tp0_pp0/w.1.pt.trace.json"),
                    _info("job/rank0_dp0_tp0_pp0/memory.log"),
                    _info("job/rank1_dp1_tp0_pp0/memory.log"),
                    _info("internlm/memory_trace/rank0_dp0_tp0/memory.log"),
                ],
            )
        ]
    )
    assert set(runs) == {"job", "internlm/memory_trace"}
    job = runs["job"]
    assert [(f.worker, f.span, f.kind) for f in job.memory_logs()] == [
        ("rank0_dp0_tp0_pp0", "memory.log", MEMORY_LOG),
        ("rank1_dp1_tp0_pp0", "memory.log", MEMORY_LOG),
    ]
    assert list(job.workers()) == ["rank0_dp0_tp0_pp0"]  # a memory.log is not a trace
    assert job.find_memory_log("rank1_dp1_tp0_pp0").key == "job/rank1_dp1_tp0_pp0/memory.log"
    assert job.find_memory_log(None).worker == "rank0_dp0_tp0_pp0"
    assert job.find_memory_log("rank5") is None
    assert runs["internlm/memory_trace"].memory_logs()[0].cache_key != job.memory_logs()[0].cache_key


def _info(key: str) -> ObjectInfo:
    return ObjectInfo(key=key, size=10, version="1")


def test_runs_workers_and_spans_in_time_order() -> None:
    runs = build_runs(
        [
            (
                "root",
                "/data",
                [
                    _info("exp/w1.200.pt.trace.json.gz"),
                    _info("exp/w1.100.pt.trace.json.gz"),
                    _info("exp/w0.150.pt.trace.json"),
                    _info("exp/w10.1.pt.trace.json"),
                    _info("exp/w2.1.pt.trace.json"),
                    _info("exp/snap.pickle"),
                ],
            )
        ]
    )
    run = runs["exp"]
    assert run.workers() == {"w0": ["150"], "w1": ["100", "200"], "w2": ["1"], "w10": ["1"]}
    assert not [f.key for f in run.files if f.refusal]
    assert [(s.key, s.worker, s.span) for s in run.snapshots()] == [("exp/snap.pickle", "snap", "snap")]
    assert run.find_snapshot("snap", None).key == "exp/snap.pickle"
    assert run.find_snapshot("w1", None) is None
    assert run.find("w1", None).span == "100"
    assert run.find(None, None).worker == "w0"
    assert run.find("nope", None) is None  # a named worker that does not exist is not replaced by another
    assert run.find("w1", "300") is None


def test_run_names_do_not_change_when_a_root_is_added_and_duplicates_stay_apart() -> None:
    first = ("a", "/a", [_info("t.json"), _info("t.json.gz"), _info("x/t.json")])
    alone = build_runs([first])
    runs = build_runs([first, ("b", "/b", [_info("x/t.json"), _info("y/t.json")]), ("x", "/c/x", [_info("t.json")])])
    assert set(alone) == {"a", "x"}
    assert set(runs) == {"a", "x", "b/x", "y", "x~2"}  # the earlier root keeps the plain name
    assert [f.source for f in runs["x"].files] == ["/a"] and [f.source for f in runs["b/x"].files] == ["/b"]
    assert sorted(runs["a"].workers()["t"]) == ["default", "default~t.json.gz"]


@pytest.mark.parametrize(
    ("link", "expected"),
    [
        ("roots/ddp", "ddp"),  # written while a second root prefixed every run
        ("ddp", "b/ddp"),  # the other way round: the run is now told apart by its root
        ("old/place/nccl", "nccl"),  # the one run with that last folder
        ("twice", None),  # two runs end in "twice": no guess
        ("nothing", None),
    ],
)
def test_a_link_to_a_moved_run_finds_where_it_went(link: str, expected: str | None) -> None:
    runs = ["b/ddp", "nccl", "a/twice", "c/twice"]
    labels = ["roots", "b"]
    assert moved_run(link, runs + (["ddp"] if link == "roots/ddp" else []), labels) == expected


def test_local_listing_skips_hidden_folders_and_the_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from profscope.sources.local import LocalSource

    for relative in ("run/w.1.pt.trace.json", ".git/x.json", "cache/traces/k/views/overview.json"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("{}")
    keys = [o.key for o in LocalSource(tmp_path, exclude=[tmp_path / "cache"]).list()]
    assert keys == ["run/w.1.pt.trace.json"]


def test_another_workers_span_id_finds_the_same_window_on_this_worker() -> None:
    from profscope.catalog import build_runs
    from profscope.sources.base import ObjectInfo

    keys = ["job/rank0.100.pt.trace.json", "job/rank0.200.pt.trace.json", "job/rank1.105.pt.trace.json",
            "job/rank1.205.pt.trace.json"]  # fmt: skip
    runs = build_runs([("file:///r", "r", [ObjectInfo(key=k, size=1, version="1") for k in keys])])
    run = runs["job"]
    assert run.find("rank1", "200").key == "job/rank1.205.pt.trace.json"
    assert run.find("rank1", "#1").key == "job/rank1.105.pt.trace.json"
    assert run.find("rank1", "105").key == "job/rank1.105.pt.trace.json"
    assert run.find("rank1", "999") is None


def test_each_file_is_seen_when_a_listing_first_holds_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``seen_at`` (``/api/runs``, where "the Overview N s after the server saw the file" starts): the time of the
    listing that first held the file, kept by later listings; a file rewritten is seen anew, one removed forgotten."""
    import time

    from profscope.config import Settings
    from profscope.state import Profscope

    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    first, second = root / "run" / "a.pt.trace.json", root / "run" / "b.pt.trace.json"
    first.write_text('{"traceEvents": []}')
    state = Profscope(Settings(roots=[str(root)], cache_dir=tmp_path / "cache", eager_ingest=False))

    def seen() -> dict[str, float | None]:
        return {f["file"]: f["seen_at"] for r in state.runs().values() for f in state.run_status(r)["files"]}

    try:
        before = time.time()
        state.rescan()
        listed = seen()
        assert before <= listed["run/a.pt.trace.json"] <= time.time()
        second.write_text('{"traceEvents": []}')
        first.write_text('{"traceEvents": [ ]}')  # another size: another version of the file
        between = time.time()
        state.rescan()
        again = seen()
        assert set(again) == {"run/a.pt.trace.json", "run/b.pt.trace.json"}
        assert all(between <= value <= time.time() for value in again.values())
        second.unlink()
        state.rescan()
        assert seen() == {"run/a.pt.trace.json": again["run/a.pt.trace.json"]}
        state.rescan()
        assert seen() == {"run/a.pt.trace.json": again["run/a.pt.trace.json"]}
        assert state._first_listed.keys() == {state.runs()["run"].files[0].cache_key}
    finally:
        state.stop()
