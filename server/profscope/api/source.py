"""Jump to source: links for stack frames, and a viewer that serves only files under source roots."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response

from profscope.api.deps import SettingsDep, json_response
from profscope.catalog import TABLE_KINDS, TraceFile
from profscope.config import Settings
from profscope.views.responses import SourceLines

router = APIRouter(prefix="/api", tags=["source"])
MAX_SOURCE_BYTES = 4 << 20
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux
MAX_PATH_PARTS = 64  # each tail is tried under each root: the cost grows with the square of the parts
MAX_LINE = 100_000_000  # far beyond any file this viewer shows (4 MiB)


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
                if real.is_file():
                    return real
            except (ValueError, OSError):  # outside the root; or a name too long for the file system
                continue
    return None


def _shown_path(settings: Settings, resolved: Path) -> str:
    """The file relative to its source root: where the server keeps its files is not the users' business."""
    for root in settings.source_roots:
        root = Path(root).resolve()
        if resolved.is_relative_to(root):
            return resolved.relative_to(root).as_posix()
    return resolved.name


def _repository_path(settings: Settings, path: str) -> str:
    for prefix, replacement in settings.source_path_map:
        if path.startswith(prefix):
            return replacement + path[len(prefix) :]
    return path.lstrip("/")


def frame_links(settings: Settings, frame: dict[str, Any], file: TraceFile | None = None) -> dict[str, str]:
    """The source viewer's link for a frame (naming the run / worker / span it came from, so the
    viewer's nav leads back there), and the editor / repository link when one is configured."""
    if "path" not in frame:
        return {}
    path, line = frame["path"], frame["line"]
    came_from = {"run": file.run, "worker": file.worker} if file is not None else {}
    if file is not None and file.kind in TABLE_KINDS:  # a snapshot's or log's name is no span of the trace pages
        came_from["span"] = file.span
    links = {"view": "/source?" + urlencode({"path": path, "line": line, **came_from})}
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
    response_model=SourceLines,
    summary="Lines of a source file around a line (only under --source-root)",
    responses={
        400: {"description": "The path has more than 64 parts: `{detail}`."},
        404: {"description": "No source root is configured, or the path is not a file under one: `{detail}`."},
        413: {"description": "The file is too large to show."},
    },
)
def source(
    settings: SettingsDep,
    path: str = Query(..., max_length=MAX_PATH_CHARS, description="File path as written in the stack frame"),
    line: int = Query(1, ge=1, le=MAX_LINE),
    context: int = Query(30, ge=0, le=500),
) -> Response:
    if not settings.source_roots:
        raise HTTPException(404, detail="no --source-root is configured, so source files are not served")
    if len(Path(path).parts) > MAX_PATH_PARTS:
        raise HTTPException(400, detail=f"the path has more than {MAX_PATH_PARTS} parts")
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
            "resolved": _shown_path(settings, resolved),
            "line": line,
            "first_line": first,
            "lines": lines[first - 1 : last],
        }
    )
