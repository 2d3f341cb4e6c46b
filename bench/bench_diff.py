"""Diff view: time to the first diff of two traces that are already cached (issue 13; target under 1 s at 1 GB).

Two real traces (default: the resnet50 num_workers 0 and 4 samples), optionally scaled to S each with
``shared/tools/make_big_trace.py``, are put in two runs. ``profscope serve`` parses them once; then the
server is stopped and started again on the same cache directory, so nothing is loaded in memory and
nothing is parsed: the first ``GET /api/diff`` reads both sides' cached results from disk and joins them.
It is timed (cold), then again (warm: the same request), then one level down the call tree.

    python bench/bench_diff.py                  # the small real traces as they are
    python bench/bench_diff.py --size 1GB       # each side scaled to 1 GB first

Prints one JSON line. Scaled traces live in bench/out/diff_x<size>/ (not committed), kept for the next run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_http import free_port, get
from run_bench import CORPUS, OUT, SHARED

BASE = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
TARGET = "kineto-tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"


def write_side(relative: str, size: str | None, folder: Path) -> None:
    """The corpus trace copied into the run's folder, or scaled to ``size`` there (made once; the catalog
    does not follow symbolic links)."""
    source = CORPUS / relative
    folder.mkdir(parents=True, exist_ok=True)
    if size is None:
        shutil.copy(source, folder / source.name)
        return
    path = folder / f"{source.name.split('.')[0]}.{source.name.split('.')[1]}.pt.trace.json"
    if not path.exists():
        tool = SHARED / "tools" / "make_big_trace.py"
        subprocess.run([sys.executable, str(tool), str(source), str(path), "--size", size], check=True)


def serve(root: Path, cache: Path, workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, "-m", "profscope.cli", "serve", str(root), "--port", str(port),
               "--cache-dir", str(cache), "--workers", str(workers), "--log-level", "warning"]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), f"http://127.0.0.1:{port}"


def wait_parsed(base_url: str) -> dict:
    while True:
        try:
            status, body = get(f"{base_url}/api/runs")
            if status == 200 and len(body["runs"]) == 2 and all(r["state"] != "parsing" for r in body["runs"]):
                return body
        except OSError:
            pass
        time.sleep(0.5)


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    server.wait(timeout=60)


def timed(url: str) -> tuple[float, int, dict]:
    mark = time.perf_counter()
    status, body = get(url)
    return time.perf_counter() - mark, status, body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default=None, help="scale each side to this size first (e.g. 1GB)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench_diff_"))
    root, cache = (OUT / f"diff_x{args.size}" if args.size else work / "runs"), work / "cache"
    for run, relative in (("base", BASE), ("target", TARGET)):
        write_side(relative, args.size, root / run)
    try:
        server, base_url = serve(root, cache, args.workers)
        started = time.perf_counter()
        try:
            runs = wait_parsed(base_url)
            ingest_s = time.perf_counter() - started
        finally:
            stop(server)
        server, base_url = serve(root, cache, args.workers)  # a fresh process: only the disk cache is warm
        try:
            wait_parsed(base_url)
            query = {"run": "target", "base_run": "base"}
            cold_s, status, body = timed(f"{base_url}/api/diff?{urlencode(query)}")
            warm_s, _, _ = timed(f"{base_url}/api/diff?{urlencode(query)}")
            first = next((row["name"] for row in body.get("tree", {}).get("children", []) if row["has_children"]), "")
            drill_s, drill_status, _ = timed(f"{base_url}/api/diff?{urlencode({**query, 'tree_path': first})}")
        finally:
            stop(server)
        sizes = {r["run"]: sum(f.get("bytes") or 0 for f in r.get("files", [])) for r in runs["runs"]}
        print(
            json.dumps(
                {
                    "size": args.size or "as in the corpus",
                    "trace_bytes": sizes,
                    "ingest_wall_s": round(ingest_s, 1),
                    "diff_status": status,
                    "first_diff_s": round(cold_s, 3),
                    "warm_diff_s": round(warm_s, 3),
                    "tree_level_s": round(drill_s, 3),
                    "tree_level_status": drill_status,
                    "operators": len(body.get("operators", [])),
                    "kernels": len(body.get("kernels", [])),
                    "response_bytes": len(json.dumps(body)),
                }
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
