"""Trace page: canvas time per frame while drag-panning with many items on screen (issue #3: 10,000).

    python bench/bench_trace_pan.py TRACE [--ranks 4] [--width 2560] [--height 3200] [--zoom-steps 8]

Serves ``--ranks`` copies of TRACE as the ranks of one run, opens them side by side in Debian's
Chromium, zooms in step by step (ctrl + wheel) and goes back to the step that drew the most items
(slices + merged blocks of every visible rank), then drags left and right (3 x 60 moves each way) and
reports the items drawn per frame and the canvas time of each frame (the page's own ``drawMs``).
A tall viewport shows several ranks at once, which is how many items reach the screen. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from bench_trace_page import CHROMIUM, CHROMIUM_ARGS, HOOK, wait_drawn, wait_ingested
from local_http import free_port

PANS, MOVES, MOVE_PX = 3, 60, 10


def drawn_items(page) -> int:
    return page.evaluate(f"() => {HOOK}.stats.slices + {HOOK}.stats.merged")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def zoom_in(page, steps: int) -> None:
    for _ in range(steps):
        page.keyboard.down("Control")
        page.mouse.wheel(0, -300)
        page.keyboard.up("Control")
        wait_drawn(page)


def measure(url: str, viewport: dict[str, int], zoom_steps: int) -> dict:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=viewport)
        page.goto(url)
        wait_drawn(page)
        box = page.locator("canvas").first.bounding_box()
        x, y = box["x"] + box["width"] * 0.55, box["y"] + 300
        page.mouse.move(x, y)
        levels = [drawn_items(page)]
        for _ in range(zoom_steps):
            zoom_in(page, 1)
            levels.append(drawn_items(page))
        densest = levels.index(max(levels))
        page.goto(url)
        wait_drawn(page)
        page.mouse.move(x, y)
        zoom_in(page, densest)
        before = len(page.evaluate(f"() => {HOOK}.timing")["drawMs"])
        items = []
        for _ in range(PANS):
            for direction in (-1, 1):
                page.mouse.move(x, y)
                page.mouse.down()
                for move in range(1, MOVES + 1):
                    page.mouse.move(x + direction * move * MOVE_PX, y)
                    items.append(drawn_items(page))
                page.mouse.up()
                wait_drawn(page)
        draws = page.evaluate(f"() => {HOOK}.timing")["drawMs"][before:]
        browser.close()
    return {
        "items_per_zoom_step": levels,
        "zoom_step": densest,
        "frames": len(draws),
        "items_per_frame": {"p50": quantile(items, 0.5), "max": max(items)},
        "draw_ms": {"p50": quantile(draws, 0.5), "p95": quantile(draws, 0.95), "max": round(max(draws), 2)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--width", type=int, default=2560)
    parser.add_argument("--height", type=int, default=3200)
    parser.add_argument("--zoom-steps", type=int, default=8)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="profscope-bench-trace-pan-"))
    root = work / "run"
    root.mkdir()
    workers = [f"rank{rank}" for rank in range(args.ranks)]
    for worker in workers:
        shutil.copy(args.trace, root / f"{worker}.json.gz")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "profscope.cli", "serve", str(root), "--cache-dir", str(work / "cache")]
    with open(work / "server.log", "w") as log:
        server = subprocess.Popen([*command, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
        try:
            run = wait_ingested(base, server)
            if run["state"] != "ready":
                raise RuntimeError(f"the trace was not ingested: {run['errors']}")
            url = f"{base}/trace?run=run&workers={','.join(workers)}"
            result = {"trace": str(args.trace), "ranks": args.ranks, "viewport": [args.width, args.height]}
            result.update(measure(url, {"width": args.width, "height": args.height}, args.zoom_steps))
            result["load_average"] = os.getloadavg()
        finally:
            server.terminate()
            server.wait(timeout=30)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
