"""Paths and URLs over real HTTP: no run, worker, span, snapshot, static or source path reaches outside the
configured roots (``..``, ``%2e%2e``, ``%2f``, absolute paths, NUL bytes, symlinks leaving a root), and no
request parameter makes the server fetch a URL (a local listener stands in for every endpoint it could
reach, and must see no connection)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from conftest import corpus_file
from profscope.sources.base import SourceError
from profscope.sources.local import LocalSource
from serving import running_server, wait_for

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
SNAPSHOT = "memory-snapshots/ZijianDu_Attention/memory.pickle"
SECRET = "s3cret-outside-the-roots"  # in every file outside the roots: must never appear in an answer
TEMPLATE_SOURCE = "{% block"  # Jinja source of web/templates: must never be served as a file


class Listener:
    """A TCP listener on loopback that records every connection made to it (and answers nothing)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """traces/cpu (a trace, a snapshot) and src/train.py, next to an outside/ folder they link out to."""
    base = tmp_path_factory.mktemp("paths")
    outside = base / "outside"
    outside.mkdir()
    shutil.copy(corpus_file(TINYGPT), outside / f"{SECRET}.pt.trace.json.gz")  # a valid trace: would be listed
    (outside / "secret.py").write_text(f"print('{SECRET}')\n")
    (outside / "notes.txt").write_text(SECRET)
    traces = base / "traces"
    run = traces / "cpu"
    run.mkdir(parents=True)
    shutil.copy(corpus_file(TINYGPT), run / Path(TINYGPT).name)
    shutil.copy(corpus_file(SNAPSHOT), run / "worker0.pickle")
    (run / "leak.1.pt.trace.json.gz").symlink_to(outside / f"{SECRET}.pt.trace.json.gz")  # a file link out
    (traces / "escape").symlink_to(outside, target_is_directory=True)  # a run folder link out
    (run / "loop").symlink_to(traces, target_is_directory=True)  # a link inside the root: a cycle
    (traces / "README.txt").write_text("not a trace\n")  # a file of the root itself, for the cycle to repeat
    src = base / "src"
    src.mkdir()
    (src / "train.py").write_text("import torch\nprint('train')\n")
    (src / "leak.py").symlink_to(outside / "secret.py")
    return {"base": base, "outside": outside, "traces": traces, "src": src}


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    listening = Listener()
    yield listening
    listening.close()


# Every endpoint the server's storage clients could reach, were a parameter ever taken for a root or a URL.
ENDPOINT_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "PROFSCOPE_S3_ENDPOINT_URL",
    "STORAGE_EMULATOR_HOST",
    "PROFSCOPE_AZURE_ACCOUNT_URL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
)


@pytest.fixture(scope="module")
def server(layout: dict[str, Path], listener: Listener) -> Iterator[str]:
    link = f"{listener.url}/" + "{relpath}#L{line}"  # frames link to it; the server must never fetch links
    patch = pytest.MonkeyPatch()
    for name in ENDPOINT_VARIABLES:
        patch.setenv(name, listener.url)
    for name in ("NO_PROXY", "no_proxy"):  # loopback stays direct: the listener is there, and the readiness probe
        patch.setenv(name, "127.0.0.1,localhost")
    try:
        with running_server(
            [layout["traces"]], layout["base"] / "cache", "--source-root", str(layout["src"]), "--source-link", link
        ) as base:
            patch.undo()  # the server process has them; this one (the test's own requests) must not
            wait_for(lambda: _ready(base), timeout=120)
            yield base
    finally:
        patch.undo()


def _ready(base: str) -> bool:
    runs = httpx.get(f"{base}/api/runs").json()["runs"]
    return bool(runs) and all(r["state"] == "ready" for r in runs)


def raw_get(base: str, target: str) -> tuple[int, bytes]:
    """GET with the request target sent byte for byte (clients normalise ``..`` and re-encode ``%``)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode("latin-1"))
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def _refused(status: int, body: bytes) -> None:
    assert status in (400, 404, 422), status
    assert SECRET.encode() not in body and b"root:x:0:0" not in body and TEMPLATE_SOURCE.encode() not in body


HOSTILE_NAMES = [
    "..",
    "../..",
    "../outside",
    "../../outside/notes.txt",
    "cpu/..",
    "cpu/../..",
    "escape",
    "escape/notes.txt",
    "cpu/leak",
    "leak",
    "/etc/passwd",
    "//etc/passwd",
    "\\..\\..\\etc\\passwd",
    "cpu\x00",
    "cpu\x00/../..",
    "%2e%2e",
    "%2e%2e%2f%2e%2e",
    "..%2f..%2foutside",
    "cpu%2f..%2f..",
    "%252e%252e%252f",
    "file:///etc/passwd",
]


def test_the_catalog_lists_only_files_under_the_root(server: str) -> None:
    runs = httpx.get(f"{server}/api/runs").json()["runs"]
    assert [r["run"] for r in runs] == ["cpu"]  # no run "escape": its link leaves the root
    (cpu,) = runs
    listed = [f["file"] for f in cpu["files"]] + [s["file"] for s in cpu["snapshots"]]
    assert listed == ["cpu/" + Path(TINYGPT).name, "cpu/worker0.pickle"]  # no "leak": it links out
    assert SECRET not in httpx.get(f"{server}/api/runs").text


@pytest.mark.parametrize("field", ["run", "worker", "span"])
def test_trace_parameters_never_leave_the_root(server: str, field: str) -> None:
    routes = [
        "/api/run",
        "/api/overview",
        "/api/operators",
        "/api/kernels",
        "/api/memory",
        "/api/timeline/tracks",
        "/api/distributed",
    ]
    for route in routes:
        if field != "run" and route in ("/api/run", "/api/distributed"):
            continue
        for value in HOSTILE_NAMES:
            params = {"run": "cpu", field: value}
            answer = httpx.get(f"{server}{route}", params=params)
            _refused(answer.status_code, answer.content)
            # and as the raw bytes of the URL, so %2e%2e is decoded by the server itself
            target = f"{route}?" + "&".join(f"{k}={v if k == field else quote(v)}" for k, v in params.items())
            if "\x00" not in target and " " not in target:
                _refused(*raw_get(server, target))


def test_snapshot_parameters_never_leave_the_root(server: str) -> None:
    for value in HOSTILE_NAMES:
        for field in ("worker", "snapshot"):
            answer = httpx.get(f"{server}/api/memory/snapshot", params={"run": "cpu", field: value})
            _refused(answer.status_code, answer.content)
    assert httpx.get(f"{server}/api/memory/snapshot", params={"run": "cpu"}).status_code in (200, 202)


def test_static_files_stay_in_their_folder(server: str) -> None:
    assert raw_get(server, "/static/css/profscope.css")[0] == 200  # the folder itself is served
    targets = [
        "/static/../templates/base.html",
        "/static/%2e%2e/templates/base.html",
        "/static/..%2ftemplates%2fbase.html",
        "/static/%2e%2e%2ftemplates%2fbase.html",
        "/static/..%5ctemplates%5cbase.html",
        "/static//etc/passwd",
        "/static/%2fetc%2fpasswd",
        "/static/..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/static/js%00/../../templates/base.html",
        "/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/overview/..%2f..%2fetc%2fpasswd",
        "/static/css/profscope.css/..%2f..%2f..%2f..%2fetc%2fpasswd",
    ]
    for target in targets:
        status, body = raw_get(server, target)
        assert status in (400, 404, 405), (target, status)
        _refused(404, body)


def test_source_viewer_serves_only_files_under_its_root(server: str, layout: dict[str, Path]) -> None:
    shown = httpx.get(f"{server}/api/source", params={"path": "train.py", "line": 1})
    assert shown.status_code == 200 and shown.json()["lines"][0] == "import torch"
    outside, src = layout["outside"], layout["src"]
    paths = [
        "../outside/secret.py",
        "../../outside/secret.py",
        str(outside / "secret.py"),
        f"{src}/../outside/secret.py",
        "leak.py",
        str(src / "leak.py"),
        "/etc/passwd",
        "/proc/self/environ",
        "train.py\x00.png",
        "train.py\x00",
        "%2e%2e/outside/secret.py",
        "..%2foutside%2fsecret.py",
        "file:///etc/passwd",
        f"file://{outside}/secret.py",
        "~/.bashrc",
        "\\..\\outside\\secret.py",
        "",
        ".",
        "..",
        "/",
        str(src),
    ]
    for path in paths:
        answer = httpx.get(f"{server}/api/source", params={"path": path, "line": 1})
        _refused(answer.status_code, answer.content)
        raw = f"/api/source?path={quote(path, safe='%/')}&line=1"  # %2e%2e left for the server to decode
        if "\x00" not in path:
            _refused(*raw_get(server, raw))


def test_no_parameter_makes_the_server_fetch_a_url(server: str, listener: Listener) -> None:
    socket.create_connection(("127.0.0.1", listener.port)).close()  # the listener counts: one of our own
    wait_for(lambda: listener.connections == 1, timeout=5)
    urls = [
        f"{listener.url}/x",
        f"http://127.0.0.1:{listener.port}",
        f"https://127.0.0.1:{listener.port}/y",
        f"s3://bucket-{listener.port}/runs",
        f"gs://bucket-{listener.port}/runs",
        f"az://c-{listener.port}/runs",
        f"https://acct.blob.core.windows.net/c/p?sv={listener.port}",
        f"//127.0.0.1:{listener.port}/z",
    ]
    fields = {  # the parameters each route reads (others are ignored, not refused)
        "/api/run": ("run",),
        "/api/overview": ("run", "worker", "span"),
        "/api/operators": ("run", "worker", "span"),
        "/api/kernels": ("run", "worker", "span"),
        "/api/memory": ("run", "worker", "span"),
        "/api/memory/snapshot": ("run", "worker", "snapshot"),
        "/api/memory/log": ("run", "worker"),
        "/api/timeline/tracks": ("run", "worker", "span"),
        "/api/distributed": ("run", "span"),
    }
    for url in urls:
        for route, names in fields.items():
            for field in names:
                answer = httpx.get(f"{server}{route}", params={"run": "cpu", field: url})
                assert answer.status_code in (404, 422), (route, field, url, answer.status_code)
        assert httpx.get(f"{server}/api/source", params={"path": url}).status_code == 404
        assert httpx.get(f"{server}/source", params={"path": url}).status_code == 200  # a page shell only
        assert httpx.post(f"{server}/api/retry", params={"run": url}).status_code == 404
        assert httpx.get(f"{server}/overview", params={"run": url}).status_code == 200
    # a frame's link points at the listener (--source-link): served as a link, never fetched
    name = httpx.get(f"{server}/api/operators", params={"run": "cpu"}).json()["rows"][0]["name"]
    stacks = httpx.get(f"{server}/api/operators/stacks", params={"run": "cpu", "name": name})
    assert stacks.status_code == 200 and f'"external":"{listener.url}/' in stacks.text
    time.sleep(1.0)  # a connection the server started would have arrived by now
    assert listener.connections == 1


def test_local_source_refuses_keys_outside_its_root(layout: dict[str, Path]) -> None:
    source = LocalSource(layout["traces"])
    assert source.stat(f"cpu/{Path(TINYGPT).name}").size > 0
    for key in [
        "../outside/notes.txt",
        "cpu/../../outside/notes.txt",
        str(layout["outside"] / "notes.txt"),
        "/etc/passwd",
        "cpu/leak.1.pt.trace.json.gz",
        "escape/notes.txt",
        "cpu/loop/../../outside/notes.txt",
    ]:
        with pytest.raises(SourceError, match="outside the root"):
            source.open(key)
        with pytest.raises(SourceError):
            source.stat(key)
    with pytest.raises((SourceError, ValueError)):
        source.open("cpu/x\x00")
    keys = [info.key for info in source.list()]
    assert keys == ["README.txt", "cpu/" + Path(TINYGPT).name, "cpu/worker0.pickle"], keys
