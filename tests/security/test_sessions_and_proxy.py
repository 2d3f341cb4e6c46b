"""Issue 21 items 6 and 7 over real HTTP.

6. The proxy header is believed only from a trusted proxy: an address in ``--trusted-proxy``
   (default loopback, with a startup warning) or a request carrying ``--proxy-secret``.
7. Each login is its own session, revoked by ``POST /logout`` and expired by the server; the
   cookie is Secure when a trusted proxy says the request came over HTTPS; failed attempts from
   one address are limited; a short token is refused at start.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from profscope.auth import FAILED_ATTEMPTS_PER_MINUTE, SESSION_COOKIE, Sessions
from serving import running_server

TOKEN = "security-test-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
USER = {"X-Forwarded-User": "mallory"}
ELSEWHERE = "10.255.0.0/16"  # a proxy network the test client (127.0.0.1) is not in
SECRET = "proxy-shared-secret-0123456789"


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("traces")
    (root / "empty").mkdir()
    return root


def _server(traces: Path, tmp: Path, *flags: str):  # type: ignore[no-untyped-def]
    return running_server([traces], tmp / "cache", "--log-level", "info", *flags, workers=1)


def _log(base: str) -> str:
    cache = Path(base.process.args[base.process.args.index("--cache-dir") + 1])
    return "".join(p.read_text() for p in cache.parent.glob(f"server-{cache.name}-*.log"))


def test_a_client_sent_proxy_header_is_refused_from_an_untrusted_address(traces: Path, tmp_path: Path) -> None:
    with _server(traces, tmp_path, "--trust-proxy-header", "X-Forwarded-User", "--trusted-proxy", ELSEWHERE) as base:
        refused = httpx.get(f"{base}/api/runs", headers=USER)
        assert refused.status_code == 403
        assert "does not come from the trusted proxy" in refused.json()["detail"]
        assert "believed from loopback" not in _log(base)  # a proxy is named: no warning


def test_the_proxy_header_with_a_token_server_needs_the_proxy_too(traces: Path, tmp_path: Path) -> None:
    flags = ("--auth-token", TOKEN, "--trust-proxy-header", "X-Forwarded-User", "--trusted-proxy", ELSEWHERE)
    with _server(traces, tmp_path, *flags) as base:
        assert httpx.get(f"{base}/api/runs", headers=USER).status_code == 401  # the header alone is not enough
        assert httpx.get(f"{base}/api/runs", headers={**USER, **BEARER}).status_code == 200


def test_a_shared_secret_makes_the_proxy_trusted_from_any_address(traces: Path, tmp_path: Path) -> None:
    with _server(traces, tmp_path, "--trust-proxy-header", "X-Forwarded-User", "--proxy-secret", SECRET) as base:
        assert httpx.get(f"{base}/api/runs", headers=USER).status_code == 403  # loopback is not enough now
        wrong = {**USER, "X-Profscope-Proxy-Secret": SECRET + "x"}
        assert httpx.get(f"{base}/api/runs", headers=wrong).status_code == 403
        right = {**USER, "X-Profscope-Proxy-Secret": SECRET}
        assert httpx.get(f"{base}/api/runs", headers=right).status_code == 200
        assert SECRET not in _log(base)


def test_the_loopback_default_is_announced_at_start(traces: Path, tmp_path: Path) -> None:
    with _server(traces, tmp_path, "--trust-proxy-header", "X-Forwarded-User") as base:
        assert httpx.get(f"{base}/api/runs", headers=USER).status_code == 200  # a sidecar on loopback
        assert "is believed from loopback addresses only" in _log(base)


@pytest.fixture(scope="module")
def token_server(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _server(traces, tmp_path_factory.mktemp("sessions"), "--auth-token", TOKEN) as base:
        yield base


def _login(base: str, headers: dict[str, str] | None = None) -> httpx.Response:
    login = httpx.post(f"{base}/login", data={"token": TOKEN, "next": "/"}, headers=headers or {})
    assert login.status_code == 303
    return login


def test_each_login_is_a_session_that_logout_revokes(token_server: str) -> None:
    first, second = _login(token_server), _login(token_server)
    assert first.cookies[SESSION_COOKIE] != second.cookies[SESSION_COOKIE]
    for login in (first, second):
        assert httpx.get(f"{token_server}/api/runs", cookies=login.cookies).status_code == 200
    assert httpx.get(f"{token_server}/logout", cookies=first.cookies).status_code in (404, 405)  # GET: no logout
    assert httpx.get(f"{token_server}/api/runs", cookies=first.cookies).status_code == 200
    logout = httpx.post(f"{token_server}/logout", cookies=first.cookies)
    assert logout.status_code == 303 and logout.headers["location"] == "/login"
    assert httpx.get(f"{token_server}/api/runs", cookies=first.cookies).status_code == 401  # even if kept
    assert httpx.get(f"{token_server}/api/runs", cookies=second.cookies).status_code == 200  # the other one stays


def test_the_server_expires_sessions_and_refuses_altered_ones(token_server: str) -> None:
    cookie = _login(token_server).cookies[SESSION_COOKIE]
    session, expiry, mac = cookie.split(".")
    later = f"{session}.{int(expiry) + 10**6}.{mac}"  # a longer life, without the key
    assert httpx.get(f"{token_server}/api/runs", cookies={SESSION_COOKIE: later}).status_code == 401
    sessions = Sessions(TOKEN)  # signed with the server's key, but expired a second ago
    body = f"{session}.{int(time.time()) - 1}"
    expired = f"{body}.{sessions._mac(body)}"
    assert httpx.get(f"{token_server}/api/runs", cookies={SESSION_COOKIE: expired}).status_code == 401
    body = f"{session}.{int(time.time()) + 3600}"  # the same, unexpired: the signing is the server's
    assert (
        httpx.get(f"{token_server}/api/runs", cookies={SESSION_COOKIE: f"{body}.{sessions._mac(body)}"}).status_code
        == 200
    )


def test_the_cookie_is_secure_when_a_trusted_proxy_saw_https(token_server: str, traces: Path, tmp_path: Path) -> None:
    assert "secure" not in _login(token_server).headers["set-cookie"].lower()
    https = {"X-Forwarded-Proto": "https"}
    assert "; secure" in _login(token_server, https).headers["set-cookie"].lower()  # the loopback proxy
    with _server(traces, tmp_path, "--auth-token", TOKEN, "--trusted-proxy", ELSEWHERE) as base:
        assert "secure" not in _login(base, https).headers["set-cookie"].lower()  # a client's claim


def test_failed_attempts_are_limited_per_address(traces: Path, tmp_path: Path) -> None:
    # The test client is on loopback: it plays the proxy (trusted there by default) and names the clients.
    guesser, other = {"X-Forwarded-For": "198.51.100.7"}, {"X-Forwarded-For": "203.0.113.9"}
    with _server(traces, tmp_path, "--auth-token", TOKEN) as base, httpx.Client() as client:
        for _ in range(FAILED_ATTEMPTS_PER_MINUTE):
            wrong = client.get(f"{base}/api/runs", headers={**guesser, "Authorization": "Bearer guess"})
            assert wrong.status_code == 401
        blocked = client.get(f"{base}/api/runs", headers={**guesser, **BEARER})  # a guess is no longer tested
        assert blocked.status_code == 429 and blocked.headers["retry-after"] == "60"
        assert client.post(f"{base}/login", data={"token": TOKEN}, headers=guesser).status_code == 429
        assert client.get(f"{base}/api/runs", headers=guesser).status_code == 401  # no credentials: as usual
        assert client.get(f"{base}/api/runs", headers={**other, **BEARER}).status_code == 200  # another client
        assert client.get(f"{base}/api/runs", headers=BEARER).status_code == 200  # local processes: not limited
        assert client.get(f"{base}/healthz", headers=guesser).status_code == 200
    with _server(traces, tmp_path / "elsewhere", "--auth-token", TOKEN, "--trusted-proxy", ELSEWHERE) as base:
        for _ in range(FAILED_ATTEMPTS_PER_MINUTE):  # a client's own X-Forwarded-For names nobody else
            httpx.get(f"{base}/api/runs", headers={**guesser, "Authorization": "Bearer guess"})
        assert httpx.get(f"{base}/api/runs", headers={**guesser, **BEARER}).status_code == 200


def test_a_short_token_is_refused_at_start(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "profscope.cli", "serve", str(tmp_path), "--cache-dir", str(tmp_path / "c"),
               "--auth-token", "short-token"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--auth-token must be at least 16 characters" in done.stderr
    done = subprocess.run([*command[:-2], "--trusted-proxy", "not-a-network"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 2 and "--trusted-proxy 'not-a-network'" in done.stderr
