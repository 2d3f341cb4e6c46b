"""The web assets (``web/static``) answered from memory, on the event loop.

A page's first load asks for its stylesheet and a dozen modules at once. Starlette's
``StaticFiles`` answered each through the thread pool (a stat, an open, a read per file) and the gzip
middleware compressed the larger ones again on every request; on a 2-core machine, with Chromium
starting its renderer on the same cores, the last module arrived ~300 ms after it was asked for.
Here each file is read and compressed once (in a thread), kept with its ETag, and answered from memory in one
send; a file that changed on disk (a developer editing a module) is read again, as ``os.stat`` says.

``bundles/<page>.js`` is a page's script with every module it imports, as one script, and ``bundles/<page>.js.map``
its source map (``module_bundle.py``): made, kept and made again the same way.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import mimetypes
import os
import re
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from stat import S_ISREG

from profscope.guard import Receive, Scope, Send, route_path
from profscope.module_bundle import Bundle, is_current, make_bundle

COMPRESSED_TYPES = ("text/", "application/javascript", "application/json", "image/svg+xml")
MIN_COMPRESSED_BYTES = 1024  # smaller files gain less than the header costs
BUNDLES = "bundles/"
_PAGE_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Asset:
    stamp: tuple[int, int]  # (mtime_ns, size): read again when either changes; (0, 0) for a bundle (its Bundle's)
    body: bytes
    gzipped: bytes | None
    etag: bytes
    media_type: bytes
    last_modified: bytes


def _media_type(path: Path) -> str:
    if path.suffix in (".js", ".mjs"):
        return "application/javascript"  # mimetypes says text/javascript on some systems, nothing on others
    guessed, _ = mimetypes.guess_type(path.name)
    return guessed or "application/octet-stream"


def load_asset(path: Path, stat: os.stat_result) -> Asset:
    return make_asset(path.read_bytes(), _media_type(path), (stat.st_mtime_ns, stat.st_size), stat.st_mtime)


def make_asset(body: bytes, media_type: str, stamp: tuple[int, int], mtime: float) -> Asset:
    gzipped = None
    if len(body) >= MIN_COMPRESSED_BYTES and media_type.startswith(COMPRESSED_TYPES):
        gzipped = gzip.compress(body, compresslevel=9, mtime=0)
    charset = "; charset=utf-8" if media_type.startswith("text/") or media_type == "application/javascript" else ""
    return Asset(
        stamp=stamp,
        body=body,
        gzipped=gzipped,
        etag=f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'.encode(),
        media_type=(media_type + charset).encode(),
        last_modified=formatdate(mtime, usegmt=True).encode(),
    )


def bundle_assets(page_script: Path, static_root: Path) -> tuple[Bundle, Asset, Asset]:
    """A page's bundle, as its script and its source map."""
    bundle = make_bundle(page_script, static_root, map_name=f"{page_script.stem}.js.map")
    mtime = max(recorded[1] for recorded in bundle.stamps) / 1e9
    script = make_asset(bundle.script.encode(), "application/javascript", (0, 0), mtime)
    source_map = make_asset(bundle.source_map.encode(), "application/json", (0, 0), mtime)
    return bundle, script, source_map


class StaticAssets:
    """An ASGI app mounted at ``/static``: GET (and HEAD, through the guard) of a file under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.assets: dict[str, Asset] = {}
        self.bundles: dict[str, tuple[Bundle, Asset, Asset]] = {}

    def locate(self, relative: str) -> tuple[Path, os.stat_result] | None:
        """The file ``relative`` names under the root, and its stat; None for anything else."""
        if not relative or relative.startswith("/") or "\\" in relative or "\x00" in relative:
            return None
        parts = relative.split("/")
        if any(part in ("", ".", "..") for part in parts):
            return None
        path = self.root.joinpath(*parts)
        try:
            stat = path.stat()
        except (OSError, ValueError):
            return None
        return (path, stat) if S_ISREG(stat.st_mode) else None

    def kept(self, relative: str, stat: os.stat_result) -> Asset | None:
        asset = self.assets.get(relative)
        return asset if asset is not None and asset.stamp == (stat.st_mtime_ns, stat.st_size) else None

    async def asset(self, relative: str) -> Asset | None:
        """The file ``relative`` names, kept or read now (in a thread: a large file takes a while to compress)."""
        if relative.startswith(BUNDLES):
            return await self.bundle(relative.removeprefix(BUNDLES))
        located = self.locate(relative)
        if located is None:
            return None
        asset = self.kept(relative, located[1])
        if asset is None:
            asset = self.assets[relative] = await asyncio.to_thread(load_asset, *located)
        return asset

    async def bundle(self, name: str) -> Asset | None:
        """``<page>.js`` or ``<page>.js.map``: the page's bundle or its source map, kept or made now (in a thread)."""
        page, is_map = name.removesuffix(".map"), name.endswith(".map")
        page = page.removesuffix(".js") if page.endswith(".js") else ""
        script = self.root / "js" / "pages" / f"{page}.js"
        if not _PAGE_NAME.fullmatch(page) or not script.is_file():
            return None
        kept = self.bundles.get(page)
        if kept is None or not is_current(kept[0]):
            kept = self.bundles[page] = await asyncio.to_thread(bundle_assets, script, self.root)
        return kept[2] if is_map else kept[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        relative = route_path(scope).removeprefix("/")
        asset = await self.asset(relative) if scope["method"] == "GET" else None
        if asset is None:
            status = 404 if scope["method"] == "GET" else 405
            body = b"Not Found" if status == 404 else b"Method Not Allowed"
            await _send(send, status, [(b"content-type", b"text/plain; charset=utf-8")], body)
            return
        headers = [
            (b"content-type", asset.media_type),
            (b"etag", asset.etag),
            (b"last-modified", asset.last_modified),
            (b"cache-control", b"no-cache"),  # revalidated (ETag): an upgrade never mixes old and new modules
        ]
        request_headers = dict(scope["headers"])
        if asset.etag in _etags(request_headers.get(b"if-none-match", b"")):
            await _send(send, 304, headers, b"")
            return
        body = asset.body
        if asset.gzipped is not None:
            headers.append((b"vary", b"Accept-Encoding"))
            if b"gzip" in request_headers.get(b"accept-encoding", b""):
                headers.append((b"content-encoding", b"gzip"))  # the gzip middleware passes it through
                body = asset.gzipped
        await _send(send, 200, headers, body)


def _etags(header: bytes) -> set[bytes]:
    return {tag.strip().removeprefix(b"W/") for tag in header.split(b",") if tag.strip()}


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    if status != 304:
        headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
