"""The FastAPI application: routers, static assets, security headers, health endpoints."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from profscope import __version__
from profscope.api import memory, runs, source, views
from profscope.assets import plotly_js, web_dir
from profscope.config import Settings
from profscope.state import Profscope

log = logging.getLogger("profscope")

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'self'; form-action 'self'"
)


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = Profscope(settings)
        app.state.profscope = state
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

    @app.middleware("http")
    async def security_headers(request: Request, call_next) -> Response:  # type: ignore[no-untyped-def]
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def readyz(request: Request) -> JSONResponse:
        state: Profscope = request.app.state.profscope
        ready = state.scans > 0
        return JSONResponse({"ready": ready, "scans": state.scans}, status_code=200 if ready else 503)

    @app.get("/static/vendor/plotly.min.js", include_in_schema=False)
    def plotly_bundle() -> FileResponse:
        return FileResponse(
            plotly_js(), media_type="application/javascript", headers={"Cache-Control": "max-age=86400"}
        )

    app.include_router(runs.router)
    app.include_router(views.router)
    app.include_router(source.router)
    app.include_router(memory.router)
    app.mount("/static", StaticFiles(directory=str(web_dir() / "static")), name="static")

    from profscope import pages

    app.include_router(pages.router)
    return app
