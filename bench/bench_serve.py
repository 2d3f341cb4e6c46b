"""The user's path, measured side by side with the peers in one run: ``profscope serve`` from process start
until every view of the trace is ready, then torch-tb-profiler 0.4.3 and HTA 0.5 on the same file.

    python bench/bench_serve.py bench/out/resnet50_x200MB.json.gz bench/out/nsres_x200MB.json.gz
    python bench/bench_serve.py FILE --no-peers           # profscope only (no ratios then)
    python bench/bench_serve.py FILE --peer torch-tb-profiler   # one peer (HTA takes ~8 min on a 1 GB nsres trace)

profscope's modules are compiled to bytecode first, as an install does (``compile_like_an_install``).

For each trace:
- profscope: a folder holding only that file (one run) is served by a fresh ``profscope serve`` with an
  empty cache. The clock starts just before the process is started and stops at the first ``/api/runs``
  answer (polled every 50 ms: the polling's own cost, on this side and the server's, competes with the work
  it waits for) where the run's state is ``ready`` and every view of ``view_states`` says ``ready``; the
  moment each view first said so is kept too (``first_ready_s``). Peak memory of the whole process tree
  (server + parse workers + their helpers), sampled from /proc: the sum of resident memory, and the sum of
  proportional memory (PSS: a page a forked helper shares with its worker counts once, not twice),
  and its CPU seconds (user + system) at that moment. The Overview's readiness is also timed from the moment the
  server first listed the file (``seen_at`` of the file in ``/api/runs``, the server's clock, read against this
  process's ``time.time()``: one machine, one clock), to the end of the first ``/api/runs`` answer that says it is
  ready: ``overview_after_seen_s``, issue 18's "the Overview within 3 s of the server seeing the file".
  The parse workers run at the server's niceness + 10 (jobs.WORKER_NICENESS), so on a busy machine they get
  less CPU than a peer at the server's niceness: compare CPU seconds too.
- the peers: ``bench/reference/timed_peer.py tbprof|hta FILE`` under /opt/refvenv, whole process timed
  with ``/usr/bin/time -v`` (wall clock, peak RSS), exactly as ``run_bench.py`` runs them.

profscope's runs of a trace (``--runs``) are spread before, between and after the peers' runs on it (3 runs,
two peers: profscope, torch-tb-profiler, profscope, HTA, profscope): this machine's speed drifts by tens of
percent within minutes (run 32: the same code took 2.5-2.8 s at 21:21 and 3.7-4.8 s at 22:01), and runs taken
back to back a few minutes before a peer's put that drift into the ratio. Until run 32b they were back to back.

Ratios are computed from this invocation's numbers only. The 1-minute load average is sampled during
every measurement (this machine is shared: report it with the numbers). One JSON line per measurement
goes to ``--results``; a Markdown table is printed at the end with the command that produced it.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from local_http import free_port, get, stop_server
from run_bench import OUT, _tree_rss_kb, timed, tool_command, tree_pss_kb, tree_total, uncompressed_mb

POLL_S = 0.05
MIB = 1 << 20  # the peaks read from /proc are KiB; their *_mb fields MiB
PEERS = ("torch-tb-profiler", "HTA")


def serve_until_every_view(trace: Path, scratch: Path, timeout_s: float, extra: tuple[str, ...] = ()) -> dict:
    """Start ``profscope serve`` on a folder holding only ``trace``; time until every view of its run is ready."""
    root = scratch / "root" / trace.name.split(".")[0]
    root.mkdir(parents=True)
    _place(trace, root / trace.name)
    port = free_port()
    command = [sys.executable, "-m", "profscope.cli", "serve", str(root.parent), "--port", str(port),
               "--cache-dir", str(scratch / "cache"), "--log-level", "warning", *extra]  # fmt: skip
    loads, peak_kb, peak_pss_kb, first_ready = [], 0, 0, {}
    seen_at, overview_after_seen = None, None
    started, started_at = time.perf_counter(), time.time()
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while time.perf_counter() - started < timeout_s:
            if server.poll() is not None:
                return {"error": f"profscope serve exited with {server.returncode}: {server.stderr.read()[-2000:]}"}
            peak_kb = max(peak_kb, _tree_rss_kb(server.pid))
            peak_pss_kb = max(peak_pss_kb, tree_pss_kb(server.pid))
            loads.append(os.getloadavg()[0])
            run = _the_run(f"http://127.0.0.1:{port}")
            now, now_at = time.perf_counter() - started, time.time()
            if run is not None:
                seen_at = seen_at or _seen_at(run)
                for view, state in (run.get("view_states") or {}).items():
                    if state == "ready":
                        first_ready.setdefault(view, round(now, 3))
                if overview_after_seen is None and "overview" in first_ready and seen_at is not None:
                    overview_after_seen = round(now_at - seen_at, 3)
                if _every_view_ready(run):
                    return {"wall_s": now, "cpu_s": _tree_cpu_s(server.pid), "peak_tree_rss_mb": peak_kb / 1024,
                            "peak_tree_pss_mb": peak_pss_kb / 1024,
                            "load_1min": _span(loads), "first_ready_s": first_ready,
                            "seen_after_start_s": None if seen_at is None else round(seen_at - started_at, 3),
                            "overview_after_seen_s": overview_after_seen,
                            "views": run.get("views", [])}  # fmt: skip
            time.sleep(POLL_S)
        return {"error": f"not every view ready after {timeout_s} s"}
    finally:
        stop_server(server)


def _tree_cpu_s(root_pid: int) -> float:
    """User + system CPU seconds of a process and its live descendants, each with its reaped children's
    (the decoding helper a worker waits for), from /proc: steadier than wall time on a busy machine."""
    ticks = os.sysconf("SC_CLK_TCK")
    return tree_total(root_pid, lambda fields: sum(int(v) for v in fields[11:15]) / ticks)  # utime..cstime


def _place(trace: Path, destination: Path) -> None:
    """A hard link where possible (a served root never follows symbolic links), else a copy."""
    try:
        os.link(trace, destination)
    except OSError:
        shutil.copyfile(trace, destination)


def _the_run(base: str) -> dict | None:
    try:
        status, body = get(f"{base}/api/runs")
    except OSError:  # not listening yet
        return None
    runs = body.get("runs", []) if status == 200 else []
    return runs[0] if runs else None


def _seen_at(run: dict) -> float | None:
    """When the server first listed the run's file (Unix time), if it says (``seen_at``, since issue 18's Overview
    round); the run of a benchmark holds one file."""
    files = run.get("files") or []
    return files[0].get("seen_at") if files else None


def _every_view_ready(run: dict) -> bool:
    """The run is parsed and, when the server reports per-view readiness, every applicable view says ready."""
    if run["state"] != "ready":
        return False
    return all(state == "ready" for state in (run.get("view_states") or {}).values())


def _span(values: list[float]) -> list[float]:
    return [round(min(values), 2), round(max(values), 2)] if values else []


def peer(tool: str, trace: Path, scratch: Path) -> dict:
    """A peer's whole process under /usr/bin/time -v, with the load average sampled before and after."""
    outcome = timed(tool_command(tool, trace, scratch))
    if "error" in outcome:
        return outcome
    outcome.pop("stdout", None)
    outcome["load_1min"] = _span(outcome["load_1min"])
    return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=1, help="profscope runs per trace (median); the peers run once")
    parser.add_argument("--no-peers", action="store_true", help="profscope only")
    parser.add_argument("--peer", action="append", choices=PEERS, help="run only this peer (repeatable; default: all)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for every view")
    parser.add_argument("--results", type=Path, default=OUT / "serve-results.jsonl")
    parser.add_argument("--serve-arg", action="append", default=[], help="an extra option of profscope serve")
    args = parser.parse_args()
    compile_like_an_install()
    tools = ("profscope serve",) + (() if args.no_peers else tuple(args.peer or PEERS))
    OUT.mkdir(parents=True, exist_ok=True)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(args.results, "a") as results:
        for trace in args.traces:
            size_mb = uncompressed_mb(trace)
            for tool, outcome, at in measure_around_the_peers(trace, tools[1:], args):
                row = {"input": trace.name.split(".")[0], "tool": tool, "uncompressed_mb": round(size_mb, 1),
                       "at": at, **outcome}  # fmt: skip
                rows.append(row)
                results.write(json.dumps(row) + "\n")
                results.flush()
                print(json.dumps(row), flush=True)
    print()
    print("Command: `" + shlex.join(["python", "bench/bench_serve.py", *sys.argv[1:]]) + "`")
    print()
    print(markdown(rows))
    return 0


def compile_like_an_install() -> None:
    """Write profscope's bytecode, as ``pip install`` and the image (``compileall``) do and as the peers' installs
    have it. An editable checkout run with PYTHONDONTWRITEBYTECODE=1 (set on this machine) would otherwise
    compile every module from source at each start: ~0.25 s before the first parse, ~0.3 s more while it runs."""
    import profscope

    compileall.compile_dir(Path(profscope.__file__).parent, quiet=1)


def spread_runs(runs: int, peers: int) -> list[int]:
    """How many of profscope's runs go before each peer's, and after the last: as even as can be, the extra ones
    first (3 runs, 2 peers: 1, 1, 1; 4 runs: 2, 1, 1; no peer: all of them)."""
    slots = peers + 1
    return [runs // slots + (1 if i < runs % slots else 0) for i in range(slots)]


def measure_around_the_peers(
    trace: Path, peers: tuple[str, ...], args: argparse.Namespace
) -> list[tuple[str, dict, str]]:
    """(tool, outcome, when it started) for profscope, then each peer. profscope's runs are spread before, between
    and after the peers' (``spread_runs``): this machine's speed drifts by tens of percent within minutes, and
    profscope's runs taken back to back, then a peer's for minutes, put the drift into the ratio."""
    ours: list[dict] = []
    theirs: list[tuple[str, dict, str]] = []
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    for slot, count in enumerate(spread_runs(args.runs, len(peers))):
        for _ in range(count):
            ours.append(measure_once("profscope serve", trace, args))
        if slot < len(peers):
            at = time.strftime("%Y-%m-%d %H:%M:%S")
            theirs.append((peers[slot], measure_once(peers[slot], trace, args), at))
    return [("profscope serve", summarize(ours), started), *theirs]


def measure_once(tool: str, trace: Path, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="serve-bench-", dir=OUT) as scratch:
        if tool == "profscope serve":
            return serve_until_every_view(trace, Path(scratch), args.timeout, tuple(args.serve_arg))
        return peer(tool, trace, Path(scratch))


def summarize(measured: list[dict]) -> dict:
    """The median run (by every view's time), with each run's figures beside it; the first failure, if any."""
    failed = [m for m in measured if "error" in m]
    if failed:
        return failed[0]
    middle = sorted(measured, key=lambda m: m["wall_s"])[len(measured) // 2]
    spread = {"runs_wall_s": [round(m["wall_s"], 3) for m in measured]}
    if "peak_tree_pss_mb" in middle:  # peak memory of each run too: it moves with how the processes overlap
        spread["runs_peak_pss_mb"] = [round(m["peak_tree_pss_mb"], 1) for m in measured]
    after_seen = [m["overview_after_seen_s"] for m in measured if m.get("overview_after_seen_s") is not None]
    if after_seen:  # its own median: the run with the median "every view" need not have the median Overview
        spread["runs_overview_after_seen_s"] = after_seen
        spread["overview_after_seen_median_s"] = sorted(after_seen)[len(after_seen) // 2]
        spread["runs_cpu_s"] = [round(m["cpu_s"], 2) for m in measured]
    return {**middle, **spread}


def markdown(rows: list[dict]) -> str:
    """Peers next to profscope, ratios of this run's own numbers."""
    by_input: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_input.setdefault(row["input"], {})[row["tool"]] = row
    lines = [
        "| input | unc. MB | profscope serve: every view s | first view (overview) s "
        "| overview after the file was seen s (range) | profscope CPU s "
        "| all processes peak MiB (RSS / PSS, PSS range of the runs) | highest PSS / trace size "
        "| tb-profiler s | tb CPU s | tb peak MiB | HTA s | HTA CPU s | HTA peak MiB "
        "| tb / profscope | HTA / profscope | load (1 min) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, tools in by_input.items():
        ours, tb, hta = (tools.get(t) or {} for t in ("profscope serve", *PEERS))
        size = next(t["uncompressed_mb"] for t in tools.values())
        loads = [x for t in tools.values() for x in t.get("load_1min", [])]
        lines.append(
            f"| {name} | {size:.1f} | {_seconds(ours)} | {_first_view(ours)} | {_after_seen(ours)} | {_cpu(ours)} "
            f"| {_mb(ours, 'peak_tree_rss_mb')} / {_mb(ours, 'peak_tree_pss_mb')}{_pss_range(ours)} "
            f"| {_share_of_trace(ours, size)} "
            f"| {_seconds(tb)} | {_cpu(tb)} | {_mb(tb, 'peak_rss_mb')} "
            f"| {_seconds(hta)} | {_cpu(hta)} | {_mb(hta, 'peak_rss_mb')} "
            f"| {_ratio(tb, ours)} | {_ratio(hta, ours)} | {min(loads, default=0):.1f}-{max(loads, default=0):.1f} |"
        )
    return "\n".join(lines)


def _seconds(row: dict) -> str:
    if not row:
        return "—"
    return "failed" if "error" in row else f"{row['wall_s']:.2f}"


def _cpu(row: dict) -> str:
    return f"{row['cpu_s']:.1f}" if row.get("cpu_s") is not None else "—"


def _first_view(row: dict) -> str:
    first = row.get("first_ready_s", {}).get("overview")
    return "—" if first is None else f"{first:.2f}"


def _after_seen(row: dict) -> str:
    """The Overview after the server saw the file: the median of the runs, and their range when there were several."""
    runs = row.get("runs_overview_after_seen_s") or []
    if not runs:
        return "—"
    spread = f" ({min(runs):.2f}-{max(runs):.2f})" if len(runs) > 1 else ""
    return f"{row['overview_after_seen_median_s']:.2f}{spread}"


def _mb(row: dict, key: str) -> str:
    return f"{row[key]:.0f}" if row and key in row else "—"


def _share_of_trace(row: dict, uncompressed_mb: float) -> str:
    """The highest run's PSS peak over the trace's uncompressed size, both in bytes: the peaks are read from /proc in
    KiB (``*_mb`` fields: MiB), the size is counted in bytes (``uncompressed_mb``: 10**6 bytes). Issue 18's memory
    target is this ratio at most 0.6 (runs 20-29 set MiB against 10**6 bytes, ~5% too low)."""
    peaks = row.get("runs_peak_pss_mb") or ([row["peak_tree_pss_mb"]] if row and "peak_tree_pss_mb" in row else [])
    return f"{max(peaks) * MIB / (uncompressed_mb * 1e6):.3f}x" if peaks else "—"


def _pss_range(row: dict) -> str:
    """The lowest and highest PSS peak of the runs, when there were several (the median run's is shown first)."""
    peaks = row.get("runs_peak_pss_mb") or []
    return f" ({min(peaks):.0f}-{max(peaks):.0f})" if len(peaks) > 1 else ""


def _ratio(peer_row: dict, ours: dict) -> str:
    if not peer_row.get("wall_s") or not ours.get("wall_s"):
        return "—"
    return f"{peer_row['wall_s'] / ours['wall_s']:.1f}x"


if __name__ == "__main__":
    sys.exit(main())
