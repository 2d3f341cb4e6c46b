"""Browser-test fixtures: a real ``profscope serve`` over HTTP, and Debian's Chromium via Playwright.

The corpus comes from ``PROFSCOPE_CORPUS`` (default ``../shared/corpus`` next to the repository).
Every ``page`` fails its test on console errors and uncaught page errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOTS,
    SOURCE_FILE,
    SOURCE_TARGET_LINE,
    VIEWPORT,
    Server,
    corpus_path,
    start_server,
    watch_page,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "allow_console(*patterns): console errors these substrings excuse")


@pytest.fixture(scope="session")
def source_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sources")
    lines = [f"# line {n} of a stand-in for the profiled script" for n in range(1, 121)]
    lines[SOURCE_TARGET_LINE - 1] = "        loss.backward()  # the frame the stack points at"
    (root / SOURCE_FILE).write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, source_root: Path) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("server")
    roots = [corpus_path(relative) for relative in ROOTS.values()]
    started = start_server(roots, work / "cache", work / "server.log", "--source-root", str(source_root))
    try:
        started.wait_parsed()
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, request: pytest.FixtureRequest) -> Iterator[object]:
    """A fresh page; the test fails if any page of its context logs a console error or throws."""
    context = browser.new_context(viewport=VIEWPORT)
    errors: list[str] = []
    context.on("page", lambda opened: watch_page(opened, errors))  # pages a test opens later, too
    yield context.new_page()
    marker = request.node.get_closest_marker("allow_console")
    allowed = marker.args if marker else ()
    unexpected = [e for e in errors if not any(re.search(pattern, e) for pattern in allowed)]
    context.close()
    assert not unexpected, f"console / page errors: {unexpected}"
