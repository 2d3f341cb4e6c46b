"""plotly.js over real HTTP: gzipped once and sent as stored bytes (not compressed again per request on the
event loop), or plain to a client that does not accept gzip."""

from __future__ import annotations

import gzip
from pathlib import Path

import httpx

from profscope.assets import plotly_js
from serving import running_server


def test_plotly_is_sent_precompressed(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    original = plotly_js().read_bytes()
    with running_server([traces], tmp_path / "cache") as base, httpx.Client(base_url=base) as client:
        for _ in range(2):  # the second answer comes from the stored bytes
            with client.stream("GET", "/static/vendor/plotly.min.js", headers={"Accept-Encoding": "gzip"}) as zipped:
                raw = b"".join(zipped.iter_raw())
            assert zipped.headers["content-encoding"] == "gzip" and "accept-encoding" in zipped.headers["vary"].lower()
            # a stored body has its length up front; the middleware's per-request compression streams it chunked
            assert int(zipped.headers.get("content-length", -1)) == len(raw) < len(original) / 2
            assert gzip.decompress(raw) == original
        plain = client.get("/static/vendor/plotly.min.js", headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers and plain.content == original
