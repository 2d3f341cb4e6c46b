"""Trace page benchmark in Chromium: first drawn timeline after ingest, window requests, drawing, JS heap.

    python bench/bench_trace_page.py bench/out/resnet50_x1GB.json.gz [--cache-dir DIR] [--pans 3]
        [--ranks N] [--width 1920] [--height 1080]

Serves the trace alone (``profscope serve``; ``--cache-dir`` reuses an ingested cache; ``--ranks N``
serves N copies as the N workers of one run and shows them all), waits for the ingest, then opens
the Trace page in Debian's Chromium (Playwright) and measures, from the page's own clock
(``performance.now()``, 0 = navigation start):
- the first timeline drawn from a window answer (page load, run listing, tracks, first window, draw);
- every ``/api/timeline`` window request the page made (Resource Timing: duration, bytes sent gzip
  and JSON decoded) while zooming in step by step with ctrl + wheel, from the whole trace to ~1 ms;
- the canvas drawing time per frame while drag-panning at the zoom level with the most drawn items,
  and the number of items (slices + merged blocks) each of those frames drew;
- the JS heap (CDP ``Performance.getMetrics``) after the first draw and at the end.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from local_http import free_port, get

CHROMIUM = os.environ.get("PROFSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
HOOK = "window.__profscopeTrace"


def stats_ms(values: list[float]) -> dict[str, float]:
    array = np.asarray(values, dtype=float)
    if not len(array):
        return {}
    return {
        "n": len(array),
        "p50": round(float(np.percentile(array, 50)), 1),
        "p95": round(float(np.percentile(array, 95)), 1),
        "max": round(float(array.max()), 1),
    }


def wait_ingested(base: str, server: subprocess.Popen) -> dict:
    while True:
        if server.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            status, runs = get(f"{base}/api/runs")
            if status == 200 and runs["runs"] and runs["runs"][0]["state"] != "parsing":
                return runs["runs"][0]
        except OSError:
            pass
        time.sleep(0.2)


def wait_drawn(page) -> None:
    page.wait_for_function(
        f"() => {HOOK} && {HOOK}.idle && {HOOK}.sections.every((s) => s.answered) && {HOOK}.stats.draws > 0",
        timeout=120_000,
    )
    page.wait_for_timeout(200)  # the debounce of a request that may follow
    page.wait_for_function(f"() => {HOOK}.idle", timeout=120_000)


def heap_mb(cdp) -> float:
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return round(metrics["JSHeapUsedSize"] / 2**20, 1)


def window_requests(page) -> list[dict]:
    return page.evaluate(
        """() => performance.getEntriesByType('resource')
          .filter((e) => new URL(e.name).pathname === '/api/timeline')
          .map((e) => ({ms: e.duration, sent: e.transferSize, json: e.decodedBodySize,
                        width: Number(new URL(e.name).searchParams.get('width_px'))}))"""
    )


def measure(base: str, run: dict, pans: int, viewport: dict) -> dict:
    from playwright.sync_api import sync_playwright

    result: dict = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=viewport)
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        workers = ",".join(w["worker"] for w in run["workers"])
        page.goto(f"{base}/trace?run={run['run']}&workers={workers}")
        wait_drawn(page)
        timing = page.evaluate(f"() => {HOOK}.timing")
        result["first_drawn_ms"] = round(timing["firstDrawnMs"], 1)
        result["first_window"] = window_requests(page)[0]
        result["js_heap_after_first_draw_mb"] = heap_mb(cdp)

        box = page.get_by_test_id("timeline").bounding_box()
        x, y = box["x"] + 230 + (box["width"] - 230) * 0.4, box["y"] + 200
        page.mouse.move(x, y)
        levels = []
        while True:
            view = page.evaluate(f"() => {HOOK}.view")
            stats = page.evaluate(f"() => {HOOK}.stats")
            span = view["end"] - view["start"]
            levels.append({"span_us": round(span, 1), "items": stats["slices"] + stats["merged"]})
            if span < 1000:
                break
            page.keyboard.down("Control")
            page.mouse.wheel(0, -300)  # e^-0.75: about half the window per step
            page.keyboard.up("Control")
            wait_drawn(page)
        result["zoom_levels"] = levels
        requests = window_requests(page)
        result["window_requests"] = {
            "ms": stats_ms([r["ms"] for r in requests]),
            "bytes_sent_max": max(r["sent"] for r in requests),
            "json_bytes_max": max(r["json"] for r in requests),
            "width_px_max": max(r["width"] for r in requests),
        }

        densest = max(levels, key=lambda level: level["items"])
        page.get_by_test_id("reset-zoom").click()
        wait_drawn(page)
        while page.evaluate(f"() => {HOOK}.view.end - {HOOK}.view.start") > densest["span_us"] * 1.01:
            page.keyboard.down("Control")
            page.mouse.wheel(0, -300)
            page.keyboard.up("Control")
            wait_drawn(page)
        before = len(page.evaluate(f"() => {HOOK}.timing").get("drawMs"))
        items = []
        for _ in range(pans):
            for direction in (-1, 1):
                page.mouse.move(x, y)
                page.mouse.down()
                for step in range(1, 61):
                    page.mouse.move(x + direction * step * 10, y)
                    items.append(page.evaluate(f"() => {HOOK}.stats.slices + {HOOK}.stats.merged"))
                page.mouse.up()
                wait_drawn(page)
        draws = page.evaluate(f"() => {HOOK}.timing")["drawMs"][before:]
        result["pan"] = {"span_us": densest["span_us"], "items_per_frame": stats_ms(items), "draw_ms": stats_ms(draws)}
        result["js_heap_end_mb"] = heap_mb(cdp)
        browser.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--cache-dir", type=Path, default=None, help="reuse an ingested cache")
    parser.add_argument("--pans", type=int, default=3, help="left-right drag pairs at the densest zoom")
    parser.add_argument("--ranks", type=int, default=1, help="copies of the trace, shown as ranks side by side")
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="profscope-bench-trace-page-"))
    root = work / "bench_trace"
    root.mkdir()
    for rank in range(args.ranks):
        copy = root / f"rank{rank}.json.gz"
        try:
            os.link(args.trace, copy)
        except OSError:
            shutil.copy(args.trace, copy)
    cache = args.cache_dir or work / "cache"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    result: dict = {"trace": str(args.trace), "ranks": args.ranks, "load_average_before": os.getloadavg()}
    result["viewport"] = [args.width, args.height]
    with open(work / "server.log", "w") as log:
        command = [sys.executable, "-m", "profscope.cli", "serve", str(root), "--cache-dir", str(cache)]
        server = subprocess.Popen(
            [*command, "--port", str(port), "--workers", str(min(args.ranks, 2))],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            started = time.perf_counter()
            run = wait_ingested(base, server)
            result["ingest_or_cache_s"] = round(time.perf_counter() - started, 1)
            if run["state"] != "ready":
                raise RuntimeError(f"the trace was not ingested: {run['errors']}")
            result.update(measure(base, run, args.pans, {"width": args.width, "height": args.height}))
        finally:
            result["load_average_after"] = os.getloadavg()
            server.terminate()
            server.wait(timeout=30)
    shutil.rmtree(work, ignore_errors=True)  # the hard link and, without --cache-dir, the cache
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
