"""Jump to source: links for stack frames, and a viewer that serves only files under source roots."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import Response

from profscope.api.deps import get_state, json_response
from profscope.config import Settings

router = APIRouter(prefix="/api", tags=["source"])
MAX_SOURCE_BYTES = 4 << 20


def resolve_source(settings: Settings, path: str) -> Path | None:
    """The readable file a frame's path names, if it lies under a configured source root."""
    candidate = Path(path)
    for root in settings.source_roots:
        root = Path(root).resolve()
        options = [candidate] if candidate.is_absolute() else []
        options.append(root / candidate.as_posix().lstrip("/"))
        if candidate.is_absolute():  # a path from another machine: match its tail under the root
            parts = candidate.parts[1:]
            options += [root.joinpath(*parts[i:]) for i in range(len(parts))]
        for option in options:
            try:
                real = option.resolve()
                real.relative_to(root)
            except (ValueError, OSError):
                continue
            if real.is_file():
                return real
    return None


def _repository_path(settings: Settings, path: str) -> str:
    for prefix, replacement in settings.source_path_map:
        if path.startswith(prefix):
            return replacement + path[len(prefix) :]
    return path.lstrip("/")


def frame_links(settings: Settings, frame: dict[str, Any]) -> dict[str, str]:
    if "path" not in frame:
        return {}
    path, line = frame["path"], frame["line"]
    links = {"view": "/source?" + urlencode({"path": path, "line": line})}
    template = settings.source_link_template
    if template:
        # "vscode://file/{path}" with an absolute path would read "file//home/...": the template's slash is the root
        shown = path.lstrip("/") if "/{path}" in template else path
        links["external"] = template.format(
            path=quote(shown), line=line, relpath=quote(_repository_path(settings, path)), rev=settings.source_revision
        )
    return links


@router.get(
    "/source",
    summary="Lines of a source file around a line (only under --source-root)",
    responses={
        404: {"description": "No source root is configured, or the path is not a file under one: `{detail}`."},
        413: {"description": "The file is too large to show."},
    },
)
def source(
    request: Request,
    path: str = Query(..., description="File path as written in the stack frame"),
    line: int = Query(1, ge=1),
    context: int = Query(30, ge=0, le=500),
) -> Response:
    settings = get_state(request).settings
    if not settings.source_roots:
        raise HTTPException(404, detail="no --source-root is configured, so source files are not served")
    resolved = resolve_source(settings, path)
    if resolved is None:
        raise HTTPException(404, detail=f"{path} is not a readable file under the configured source roots")
    if resolved.stat().st_size > MAX_SOURCE_BYTES:
        raise HTTPException(413, detail="the file is too large to show")
    lines = resolved.read_text(errors="replace").splitlines()
    first = max(1, line - context)
    last = min(len(lines), line + context)
    return json_response(
        {
            "path": path,
            "resolved": str(resolved),
            "line": line,
            "first_line": first,
            "lines": lines[first - 1 : last],
        }
    )
