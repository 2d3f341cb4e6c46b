"""Access control over real HTTP: every route (OpenAPI, pages, static files) refused without
credentials and served with them; the login form's cookie; the trusted proxy header; no route writes
to the sources."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import app_routes, corpus_file
from profscope.app import create_app
from profscope.assets import web_dir
from profscope.config import Settings
from profscope.pages import PAGES
from serving import running_server, wait_for

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
SNAPSHOT = "memory-snapshots/ZijianDu_Attention/memory.pickle"  # so the /api/memory/snapshot* routes have one
MEMORY_LOG = Path(__file__).resolve().parent / "data" / "internlm" / "memory_trace" / "rank0_dp0_tp0" / "memory.log"
TOKEN = "pr0fscope-test-token-0123456789"
OPEN = {"/healthz", "/readyz"}


def every_kind_of_file(root: Path) -> Path:
    """A root with one run ``cpu`` holding a trace, a snapshot and a memory.log: every route has data."""
    (root / "cpu").mkdir(parents=True)
    shutil.copy(corpus_file(TINYGPT), root / "cpu" / Path(TINYGPT).name)
    shutil.copy(corpus_file(SNAPSHOT), root / "cpu" / "worker0.pickle")
    shutil.copy(MEMORY_LOG, root / "cpu" / "memory.log")  # and the /api/memory/log* routes
    return root


def one_source_file(root: Path) -> Path:
    """A source root with ``train.py``, for the source viewer."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text("import torch\n\nprint('train')\n")
    return root


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return every_kind_of_file(tmp_path_factory.mktemp("ac") / "traces")


@pytest.fixture(scope="module")
def source_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return one_source_file(tmp_path_factory.mktemp("src"))


def _start(roots: Path, source_root: Path, cache: Path, *flags: str):  # type: ignore[no-untyped-def]
    return running_server([roots], cache, "--source-root", str(source_root), "--log-format", "json",
                          "--log-level", "info", *flags)  # fmt: skip


@pytest.fixture(scope="module")
def token_server(roots: Path, source_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cache = tmp_path_factory.mktemp("token") / "cache"
    with _start(roots, source_root, cache, "--auth-token", TOKEN) as base:
        wait_for(lambda: _parsed(base, {"Authorization": f"Bearer {TOKEN}"}))
        yield base


@pytest.fixture(scope="module")
def proxy_server(roots: Path, source_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cache = tmp_path_factory.mktemp("proxy") / "cache"
    with _start(roots, source_root, cache, "--trust-proxy-header", "X-Forwarded-User") as base:
        wait_for(lambda: _parsed(base, {"X-Forwarded-User": "alice"}))
        yield base


def _parsed(base: str, headers: dict[str, str]) -> bool:
    runs = httpx.get(f"{base}/api/runs", headers=headers).json()["runs"]
    return bool(runs) and all(r["state"] == "ready" for r in runs)


def _registered_paths() -> set[str]:
    """Every path the app serves, including routes left out of the OpenAPI document."""

    return {route.path for route in app_routes(create_app(Settings()).routes)}


def _requests(base: str, source_root: Path, headers: dict[str, str]) -> list[tuple[str, str, dict[str, str]]]:
    """(method, path, query) for every OpenAPI operation, every page, every static file."""
    spec = httpx.get(f"{base}/openapi.json", headers=headers).json()
    # a valid value for every required parameter of any route (the Trace view's too: slice 0, a search)
    values = {"run": "cpu", "base_run": "cpu", "name": "aten::mm", "path": str(source_root / "train.py"), "id": "0",
              "q": "aten"}  # fmt: skip
    requests = []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            required = [p["name"] for p in operation.get("parameters", []) if p.get("required")]
            missing = [name for name in required if name not in values]
            assert not missing, f"{method.upper()} {path}: give the test a value for {missing}"
            requests.append((method.upper(), path, {name: values[name] for name in required}))
    pages = ["/", "/run", "/source", "/api-docs", *(f"/{name}" for name in PAGES)]
    requests += [("GET", page, {"run": "cpu"}) for page in pages]
    static = web_dir() / "static"
    files = [f"/static/{p.relative_to(static).as_posix()}" for p in sorted(static.rglob("*")) if p.is_file()]
    assert files, "no static files found"
    requests += [("GET", path, {}) for path in [*files, "/static/bundles/overview.js"]]
    requests += [("GET", "/openapi.json", {}), ("GET", "/metrics", {})]
    covered = {path for _, path, _ in requests} | OPEN | {"/login", "/logout", "/static"}
    templated = {p for p in _registered_paths() if "{" in p}  # /{page}: covered by the PAGES entries
    assert _registered_paths() - templated <= covered, "a route is missing from this test"
    return requests


def _call(base: str, method: str, path: str, query: dict[str, str], **kwargs) -> httpx.Response:  # type: ignore[no-untyped-def]
    return httpx.request(method, f"{base}{path}", params=query, follow_redirects=False, timeout=30, **kwargs)


def _served(response: httpx.Response) -> bool:
    if response.status_code == 307:  # /run -> /overview
        return response.headers["location"].startswith("/overview")
    return response.status_code in (200, 202)


def test_every_route_needs_the_token(token_server: str, source_root: Path) -> None:
    good = {"Authorization": f"Bearer {TOKEN}"}
    requests = _requests(token_server, source_root, good)
    assert any(path == "/api/overview" for _, path, _ in requests)
    for method, path, query in requests:
        refused = _call(token_server, method, path, query)
        assert refused.status_code == 401, (method, path, refused.status_code)
        assert refused.headers["www-authenticate"].startswith("Bearer")
        wrong = _call(token_server, method, path, query, headers={"Authorization": f"Bearer {TOKEN}x"})
        assert wrong.status_code == 401, (method, path)
        allowed = _call(token_server, method, path, query, headers=good)
        assert _served(allowed), (method, path, allowed.status_code, allowed.text[:200])
    for path in OPEN:
        assert httpx.get(f"{token_server}{path}").status_code == 200


def test_a_browser_logs_in_once_and_keeps_a_cookie(token_server: str, source_root: Path) -> None:
    # A pasted link without credentials answers 401 with the login form, which returns to the link.
    page = httpx.get(f"{token_server}/overview", params={"run": "cpu"}, headers={"Accept": "text/html"})
    assert page.status_code == 401
    assert '<form method="post" action="/login">' in page.text
    assert 'name="next" value="/overview?run=cpu"' in page.text
    assert "<script" not in page.text  # the form works without the (protected) scripts
    assert TOKEN not in page.text

    wrong = httpx.post(f"{token_server}/login", data={"token": "nope", "next": "/overview?run=cpu"})
    assert wrong.status_code == 401 and "not the one" in wrong.text and "set-cookie" not in wrong.headers

    login = httpx.post(f"{token_server}/login", data={"token": TOKEN, "next": "/overview?run=cpu"})
    assert login.status_code == 303 and login.headers["location"] == "/overview?run=cpu"
    cookie = login.headers["set-cookie"]
    assert "HttpOnly" in cookie and "samesite=lax" in cookie.lower()
    assert TOKEN not in cookie  # the cookie is an HMAC of the token, never the token

    with httpx.Client(base_url=token_server, cookies=login.cookies) as browser:
        for method, path, query in _requests(token_server, source_root, {"Authorization": f"Bearer {TOKEN}"}):
            response = browser.request(method, path, params=query, follow_redirects=False)
            assert _served(response), (method, path, response.status_code)
        logout = browser.post("/logout")  # a POST: another site's link or image cannot log anyone out
        assert logout.status_code == 303
    assert httpx.get(f"{token_server}/api/runs", cookies=login.cookies).status_code == 401  # revoked on the server
    assert httpx.get(f"{token_server}/api/runs", cookies={"profscope_session": "forged"}).status_code == 401


def test_login_never_redirects_off_site(token_server: str) -> None:
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:alert(1)"):
        login = httpx.post(f"{token_server}/login", data={"token": TOKEN, "next": target})
        assert login.status_code == 303 and login.headers["location"] == "/", target


def test_every_route_needs_the_proxy_header(proxy_server: str, source_root: Path) -> None:
    user = {"X-Forwarded-User": "alice@example.com"}
    requests = _requests(proxy_server, source_root, user)
    for method, path, query in requests:
        refused = _call(proxy_server, method, path, query)
        assert refused.status_code == 403, (method, path, refused.status_code)
        assert "X-Forwarded-User" in refused.json()["detail"]
        empty = _call(proxy_server, method, path, query, headers={"X-Forwarded-User": ""})
        assert empty.status_code == 403, (method, path)
        allowed = _call(proxy_server, method, path, query, headers=user)
        assert _served(allowed), (method, path, allowed.status_code)
    for path in OPEN:
        assert httpx.get(f"{proxy_server}{path}").status_code == 200
    # The bearer token is not a way in when only the proxy is trusted.
    assert httpx.get(f"{proxy_server}/api/runs", headers={"Authorization": "Bearer x"}).status_code == 403


def test_access_log_names_the_user_and_never_the_token(token_server: str, proxy_server: str) -> None:
    httpx.get(f"{proxy_server}/api/runs", headers={"X-Forwarded-User": "bob"})
    httpx.get(f"{token_server}/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
    httpx.post(f"{token_server}/login", data={"token": TOKEN, "next": "/"})
    for base, user in ((proxy_server, "bob"), (token_server, "token")):
        log = Path(base.process.args[base.process.args.index("--cache-dir") + 1]).parent
        text = "".join(p.read_text() for p in log.glob("server-*.log"))
        assert TOKEN not in text
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        access = [entry for entry in lines if entry["logger"] == "profscope.access"]
        assert any(e["route"] == "/api/runs" and e["status"] == 200 and e["user"] == user for e in access)
        assert all({"method", "route", "path", "status", "duration_ms"} <= set(e) for e in access)


def _snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): f"{p.stat().st_mtime_ns}:{hashlib.sha256(p.read_bytes()).hexdigest()}"
        for p in sorted(root.rglob("*"))
        if p.is_file()
    } | {p.relative_to(root).as_posix() + "/": "dir" for p in root.rglob("*") if p.is_dir()}


def test_no_route_writes_to_the_sources(roots: Path, source_root: Path, tmp_path: Path) -> None:
    before = _snapshot(roots), _snapshot(source_root)
    cache = tmp_path / "cache"
    with running_server([roots], cache, "--source-root", str(source_root)) as base:
        wait_for(lambda: _parsed(base, {}))
        for method, path, query in _requests(base, source_root, {}):
            assert _served(_call(base, method, path, query)), (method, path)
        # a retry re-parses into the cache, never next to the trace
        assert httpx.post(f"{base}/api/retry", params={"run": "cpu"}).status_code == 202
        wait_for(lambda: _parsed(base, {}))
    assert (_snapshot(roots), _snapshot(source_root)) == before
    assert any(cache.rglob("summary.json"))
    assert not [p for p in cache.rglob("*") if p.name.endswith(".tmp")]
