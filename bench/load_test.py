"""Load test: many concurrent clients browse every view of a real ``profscope serve`` on loopback.

    python bench/load_test.py [--clients 50] [--duration 600] [--think-s 1.0]
    python bench/load_test.py --ingest-trace bench/out/resnet50_x1GB.json.gz --duration 300

Starts ``profscope serve`` on 127.0.0.1 (a free port, a fresh cache under ``bench/out/``) over several
corpus runs (``PROFSCOPE_CORPUS``), waits until they are parsed and every view answered once (the views
are cached), then runs ``--clients`` browsers for ``--duration`` seconds. Each browser opens the static
assets once (then again with probability 1/20 per visit, a new browser session: they are cacheable),
then visits pages in a loop: a page is its HTML plus the API calls that page makes, sent together as a
browser does, then ``--think-s`` (0.5x-1.5x) before the next visit. Visits cover the Runs page, Overview,
Operator (both groupings and the stacks of the top operator), Kernel (both groupings), Memory (profiler
memory and snapshots), Distributed and the Trace view's API (tracks, the whole trace, a random 10% window,
an area summary).

Measured: per route p50 / p95 / p99 latency, errors (a status >= 400, or a failed connection), 202s
(not ready), throughput; the server's RSS (and its worker processes') every ``--rss-every`` seconds from
/proc; and ``/healthz`` every 0.1 s on a separate connection: a slow answer there means the event loop
was blocked.

``--ingest-trace FILE``: after 10 s of browsing, the file is hard-linked into a watched empty root (a new
run), so the server ingests it while the clients browse; the report splits latencies into before,
during and after that ingest. Make a large trace with
``python /work/shared/tools/make_big_trace.py IN.json.gz bench/out/resnet50_x1GB.json.gz --size 1GB``.

Stops by itself (the server is always terminated). Writes a JSON report (``--out``) and prints Markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from local_http import free_port, stop_server

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("PROFSCOPE_CORPUS", REPO.parent / "shared" / "corpus")).resolve()
# One run per root (a run is named after its folder): GPU, CPU, distributed, snapshot.
RUN_FOLDERS = [
    "kineto-tb_plugin/samples/resnet50_num_workers_0",
    "generated/tinygpt_cpu",
    "generated/tinygpt_ddp4_gloo",
    "hta/trace_filter",
    "memory-snapshots/ZijianDu_Attention",
    "memory-snapshots/bcrafton_assignment2-systems",
]
INGEST_RUN = "ingest_while_browsing"
WARM_TIMEOUT_S = 600
PROBE_INTERVAL_S = 0.1


@dataclass
class Request:
    label: str  # the route as reported (a route template, plus the grouping where it selects another view)
    path: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sample:
    at_s: float  # since the clients started
    label: str
    latency_s: float
    status: int  # 0: no answer (``failure`` says why)
    failure: str = ""


# ---- the server --------------------------------------------------------------------------------


def start_server(roots: list[Path], work: Path, workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "profscope.cli",
        "serve",
        *map(str, roots),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--cache-dir",
        str(work / "cache"),
        "--workers",
        str(workers),
        "--rescan-seconds",
        "2",
        "--log-level",
        "warning",
    ]
    log = (work / "server.log").open("w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), f"http://127.0.0.1:{port}"


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A memory line of /proc/PID/status: VmRSS (all), RssAnon (heap), RssFile (mapped files, e.g. the cache)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


# ---- what a browser asks for -----------------------------------------------------------------------
def static_assets() -> list[Request]:
    from profscope.assets import web_dir

    static = web_dir() / "static"
    files = sorted(p for p in static.rglob("*") if p.is_file())
    assets = [Request("/static/*", f"/static/{p.relative_to(static).as_posix()}") for p in files]
    return [*assets, Request("/static/bundles/overview.js", "/static/bundles/overview.js")]


def page_visits(client: httpx.Client, runs: list[dict[str, Any]], pages: set[str]) -> list[list[Request]]:
    """Each visit: a page's HTML and the API calls it makes for one run (worker, span: the first)."""
    visits = [[Request("/ (page)", "/"), Request("/api/runs", "/api/runs")]]
    for run in runs:
        name = run["run"]
        trace = run["files"][0] if run["files"] else None
        ident = {"run": name} | ({"worker": trace["worker"], "span": trace["span"]} if trace else {})
        views = run["views"]
        if "overview" in views:
            visits.append(
                [
                    Request("/overview (page)", "/overview", {"run": name}),
                    Request("/api/overview", "/api/overview", ident),
                ]
            )
        if "operators" in views:
            rows = client.get("/api/operators", params=ident).json()["rows"]
            top = {"name": rows[0]["name"]} if rows else {}
            for group_by in ("operator", "operator_input_shape"):
                visits.append(
                    [
                        Request("/operators (page)", "/operators", {"run": name}),
                        Request(
                            f"/api/operators?group_by={group_by}", "/api/operators", ident | {"group_by": group_by}
                        ),
                    ]
                )
            if top:
                visits.append([Request("/api/operators/stacks", "/api/operators/stacks", ident | top)])
        if "kernels" in views:
            for group_by in ("kernel", "kernel_op"):
                visits.append(
                    [
                        Request("/kernels (page)", "/kernels", {"run": name}),
                        Request(f"/api/kernels?group_by={group_by}", "/api/kernels", ident | {"group_by": group_by}),
                    ]
                )
        if "memory" in views:
            visits.append([Request("/memory (page)", "/memory", {"run": name}), *memory_requests(run, ident)])
        if "distributed" in views:
            visits.append(
                [
                    Request("/distributed (page)", "/distributed", {"run": name}),
                    Request("/api/distributed", "/api/distributed", {"run": name}),
                ]
            )
        if "trace" in views and trace is not None:
            visits.append(trace_view_requests(client, ident, "trace" in pages))
    return visits


def memory_requests(run: dict[str, Any], ident: dict[str, Any]) -> list[Request]:
    if run["files"]:
        return [Request("/api/memory", "/api/memory", ident)]
    snapshot = {"run": run["run"], "worker": run["snapshots"][0]["worker"], "snapshot": run["snapshots"][0]["snapshot"]}
    return [
        Request(f"/api/memory/snapshot{part}", f"/api/memory/snapshot{part}", snapshot)
        for part in ("", "/timeline", "/top", "/stacks", "/segments")
    ]


def trace_view_requests(client: httpx.Client, ident: dict[str, Any], has_page: bool) -> list[Request]:
    duration_us = client.get("/api/timeline/tracks", params=ident).json()["duration_us"]
    start = random.uniform(0, 0.9 * duration_us)
    window = {"start_us": round(start, 1), "end_us": round(start + 0.1 * duration_us, 1)}
    requests = [
        Request("/api/timeline/tracks", "/api/timeline/tracks", ident),
        Request("/api/timeline (whole)", "/api/timeline", ident | {"width_px": 1200}),
        Request("/api/timeline (10% window)", "/api/timeline", ident | window | {"width_px": 1200}),
        Request("/api/timeline/summary", "/api/timeline/summary", ident | window),
    ]
    return [Request("/trace (page)", "/trace", {"run": ident["run"]}), *requests] if has_page else requests


def server_pages(client: httpx.Client) -> set[str]:
    """The view pages this server has (a page added later, e.g. /trace, is browsed once it exists)."""
    return {
        name
        for name in ("overview", "operators", "kernels", "memory", "distributed", "trace")
        if client.get(f"/{name}").status_code == 200
    }


# ---- warm-up ---------------------------------------------------------------------------------------
def wait_until_parsed(client: httpx.Client, expected_runs: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WARM_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            runs = client.get("/api/runs").json()["runs"]
        except httpx.HTTPError:
            runs = []
        if len(runs) >= expected_runs and all(r["state"] != "parsing" for r in runs):
            return runs
        time.sleep(1)
    raise SystemExit(f"the corpus runs were not parsed within {WARM_TIMEOUT_S} s")


def warm(client: httpx.Client, visits: list[list[Request]]) -> None:
    """Ask every request once until it answers 200: from then on every view is served from the cache."""
    for visit in visits:
        for request in visit:
            deadline = time.monotonic() + WARM_TIMEOUT_S
            while (status := client.get(request.path, params=request.params).status_code) == 202:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{request.path} {request.params} still 202 after warm-up")
                time.sleep(0.5)
            if status != 200:
                raise SystemExit(f"warm-up: {request.path} {request.params} answered {status}")


# ---- the load --------------------------------------------------------------------------------------
async def browse(
    base: str,
    visits: list[list[Request]],
    assets: list[Request],
    until: float,
    started: float,
    think_s: float,
    samples: list[Sample],
) -> None:
    """One browser: static assets once, then page visits with think time until ``until``."""
    limits = httpx.Limits(max_connections=6)  # as a browser, per host
    headers = {"Accept-Encoding": "gzip"}
    async with httpx.AsyncClient(base_url=base, limits=limits, headers=headers, timeout=120) as client:
        await asyncio.sleep(random.uniform(0, think_s))  # browsers do not all arrive at once
        await fetch_all(client, assets, started, samples)
        while time.monotonic() < until:
            if random.random() < 1 / 20:
                await fetch_all(client, assets, started, samples)
            await fetch_all(client, random.choice(visits), started, samples)
            await asyncio.sleep(think_s * random.uniform(0.5, 1.5))


async def fetch_all(client: httpx.AsyncClient, requests: list[Request], started: float, samples: list[Sample]) -> None:
    await asyncio.gather(*(fetch(client, r, started, samples) for r in requests))


async def fetch(client: httpx.AsyncClient, request: Request, started: float, samples: list[Sample]) -> None:
    sent = time.monotonic()
    try:
        # the body as sent (gzip stays compressed): decompressing is the browser's work, not the server's
        async with client.stream("GET", request.path, params=request.params) as response:
            async for _ in response.aiter_raw():
                pass
        status, failure = response.status_code, ""
    except httpx.HTTPError as error:
        status, failure = 0, type(error).__name__
    samples.append(Sample(sent - started, request.label, time.monotonic() - sent, status, failure))


async def probe_loop(base: str, until: float, started: float, samples: list[Sample]) -> None:
    """``/healthz`` every 0.1 s: its latency is how long the event loop could not answer."""
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        while time.monotonic() < until:
            await fetch(client, Request("/healthz (probe)", "/healthz"), started, samples)
            await asyncio.sleep(PROBE_INTERVAL_S)


async def sample_rss(pid: int, until: float, started: float, every_s: float, rss: list[dict[str, float]]) -> None:
    while time.monotonic() < until:
        workers = sum(rss_mib(child) for child in children_of(pid))
        rss.append(
            {
                "at_s": round(time.monotonic() - started, 1),
                "server_mib": round(rss_mib(pid), 1),
                "server_anon_mib": round(rss_mib(pid, "RssAnon"), 1),
                "server_file_mib": round(rss_mib(pid, "RssFile"), 1),
                "workers_mib": round(workers, 1),
                "load_1m": load_average(),
            }
        )
        await asyncio.sleep(every_s)


async def ingest_while_browsing(base: str, trace: Path, target: Path, started: float, until: float) -> dict[str, float]:
    """Link ``trace`` into the watched root after 10 s; when its parse started and ended (from /api/runs)."""
    await asyncio.sleep(10)
    os.link(trace, target)
    linked = time.monotonic() - started
    seen: dict[str, float] = {"linked_s": linked}
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        while time.monotonic() < until:
            runs = {r["run"]: r for r in (await client.get("/api/runs")).json()["runs"]}
            run = runs.get(INGEST_RUN)
            now = time.monotonic() - started
            if run is not None and run["files"]:
                state = run["files"][0]["state"]
                if state in ("parsing", "pending", "queued") and "ingest_start_s" not in seen:
                    seen["ingest_start_s"] = now
                if state in ("ready", "error"):
                    seen.setdefault("ingest_start_s", linked)
                    seen["ingest_end_s"], seen["ingest_state"] = now, state  # type: ignore[assignment]
                    return seen
            await asyncio.sleep(0.5)
    return seen


async def run_load(
    base: str, pid: int, visits: list[list[Request]], args: argparse.Namespace, ingest_target: Path | None
) -> dict[str, Any]:
    samples: list[Sample] = []
    rss: list[dict[str, float]] = []
    started = time.monotonic()
    until = started + args.duration
    assets = static_assets()
    tasks = [browse(base, visits, assets, until, started, args.think_s, samples) for _ in range(args.clients)]
    tasks += [probe_loop(base, until, started, samples), sample_rss(pid, until, started, args.rss_every, rss)]
    ingest: dict[str, float] = {}
    if ingest_target is not None:

        async def ingest_task() -> None:
            ingest.update(await ingest_while_browsing(base, args.ingest_trace, ingest_target, started, until))

        tasks.append(ingest_task())
    await asyncio.gather(*tasks)
    return {"samples": samples, "rss": rss, "ingest": ingest, "elapsed_s": time.monotonic() - started}


# ---- the report ------------------------------------------------------------------------------------
def route_table(samples: list[Sample], elapsed_s: float) -> list[dict[str, Any]]:
    by_label: dict[str, list[Sample]] = {}
    for sample in samples:
        by_label.setdefault(sample.label, []).append(sample)
    rows = []
    for label, group in sorted(by_label.items()):
        ms = np.asarray([s.latency_s for s in group]) * 1000
        rows.append(
            {
                "route": label,
                "requests": len(group),
                "per_s": round(len(group) / elapsed_s, 2),
                "errors": sum(1 for s in group if s.status == 0 or s.status >= 400),
                "not_ready_202": sum(1 for s in group if s.status == 202),
                "other_statuses": dict(
                    Counter(s.failure or str(s.status) for s in group if s.status not in (200, 202))
                ),
                **{f"p{q}_ms": round(float(np.percentile(ms, q)), 1) for q in (50, 95, 99)},
                "max_ms": round(float(ms.max()), 1),
            }
        )
    return rows


def phases(samples: list[Sample], ingest: dict[str, Any], elapsed_s: float) -> dict[str, list[Sample]]:
    if "ingest_start_s" not in ingest:
        return {"all": samples}
    start, end = ingest["ingest_start_s"], ingest.get("ingest_end_s", elapsed_s)
    return {
        "before ingest": [s for s in samples if s.at_s < start],
        "during ingest": [s for s in samples if start <= s.at_s < end],
        "after ingest": [s for s in samples if s.at_s >= end],
    }


def markdown(report: dict[str, Any]) -> str:
    lines = []
    for phase, table in report["routes"].items():
        lines += [
            f"**{phase}** ({table['seconds']:.0f} s, {table['requests']} requests, "
            f"{table['requests_per_s']:.1f} req/s, {table['errors']} errors)",
            "",
            "| route | requests | errors | 202 | p50 ms | p95 ms | p99 ms | max ms |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in table["rows"]:
            lines.append(
                f"| `{r['route']}` | {r['requests']} | {r['errors']} | {r['not_ready_202']} | "
                f"{r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | {r['max_ms']} |"
            )
        lines.append("")
    lines += ["| at s | server RSS MiB | workers RSS MiB | load (1 min) |", "|---:|---:|---:|---:|"]
    rss = report["rss"]
    step = max(1, len(rss) // 12)
    for point in [*rss[::step], rss[-1]] if rss else []:
        lines.append(f"| {point['at_s']} | {point['server_mib']} | {point['workers_mib']} | {point['load_1m']} |")
    return "\n".join(lines)


def summarize(result: dict[str, Any], args: argparse.Namespace, visits: int) -> dict[str, Any]:
    samples, elapsed = result["samples"], result["elapsed_s"]
    routes = {}
    for phase, group in phases(samples, result["ingest"], elapsed).items():
        if not group:
            continue
        seconds = max(s.at_s for s in group) - min(s.at_s for s in group) or 1.0
        browsing = [s for s in group if s.label != "/healthz (probe)"]
        routes[phase] = {
            "seconds": round(seconds, 1),
            "requests": len(browsing),
            "requests_per_s": round(len(browsing) / seconds, 1),
            "errors": sum(1 for s in browsing if s.status == 0 or s.status >= 400),
            "rows": route_table(group, seconds),
        }
    rss = result["rss"]
    steady = [p["server_mib"] for p in rss if p["at_s"] >= 60] or [p["server_mib"] for p in rss]
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "clients": args.clients,
        "duration_s": args.duration,
        "think_s": args.think_s,
        "visits": visits,
        "elapsed_s": round(elapsed, 1),
        "ingest": result["ingest"],
        "server_rss_mib": {
            "first": rss[0]["server_mib"] if rss else None,
            "min_after_60s": min(steady, default=None),
            "max_after_60s": max(steady, default=None),
            "last": rss[-1]["server_mib"] if rss else None,
        },
        "routes": routes,
        "rss": rss,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of browsing")
    parser.add_argument("--think-s", type=float, default=1.0, help="mean pause between two page visits of a client")
    parser.add_argument("--workers", type=int, default=2, help="the server's ingest processes")
    parser.add_argument("--rss-every", type=float, default=5.0)
    parser.add_argument("--ingest-trace", type=Path, help="a large trace to ingest while the clients browse")
    parser.add_argument("--out", type=Path, help="JSON report (default bench/out/load-<steady|ingest>.json)")
    args = parser.parse_args()

    scenario = "ingest" if args.ingest_trace else "steady"
    work = REPO / "bench" / "out" / f"load-{scenario}-{time.strftime('%Y%m%d-%H%M%S')}"
    ingest_root = work / INGEST_RUN
    ingest_root.mkdir(parents=True)
    roots = [CORPUS / folder for folder in RUN_FOLDERS]
    process, base = start_server([*roots, ingest_root] if args.ingest_trace else roots, work, args.workers)
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            deadline = time.monotonic() + 60
            while not _ready(client) and time.monotonic() < deadline:
                time.sleep(0.2)
            runs = wait_until_parsed(client, len(roots))
            visits = page_visits(client, runs, server_pages(client))
            print(f"warming {sum(map(len, visits))} requests of {len(visits)} visits over {len(runs)} runs", flush=True)
            warm(client, visits)
        target = None
        if args.ingest_trace:
            staged = work / args.ingest_trace.name  # a hard link needs the same file system: stage a copy
            shutil.copyfile(args.ingest_trace, staged)
            args.ingest_trace = staged
            target = ingest_root / "worker0.1700000000000000000.pt.trace.json.gz"
        print(f"browsing: {args.clients} clients for {args.duration:.0f} s", flush=True)
        result = asyncio.run(run_load(base, process.pid, visits, args, target))
    finally:
        stop_server(process)
    report = summarize(result, args, len(visits))
    out = args.out or REPO / "bench" / "out" / f"load-{scenario}.json"
    out.write_text(json.dumps(report, indent=1))
    print(markdown(report))
    print(f"\nreport: {out}; server log: {work / 'server.log'}")
    shutil.rmtree(work / "cache", ignore_errors=True)
    return 0


def _ready(client: httpx.Client) -> bool:
    try:
        return client.get("/readyz").status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())
