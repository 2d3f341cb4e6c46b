"""What the benchmarks that start ``profscope serve`` share: a free loopback port, a JSON GET."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.error
import urllib.request

TIMEOUT_S = 600  # a cold view of a scaled trace can take minutes on a loaded machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str) -> tuple[int, dict]:
    """(status, decoded JSON body) of a GET; HTTP errors are answers, not exceptions."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def stop_server(process: subprocess.Popen) -> None:
    """Stop a server the benchmark started: SIGTERM, then SIGKILL if it has not exited after 20 s."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
