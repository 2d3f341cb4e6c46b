"""Issue 21 items 1 and 2, over real HTTP, measured from outside the server process.

1. Method names a client invents map to one metrics label: /metrics and the server's memory stay
   the same size however many distinct names arrive (before: a series per name, 110 MB of /metrics).
2. POST /login reads at most 16 KiB of a body as it streams: a 256 MiB body (declared or chunked)
   answers 413 without the server's memory growing by the body's size.
"""

from __future__ import annotations

import random
import select
import string
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from serving import running_server

from .outside import connect, host_of, metric_value, metrics_text, resident_bytes

TOKEN = "security-test-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
METHOD_CHARS = 8000
BODY_BYTES = 256 << 20
CHUNK = b"a" * (1 << 20)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("limits")
    (base / "traces").mkdir()
    with running_server([base / "traces"], base / "cache", "--auth-token", TOKEN, workers=1) as url:
        yield url


def _random_method(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_uppercase, k=METHOD_CHARS))


def test_invented_method_names_share_one_metrics_label(server: str) -> None:
    rng = random.Random(21)
    assert httpx.request(_random_method(rng), f"{server}/api/runs").status_code == 401  # the "other" series exists
    metrics_text(server, BEARER)  # and the series of /metrics itself
    before_text, before_rss = metrics_text(server, BEARER), resident_bytes(server.process.pid)
    with httpx.Client() as client:
        for _ in range(300):
            assert client.request(_random_method(rng), f"{server}/api/runs").status_code == 401
    after_text, after_rss = metrics_text(server, BEARER), resident_bytes(server.process.pid)
    # 300 distinct 8,000-character names would add ~300 x 20 lines x 8 KB = 48 MB of series
    assert len(after_text) - len(before_text) < 1024, (len(before_text), len(after_text))
    assert after_rss - before_rss < 20 << 20, (before_rss, after_rss)
    assert metric_value(after_text, "profscope_http_requests_total", method="other") == 301
    assert all(len(line) < 500 for line in after_text.splitlines())


def _post_login_body(server: str, chunked: bool) -> bytes:
    """POST /login with a BODY_BYTES body, stopping when the server answers; returns what it answered."""
    framing = b"Transfer-Encoding: chunked" if chunked else f"Content-Length: {BODY_BYTES}".encode()
    head = (b"POST /login HTTP/1.1\r\nHost: " + host_of(server).encode() + b"\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n" + framing + b"\r\n\r\n")  # fmt: skip
    head += b"6\r\ntoken=\r\n" if chunked else b"token="
    answer = b""
    with connect(server) as sock:
        sock.sendall(head)
        for _ in range(BODY_BYTES // len(CHUNK)):
            if select.select([sock], [], [], 0)[0]:
                break  # the server has answered: no need to send the rest
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK)
            except (BrokenPipeError, ConnectionResetError):
                break
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and b"}" in answer:
                    break
        except ConnectionResetError:
            pass
    return answer


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_huge_login_body_is_refused_as_it_streams(server: str, chunked: bool) -> None:
    before = resident_bytes(server.process.pid)
    answer = _post_login_body(server, chunked)
    after = resident_bytes(server.process.pid)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"larger than 16384 bytes" in answer
    assert after - before < 64 << 20, (before, after)  # the whole body would be 256 MiB
    assert httpx.get(f"{server}/healthz").status_code == 200
    login = httpx.post(f"{server}/login", data={"token": TOKEN, "next": "/"})
    assert login.status_code == 303  # a normal login still works


def test_a_login_form_within_the_limit_is_read_whole(server: str, tmp_path: Path) -> None:
    padded = httpx.post(f"{server}/login", data={"token": TOKEN, "next": "/", "pad": "x" * 15000})
    assert padded.status_code == 303
