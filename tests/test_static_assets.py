"""The web assets over real HTTP (``static_assets.py``): every file under ``web/static`` answered from memory
with its type, its ETag and, for text, a body gzipped once and sent as stored bytes; a file edited on disk is
answered anew; each page's bundle (``bundles/<page>.js``, module_bundle.py) and its source map likewise; anything
else under ``/static`` is a 404. (Paths that try to leave the folder:
tests/hostile/test_paths.py.)"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from profscope.assets import web_dir
from profscope.module_bundle import make_bundle
from profscope.static_assets import MIN_COMPRESSED_BYTES, StaticAssets
from serving import running_server

STATIC = web_dir() / "static"
FILES = sorted(p.relative_to(STATIC).as_posix() for p in STATIC.rglob("*") if p.is_file())
TYPES = {".js": "application/javascript", ".css": "text/css", ".svg": "image/svg+xml", ".png": "image/png"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("static")
    (tmp / "traces").mkdir()
    with running_server([tmp / "traces"], tmp / "cache") as base, httpx.Client(base_url=base) as http:
        yield http


def test_the_largest_asset_is_sent_precompressed(client: httpx.Client) -> None:
    largest = max(FILES, key=lambda relative: (STATIC / relative).stat().st_size)
    original = (STATIC / largest).read_bytes()
    for _ in range(2):  # the second answer comes from the stored bytes
        with client.stream("GET", f"/static/{largest}", headers={"Accept-Encoding": "gzip"}) as zipped:
            raw = b"".join(zipped.iter_raw())
        assert zipped.headers["content-encoding"] == "gzip" and "accept-encoding" in zipped.headers["vary"].lower()
        # a stored body has its length up front; the middleware's per-request compression streams it chunked
        assert int(zipped.headers.get("content-length", -1)) == len(raw) < len(original) / 2
        assert gzip.decompress(raw) == original
        assert zipped.headers["cache-control"] == "no-cache"  # revalidated by its ETag: an upgrade shows at once
    plain = client.get(f"/static/{largest}", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == original


@pytest.mark.parametrize("relative", FILES)
def test_every_asset_is_answered_whole_with_its_type(client: httpx.Client, relative: str) -> None:
    original = (STATIC / relative).read_bytes()
    with client.stream("GET", f"/static/{relative}", headers={"Accept-Encoding": "gzip"}) as answer:
        raw = b"".join(answer.iter_raw())
    assert answer.status_code == 200
    assert answer.headers["content-type"].split(";")[0] == TYPES[Path(relative).suffix]
    assert int(answer.headers["content-length"]) == len(raw)
    assert answer.headers["x-content-type-options"] == "nosniff"  # the app's headers reach assets too
    if answer.headers.get("content-encoding") == "gzip":
        assert gzip.decompress(raw) == original and len(raw) < len(original)
    else:
        assert raw == original
        textual = Path(relative).suffix in (".js", ".css", ".svg")
        assert not textual or len(original) < MIN_COMPRESSED_BYTES, "a text asset was sent uncompressed"


@pytest.mark.parametrize("relative", ["js/api.js", "css/profscope.css"])
def test_a_known_etag_is_answered_304_without_a_body(client: httpx.Client, relative: str) -> None:
    first = client.get(f"/static/{relative}")
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == "no-cache"  # revalidated: an upgrade never mixes old and new modules
    again = client.get(f"/static/{relative}", headers={"If-None-Match": f'W/"other", {etag}'})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    other = client.get(f"/static/{relative}", headers={"If-None-Match": '"other"'})
    assert other.status_code == 200 and other.content == first.content


def test_head_answers_the_headers_of_get(client: httpx.Client) -> None:
    get, head = client.get("/static/js/api.js"), client.head("/static/js/api.js")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["etag"] == get.headers["etag"] and head.headers["content-type"] == get.headers["content-type"]


NOT_FILES = ["/static/", "/static/js", "/static/js/", "/static/js/nothing.js", "/static/js//api.js"]


@pytest.mark.parametrize("path", NOT_FILES)
def test_what_is_not_a_file_of_the_folder_is_404(client: httpx.Client, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404, path


def test_other_methods_are_refused(client: httpx.Client) -> None:
    assert client.post("/static/js/api.js").status_code == 405


def test_a_file_edited_on_disk_is_answered_anew(tmp_path: Path) -> None:
    (tmp_path / "js").mkdir()
    module = tmp_path / "js" / "page.js"
    module.write_text("export const a = 1;\n" * 100)
    assets = StaticAssets(tmp_path)

    def find(relative: str):
        # on a thread of its own: an earlier test (Playwright's sync API) may leave an event loop running on this one
        with ThreadPoolExecutor(1) as thread:
            return thread.submit(asyncio.run, assets.asset(relative)).result()

    first = find("js/page.js")
    assert first is not None and first.body == module.read_bytes() and first.gzipped is not None
    assert find("js/page.js") is first  # kept
    module.write_text("export const b = 2;\n" * 100)
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, first.stamp[0] + 1_000_000))  # a new mtime even on coarse clocks
    second = find("js/page.js")
    assert second is not None and second.body == module.read_bytes() and second.etag != first.etag
    assert gzip.decompress(second.gzipped) == module.read_bytes()
    module.unlink()
    assert find("js/page.js") is None


PAGE_SCRIPTS = sorted(p.stem for p in (STATIC / "js" / "pages").glob("*.js"))


@pytest.mark.parametrize("page", PAGE_SCRIPTS)
def test_each_page_s_bundle_and_its_source_map_are_answered(client: httpx.Client, page: str) -> None:
    expected = make_bundle(STATIC / "js" / "pages" / f"{page}.js", STATIC, map_name=f"{page}.js.map")
    with client.stream("GET", f"/static/bundles/{page}.js", headers={"Accept-Encoding": "gzip"}) as answer:
        raw = b"".join(answer.iter_raw())
    assert answer.status_code == 200 and answer.headers["content-encoding"] == "gzip"
    assert answer.headers["content-type"] == "application/javascript; charset=utf-8"
    assert answer.headers["cache-control"] == "no-cache"  # revalidated, as the modules it is made of
    assert gzip.decompress(raw).decode() == expected.script
    again = client.get(f"/static/bundles/{page}.js", headers={"If-None-Match": answer.headers["etag"]})
    assert again.status_code == 304
    source_map = client.get(f"/static/bundles/{page}.js.map")
    assert source_map.headers["content-type"].startswith("application/json")
    assert source_map.json() == json.loads(expected.source_map)


NOT_BUNDLES = [
    f"/static/bundles/{name}"
    for name in ("", "nothing.js", "Overview.js", "overview", "overview.map", "overview.js.map.map", "js/overview.js")
]


@pytest.mark.parametrize("path", NOT_BUNDLES)
def test_what_is_not_a_page_s_bundle_is_404(client: httpx.Client, path: str) -> None:
    assert client.get(path).status_code == 404, path


def test_a_bundle_is_made_anew_when_one_of_its_modules_is_edited(tmp_path: Path) -> None:
    (tmp_path / "js" / "pages").mkdir(parents=True)
    (tmp_path / "js" / "pages" / "p.js").write_text('import { a } from "../a.js";\nconsole.log(a);\n')
    module = tmp_path / "js" / "a.js"
    module.write_text("export const a = 1;\n")
    assets = StaticAssets(tmp_path)

    def find(relative: str):
        with ThreadPoolExecutor(1) as thread:  # as in the test above: a loop of its own
            return thread.submit(asyncio.run, assets.asset(relative)).result()

    first = find("bundles/p.js")
    assert first is not None and b"const a = 1;" in first.body
    assert find("bundles/p.js") is first  # kept
    module.write_text("export const a = 22;\n")
    second = find("bundles/p.js")
    assert second is not None and b"const a = 22;" in second.body and second.etag != first.etag
    assert find("bundles/p.js.map") is not None
    (tmp_path / "js" / "pages" / "p.js").unlink()
    assert find("bundles/p.js") is None
