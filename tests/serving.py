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


@contextmanager
def running_server(roots: list[Path], cache_dir: Path, *extra: str, workers: int = 2) -> Iterator[str]:
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
        base = f"http://127.0.0.1:{port}"
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
