"""Ingest time and peak memory: profscope side by side with torch-tb-profiler 0.4.3 and HTA, in one run.

Each measurement is a whole process timed from outside with ``/usr/bin/time -v`` (wall clock and
peak resident set size), the median of ``--runs`` runs, as in ``shared/reference/peers-bench.md``:

- profscope: ``profscope ingest FILE`` — stream, parse, build the tables, compute every view payload
  (overview, operators x2, kernels x2, call stacks x2) and write the cache: all views ready.
- torch-tb-profiler: ``bench/reference/timed_peer.py tbprof FILE`` in /opt/refvenv — parse, generate
  the run profile and serialise every per-worker route the plugin serves.
- HTA: ``timed_peer.py hta FILE`` — TraceAnalysis() + temporal and kernel breakdowns.

Scaled traces are made with ``shared/tools/make_big_trace.py`` (kept in bench/out/, not committed).

    python bench/run_bench.py --peers                     # corpus + 200 MB traces, all three tools
    python bench/run_bench.py --sizes 200MB,1GB --peers   # adds the 1 GB traces (peers take minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PROFSCOPE_SHARED", REPO.parent / "shared"))
CORPUS = Path(os.environ.get("PROFSCOPE_CORPUS", SHARED / "corpus"))
OUT = REPO / "bench" / "out"
REFVENV_PYTHON = Path(os.environ.get("REFVENV", "/opt/refvenv")) / "bin" / "python"

REAL_TRACES = {
    "kineto_rn50_nw0_a": "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto_rn50_nw4_a": "kineto-tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "hta_ns_resolution_rank0": "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta_neg_queue_len_rank0": "hta/negative_queue_length_values_check/rank0.json.gz",
    "h100_owlv2": "traces/AMD-AGI_TraceLens/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
}
SCALE_SOURCES = {
    "resnet50": REAL_TRACES["kineto_rn50_nw0_a"],
    "nsres": REAL_TRACES["hta_ns_resolution_rank0"],
}


def scaled_trace(family: str, size: str) -> Path:
    path = OUT / f"{family}_x{size}.json.gz"
    if not path.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                str(SHARED / "tools" / "make_big_trace.py"),
                str(CORPUS / SCALE_SOURCES[family]),
                str(path),
                "--size",
                size,
                "--compresslevel",
                "1",
            ],
            check=True,
        )
    return path


def _process_tree(root_pid: int) -> tuple[list[int], dict[int, list[str]]]:
    """A process and all its descendants (from /proc), and every process's /proc/PID/stat fields after the name."""
    children: dict[int, list[int]] = {}
    fields_of: dict[int, list[str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(pid)
        fields_of[pid] = fields
    tree, pending = [], [root_pid]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree, fields_of


def tree_total(root_pid: int, value: Callable[[list[str]], float]) -> float:
    """The sum of ``value(fields of /proc/PID/stat after the name)`` over a process and all its descendants."""
    tree, fields_of = _process_tree(root_pid)
    return sum(value(fields_of[pid]) for pid in tree if pid in fields_of)


def tree_pss_kb(root_pid: int) -> int:
    """Proportional memory of a process and all its descendants (/proc/PID/smaps_rollup): a page shared by
    several of them (a forked helper's copy-on-write tables) counts once in all, not once per process."""
    total = 0
    for pid in _process_tree(root_pid)[0]:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return total


def _tree_rss_kb(root_pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc."""
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    return int(tree_total(root_pid, lambda fields: int(fields[21]) * page_kb))


def timed(command: list[str]) -> dict:
    """Run under /usr/bin/time -v; wall seconds, user + system CPU seconds (less sensitive than wall time
    to other work on the machine), peak RSS of the largest process (GNU time), the peak of all its
    processes together (sampled every 50 ms from /proc: helpers count too) and the load average."""
    load_before = os.getloadavg()[0]
    # output to files, not pipes: a tool that logs more than a pipe holds (torch-tb-profiler on the nsres
    # traces) would block on a pipe nobody reads while the loop below samples memory
    with tempfile.TemporaryDirectory(prefix="timed-") as folder:
        out, err, timing = (Path(folder) / name for name in ("stdout", "stderr", "time"))
        with open(out, "w") as stdout_file, open(err, "w") as stderr_file:
            process = subprocess.Popen(["/usr/bin/time", "-v", "-o", str(timing), *command],
                                       stdout=stdout_file, stderr=stderr_file)  # fmt: skip
            tree_peak_kb = 0
            while process.poll() is None:
                tree_peak_kb = max(tree_peak_kb, _tree_rss_kb(process.pid))
                time.sleep(0.05)
        stdout, report = out.read_text(errors="replace"), timing.read_text() + err.read_text(errors="replace")[-4000:]
    completed = subprocess.CompletedProcess(command, process.returncode, stdout, report)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", report)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", report)
    cpu = re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", report)
    if completed.returncode != 0 or not wall or not rss:
        return {"error": (completed.stdout + report)[-2000:]}
    parts = [float(p) for p in wall.group(1).split(":")]
    seconds = sum(p * 60**i for i, p in enumerate(reversed(parts)))
    return {
        "wall_s": seconds,
        "cpu_s": sum(float(c) for c in cpu),
        "load_1min": [load_before, os.getloadavg()[0]],
        "peak_rss_mb": int(rss.group(1)) / 1024,
        "peak_tree_rss_mb": tree_peak_kb / 1024,
        "stdout": completed.stdout[-4000:],
    }


def ingest_report(stdout: str) -> dict:
    """profscope ingest's own report: the decoder used, parse and per-view seconds ({} for the peers)."""
    try:
        report = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}
    return {key: report[key] for key in ("decoder", "parse_s", "phase_s") if key in report}


def tool_command(tool: str, trace: Path, cache_dir: Path) -> list[str]:
    if tool == "profscope":
        return [sys.executable, "-m", "profscope.cli", "ingest", str(trace), "--cache-dir", str(cache_dir)]
    return [
        str(REFVENV_PYTHON),
        str(REPO / "bench" / "reference" / "timed_peer.py"),
        "tbprof" if tool == "torch-tb-profiler" else "hta",
        str(trace),
    ]


def uncompressed_mb(trace: Path) -> float:
    import gzip

    with gzip.open(trace) if trace.suffix == ".gz" else open(trace, "rb") as handle:
        size = 0
        while chunk := handle.read(1 << 24):
            size += len(chunk)
    return size / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="200MB", help="scaled trace sizes, comma-separated (e.g. 200MB,1GB)")
    parser.add_argument("--peers", action="store_true", help="also run torch-tb-profiler and HTA (needs /opt/refvenv)")
    parser.add_argument("--peer-max-mb", type=float, default=1e9, help="skip the peers on inputs larger than this")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median); 1 for inputs over 500 MB")
    parser.add_argument("--only", default="", help="comma-separated input names to run")
    parser.add_argument("--results", type=Path, default=OUT / "results.jsonl")
    args = parser.parse_args()

    inputs = {name: CORPUS / rel for name, rel in REAL_TRACES.items()}
    for size in filter(None, args.sizes.split(",")):
        for family in SCALE_SOURCES:
            inputs[f"{family}_x{size}"] = scaled_trace(family, size)
    if args.only:
        inputs = {k: v for k, v in inputs.items() if k in args.only.split(",")}
    tools = ["profscope"] + (["torch-tb-profiler", "HTA"] if args.peers else [])
    args.results.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="profscope-bench-") as scratch, open(args.results, "a") as results:
        for name, trace in inputs.items():
            size_mb = uncompressed_mb(trace)
            for tool in tools:
                if tool != "profscope" and size_mb > args.peer_max_mb:
                    continue
                runs = 1 if size_mb > 500 else args.runs
                measured = []
                for run in range(runs):
                    cache_dir = Path(scratch) / f"{name}-{tool}-{run}"
                    outcome = timed(tool_command(tool, trace, cache_dir))
                    measured.append(outcome)
                    if "error" in outcome:
                        break
                ok = [m for m in measured if "error" not in m]
                row = {
                    "input": name,
                    "tool": tool,
                    "gz_mb": trace.stat().st_size / 1e6,
                    "uncompressed_mb": size_mb,
                    "runs": len(ok),
                    "wall_s": statistics.median(m["wall_s"] for m in ok) if ok else None,
                    "cpu_s": statistics.median(m["cpu_s"] for m in ok) if ok else None,
                    "load_1min": [m["load_1min"] for m in ok],
                    "peak_rss_mb": statistics.median(m["peak_rss_mb"] for m in ok) if ok else None,
                    "peak_tree_rss_mb": statistics.median(m["peak_tree_rss_mb"] for m in ok) if ok else None,
                    "error": None if ok else measured[-1]["error"],
                    "report": ingest_report(ok[-1]["stdout"]) if ok and tool == "profscope" else {},
                }
                rows.append(row)
                results.write(json.dumps(row) + "\n")
                results.flush()
                print(json.dumps(row), flush=True)
    print(markdown(rows))
    return 0


def markdown(rows: list[dict]) -> str:
    by_input: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_input.setdefault(row["input"], {})[row["tool"]] = row
    lines = [
        "| input | gz MB | unc. MB | profscope s | profscope peak MB | tb-profiler s | tb peak MB | HTA s "
        "| HTA peak MB | speed-up vs tb |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cell(row: dict | None, key: str) -> str:
        if row is None:
            return "—"
        if row.get("error"):
            return "failed"
        return f"{row[key]:.2f}" if key == "wall_s" else f"{row[key]:.0f}"

    for name, tools in by_input.items():
        ours, tb, hta = tools.get("profscope"), tools.get("torch-tb-profiler"), tools.get("HTA")
        first = ours or tb or hta
        speedup = (
            f"{tb['wall_s'] / ours['wall_s']:.1f}x" if ours and tb and ours.get("wall_s") and tb.get("wall_s") else "—"
        )
        lines.append(
            f"| {name} | {first['gz_mb']:.2f} | {first['uncompressed_mb']:.1f} | {cell(ours, 'wall_s')} | "
            f"{cell(ours, 'peak_rss_mb')} | {cell(tb, 'wall_s')} | {cell(tb, 'peak_rss_mb')} | {cell(hta, 'wall_s')} | "
            f"{cell(hta, 'peak_rss_mb')} | {speedup} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
