"""What every request passes before the application sees it (docs/security.md).

One ASGI middleware, cheap and async, so that it keeps answering when the thread pool is busy:

- ``/healthz`` and ``/readyz`` are answered here, never through the thread pool that view
  requests can fill (a liveness probe that times out restarts the pod);
- a path with control characters (``/log%09in``) is refused, so the access check and the router,
  which both read ``scope["path"]`` (``route_path``), see the same clean path;
- the ``Host`` header must be one of the allowed hosts (a DNS-rebinding page names its own host);
- ``HEAD`` is answered wherever ``GET`` is (health checkers), without a body;
- a redirect never carries the request's ``Host`` back (``Location`` becomes a local path);

and a second one, inside the access check: the heavy routes run at most ``HEAVY_REQUESTS`` at a
time; a request waiting for its turn is dropped when its client leaves, and answered 503 when the
wait gets too long.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import orjson

from profscope.metrics import Metrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PROBE_PATHS = frozenset({"/healthz", "/readyz"})
# Routes whose cost grows with the trace (and, for a summary, with its tracks): at most this many
# run at once, so they cannot take every thread of the pool that the other views need.
HEAVY_PATHS = frozenset({"/api/timeline", "/api/timeline/summary", "/api/timeline/search", "/api/timeline/export"})
HEAVY_REQUESTS = max(2, min(8, os.cpu_count() or 2))  # computing more at once than cores only adds waiting
HEAVY_WAIT_S = 60.0  # a heavy request still waiting for its turn after this answers 503 (ask again)
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a request whose client went away
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def route_path(scope: Scope) -> str:
    """The path the router matches (percent-decoded by the server): the one the access check reads too."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def host_allowed(host: str, allowed: list[str]) -> bool:
    """``host`` (the Host header) against entries ``*``, ``name``, ``name:port`` or ``*.domain``."""
    host = host.strip().lower()
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    for entry in allowed:
        entry = entry.strip().lower()
        if entry == "*" or entry in (host, name):
            return True
        if entry.startswith("*.") and (name.endswith(entry[1:]) or name == entry[2:]):
            return True
    return False


class RequestGuard:
    def __init__(
        self, app: ASGIApp, allowed_hosts: list[str], readiness: Callable[[], tuple[bool, dict[str, Any]]]
    ) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts or ["*"]
        self.readiness = readiness

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        if _CONTROL_CHARACTERS.search(path):
            await _answer(send, 400, {"detail": "the path holds control characters"})
            return
        if path in PROBE_PATHS:
            await self._probe(scope, send, path)
            return
        host = _header(scope, b"host")
        if not host_allowed(host, self.allowed_hosts):
            detail = (f"this server does not answer for the host {host[:100]!r}: start it with --allowed-host "
                      f"{host.split(':')[0][:100] or 'NAME'} if that name is meant to reach it")  # fmt: skip
            await _answer(send, 400, {"detail": detail})
            return
        send = _local_redirects(send)
        if scope["method"] == "HEAD":
            scope["method"] = "GET"  # in place: the router records the matched route in this scope
            send = _without_body(send)
        await self.app(scope, receive, send)

    async def _probe(self, scope: Scope, send: Send, path: str) -> None:
        if path == "/healthz":
            await _answer(send, 200, {"status": "ok"}, head=scope["method"] == "HEAD")
            return
        ready, body = self.readiness()
        await _answer(send, 200 if ready else 503, body, head=scope["method"] == "HEAD")


class HeavyRequestQueue:
    """The heavy routes' own queue, inside the access check (a client without credentials never waits in it)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self.heavy = asyncio.Semaphore(HEAVY_REQUESTS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or route_path(scope) not in HEAVY_PATHS:
            await self.app(scope, receive, send)
            return
        self.metrics.heavy_waiting.inc()
        try:
            turn, buffered = await _wait_for_turn(self.heavy, receive)
        finally:
            self.metrics.heavy_waiting.dec()
        if turn == "disconnected":  # nobody reads this answer: it is for the access log and the metrics
            await _answer(send, CLIENT_CLOSED_REQUEST, {"detail": "the client left before its turn"})
            return
        if turn == "busy":
            await _answer(send, 503, {"detail": "too many large requests at once: ask again shortly"},
                          {"retry-after": "5"})  # fmt: skip
            return
        self.metrics.heavy_running.inc()
        try:
            await self.app(scope, _replaying(buffered, receive), send)
        finally:
            self.metrics.heavy_running.dec()
            self.heavy.release()


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return ""


async def _answer(send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None,
                  head: bool = False) -> None:  # fmt: skip
    content = orjson.dumps(body)
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()),
                   (b"cache-control", b"no-store")]  # fmt: skip
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": b"" if head else content})


def _without_body(send: Send) -> Send:
    async def send_headers_only(message: Message) -> None:
        if message["type"] == "http.response.body":
            if message.get("more_body"):
                return
            message = {"type": "http.response.body", "body": b""}
        await send(message)

    return send_headers_only


def _local_redirects(send: Send) -> Send:
    """``Location: http://HOST/x`` (Starlette's trailing-slash redirect copies the Host header) -> ``/x``."""

    async def send_local(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [
                (key, _local_location(value) if key.lower() == b"location" else value)
                for key, value in message.get("headers", [])
            ]
        await send(message)

    return send_local


def _local_location(value: bytes) -> bytes:
    parts = urlsplit(value.decode("latin-1"))
    if not parts.netloc:
        return value
    local = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return ("/" + local.lstrip("/")).encode("latin-1")


async def _wait_for_turn(semaphore: asyncio.Semaphore, receive: Receive) -> tuple[str, list[Message]]:
    """The outcome ("acquired", "disconnected" or "busy") and what the client sent meanwhile (replayed to the app)."""
    buffered: list[Message] = []
    acquiring = asyncio.ensure_future(semaphore.acquire())
    listening: asyncio.Future[Message] | None = None
    deadline = asyncio.get_running_loop().time() + HEAVY_WAIT_S
    outcome = "busy"
    try:
        while True:
            if listening is None:  # after the body, the next message is the client leaving
                listening = asyncio.ensure_future(receive())
            timeout = deadline - asyncio.get_running_loop().time()
            done, _ = await asyncio.wait({acquiring, listening}, timeout=max(timeout, 0),
                                         return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            if acquiring in done:
                outcome = "acquired"
                if listening is not None and listening.done():  # the client spoke in the same instant
                    buffered.append(listening.result())
                    listening = None
                return outcome, buffered
            if not done:
                return outcome, buffered
            message = listening.result()
            listening = None
            if message["type"] == "http.disconnect":
                outcome = "disconnected"
                return outcome, buffered
            buffered.append(message)
    finally:
        if listening is not None:
            listening.cancel()
        if outcome != "acquired":
            if acquiring.done() and not acquiring.cancelled():
                semaphore.release()  # granted just as we gave up
            acquiring.cancel()


def _replaying(buffered: list[Message], receive: Receive) -> Receive:
    async def replay() -> Message:
        return buffered.pop(0) if buffered else await receive()

    return replay
