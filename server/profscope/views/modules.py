"""The Module page: time by ``nn.Module`` (a tree and an icicle), and the model phases of every step."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from profscope.analysis.modules import module_view
from profscope.analysis.payloads import query_of
from profscope.api.deps import IngestDep, SettingsDep, StoreDep, get_trace
from profscope.api.source import frame_links
from profscope.catalog import TraceFile
from profscope.config import Settings
from profscope.views.responses import Modules
from profscope.views.shared import STATUS_DOC, cached_view
from profscope.views.view import IDENT, View

router = APIRouter(prefix="/api", tags=["views"])


@router.get(
    "/modules",
    response_model=Modules,
    responses=STATUS_DOC,
    summary="Time by nn.Module (a tree, backward work attached to its module) and the model phases per step",
)
def modules(
    store: StoreDep, ingest: IngestDep, settings: SettingsDep, trace: TraceFile = Depends(get_trace)
) -> Response:
    return cached_view(store, ingest, trace, "modules", lambda body: _with_source_links(body, settings))


def _with_source_links(body: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Each module's frame gets its links to the Source page (and the configured external viewer)."""
    pending = list(body.get("modules", []))
    while pending:
        row = pending.pop()
        pending.extend(row["children"])
        if row.get("frame"):
            links = frame_links(settings, row["frame"])
            row["frame"] |= {"href": links.get("view"), "external": links.get("external")}
    return body


VIEW = View("modules", "Module", router, queries=(query_of(module_view),), first_request=f"/api/modules?{IDENT}")
