"""Benchmark: a ~1 GB allocator snapshot through a real ``profscope serve``.

1. Scale a real corpus snapshot to the target size: the original trace, then copies of its
   allocations that are both allocated and freed within the trace (so every copy returns memory to
   the same level), each copy's addresses shifted by a copy-specific offset and its times by the
   trace's length; written as a protocol-4 pickle like ``torch.cuda.memory._dump_snapshot`` writes
   (each entry its own dict and frame list, frame dicts shared through the memo). The segments stay
   the original's.
2. Serve a folder holding only that pickle; measure the ingest (until ``/api/runs`` says ready),
   then the Memory page's first draw as the page asks for it (the summary, then the timeline at the
   default size together with top allocations, call stacks, segments and OOM), a timeline at another
   size (computed, not cached: 1200x440 px, as in run 6) and a zoomed one, sampling the resident
   memory of the server and its worker processes every 50 ms from /proc. The machine's load average
   is recorded before and after (timings are upper bounds on a shared machine).

    python bench/bench_memory.py [--source memory-snapshots/...pickle] [--target-mb 1024] [--out bench/out]

Prints one JSON line of results.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from local_http import free_port, get

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("PROFSCOPE_CORPUS", REPO.parent / "shared" / "corpus"))
DEFAULT_SOURCE = "memory-snapshots/notHanmin_assignment2-systems/memory_snapshot.pickle"
ADDRESS_SHIFT = 1 << 36  # 64 GiB per copy: copies never share an address
SENTINEL_ADDR = 0x7A5E_0000_0000_0001
SENTINEL_TIME = 0x7B5E_0000_0000_0002


class _Writer:
    """Protocol-4 pickle written piece by piece with one memo, as the pickler would write it (unframed)."""

    def __init__(self, out) -> None:
        self.out = out
        self.pickler = pickle._Pickler(io.BytesIO(), protocol=4)  # the pure-Python pickler: save() is reachable
        self.pickler.framer.file_write = out.write

    def raw(self, data: bytes) -> None:
        self.out.write(data)

    def save(self, obj) -> None:
        self.pickler.save(obj)

    def memoize(self, obj) -> None:
        self.pickler.memoize(obj)

    def template(self, entry: dict) -> list[bytes]:
        """The entry's bytes split around its address and time (filled in per copy)."""
        copy = {**entry, "addr": SENTINEL_ADDR, "time_us": SENTINEL_TIME, "frames": list(entry.get("frames") or [])}
        buffer = io.BytesIO()
        self.pickler.framer.file_write = buffer.write
        self.pickler.save(copy)
        self.pickler.framer.file_write = self.out.write
        data = buffer.getvalue()
        addr_bytes, time_bytes = (_long1(SENTINEL_ADDR), _long1(SENTINEL_TIME))
        before, rest = data.split(addr_bytes, 1)
        middle, after = rest.split(time_bytes, 1)
        return [before, middle, after]


def _paired_entries(trace: list[dict]) -> list[int]:
    """Indices of the entries of allocations both allocated and freed within the trace."""
    open_allocs: dict[int, list[int]] = {}
    keep: list[int] = []
    for index, entry in enumerate(trace):
        if entry["action"] == "alloc":
            open_allocs[entry["addr"]] = [index]
        elif entry["action"] == "free_requested" and entry["addr"] in open_allocs:
            open_allocs[entry["addr"]].append(index)
        elif entry["action"] in ("free_completed", "free") and entry["addr"] in open_allocs:
            keep += [*open_allocs.pop(entry["addr"]), index]
    return sorted(keep)


def _long1(value: int) -> bytes:
    encoded = pickle.encode_long(value)
    return pickle.LONG1 + bytes([len(encoded)]) + encoded


def scale_snapshot(source: Path, target_bytes: int, out: Path) -> dict:
    with open(source, "rb") as f:
        snapshot = pickle.load(f)  # the corpus file is trusted
    trace = snapshot["device_traces"][0]
    times = [e["time_us"] for e in trace if "time_us" in e]
    period = max(times) - min(times) + 1000
    original_bytes = source.stat().st_size
    copies = max(1, round(target_bytes / original_bytes))
    with open(out, "wb") as f:
        writer = _Writer(f)
        writer.raw(pickle.PROTO + bytes([4]))
        writer.raw(pickle.EMPTY_DICT)
        writer.memoize(snapshot)
        writer.raw(pickle.MARK)
        for key in ("segments", "allocator_settings", "external_annotations"):
            writer.save(key)
            writer.save(snapshot.get(key) or ([] if key != "allocator_settings" else {}))
        writer.save("device_traces")
        outer: list = []
        writer.raw(pickle.EMPTY_LIST)
        writer.memoize(outer)
        inner: list = []
        writer.raw(pickle.EMPTY_LIST)
        writer.memoize(inner)
        # every frame dict once, up front (pushed and popped): entries then refer to them through the memo, as
        # in a real snapshot, instead of the first copy of an entry defining them again in every copy
        frames = list({id(f): f for e in trace for f in e.get("frames") or []}.values())
        writer.save(frames)
        writer.raw(pickle.POP)
        templates = [(writer.template(e), e["addr"], e.get("time_us", 0)) for e in trace]
        paired = [templates[i] for i in _paired_entries(trace)]
        entries = 0
        batch = 0
        for copy in range(copies):
            for (before, middle, after), addr, time_us in templates if copy == 0 else paired:
                if batch == 0:
                    f.write(pickle.MARK)
                f.write(before + _long1(addr + copy * ADDRESS_SHIFT) + middle + _long1(time_us + copy * period) + after)
                batch += 1
                entries += 1
                if batch == 1000:
                    f.write(pickle.APPENDS)
                    batch = 0
        if batch:
            f.write(pickle.APPENDS)
        writer.raw(pickle.APPEND)  # the device list into device_traces
        writer.raw(pickle.SETITEMS)
        writer.raw(pickle.STOP)
    return {"copies": copies, "entries": entries, "bytes": out.stat().st_size}


def tree_rss_mb(root_pid: int) -> tuple[float, float]:
    """Resident MB of a process and its descendants: (all together, the largest one)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * page_kb
    total, largest, pending = 0, 0, [root_pid]
    while pending:
        pid = pending.pop()
        total += rss.get(pid, 0)
        largest = max(largest, rss.get(pid, 0))
        pending.extend(children.get(pid, []))
    return total / 1024, largest / 1024


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_total, self.peak_largest = pid, 0.0, 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            total, largest = tree_rss_mb(self.pid)
            self.peak_total, self.peak_largest = max(self.peak_total, total), max(self.peak_largest, largest)
            time.sleep(0.05)


def first_draw(base: str, ident: str) -> dict:
    """The Memory page's first draw: the summary, then its five views at once; when each arrived (s)."""
    started = time.perf_counter()
    status, summary = get(f"{base}/api/memory/snapshot?{ident}")
    if status != 200:
        raise RuntimeError(f"summary: HTTP {status}: {summary}")
    arrived = {"summary_s": round(time.perf_counter() - started, 2)}
    views = {
        "timeline": "timeline?",
        "top": "top?moment=peak&limit=200&",
        "stacks": "stacks?moment=peak&",
        "segments": "segments?",
        "oom": "oom?",
    }

    def fetch(name: str) -> tuple[str, float, dict]:
        status, body = get(f"{base}/api/memory/snapshot/{views[name]}{ident}")
        if status != 200:
            raise RuntimeError(f"{name}: HTTP {status}: {body}")
        return name, time.perf_counter() - started, body

    with ThreadPoolExecutor(len(views)) as pool:
        for name, at, body in pool.map(fetch, views):
            arrived[f"{name}_s"] = round(at, 2)
            if name == "timeline":
                arrived["timeline"] = {
                    k: body.get(k) for k in ("width_px", "height_px", "bands_shown", "summarized_count")
                }
                arrived["timeline_json_kb"] = len(json.dumps(body)) // 1024
    return arrived


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=DEFAULT_SOURCE, help="corpus-relative snapshot to scale")
    parser.add_argument("--target-mb", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()
    folder = args.out / "memory-bench" / f"snapshots-{args.target_mb}MB"  # served alone: one snapshot per folder
    folder.mkdir(parents=True, exist_ok=True)
    big = folder / f"scaled_{args.target_mb}MB.pickle"
    started = time.perf_counter()
    if big.exists():  # the scaling is deterministic: reuse an earlier build
        scaled = {"bytes": big.stat().st_size, "reused": True}
    else:
        scaled = scale_snapshot(CORPUS / args.source, args.target_mb << 20, big)
        scaled["build_s"] = round(time.perf_counter() - started, 1)
    cache = args.out / "memory-bench" / "cache"
    subprocess.run(["rm", "-rf", str(cache)], check=True)
    port = free_port()
    log = open(args.out / "memory-bench" / "server.log", "w")  # noqa: SIM115 - open for the server's lifetime
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "profscope.cli",
            "serve",
            str(folder),
            "--cache-dir",
            str(cache),
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    sampler = Sampler(server.pid)
    sampler.start()
    base = f"http://127.0.0.1:{port}"
    result: dict = {"snapshot": args.source, "scaled": scaled, "load_average_before": os.getloadavg()}
    try:
        launched = time.perf_counter()
        while True:
            try:
                status, runs = get(f"{base}/api/runs")
                if status == 200 and runs["runs"] and runs["runs"][0]["state"] != "parsing":
                    break
            except OSError:
                pass
            if server.poll() is not None:
                raise RuntimeError("the server exited")
            time.sleep(0.2)
        run = runs["runs"][0]
        result["ingest_s"] = round(time.perf_counter() - launched, 1)
        result["state"] = run["state"]
        result["errors"] = run["errors"]
        result["peak_during_ingest_mb"] = {"all": round(sampler.peak_total), "largest": round(sampler.peak_largest)}
        snapshot = run["snapshots"][0]["snapshot"]
        ident = f"run={run['run']}&snapshot={snapshot}"
        result["page_first_draw"] = first_draw(base, ident)
        query = f"{ident}&width_px=1200&height_px=440"
        timings = {}
        for name, url in (
            ("default_timeline_again_s", f"{base}/api/memory/snapshot/timeline?{ident}"),
            ("computed_timeline_1200x440_s", f"{base}/api/memory/snapshot/timeline?{query}"),
            ("computed_timeline_again_s", f"{base}/api/memory/snapshot/timeline?{query}"),
            ("zoomed_timeline_s", f"{base}/api/memory/snapshot/timeline?{query}&start=1000000&end=1300000"),
            ("segments_s", f"{base}/api/memory/snapshot/segments?{ident}"),
            ("top_s", f"{base}/api/memory/snapshot/top?{ident}"),
        ):
            mark = time.perf_counter()
            status, body = get(url)
            timings[name] = round(time.perf_counter() - mark, 2)
            if name == "computed_timeline_1200x440_s":
                result["timeline_1200x440"] = {
                    k: body.get(k) for k in ("bands_shown", "summarized_count", "peak_allocated_bytes")
                }
                result["timeline_1200x440_json_kb"] = len(json.dumps(body)) // 1024
        result["requests"] = timings
        summary = json.loads((next(cache.glob("traces/*/summary.json"))).read_text())
        result["ingest_phases_s"] = {
            "parse": round(summary["parse_s"], 1),
            **{k: round(v, 1) for k, v in summary["phase_s"].items()},
        }
        result["entries"] = summary["entries"]
    finally:
        result["load_average_after"] = os.getloadavg()
        time.sleep(0.2)
        result["peak_overall_mb"] = {"all": round(sampler.peak_total), "largest": round(sampler.peak_largest)}
        sampler.stop.set()
        server.terminate()
        server.wait(timeout=30)
        log.close()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
