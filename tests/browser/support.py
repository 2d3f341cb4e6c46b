"""Helpers for the browser tests: the corpus, a real ``profscope serve`` subprocess, screenshots."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CORPUS = Path(
    os.environ.get("PROFSCOPE_CORPUS", Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus")
).resolve()
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = os.environ.get("PROFSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1280, "height": 900}

# The runs every page test uses; each root is one run folder, so the run is named after it.
ROOTS = {
    "resnet50_num_workers_0": "kineto-tb_plugin/samples/resnet50_num_workers_0",  # old format, V100
    "tinygpt_cpu": "generated/tinygpt_cpu",  # torch 2.x, CPU only, with_stack
    "trace_filter": "hta/trace_filter",  # HTA: 2 ranks of a 128-rank NCCL job on A100s
    "memory_analysis": "hta/memory_analysis",  # not a Chrome trace: fails with 422
    "execution_trace": "hta/execution_trace",  # an execution trace next to a kineto trace
}

# A stand-in for the script the tinygpt_cpu stacks point at (gen_cpu_traces.py(67): train).
SOURCE_FILE = "gen_cpu_traces.py"
SOURCE_TARGET_LINE = 67


def corpus_path(relative: str) -> Path:
    path = CORPUS / relative
    if not path.exists():
        pytest.fail(f"{path} is missing: set PROFSCOPE_CORPUS to the shared trace corpus")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    log: Path
    roots: list[Path] = field(default_factory=list)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"profscope exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if get_json(f"{self.url}/readyz")[0] == 200:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"profscope did not become ready in {timeout_s}s:\n{self.log.read_text()[-3000:]}")

    def wait_parsed(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _, body = get_json(f"{self.url}/api/runs")
            if not any(run["state"] == "parsing" for run in body["runs"]):
                return
            time.sleep(0.2)
        raise RuntimeError(f"traces still parsing after {timeout_s}s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(roots: list[Path], cache_dir: Path, log: Path, *extra: str) -> Server:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "profscope.cli",
        "serve",
        *map(str, roots),
        "--port",
        str(port),
        "--cache-dir",
        str(cache_dir),
        "--log-level",
        "warning",
        *extra,
    ]
    handle = log.open("w")
    process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    server = Server(url=f"http://127.0.0.1:{port}", process=process, log=log, roots=roots)
    try:
        server.wait_ready()
    except RuntimeError:
        server.stop()
        raise
    return server


def watch_page(target, errors: list[str]) -> None:
    target.on("console", lambda message: errors.append(f"console: {message.text}") if message.type == "error" else None)
    target.on("pageerror", lambda error: errors.append(f"pageerror: {error}"))


def screenshot(target, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"
    target.screenshot(path=str(path), full_page=True)
    return path


def query_of(url: str) -> dict[str, str]:
    """The query parameters of a URL (one value each)."""
    from urllib.parse import parse_qsl, urlsplit

    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def wait_for_plot(target, selector: str, marks: str, timeout_ms: int = 20_000) -> int:
    """Wait until the plotly chart under `selector` has drawn at least one of `marks`; their count."""
    target.wait_for_function(
        "([sel, marks]) => document.querySelectorAll(`${sel} ${marks}`).length > 0",
        arg=[selector, marks],
        timeout=timeout_ms,
    )
    return target.locator(f"{selector} {marks}").count()


PIE_SLICES = "g.slice path.surface"
BARS = "g.trace.bars g.point path"
