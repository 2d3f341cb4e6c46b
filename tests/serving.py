"""Run ``profscope serve`` as a real subprocess on a free port, for tests over real HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerUrl(str):
    """The server's base URL; ``.process`` is the server process."""

    process: subprocess.Popen


@contextmanager
def running_server(roots: list[Path], cache_dir: Path, *extra: str, workers: int = 2) -> Iterator[ServerUrl]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "profscope.cli",
        "serve",
        *map(str, roots),
        "--port",
        str(port),
        "--cache-dir",
        str(cache_dir),
        "--workers",
        str(workers),
        "--log-level",
        "warning",
        *extra,
    ]
    log_path = cache_dir.parent / f"server-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
        base = ServerUrl(f"http://127.0.0.1:{port}")
        base.process = process
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"server exited: {log_path.read_text()[-3000:]}")
                try:
                    if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server did not get ready: {log_path.read_text()[-3000:]}")
                time.sleep(0.1)
            yield base
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


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
