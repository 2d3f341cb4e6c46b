"""Issue 21 item 9 over real HTTP: slow partial requests and too many connections.

A client that sends part of a request's headers and stops, or connects and sends nothing, is
disconnected after ``--header-timeout``; connections beyond ``--max-connections`` are closed at
once; a complete request on an idle keep-alive connection is unaffected.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from serving import running_server

from .outside import closed_by_server, connect, host_of


def test_slow_partial_requests_are_disconnected(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    with running_server([tmp_path / "traces"], tmp_path / "cache", "--header-timeout", "1", workers=1) as base:
        with connect(base) as silent, connect(base) as partial, connect(base) as second:
            partial.sendall(b"GET /api/runs HTTP/1.1\r\nHost: " + host_of(base).encode() + b"\r\nX-Slow: ")
            second.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host_of(base)}\r\n\r\n".encode())
            answer = b""
            while not answer.endswith(b'{"status":"ok"}'):
                answer += second.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200")
            second.sendall(b"GET /healthz HTTP/1.1\r\nHo")  # the next request on a kept-alive connection
            assert closed_by_server(silent)
            assert closed_by_server(partial)
            assert closed_by_server(second)
        assert httpx.get(f"{base}/healthz").status_code == 200


def test_connections_beyond_the_cap_are_closed(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    with running_server([tmp_path / "traces"], tmp_path / "cache", "--max-connections", "4", workers=1) as base:
        idle = [connect(base) for _ in range(4)]
        try:
            with connect(base) as extra:
                extra.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host_of(base)}\r\n\r\n".encode())
                assert closed_by_server(extra)
        finally:
            for sock in idle:
                sock.close()
        served = httpx.get(f"{base}/healthz")  # the idle ones gone, a new connection is served
        assert served.status_code == 200
