"""Issue 21 items 3, 8 and 9 (HEAD, redirects) over real HTTP.

3. With the default local binding, a request naming another host (a DNS-rebinding page) is refused
   on every route but the probes; ``--allowed-host`` names the hosts of a deployment, ``*`` any.
8. The access check and the router read the same path: ``/log%09in`` is refused before either.
9. ``HEAD`` is answered wherever ``GET`` is; a redirect never carries the request's Host back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from serving import running_server

from .outside import connect, host_of

TOKEN = "security-test-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
REBOUND = {"Host": "attacker.example"}


def _source_root(base: Path) -> Path:
    (base / "src").mkdir(parents=True)
    (base / "src" / "train.py").write_text("print('train')\n")
    return base / "src"


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The default setup: no token, bound to 127.0.0.1."""
    base = tmp_path_factory.mktemp("local")
    (base / "traces").mkdir()
    with running_server([base / "traces"], base / "cache", "--source-root", str(_source_root(base)),
                        workers=1) as url:  # fmt: skip
        yield url


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("token")
    (base / "traces").mkdir()
    with running_server([base / "traces"], base / "cache", "--auth-token", TOKEN, "--allowed-host", "*",
                        workers=1) as url:  # fmt: skip
        yield url


def test_another_host_name_is_refused_by_default(local_server: str) -> None:
    port = local_server.rsplit(":", 1)[1]
    for path, query in (("/api/runs", {}), ("/api/source", {"path": "train.py"}), ("/", {})):
        assert httpx.get(f"{local_server}{path}", params=query).status_code == 200, path
        refused = httpx.get(f"{local_server}{path}", params=query, headers=REBOUND)
        assert refused.status_code == 400, path
        assert "--allowed-host attacker.example" in refused.json()["detail"]
        assert "print" not in refused.text
        for name in (f"localhost:{port}", f"[::1]:{port}", f"127.0.0.1:{port}", "127.0.0.1"):
            assert httpx.get(f"{local_server}{path}", params=query, headers={"Host": name}).status_code == 200
        tunnel = httpx.get(f"{local_server}{path}", params=query, headers={"Host": "localhost:9000"})
        assert tunnel.status_code == 200  # ssh -L 9000:127.0.0.1:PORT: the browser names the tunnel's port
    for probe in ("/healthz", "/readyz"):  # a kubelet names the pod's address
        assert httpx.get(f"{local_server}{probe}", headers=REBOUND).status_code == 200


def test_allowed_hosts_are_configurable(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    flags = ("--allowed-host", "profscope.example.com", "--allowed-host", "*.corp.example")
    with running_server([tmp_path / "traces"], tmp_path / "cache", *flags, workers=1) as base:
        for host, status in (("profscope.example.com", 200), ("profscope.example.com:8443", 200),
                             ("a.corp.example", 200), ("attacker.example", 400), ("corp.example.evil", 400),
                             (host_of(base), 400)):  # fmt: skip
            assert httpx.get(f"{base}/api/runs", headers={"Host": host}).status_code == status, host


def test_a_path_with_control_characters_reaches_neither_check_nor_router(token_server: str) -> None:
    for path in ("/log%09in", "/login%0a", "/api/runs%00", "/healthz%0d", "/%7Flogin"):
        for headers in ({}, BEARER):
            answer = httpx.get(f"{token_server}{path}", headers=headers)
            assert answer.status_code == 400, (path, answer.status_code)
            assert answer.json()["detail"] == "the path holds control characters"
    # a percent-encoded slash is decoded once, for both: the access check sees the route it guards
    assert httpx.get(f"{token_server}/api%2Fruns").status_code == 401
    assert httpx.get(f"{token_server}/api%2Fruns", headers=BEARER).status_code == 200


def test_head_is_answered_wherever_get_is(token_server: str) -> None:
    for path in ("/healthz", "/readyz", "/api/runs", "/", "/openapi.json", "/static/css/profscope.css"):
        get = httpx.get(f"{token_server}{path}", headers=BEARER)
        head = httpx.head(f"{token_server}{path}", headers=BEARER)
        assert get.status_code == 200 and head.status_code == 200, (path, head.status_code)
        assert head.content == b""
        assert head.headers["content-type"] == get.headers["content-type"]
    assert httpx.head(f"{token_server}/api/runs").status_code == 401  # and it needs credentials as GET does


def test_redirects_never_carry_the_host_header(token_server: str) -> None:
    for host in ("attacker.example", host_of(token_server)):
        answer = httpx.get(f"{token_server}/api/runs/", headers={**BEARER, "Host": host})
        assert answer.status_code == 307
        assert answer.headers["location"] == "/api/runs"
    with connect(token_server) as sock:  # HTTP/1.0 without any Host header
        sock.sendall(b"GET /api/runs/ HTTP/1.0\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n\r\n")
        answer = sock.recv(65536)
    assert b"location: /api/runs\r\n" in answer.lower(), answer[:300]
