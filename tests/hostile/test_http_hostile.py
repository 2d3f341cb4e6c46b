"""Over real HTTP: a run folder of hostile files next to a good trace. Each bad file fails alone.

Every bad file answers 422 on its own page's JSON with its message and its file name; the good trace
and the readable-but-odd files answer 200; the server stays up and another run keeps working.
"""

from __future__ import annotations

import gzip
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import corpus_file
from serving import running_server, wait_for

from .hostile_files import (
    GOOD_EVENTS,
    KERNEL,
    MEMORY_LOG,
    RunsACommand,
    SomeClass,
    deeply_nested,
    gzip_bomb,
    op,
    snapshot,
    trace_bytes,
)

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
LIMIT = 32 << 20  # --max-trace-bytes
DEEP = trace_bytes([op(args={"Input Dims": [[1]]})]).replace(b"[[1]]", deeply_nested(50_000).encode())

# worker name -> (file content, words the 422 answer must contain; None: the file is readable, 200)
TRACES: dict[str, tuple[bytes, str | None]] = {
    "truncated_gzip": (b"", "cannot decompress the file"),  # filled in below from the real trace
    "gzip_bomb": (gzip_bomb(64 << 20), f"decompressed size exceeds the limit of {LIMIT:,} bytes"),
    "malformed": (b'{"traceEvents": [{"ph": "X", "ts": 1} {"ph": "X"}]}', "JSON is malformed"),
    "truncated_json": (trace_bytes(GOOD_EVENTS)[:-40], "the trace ends before its event list closes"),
    "not_a_list": (b'{"traceEvents": {"ph": "X"}}', "'traceEvents' is not a list"),
    "deep": (DEEP, "JSON nested too deeply"),
    "not_utf8": (trace_bytes([*GOOD_EVENTS, op("NAME", ts=30)]).replace(b"NAME", b"\xff\xfe"), None),
    "wrong_types": (trace_bytes([*GOOD_EVENTS, {**KERNEL, "ts": "soon", "pid": [1]}, op(ts=1e300, args=[1])]), None),
    "long_name": (trace_bytes([*GOOD_EVENTS, op("x" * 10_000_000, ts=30)]), None),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    root = tmp_path_factory.mktemp("roots") / "traces"
    run = root / "hostile"
    run.mkdir(parents=True)
    good = corpus_file(TINYGPT).read_bytes()
    (run / "good.1.pt.trace.json.gz").write_bytes(good)
    for worker, (content, _) in TRACES.items():
        data = good[: len(good) // 2] if worker == "truncated_gzip" else content
        suffix = ".gz" if data[:2] == b"\x1f\x8b" else ""
        (run / f"{worker}.1.pt.trace.json{suffix}").write_bytes(data)
    marker = tmp_path_factory.mktemp("marker") / "the-command-ran"
    (run / "command.pickle").write_bytes(pickle.dumps(snapshot(extra=RunsACommand(marker))))
    (run / "klass.pickle").write_bytes(pickle.dumps(snapshot(extra=SomeClass())))
    (run / "memory.log").write_text(MEMORY_LOG.replace("10.00 MB", "9" * 40 + " MB"))
    (root / "other").mkdir()
    shutil.copy(corpus_file(TINYGPT), root / "other" / Path(TINYGPT).name)
    cache = tmp_path_factory.mktemp("cache") / "c"
    with running_server([root], cache, "--max-trace-bytes", str(LIMIT)) as base:
        wait_for(lambda: _parsed(base), timeout=180)
        yield base, marker, run


def _parsed(base: str) -> bool:
    runs = httpx.get(f"{base}/api/runs", timeout=10).json()["runs"]
    return all(r["state"] != "parsing" for r in runs)


@pytest.mark.parametrize("worker", TRACES)
def test_each_hostile_trace_fails_alone_on_its_page(served: tuple[str, Path, Path], worker: str) -> None:
    base, _, _ = served
    expected = TRACES[worker][1]
    for view in ("overview", "operators", "kernels"):
        answer = httpx.get(f"{base}/api/{view}", params={"run": "hostile", "worker": worker}, timeout=30)
        if expected is None:
            assert answer.status_code == 200, (worker, view, answer.text[:300])
            continue
        assert answer.status_code == 422, (worker, view)
        body = answer.json()
        assert expected in body["error"], (worker, body["error"])
        assert body["state"] == "error" and body["file"].startswith(f"hostile/{worker}.1.pt.trace.json")


def test_hostile_pickles_fail_alone_and_run_nothing(served: tuple[str, Path, Path]) -> None:
    base, marker, _ = served
    for name, words in (("command", "posix.system"), ("klass", "hostile.hostile_files.SomeClass")):
        answer = httpx.get(f"{base}/api/memory/snapshot", params={"run": "hostile", "snapshot": name}, timeout=30)
        assert answer.status_code == 422
        refused = f"hostile/{name}.pickle: refused: the pickle asks for the Python object {words}"
        assert refused in answer.json()["error"]
    assert not marker.exists()


def test_a_hostile_memory_log_fails_alone(served: tuple[str, Path, Path]) -> None:
    base, _, _ = served
    answer = httpx.get(f"{base}/api/memory/log", params={"run": "hostile"}, timeout=30)
    assert answer.status_code == 422
    assert answer.json()["error"].startswith("hostile/memory.log: line 4: expected total_memory: X MB")


def test_the_run_lists_every_failure_and_the_good_files_stay_readable(served: tuple[str, Path, Path]) -> None:
    base, _, _ = served
    run = httpx.get(f"{base}/api/run", params={"run": "hostile"}, timeout=30).json()
    failed = {e["file"].split("/")[1].split(".")[0] for e in run["errors"]}
    assert failed == {w for w, (_, error) in TRACES.items() if error} | {"command", "klass", "memory"}
    readable = {w["worker"] for w in run["workers"]}
    assert readable == {"good"} | {w for w, (_, error) in TRACES.items() if error is None}
    good = httpx.get(f"{base}/api/overview", params={"run": "hostile", "worker": "good"}, timeout=30)
    assert good.status_code == 200 and good.json()["steps"]


def test_the_server_stays_up_and_other_runs_keep_working(served: tuple[str, Path, Path]) -> None:
    base, _, _ = served
    assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
    for view in ("overview", "operators", "kernels", "memory"):
        assert httpx.get(f"{base}/api/{view}", params={"run": "other"}, timeout=30).status_code == 200, view
    assert httpx.get(f"{base}/overview", params={"run": "hostile", "worker": "deep"}, timeout=30).status_code == 200


def test_a_hostile_file_added_while_serving_fails_alone(served: tuple[str, Path, Path]) -> None:
    base, _, run = served
    (run / "late.1.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "na'))

    def answered() -> httpx.Response | None:
        response = httpx.get(f"{base}/api/overview", params={"run": "hostile", "worker": "late"}, timeout=30)
        return response if response.status_code == 422 else None

    answer = wait_for(answered, timeout=60, interval=0.5)
    assert "truncated" in answer.json()["error"]
    assert httpx.get(f"{base}/api/overview", params={"run": "other"}, timeout=30).status_code == 200
