"""Measuring a server process from outside: its resident memory, its /metrics, raw sockets."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx


def resident_bytes(pid: int) -> int:
    """The process's resident set (VmRSS in /proc)."""
    match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    assert match, f"no VmRSS for {pid}"
    return int(match.group(1)) * 1024


def metrics_text(base: str, headers: dict[str, str] | None = None) -> str:
    response = httpx.get(f"{base}/metrics", headers=headers or {}, timeout=30)
    assert response.status_code == 200, response.text[:200]
    return response.text


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels`` (0 when there is none)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def connect(base: str, timeout_s: float = 30.0) -> socket.socket:
    address = urlsplit(base)
    return socket.create_connection((address.hostname, address.port), timeout=timeout_s)


def host_of(base: str) -> str:
    return urlsplit(base).netloc


def closed_by_server(sock: socket.socket) -> bool:
    """Blocks until the server closes the connection (True) or sends something (False)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
