"""Cold page load in a fresh Chromium: when each view shows its first content, and when its first chart.

    python bench/bench_cold_load.py ROOT [ROOT ...] [--run NAME] [--repeat 5] [--pages overview,operators,...]
    python bench/bench_cold_load.py --url http://127.0.0.1:8080 --run NAME   # a server already running

Serves the roots (``profscope serve``), waits for the ingest (the views' answers are then memoised
by the first visit, which is not counted), and opens each page ``--repeat`` times, each time in a
new browser context (empty HTTP cache, no compiled-code cache). Times come from the page's own
clock (``performance.now()``, 0 = navigation start), polled every animation frame:
- content_ms: the first ``section.panel`` of the view is in the page (numbers and tables);
- chart_ms: the first plotly chart has drawn its SVG;
- all_charts_ms: every plotly chart container that will be drawn has drawn (chart containers
  stop changing for 300 ms).
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
from pathlib import Path

from local_http import free_port, get

CHROMIUM = os.environ.get("PROFSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
PAGES = ["overview", "operators", "kernels", "memory", "distributed"]
CONTENT = "() => document.querySelector('#main section.panel:not([hidden])') ? performance.now() : null"
CHART = "() => document.querySelector('#main .js-plotly-plot .main-svg') ? performance.now() : null"
CHART_COUNT = "() => document.querySelectorAll('#main .js-plotly-plot').length"


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


def settled_chart_count(page) -> int:
    """Charts drawn once their number has not changed for 300 ms (a page draws them one after another)."""
    count, stable_since = -1, time.monotonic()
    while time.monotonic() - stable_since < 0.3:
        now = page.evaluate(CHART_COUNT)
        if now != count:
            count, stable_since = now, time.monotonic()
        time.sleep(0.05)
    return count


def open_cold(browser, url: str) -> dict:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(url, wait_until="commit")
        content = page.wait_for_function(CONTENT, polling="raf", timeout=60_000).json_value()
        try:
            chart = page.wait_for_function(CHART, polling="raf", timeout=10_000).json_value()
        except Exception:  # a view with no chart for this run (e.g. Memory without memory events)
            chart = None
        charts = settled_chart_count(page)
        last = page.evaluate("() => performance.now()") - 300 if charts else None
        return {"content_ms": content, "chart_ms": chart, "charts": charts, "all_charts_ms": last}
    finally:
        context.close()


def summary(values: list[float | None]) -> dict | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"median": round(statistics.median(present)), "min": round(min(present)), "max": round(max(present))}


def measure(base: str, run: str, pages: list[str], repeat: int) -> dict:
    from playwright.sync_api import sync_playwright

    results = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for name in pages:
            url = f"{base}/{name}?run={run}"
            open_cold(browser, url)  # warms the server's memoised answers, not the browser
            samples = [open_cold(browser, url) for _ in range(repeat)]
            results[name] = {
                "content_ms": summary([s["content_ms"] for s in samples]),
                "first_chart_ms": summary([s["chart_ms"] for s in samples]),
                "charts": samples[-1]["charts"],
            }
        browser.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="*", type=Path)
    parser.add_argument("--url", help="measure a server that is already running")
    parser.add_argument("--run", help="the run to open (default: the first listed)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pages", default=",".join(PAGES))
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
    try:
        wait_ingested(base, server)
        run = args.run or get(f"{base}/api/runs")[1]["runs"][0]["run"]
        print(json.dumps({"run": run, "repeat": args.repeat, "pages": measure(base, run, pages, args.repeat)}))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        if work is not None:
            work.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
