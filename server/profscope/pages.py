"""HTML pages: server-rendered shells whose JavaScript reads its state from the URL and calls the API.

One route per view of the registry (``profscope.views.registry``), rendering the view's template.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote_plus

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from profscope import __version__
from profscope.api.deps import ServerState
from profscope.assets import web_dir
from profscope.views.registry import VIEWS
from profscope.views.view import View

if TYPE_CHECKING:
    from starlette.datastructures import QueryParams

    from profscope.state import Profscope

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(web_dir() / "templates"))

RUN_VIEWS = {view.name: view for view in VIEWS if view.run_tab}  # the per-run pages, in the nav's order
PAGES = {name: view.label for name, view in RUN_VIEWS.items()}
NAV = [{"name": view.name, "label": view.label, "href": view.page_path} for view in VIEWS if view.in_nav]


def _render(request: Request, template: str, **context: object) -> HTMLResponse:
    return templates.TemplateResponse(
        request, template, {"version": __version__, "pages": PAGES, "nav": NAV, **context}
    )


def _add_page(view: View) -> None:
    """A page that is not per run (the runs list, a source file) has a route of its own."""

    def page(request: Request) -> HTMLResponse:
        return _render(request, view.template, page=view.name, title=view.label)

    router.add_api_route(view.page_path, page, methods=["GET"], response_class=HTMLResponse, name=f"{view.name}_page")


for _view in VIEWS:
    if not _view.run_tab:
        _add_page(_view)


@router.get("/run")
def run_page(request: Request) -> Response:
    return RedirectResponse(url=f"/overview?{request.url.query}")


@router.get("/api-docs", response_class=HTMLResponse)
def api_docs_page(request: Request) -> HTMLResponse:
    return _render(request, "api_docs.html", page="api-docs", title="API")


@router.get("/{page}", response_class=HTMLResponse)
def run_view_page(request: Request, page: str, state: ServerState) -> HTMLResponse:
    """The per-run pages share one route (one metrics label, ``/{page}``)."""
    view = RUN_VIEWS.get(page)
    if view is None:
        raise HTTPException(status_code=404, detail=f"no page {page!r}")
    return _render(
        request,
        view.template,
        page=view.name,
        title=view.label,
        first_request=first_request(state, view, request.query_params),
    )


TRACE_PARAMS = {"run", "worker", "span"}


def first_request(state: Profscope, view: View, params: QueryParams) -> str | None:
    """The API request ``view``'s script will make first (``View.first_request``), for the page to have the
    browser fetch it with the modules; None unless the page's URL names the run and nothing besides its
    trace (any other parameter changes what the script asks), or when the run or trace is not there (the
    script then shows why, asking nothing)."""
    keys = [key for key, _ in params.multi_items()]
    if not view.first_request or "run" not in keys or len(set(keys)) < len(keys) or not set(keys) <= TRACE_PARAMS:
        return None
    run = state.run(params["run"])
    worker, span = params.get("worker") or None, params.get("span") or None
    trace = run.find(worker, span) if run is not None else None
    if trace is None or worker not in (None, trace.worker) or span not in (None, trace.span):
        return None  # the script takes the named worker and span only as they are listed
    return view.first_request.format(
        run=form_encoded(trace.run), worker=form_encoded(trace.worker), span=form_encoded(trace.span)
    )


def form_encoded(value: str) -> str:
    """``value`` as the browser's ``URLSearchParams`` writes it (application/x-www-form-urlencoded): ASCII
    letters, digits and ``*-._`` as they are, a space as ``+``, every other byte of its UTF-8 as ``%XX``."""
    return quote_plus(value, safe="*").replace("~", "%7E")
