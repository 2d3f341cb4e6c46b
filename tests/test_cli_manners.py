"""Everyday manners of ``profscope`` as a new user meets them, on a real process over real HTTP: relative roots,
a single file as the root, a root that appears after the server started, one log line per failed parse,
one-line user errors, "serving on" only once the port is bound, a clean stop, ``--version``."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from conftest import corpus_file
from profscope import __version__
from serving import alive, children_of, free_port, get_json, stacks_then_kill, start_server, wait_for

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
PROFSCOPE = [sys.executable, "-m", "profscope.cli"]


def _runs(url: str) -> dict:
    return get_json(f"{url}/api/runs")[1]  # type: ignore[return-value]


def _scans(url: str) -> int:
    return get_json(f"{url}/readyz")[1]["scans"]  # type: ignore[index]


def _parsed(url: str) -> dict | None:
    body = _runs(url)
    return body if body["runs"] and all(r["state"] != "parsing" for r in body["runs"]) else None


def test_a_folder_that_appears_later_is_listed_again_and_its_runs_appear(tmp_path: Path) -> None:
    """``profscope serve log`` (relative, from the folder the user is in) before training creates ``log``."""
    work = tmp_path / "project"
    work.mkdir()
    server = start_server([Path("log")], tmp_path / "cache", tmp_path / "server.log", "--rescan-seconds", "0.2",
                          "--log-level", "info", cwd=work)  # fmt: skip
    try:
        status, ready = get_json(f"{server.url}/readyz")
        assert status == 503 and not ready["ready"]  # type: ignore[index]
        expected = "log does not exist (yet)"  # the root's label: its absolute path stays in the server's log
        assert ready["failing_roots"] == [{"root": "log", "error": expected}]  # type: ignore[index]
        (root,) = _runs(server.url)["roots"]
        assert root["error"] == expected and root["listed_at"] is None
        wait_for(lambda: server.log.read_text().count("does not exist (yet)") >= 1)

        (work / "log").mkdir()
        shutil.copy(corpus_file(TINYGPT), work / "log" / Path(TINYGPT).name)
        body = wait_for(lambda: _parsed(server.url), timeout=60)
        assert [r["run"] for r in body["runs"]] == ["log"] and body["runs"][0]["state"] == "ready"
        assert body["roots"][0]["error"] is None
        status, ready = get_json(f"{server.url}/readyz")
        assert status == 200 and ready["ready"] and ready["failing_roots"] == []  # type: ignore[index]
        assert httpx.get(f"{server.url}/api/overview", params={"run": "log"}, timeout=30).status_code == 200
    finally:
        server.stop()
    log = server.log.read_text()
    assert log.count("does not exist (yet)") == 1  # said once, not at every rescan
    assert f"{work / 'log'} can be listed now: 1 files" in log


def test_a_single_trace_file_given_by_a_relative_path_is_served_as_a_run(tmp_path: Path) -> None:
    (tmp_path / "here").mkdir()
    trace = tmp_path / "here" / Path(TINYGPT).name
    shutil.copy(corpus_file(TINYGPT), trace)
    (tmp_path / "here" / "other.pt.trace.json").write_text("not served: only the file named is")
    server = start_server([Path(trace.name)], tmp_path / "cache", tmp_path / "server.log", cwd=trace.parent)
    try:
        body = wait_for(lambda: _parsed(server.url), timeout=60)
        (run,) = body["runs"]
        assert run["state"] == "ready" and run["errors"] == []
        assert [(w["worker"], w["spans"]) for w in run["workers"]] == [("worker0", ["1795315486519085323"])]
        overview = httpx.get(f"{server.url}/api/overview", params={"run": run["run"]}, timeout=30)
        assert overview.status_code == 200 and overview.json()["steps"]
        assert get_json(f"{server.url}/readyz")[0] == 200
    finally:
        server.stop()


def test_each_failed_parse_is_logged_once_with_its_file_and_reason(tmp_path: Path) -> None:
    run = tmp_path / "root" / "job"
    run.mkdir(parents=True)
    shutil.copy(corpus_file(TINYGPT), run / Path(TINYGPT).name)
    (run / "broken.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "name": ')
    server = start_server([tmp_path / "root"], tmp_path / "cache", tmp_path / "server.log", "--rescan-seconds", "0.2")
    try:
        wait_for(lambda: _parsed(server.url), timeout=60)
        scans = _scans(server.url)
        for _ in range(3):  # pages asking for it, and rescans, do not parse (nor log) it again
            httpx.get(f"{server.url}/api/overview", params={"run": "job", "worker": "broken"}, timeout=30)
        wait_for(lambda: _scans(server.url) >= scans + 3)
    finally:
        server.stop()
    failures = [line for line in server.log.read_text().splitlines() if "cannot read" in line]
    assert len(failures) == 1, failures
    assert f"cannot read {run / 'broken.pt.trace.json'}: " in failures[0]
    assert len(failures[0].split(": ", 1)[1]) > 10  # the reason follows the file


def test_user_errors_are_one_line_without_a_traceback(tmp_path: Path) -> None:
    missing = subprocess.run([*PROFSCOPE, "ingest", "missing-file"], cwd=tmp_path, capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr == "profscope ingest: missing-file: no such file\n"

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run([*PROFSCOPE, "serve", "--port", str(port), "--cache-dir", str(tmp_path / "cache")],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert busy.returncode == 2
    assert busy.stderr == f"profscope serve: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert "serving" not in busy.stdout + busy.stderr

    version = subprocess.run([*PROFSCOPE, "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout == f"profscope {__version__}\n"


@contextmanager
def _serving_until(tmp_path: Path, said: str) -> Iterator[tuple[subprocess.Popen, int, str]]:
    """``profscope serve`` (the demo) with its stderr piped, once it has written a line holding ``said``: the
    process, its port and that line. Stopped on leaving (``_stop``)."""
    port = free_port()
    command = [*PROFSCOPE, "serve", "--port", str(port), "--cache-dir", str(tmp_path / "cache")]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        while said not in (line := process.stderr.readline()):
            assert line, f"the server exited before saying {said!r}"
        yield process, port, line
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM, and the process gone within 30 s: else the failure shows where each of its threads was."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        stacks_then_kill(process)
        _, stderr = process.communicate()
        raise AssertionError(f"profscope serve did not stop on SIGTERM; its stacks:\n{stderr[-8000:]}") from None


def test_serving_on_is_said_once_the_port_accepts_connections(tmp_path: Path) -> None:
    with _serving_until(tmp_path, "serving") as (process, port, line):
        assert f"on http://127.0.0.1:{port} " in line
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # accepted (into the backlog) the moment the line is out
    assert process.returncode == 0  # stopped by its own handler, its workers with it


def test_sigusr1_prints_every_thread_s_stack_and_the_server_goes_on(tmp_path: Path) -> None:
    with _serving_until(tmp_path, "serving") as (process, port, _):
        assert process.stderr is not None
        process.send_signal(signal.SIGUSR1)
        dump = []
        while "_serve_app" not in (line := process.stderr.readline()):  # the main thread, in uvicorn's run
            assert line, "the server exited on SIGUSR1"
            dump.append(line)
        assert any(line.startswith("Thread 0x") for line in dump), dump  # every thread, each with its stack
        status, _ = get_json(f"http://127.0.0.1:{port}/healthz")
        assert status == 200
    assert process.returncode == 0


def test_a_stop_while_the_views_are_imported_is_a_clean_exit(tmp_path: Path) -> None:
    """SIGTERM once the first files are listed and handed to the workers, ~0.5 s before "serving": the
    server stops its workers and exits 0 (before, it died of the signal and left its workers to notice)."""
    with _serving_until(tmp_path, "listed for the first time") as (process, _, _):
        workers = children_of(process.pid)
        assert workers  # forked before the listing
    assert process.returncode == 0
    wait_for(lambda: not any(alive(pid) for pid in workers), timeout=10)


def test_the_server_s_connections_send_small_writes_at_once(tmp_path: Path) -> None:
    """``serve`` binds its socket itself, and asyncio sets TCP_NODELAY only on a connection whose socket names
    IPPROTO_TCP: without it, every response written in two parts (headers, then a file or a gzipped body) waited
    for the client's delayed ACK, ~40 ms per request. Checked where uvicorn gets its connections: an asyncio server
    on the bound socket."""
    import asyncio
    import concurrent.futures

    from profscope.cli import _bind

    async def accepted_nodelay() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted = transport.get_extra_info("socket")
                seen.set_result(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        sock = _bind("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        try:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            value = await asyncio.wait_for(seen, timeout=10)
            writer.close()
            return value
        finally:
            server.close()

    # a thread of its own: an event loop may already run in this one (the browser tests' Playwright)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(asyncio.run, accepted_nodelay()).result(timeout=60) != 0


def _stop_after_parsing(tmp_path: Path, stop: signal.Signals) -> tuple[int, str]:
    """Serve a run until parsed (the parser pool and its queues exist), then stop it as a service manager does."""
    root = tmp_path / "root" / "job"
    root.mkdir(parents=True)
    shutil.copy(corpus_file(TINYGPT), root / Path(TINYGPT).name)
    log = tmp_path / "server.log"
    server = start_server([root.parent], tmp_path / "cache", log, "--log-level", "info")
    wait_for(lambda: _parsed(server.url), timeout=60)
    server.process.send_signal(stop)
    code = server.process.wait(timeout=30)
    return code, log.read_text()


def test_a_stopped_server_exits_cleanly(tmp_path: Path) -> None:
    for stop in (signal.SIGTERM, signal.SIGINT):
        code, log = _stop_after_parsing(tmp_path / stop.name, stop)
        assert code == 0, log
        assert "leaked" not in log and "Traceback" not in log, log
        assert "Finished server process" in log


def test_ctrl_c_in_a_terminal_stops_the_workers_without_tracebacks(tmp_path: Path) -> None:
    """Ctrl+C reaches every process of the terminal's group: the parsers, mid-parse, ignore it and are stopped
    by the server."""
    root = tmp_path / "root" / "job"
    root.mkdir(parents=True)
    for name in ("worker0.1623143089861.pt.trace.json.gz", "worker0.1623143566756.pt.trace.json.gz"):
        shutil.copy(corpus_file(f"kineto-tb_plugin/samples/resnet50_num_workers_0/{name}"), root / name)
    log = tmp_path / "server.log"
    command = [*PROFSCOPE, "serve", str(root.parent), "--port", str(free_port()), "--cache-dir", str(tmp_path / "c")]
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "Application startup complete" in log.read_text(), timeout=60)
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    text = log.read_text()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text and "leaked" not in text, text
