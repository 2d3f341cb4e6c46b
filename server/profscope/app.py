"""The FastAPI application: routers, static assets, security headers, access control, health and metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import Response

from profscope import __version__, auth
from profscope.assets import web_dir
from profscope.config import Settings
from profscope.guard import (
    HEAVY_PATHS,
    PROBE_PATHS,
    HeavyRequestQueue,
    Message,
    Receive,
    RequestGuard,
    Scope,
    Send,
    route_path,
)
from profscope.logs import ACCESS_LOGGER
from profscope.metrics import CONTENT_TYPE, Metrics
from profscope.state import Profscope
from profscope.static_assets import StaticAssets
from profscope.views.registry import VIEWS

log = logging.getLogger("profscope")
access_log = logging.getLogger(ACCESS_LOGGER)

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'self'; form-action 'self'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)
GUARDED_PATHS = PROBE_PATHS | HEAVY_PATHS
LOGGED_METHOD_CHARS = 16  # a client may send a method name of any length


def create_app(settings: Settings, started: Profscope | None = None) -> FastAPI:
    """``started``: the state ``serve`` built and started before importing this module (its first parses run
    already); it is stopped with the app. Without it, the app builds and starts its own at startup."""
    metrics = started.metrics if started is not None else Metrics()
    if started is not None:
        started.show_views(VIEWS)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = started or Profscope(settings, metrics, VIEWS)
        app.state.profscope = state
        if started is None:
            state.start()
        try:
            yield
        finally:
            state.stop()

    app = FastAPI(
        title="profscope",
        version=__version__,
        description="Dashboard for PyTorch profiler traces. Every page has a JSON twin under /api.",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )

    app.add_middleware(GZipMiddleware, minimum_size=4096)  # JSON of big windows and tables compresses ~10x
    app.add_middleware(HeavyRequestQueue, metrics=metrics)
    # Middleware: the last added runs first. Order: observe (log + metrics + headers) > guard (probes,
    # hosts, paths) > access control > the heavy routes' queue > gzip.
    if settings.access_control:
        app.state.access_control = auth.AccessControl(settings)
        app.add_middleware(auth.AccessMiddleware, control=app.state.access_control)
    app.add_middleware(RequestGuard, allowed_hosts=settings.allowed_hosts, readiness=lambda: readiness(app))

    app.add_middleware(Observe, metrics=metrics)

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    for view in VIEWS:
        if view.router is not None:
            app.include_router(view.router)
    app.include_router(auth.router)
    app.mount("/static", StaticAssets(web_dir() / "static"), name="static")

    from profscope import pages

    app.include_router(pages.router)
    return app


def readiness(app: FastAPI) -> tuple[bool, dict[str, Any]]:
    """/readyz (answered by the guard, outside the thread pool): what "ready" means with roots that cannot be
    listed is ``Profscope.readiness``'s to say."""
    state: Profscope | None = getattr(app.state, "profscope", None)
    if state is None:
        return False, {"ready": False, "scans": 0, "failing_roots": []}
    ready, failing = state.readiness()
    return ready, {"ready": ready, "scans": state.scans, "failing_roots": failing}


def route_template(scope: Scope, status: int) -> str:
    """The route's path template (``/api/overview``, ``/{page}``, ``/static``): a bounded metrics label."""
    if route_path(scope) in GUARDED_PATHS:  # answered by the guard, maybe without reaching a route
        return route_path(scope)
    route = scope.get("route")
    if route is not None and getattr(route, "path", None):
        return route.path
    if scope.get("root_path"):  # a mount (static files)
        return scope["root_path"]
    return "<refused>" if status in (401, 403) else "<unmatched>"


class Observe:
    """The outermost middleware, plain ASGI (Starlette's ``BaseHTTPMiddleware`` costs a task and a stream per
    request, ~1 ms each on this machine): every answer gets the security headers it does not set itself, is
    counted in the metrics and written to the access log."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method = scope["method"][:LOGGED_METHOD_CHARS]  # before the guard answers a HEAD as a GET
        status = 500  # what the server answers when the app raises before it answered

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", ()))
                present = {key.lower() for key, _ in headers}
                headers += [(key, value) for key, value in SECURITY_HEADERS if key not in present]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            seconds = time.perf_counter() - started
            route = route_template(scope, status)
            self.metrics.observe_request(method, route, status, seconds)
            path = scope["path"]
            access_log.info(
                "%s %s %d %.1fms",
                method,
                path,
                status,
                seconds * 1000,
                extra={
                    "method": method,
                    "route": route,
                    "path": path,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                    "user": scope.get("state", {}).get("user"),
                },
            )
