"""The wheel carries the web assets, the demo run and the compiled decoder: nothing else is needed."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import REPO


def test_wheel_ships_templates_static_files_and_demo(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
    )
    (wheel,) = tmp_path.glob("profscope-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for template in ("base.html", "overview.html", "operators.html", "kernels.html", "runs.html", "source.html"):
        assert f"profscope/web/templates/{template}" in names
    assert "profscope/web/static/css/profscope.css" in names
    assert any(n.startswith("profscope/web/static/js/pages/") for n in names)
    assert "profscope/web/static/js/chart/core.js" in names  # the charts are drawn by our own modules: no npm, no CDN
    assert any(n.startswith("profscope/demo/traces/demo_run/") and n.endswith(".pt.trace.json.gz") for n in names)
    # the C decoder, compiled when the machine has a compiler (every machine that runs these tests does)
    assert any(n.startswith("profscope/ingest/_native_events.") and n.endswith(".so") for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "profscope = profscope.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
