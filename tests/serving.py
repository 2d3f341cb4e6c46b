"""Run ``profscope serve`` as a real subprocess on a free port, for tests over real HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Never through a proxy: urlopen's global opener keeps the proxies of the environment it first saw
# (tests/hostile/test_paths.py sets HTTP_PROXY for a while), and every server here is on loopback.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_json(url: str) -> tuple[int, object]:
    try:
        with _DIRECT.open(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    log: Path
    roots: list[Path] = field(default_factory=list)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until the first scan is done: /readyz answers 200, or 503 with the roots that could not be listed."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"profscope exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                status, body = get_json(f"{self.url}/readyz")
                if status == 200 or (isinstance(body, dict) and body.get("scans")):
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"profscope did not become ready in {timeout_s}s:\n{self.log.read_text()[-3000:]}")

    def wait_parsed(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _, body = get_json(f"{self.url}/api/runs")
            if not any(run["state"] == "parsing" for run in body["runs"]):
                return
            time.sleep(0.2)
        raise RuntimeError(f"traces still parsing after {timeout_s}s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:  # a bug of its own: its stacks go to the log, and the run says so
            stacks_then_kill(self.process)
            stacks = self.log.read_text()[-6000:]
            warnings.warn(f"profscope did not stop in 15 s after SIGTERM; its stacks:\n{stacks}", stacklevel=2)


def stacks_then_kill(process: subprocess.Popen) -> None:
    """A server that does not stop: every thread's stack to its stderr (``kill -USR1``), then SIGKILL."""
    process.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    process.kill()
    process.wait()


def start_server(roots: list[Path], cache_dir: Path, log: Path, *extra: str, cwd: Path | None = None) -> Server:
    """``profscope serve`` on a free port, its output in ``log``; ``cwd``: where relative roots are read from."""
    command = [sys.executable, "-m", "profscope.cli", "serve", *map(str, roots), "--port", str(free_port()),
               "--cache-dir", str(cache_dir), "--log-level", "warning", *extra]  # fmt: skip
    port = command[command.index("--port") + 1]
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=cwd)
    server = Server(url=f"http://127.0.0.1:{port}", process=process, log=log, roots=roots)
    try:
        server.wait_ready()
    except RuntimeError:
        server.stop()
        raise
    return server


class ServerUrl(str):
    """The server's base URL; ``.process`` is the server process."""

    process: subprocess.Popen


@contextmanager
def running_server(roots: list[Path], cache_dir: Path, *extra: str, workers: int = 2) -> Iterator[ServerUrl]:
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    log = cache_dir.parent / f"server-{cache_dir.name}-{time.monotonic_ns()}.log"
    server = start_server(roots, cache_dir, log, "--workers", str(workers), *extra)
    base = ServerUrl(server.url)
    base.process = server.process
    try:
        yield base
    finally:
        server.stop()


def appear(staged: Path, target: Path) -> None:
    """``staged`` (a file or a run's folder, outside the served root) becomes ``target`` at once, by a rename. A
    test that must see a file being parsed places it once the server answers: the server hands out its first
    parses before it listens, and a small one can be over before the first request (run it with a short
    ``--rescan-seconds``)."""
    os.replace(staged, target)


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def children_of(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
