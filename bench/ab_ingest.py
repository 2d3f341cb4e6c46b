"""Same-run A/B of ``profscope ingest`` between two checkouts (e.g. before and after a refactor).

    python bench/ab_ingest.py --before /work/before12 --after . bench/out/resnet50_x1GB.json.gz ... [--rounds 3]

Each checkout runs with its own interpreter (``CHECKOUT/.venv/bin/python`` if present, else this one) and its
own code; the two alternate (before, after, before, after, ...) on each trace so that both meet the same
machine. Each run is a whole process under ``/usr/bin/time -v`` with a fresh cache directory. Prints one
JSON line per run and a Markdown table of medians, with the 1-minute load average at each run's start.
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
from pathlib import Path


def interpreter(checkout: Path) -> str:
    venv = checkout / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def timed_ingest(checkout: Path, trace: Path, cache: Path) -> dict[str, float]:
    load = os.getloadavg()[0]
    command = ["/usr/bin/time", "-v", interpreter(checkout), "-m", "profscope.cli", "ingest", str(trace),
               "--cache-dir", str(cache)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(checkout / "server")}
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env, cwd=checkout)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    cpu = [float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", done.stderr)]
    assert wall and peak and len(cpu) == 2, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "wall_s": int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3)),
        "cpu_s": round(sum(cpu), 2),
        "peak_mb": round(int(peak.group(1)) / 1024),
        "load_1min": round(load, 2),
        "queries": len(report.get("phase_s", {})),
        "parse_s": round(report.get("parse_s", 0.0), 2),
        "phase_s": {name: round(seconds, 3) for name, seconds in report.get("phase_s", {}).items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", type=Path, nargs="+")
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="ab-ingest-") as scratch:
        for trace in args.traces:
            for round_ in range(args.rounds):
                for side, checkout in (("before", args.before), ("after", args.after)):
                    cache = Path(scratch) / f"{trace.name}-{side}-{round_}"
                    run = timed_ingest(checkout.resolve(), trace.resolve(), cache)
                    rows.setdefault((trace.name, side), []).append(run)
                    print(json.dumps({"trace": trace.name, "side": side, "round": round_, **run}), flush=True)
    print("| trace | side | queries | wall s (median, runs) | CPU s | peak MB | load at start |")
    print("|---|---|---:|---:|---:|---:|---|")
    for (trace, side), runs in rows.items():
        walls = ", ".join(format(r["wall_s"], ".2f") for r in runs)
        loads = ", ".join(str(r["load_1min"]) for r in runs)
        wall, cpu = statistics.median(r["wall_s"] for r in runs), statistics.median(r["cpu_s"] for r in runs)
        peak = statistics.median(r["peak_mb"] for r in runs)
        print(f"| {trace} | {side} | {runs[0]['queries']} | {wall:.2f} ({walls}) | {cpu:.2f} | {peak:.0f} | {loads} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
