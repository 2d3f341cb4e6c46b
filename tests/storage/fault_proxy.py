"""A real HTTP proxy in front of an emulator that can be told to fail: answer 500, answer slowly, or
cut a response body short. Clients talk real HTTP to it and it forwards real requests upstream."""

from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te", "trailer"}
_ERROR_BODY = b"<?xml version='1.0'?><Error><Code>InternalError</Code><Message>injected</Message></Error>"


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.mode = "pass"  # pass | fail | delay
        self.only_paths = ""  # when set, faults hit only requests whose path contains it
        self.delay_s = 0.0
        self.cut_after_bytes = 0  # > 0: the next `cuts_left` bodies larger than this are cut there
        self.cuts_left = 0
        self.requests = 0
        self.failed = 0
        self.cut = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                proxy._handle(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.requests += 1
            mode, delay_s = self.mode, self.delay_s
            if self.only_paths and self.only_paths not in handler.path:
                mode = "pass"
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        if mode == "fail":
            with self._lock:
                self.failed += 1
            handler.send_response(500)
            handler.send_header("Content-Type", "application/xml")
            handler.send_header("Content-Length", str(len(_ERROR_BODY)))
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(_ERROR_BODY)
            return
        if mode == "delay":
            time.sleep(delay_s)
        upstream = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP}
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        except OSError:
            handler.send_error(502)
            return
        finally:
            upstream.close()
        handler.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command == "HEAD":
            return
        with self._lock:
            cut_here = self.cuts_left > 0 and self.cut_after_bytes and len(data) > self.cut_after_bytes
            if cut_here:
                self.cuts_left -= 1
                self.cut += 1
        if cut_here:  # promise the whole body, send part of it, hang up
            handler.wfile.write(data[: self.cut_after_bytes])
            handler.wfile.flush()
            handler.close_connection = True
            return
        handler.wfile.write(data)
