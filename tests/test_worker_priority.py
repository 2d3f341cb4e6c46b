"""Parse workers run at a lower CPU priority than the server process, so requests win the CPU while a large
trace is being read (bench/load_test.py --ingest-trace measures it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx

from conftest import corpus_file
from profscope.ingest.jobs import WORKER_NICENESS
from serving import children_of, running_server, wait_for

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
MAX_NICENESS = 19


def _parse_workers(server_pid: int) -> list[int]:
    """The server's process-pool workers, forked or spawned (not multiprocessing's resource tracker)."""
    workers = []
    for pid in children_of(server_pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"resource_tracker" not in command:
            workers.append(pid)
    return workers


def test_parse_workers_run_below_the_server(tmp_path: Path) -> None:
    run = tmp_path / "traces" / "cpu"
    run.mkdir(parents=True)
    shutil.copy(corpus_file(TINYGPT), run / Path(TINYGPT).name)
    with running_server([run.parent], tmp_path / "cache") as base:
        wait_for(lambda: httpx.get(f"{base}/api/runs").json()["runs"][0]["state"] == "ready", timeout=120)
        workers = wait_for(lambda: _parse_workers(base.process.pid), timeout=30)
        server = os.getpriority(os.PRIO_PROCESS, base.process.pid)
        for pid in workers:
            assert os.getpriority(os.PRIO_PROCESS, pid) == min(MAX_NICENESS, server + WORKER_NICENESS), pid
