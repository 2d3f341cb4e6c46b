"""Distributed view at scale: N ranks of S MB each, made from a real NCCL rank, through a real server.

A real 2-rank NCCL job's rank 0 (``hta/nccl_parser_config/nccl_data.json.gz``: A100, DDP all-reduce
and broadcast with process-group args) is scaled to S MB with ``shared/tools/make_big_trace.py``, then
written once per rank with its identity patched (``distributedInfo.rank`` / ``world_size``, the
group's member list) and ``baseTimeNanoseconds`` moved by ``rank x 37 µs`` so that ranks arrive apart
at every collective. Then ``profscope serve`` (``--workers 2``) ingests the run while the memory of
its whole process tree (server + parser workers + their helper processes) is sampled from /proc, and
``GET /api/distributed`` is timed cold (built from the 64 rank summaries) and warm (cached).

    python bench/bench_distributed.py --ranks 64 --size 200MB
    python bench/bench_distributed.py --ranks 8 --size 200MB

Prints one JSON line. Generated traces live in bench/out/ (not committed).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_http import free_port, get
from run_bench import CORPUS, OUT, SHARED, _tree_rss_kb

SOURCE = "hta/nccl_parser_config/nccl_data.json.gz"
SKEW_NS_PER_RANK = 37_000


def base_trace(size: str) -> Path:
    path = OUT / f"nccl_rank_x{size}.json"
    if not path.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                str(SHARED / "tools" / "make_big_trace.py"),
                str(CORPUS / SOURCE),
                str(path),
                "--size",
                size,
            ],
            check=True,
        )
    return path


def write_ranks(base: Path, ranks: int, folder: Path) -> None:
    """One gzip file per rank: the same events, the rank's own identity and clock."""
    data = base.read_bytes()
    split = data.index(b'"traceEvents"')
    head, body = data[:split].decode(), data[split:]
    members = ", ".join(str(r) for r in range(ranks))
    body = body.replace(b'"Process Group Ranks": "[0, 1]"', f'"Process Group Ranks": "[{members}]"'.encode())
    folder.mkdir(parents=True, exist_ok=True)
    base_ns = int(re.search(r'"baseTimeNanoseconds": (\d+)', data[-4096:].decode(errors="replace") + head).group(1))
    for rank in range(ranks):
        text = re.sub(r'"rank": \d+', f'"rank": {rank}', head, count=1)
        text = re.sub(r'"world_size": \d+', f'"world_size": {ranks}', text, count=1)
        text = text.replace('"pg_size": 2, "ranks": [0, 1]', f'"pg_size": {ranks}, "ranks": [{members}]')
        rank_body = body.replace(
            f'"baseTimeNanoseconds": {base_ns}'.encode(),
            f'"baseTimeNanoseconds": {base_ns + rank * SKEW_NS_PER_RANK}'.encode(),
        )
        head_bytes = text.encode().replace(
            f'"baseTimeNanoseconds": {base_ns}'.encode(),
            f'"baseTimeNanoseconds": {base_ns + rank * SKEW_NS_PER_RANK}'.encode(),
        )
        with gzip.open(folder / f"rank{rank}.pt.trace.json.gz", "wb", compresslevel=1) as out:
            out.write(head_bytes)
            out.write(rank_body)


class Sampler(threading.Thread):
    """Peak resident memory of a process tree, sampled every 100 ms."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_kb, self.server_peak_kb, self.running = pid, 0, 0, True

    def run(self) -> None:
        while self.running:
            self.peak_kb = max(self.peak_kb, _tree_rss_kb(self.pid))
            self.server_peak_kb = max(self.server_peak_kb, _rss_kb(self.pid))
            time.sleep(0.1)

    def reset(self) -> None:
        self.peak_kb = self.server_peak_kb = 0


def _rss_kb(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[21]) * (
            os.sysconf("SC_PAGE_SIZE") // 1024
        )
    except OSError:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--size", default="200MB")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the generated rank files")
    args = parser.parse_args()

    base = base_trace(args.size)
    run_dir = OUT / f"dist_{args.ranks}x{args.size}"
    folder = run_dir / "job"
    if not folder.exists() or len(list(folder.glob("*.gz"))) != args.ranks:
        shutil.rmtree(run_dir, ignore_errors=True)
        started = time.perf_counter()
        write_ranks(base, args.ranks, folder)
        print(f"wrote {args.ranks} ranks in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    gz_bytes = sum(p.stat().st_size for p in folder.glob("*.gz"))
    cache = Path(tempfile.mkdtemp(prefix="bench_dist_cache_"))
    port = free_port()
    command = [sys.executable, "-m", "profscope.cli", "serve", str(run_dir), "--port", str(port),
               "--cache-dir", str(cache), "--workers", str(args.workers), "--log-level", "warning"]  # fmt: skip
    started = time.perf_counter()
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sampler = Sampler(server.pid)
    sampler.start()
    base_url = f"http://127.0.0.1:{port}"
    distributed_ready_s = None  # when the Runs page first said the Distributed view is ready
    try:
        while True:
            try:
                status, body = get(f"{base_url}/api/runs")
                now = time.perf_counter() - started
                states = [r.get("view_states", {}).get("distributed") for r in body.get("runs", [])]
                if distributed_ready_s is None and states and all(s == "ready" for s in states):
                    distributed_ready_s = round(now, 1)
                if status == 200 and body["runs"] and all(r["state"] != "parsing" for r in body["runs"]):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        ingest_s = time.perf_counter() - started
        ingest_peak_mb = sampler.peak_kb / 1024
        failed = [e for r in body["runs"] for e in r["errors"]]
        sampler.reset()
        before_mb = _rss_kb(server.pid) / 1024
        mark = time.perf_counter()
        status, view = get(f"{base_url}/api/distributed?run=job")
        cold_s = time.perf_counter() - mark
        cold_peak_mb = sampler.server_peak_kb / 1024
        mark = time.perf_counter()
        get(f"{base_url}/api/distributed?run=job")
        warm_s = time.perf_counter() - mark
        summaries = sum(p.stat().st_size for p in cache.glob("traces/*/views/distributed.rank.v*.json"))
        result = {
            "ranks": args.ranks,
            "size": args.size,
            "distributed_ready_s": distributed_ready_s,
            "load_1min_at_end": os.getloadavg()[0],
            "uncompressed_mb_per_rank": round(base.stat().st_size / 1e6, 1),
            "gz_mb_total": round(gz_bytes / 1e6, 1),
            "workers": args.workers,
            "ingest_wall_s": round(ingest_s, 1),
            "ingest_peak_all_processes_mb": round(ingest_peak_mb),
            "failed_files": len(failed),
            "view_status": status,
            "view_cold_s": round(cold_s, 2),
            "view_warm_s": round(warm_s, 3),
            "server_rss_before_view_mb": round(before_mb),
            "server_peak_during_view_mb": round(cold_peak_mb),
            "summaries_mb_total": round(summaries / 1e6, 2),
            "calls_per_rank": view["ranks"][0]["calls"] if status == 200 else None,
            "collectives_matched": view["matching"] if status == 200 else None,
            "warnings": view.get("warnings") if status == 200 else view,
        }
        print(json.dumps(result))
    finally:
        sampler.running = False
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(cache, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
