"""HTML pages: server-rendered shells whose JavaScript reads its state from the URL and calls the API."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from profscope import __version__
from profscope.assets import web_dir

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(web_dir() / "templates"))

PAGES = {
    "overview": "Overview",
    "operators": "Operator",
    "kernels": "Kernel",
    "memory": "Memory",
    "distributed": "Distributed",
    "trace": "Trace",
    "paddle": "Paddle Summary",
}


def _render(request: Request, template: str, **context: object) -> HTMLResponse:
    return templates.TemplateResponse(request, template, {"version": __version__, "pages": PAGES, **context})


@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request) -> HTMLResponse:
    return _render(request, "runs.html", page="runs", title="Runs")


@router.get("/run")
def run_page(request: Request) -> Response:
    return RedirectResponse(url=f"/overview?{request.url.query}")


@router.get("/source", response_class=HTMLResponse)
def source_page(request: Request) -> HTMLResponse:
    return _render(request, "source.html", page="source", title="Source")


@router.get("/api-docs", response_class=HTMLResponse)
def api_docs_page(request: Request) -> HTMLResponse:
    return _render(request, "api_docs.html", page="api-docs", title="API")


@router.get("/{page}", response_class=HTMLResponse)
def view_page(request: Request, page: str) -> HTMLResponse:
    if page not in PAGES:
        raise HTTPException(status_code=404, detail=f"no page {page!r}")
    return _render(request, f"{page}.html", page=page, title=PAGES[page])
