"""Issue 21 item 5 over real HTTP, on a trace with 3,000 threads (tests/security/many_threads.py).

An area summary over too many slices x tracks answers 400 with what to do instead; the heavy
routes run a few at a time (two on two cores), so while many of them are in flight the probes and the other views
still answer; a heavy request whose client leaves before its turn is dropped (499 in /metrics),
never computed.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from profscope.guard import HEAVY_REQUESTS
from serving import running_server, wait_for

from .many_threads import write_many_threads_trace
from .outside import connect, host_of, metric_value, metrics_text

THREADS, OPS = 3000, 4
SUMMARY = "/api/timeline/summary"
IN_FLIGHT = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("heavy")
    write_many_threads_trace(base / "traces" / "many" / "rank0.pt.trace.json.gz", THREADS, OPS)
    # a budget that lets a summary of the whole trace (12,000 slices x 3,000 tracks) through
    with running_server([base / "traces"], base / "cache", "--max-summary-work", str(40_000_000), workers=1) as url:
        wait_for(lambda: httpx.get(f"{url}/api/runs").json()["runs"][0]["state"] == "ready", timeout=300)
        yield url


def test_a_summary_over_too_much_is_refused_with_what_to_do(server: str) -> None:
    whole = httpx.get(f"{server}{SUMMARY}", params={"run": "many"}, timeout=60)
    assert whole.status_code == 200 and whole.json()["slices"] == THREADS * OPS
    args = server.process.args
    cache = Path(args[args.index("--cache-dir") + 1])  # already parsed: the second server reuses it
    with running_server([Path(args[4])], cache, "--max-summary-work", str(THREADS * OPS * THREADS - 1),
                        workers=1) as tight:  # fmt: skip
        wait_for(lambda: httpx.get(f"{tight}/api/runs").json()["runs"][0]["state"] == "ready", timeout=300)
        refused = httpx.get(f"{tight}{SUMMARY}", params={"run": "many"}, timeout=60)
        assert refused.status_code == 400
        assert refused.json()["detail"] == (
            f"the area holds {THREADS * OPS:,} slices on {THREADS:,} tracks: too much to summarise at once; "
            "select fewer tracks or a shorter time range"
        )
        first_slices = httpx.get(f"{tight}{SUMMARY}", params={"run": "many", "end_us": 100}, timeout=60)
        assert first_slices.status_code == 200 and first_slices.json()["slices"] == THREADS


def _send_summary(server: str) -> socket.socket:
    sock = connect(server, timeout_s=120)
    sock.sendall(f"GET {SUMMARY}?run=many HTTP/1.1\r\nHost: {host_of(server)}\r\n\r\n".encode())
    return sock


def test_probes_and_views_answer_while_heavy_requests_run_and_leavers_are_dropped(server: str) -> None:
    before = metrics_text(server)
    heavy = [_send_summary(server) for _ in range(IN_FLIGHT)]
    try:
        wait_for(lambda: metric_value(metrics_text(server), "profscope_heavy_requests_waiting") >= IN_FLIGHT // 2)
        for path in ("/healthz", "/readyz", "/api/runs", "/api/run?run=many", "/"):
            assert httpx.get(f"{server}{path}", timeout=30).status_code == 200, path
        during = metrics_text(server)
        assert 1 <= metric_value(during, "profscope_heavy_requests_running") <= HEAVY_REQUESTS
        assert metric_value(during, "profscope_heavy_requests_waiting") >= 1  # the probes did not wait for them
    finally:
        for sock in heavy:
            sock.close()

    def settled() -> str | None:
        text = metrics_text(server)
        idle = metric_value(text, "profscope_heavy_requests_waiting") == metric_value(
            text, "profscope_heavy_requests_running") == 0  # fmt: skip
        return text if idle else None

    after = wait_for(settled, timeout=120)
    dropped = metric_value(after, "profscope_http_requests_total", route=SUMMARY, status="499")
    computed = metric_value(after, "profscope_http_requests_total", route=SUMMARY, status="200") - metric_value(
        before, "profscope_http_requests_total", route=SUMMARY, status="200"
    )
    assert dropped >= 1 and dropped + computed == IN_FLIGHT, (dropped, computed)
