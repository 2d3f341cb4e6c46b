"""Cold page load in a fresh Chromium: when each view shows its first content, and when its first chart.

    python bench/bench_cold_load.py ROOT [ROOT ...] [--run NAME] [--repeat 5] [--pages overview,operators,...]
    python bench/bench_cold_load.py --url http://127.0.0.1:8080 --run NAME   # a server already running

Serves the roots (``profscope serve``), waits for the ingest (the views' answers are then memoised
by the first visit, which is not counted), and opens each page ``--repeat`` times, each time in a
new browser context (empty HTTP cache, no compiled-code cache). Times come from the page's own
clock (``performance.now()``, 0 = navigation start), taken by a small observer the context adds to each
page before it loads (``OBSERVER``: it looks at the page every animation frame):
- content_ms: the first ``section.panel`` of the view is in the page (numbers and tables);
- chart_ms: the first chart has drawn its SVG (profscope's own charts, ``svg.chart-svg``; a plotly chart,
  ``.js-plotly-plot .main-svg``, for the code before run 26, so that an A/B against it measures the same moment);
- all_charts_ms: when the number of drawn charts last changed, once it has not changed for 300 ms (a
  page draws its charts one after another).

Nothing else runs in the page until its first chart is drawn (or 10 s have passed): the observer reports
through the console, which the harness listens to. Playwright's own polling (``wait_for_function``) would
inject its ~300 KB script into the page as the page loads, and executing it took 130-150 ms of the
page's main thread before the page's modules ran (``bench/RESULTS.md``, run 25); the numbers of runs
before 25 include that.
Prints one JSON object with the median, min and max per page.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from local_http import free_port, get, stop_server

CHROMIUM = os.environ.get("PROFSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
PAGES = ["overview", "operators", "kernels", "memory", "distributed"]
# Added to each page before its own scripts: marks when the view's content and its charts appear, from the
# page's own clock, and says so on the console (which the harness hears without running anything in the page).
OBSERVER = """(() => {
  const marks = (window.__coldLoad = { charts: 0 });
  const poll = () => {
    const now = performance.now();
    if (marks.content_ms === undefined && document.querySelector("#main section.panel:not([hidden])")) {
      marks.content_ms = now;
      console.debug("cold-load:content");
    }
    const chart = document.querySelector("#main svg.chart-svg, #main .js-plotly-plot .main-svg");
    if (marks.chart_ms === undefined && chart) marks.chart_ms = now;
    const charts = document.querySelectorAll("#main .chart-drawn, #main .js-plotly-plot").length;
    if (charts !== marks.charts) {
      marks.charts = charts;
      marks.last_chart_ms = now;
      console.debug("cold-load:chart");
    }
    if (now < 60000) requestAnimationFrame(poll);
  };
  requestAnimationFrame(poll);
})();"""
SETTLED_S = 0.3  # the charts are all drawn once their number has not changed for this long


def wait_ingested(base: str, server: subprocess.Popen | None) -> None:
    while True:
        if server is not None and server.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            status, runs = get(f"{base}/api/runs")
            if status == 200 and runs["runs"] and all(r["state"] != "parsing" for r in runs["runs"]):
                return
        except OSError:
            pass
        time.sleep(0.2)


def open_cold(browser, url: str) -> dict:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(OBSERVER)
    page = context.new_page()
    heard: list[tuple[str, float]] = []
    page.on("console", lambda message: heard.append((message.text, time.monotonic())))
    try:
        page.goto(url, wait_until="commit")
        started = time.monotonic()

        def last_heard(text: str) -> float | None:
            return max((at for said, at in heard if said == text), default=None)

        while last_heard("cold-load:content") is None:
            if time.monotonic() - started > 60:
                raise TimeoutError(f"{url}: no content after 60 s")
            page.wait_for_timeout(20)
        while True:  # the first chart within 10 s (a view may have none for this run), then no new one for 0.3 s
            last = last_heard("cold-load:chart")
            if last is None and time.monotonic() - started > 10:
                break
            if last is not None and time.monotonic() - last > SETTLED_S:
                break
            page.wait_for_timeout(20)
        marks = page.evaluate("() => window.__coldLoad")
        return {
            "content_ms": marks["content_ms"],
            "chart_ms": marks.get("chart_ms"),
            "charts": marks["charts"],
            "all_charts_ms": marks.get("last_chart_ms"),
        }
    finally:
        context.close()


def summary(values: list[float | None]) -> dict | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"median": round(statistics.median(present)), "min": round(min(present)), "max": round(max(present))}


def measure(targets: list[tuple[str, str]], repeat: int) -> dict:
    """``targets``: (name, url) pairs, each opened cold ``repeat`` times after one warming visit."""
    from playwright.sync_api import sync_playwright

    results = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for name, url in targets:
            open_cold(browser, url)  # warms the server's memoised answers, not the browser
            samples = [open_cold(browser, url) for _ in range(repeat)]
            results[name] = {
                "content_ms": summary([s["content_ms"] for s in samples]),
                "first_chart_ms": summary([s["chart_ms"] for s in samples]),
                "charts": samples[-1]["charts"],
            }
        browser.close()
    return results


# --floors: what this machine and browser take for a page that does nothing (its content is in the HTML), served
# as a static file by Python's http.server. A view's page cannot show its content sooner than this.
FLOOR_PAGES = {
    "floor_blank": '<section class="panel">Nothing else on this page.</section>',
}


def serve_floor_pages(directory: Path) -> tuple[str, subprocess.Popen]:
    for name, body in FLOOR_PAGES.items():
        html = f'<!doctype html><html><head><meta charset="utf-8"><title>{name}</title></head><body><main id="main">{body}</main></body></html>'  # noqa: E501
        (directory / f"{name}.html").write_text(html)
    port = free_port()
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(directory)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    while server.poll() is None:
        try:
            with urllib.request.urlopen(f"{base}/floor_blank.html", timeout=5):
                return base, server
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the floor pages' http.server exited")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="*", type=Path)
    parser.add_argument("--url", help="measure a server that is already running")
    parser.add_argument("--run", help="the run to open (default: the first listed)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pages", default=",".join(PAGES))
    parser.add_argument("--floors", action="store_true", help="also measure the floor page (FLOOR_PAGES)")
    args = parser.parse_args()
    pages = args.pages.split(",")
    if args.url:
        base, server = args.url.rstrip("/"), None
        work = None
    else:
        work = tempfile.TemporaryDirectory()
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "profscope.cli", "serve", *map(str, args.roots), "--port", str(port),
                   "--cache-dir", str(Path(work.name) / "cache"), "--log-level", "warning"]  # fmt: skip
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    floors = None
    try:
        wait_ingested(base, server)
        run = args.run or get(f"{base}/api/runs")[1]["runs"][0]["run"]
        targets = [(name, f"{base}/{name}?run={run}") for name in pages]
        if args.floors:
            floor_dir = tempfile.TemporaryDirectory()
            floor_base, floors = serve_floor_pages(Path(floor_dir.name))
            targets += [(name, f"{floor_base}/{name}.html") for name in FLOOR_PAGES]
        print(json.dumps({"run": run, "repeat": args.repeat, "pages": measure(targets, args.repeat)}))
    finally:
        for process in (server, floors):
            if process is not None:
                stop_server(process)
        if work is not None:
            work.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
