"""Jump to source: frame links, and a viewer that serves only files under the configured source roots."""

from __future__ import annotations

from pathlib import Path

import httpx

from profscope.analysis.callstacks import parse_frame
from profscope.api.source import frame_links, resolve_source
from profscope.catalog import SNAPSHOT, TraceFile
from profscope.config import Settings
from profscope.sources.base import ObjectInfo
from serving import running_server


def test_frames_parse_and_link(tmp_path: Path) -> None:
    frame = parse_frame("/opt/app/train/model.py(123): forward")
    assert (frame["path"], frame["line"], frame["func"]) == ("/opt/app/train/model.py", 123, "forward")
    assert parse_frame("<built-in method conv2d of type object>") == {"text": "<built-in method conv2d of type object>"}
    settings = Settings(
        source_link_template="https://git.example.com/org/repo/blob/{rev}/{relpath}#L{line}",
        source_path_map=[("/opt/app/", "src/")],
        source_revision="abc123",
    )
    links = frame_links(settings, frame)
    assert links["view"] == "/source?path=%2Fopt%2Fapp%2Ftrain%2Fmodel.py&line=123"
    assert links["external"] == "https://git.example.com/org/repo/blob/abc123/src/train/model.py#L123"
    vscode = frame_links(Settings(source_link_template="vscode://file/{path}:{line}"), frame)
    assert vscode["external"] == "vscode://file/opt/app/train/model.py:123"  # one slash, as VS Code wants


def test_a_frame_link_names_the_run_it_came_from() -> None:
    """The source viewer's nav leads back to the run (issue 20); a snapshot's name is no span."""
    frame = parse_frame("/opt/app/train/model.py(123): forward")
    info = ObjectInfo(key="job/w0.1.pt.trace.json", size=1, version="1")
    trace = TraceFile(source="/data", info=info, run="job", worker="w0", span="1")
    snapshot = TraceFile(source="/data", info=info, run="job", worker="snap", span="snap", kind=SNAPSHOT)
    view = frame_links(Settings(), frame, trace)["view"]
    assert view == "/source?path=%2Fopt%2Fapp%2Ftrain%2Fmodel.py&line=123&run=job&worker=w0&span=1"
    assert frame_links(Settings(), frame, snapshot)["view"].endswith("&line=123&run=job&worker=snap")


def test_paths_resolve_only_under_a_source_root(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "train").mkdir(parents=True)
    (root / "train" / "model.py").write_text("a\nb\n")
    (tmp_path / "secret.py").write_text("no")
    (root / "escape.py").symlink_to(tmp_path / "secret.py")
    settings = Settings(source_roots=[root])
    assert resolve_source(settings, "train/model.py") == (root / "train" / "model.py").resolve()
    # a frame recorded on another machine: its tail is found under the root
    assert resolve_source(settings, "/home/someone/project/train/model.py") == (root / "train" / "model.py").resolve()
    assert resolve_source(settings, "../secret.py") is None
    assert resolve_source(settings, str(tmp_path / "secret.py")) is None
    assert resolve_source(settings, "escape.py") is None  # a symlink leaving the root


def test_source_viewer_over_http(tmp_path: Path) -> None:
    source_root = tmp_path / "src"
    source_root.mkdir()
    (source_root / "model.py").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    traces = tmp_path / "traces"
    traces.mkdir()
    with running_server([traces], tmp_path / "cache", "--source-root", str(source_root)) as base:
        shown = httpx.get(f"{base}/api/source", params={"path": "/elsewhere/model.py", "line": 50, "context": 2}).json()
        assert shown["first_line"] == 48 and shown["lines"] == ["line 48", "line 49", "line 50", "line 51", "line 52"]
        refused = httpx.get(f"{base}/api/source", params={"path": "../../etc/passwd", "line": 1})
        assert refused.status_code == 404 and "not a readable file" in refused.json()["detail"]
