"""Shared cache in object storage: a fresh replica's first view of a large trace, from the bucket cache vs parsing.

For each trace (uploaded to the S3 emulator as ``s3://bench/traces/<run>/<file>``):

- *parse*: a fresh ``profscope serve s3://bench/traces --workers 1`` with an empty local cache and no
  shared cache; time from readiness to the Overview JSON (streaming the object, parsing, every view
  payload), then to the Trace view's first window (``/api/timeline``, tables + timeline index mapped).
- *index*: ``profscope index s3://bench/traces --cache-dir s3://bench/cache`` once (parse + upload);
  its wall time and the bundle's size.
- *bucket cache*: a fresh replica with ``--cache-dir s3://bench/cache`` and an empty
  ``--local-cache-dir``: the same two times (manifest GET, bundle download, size + SHA-256 check,
  unpacking), and the fetch time the replica reports in ``profscope_shared_cache_fetch_duration_seconds``.
  It must parse nothing (``profscope_ingests_started_total`` is checked to be 0).

The emulator (moto) runs on this machine, so the network is loopback: a real bucket adds its
bandwidth limit (bundle bytes / throughput) and round trips, and removes moto's own CPU use.

    python bench/bench_shared_cache.py TRACE.json.gz [...] --runs 3      # prints a Markdown table
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from serving import running_server  # noqa: E402
from storage import emulators  # noqa: E402


def first_views_s(root: str, run: str, local: Path, *flags: str) -> tuple[float, float, dict[str, float]]:
    """(seconds to the Overview JSON, to the first Trace window, the server's metrics) for a fresh server."""
    if flags:  # a bucket cache: entries unpacked into the same empty local folder
        flags = (*flags, "--local-cache-dir", str(local))
    with running_server([root], local, *flags, workers=1) as base:  # type: ignore[list-item]
        started = time.perf_counter()
        overview = _wait_200(f"{base}/api/overview", {"run": run}) - started
        window = _wait_200(f"{base}/api/timeline", {"run": run, "width_px": 2000}) - started
        text = httpx.get(f"{base}/metrics").text
        metrics = {s.name + json.dumps(s.labels, sort_keys=True): s.value
                   for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip
        return overview, window, metrics


def _wait_200(url: str, params: dict) -> float:
    while True:
        response = httpx.get(url, params=params, timeout=300)
        if response.status_code == 200:
            return time.perf_counter()
        if response.status_code not in (202, 404):  # 404 until the first listing names the run
            raise RuntimeError(f"{url}: {response.status_code} {response.text[:300]}")
        time.sleep(0.02)


def _spread(times: list[float]) -> str:
    return f"{statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="profscope-bench-shared-cache-"))
    moto = emulators.moto(work / "moto.log")
    try:
        moto.start()
        os.environ.update(
            AWS_ENDPOINT_URL=moto.url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1", NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
        )  # fmt: skip
        import boto3

        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="bench")
        header = "| trace (gz / json) | index: parse + upload (s) | bundle | source of the first view | "
        header += f"Overview (s) | Trace window (s) | fetch (s), median (min-max) of {args.runs} |"
        print(header)
        print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
        for number, path in enumerate(args.traces):
            run = f"run{number}"
            s3.upload_file(str(path), "bench", f"traces/{run}/{path.name}")
            with gzip.open(path) as raw:
                json_bytes = sum(len(chunk) for chunk in iter(lambda: raw.read(1 << 24), b""))
            label = f"{path.name} ({path.stat().st_size / 1e6:.0f} MB / {json_bytes / 1e6:.0f} MB)"
            cache = f"s3://bench/cache{number}"
            started = time.perf_counter()
            index = subprocess.run([sys.executable, "-m", "profscope.cli", "index", "s3://bench/traces", "--cache-dir",
                                    cache], capture_output=True, text=True, check=True)  # fmt: skip
            index_s = time.perf_counter() - started
            assert json.loads(index.stdout.splitlines()[-1])["parsed"] == 1, index.stdout
            objects = s3.list_objects_v2(Bucket="bench", Prefix=f"cache{number}/")["Contents"]
            (bundle,) = [o["Size"] for o in objects if o["Key"].endswith(".tar")]  # the root holds this trace only
            for source, flags in (("parse (no shared cache)", ()), ("bucket cache", ("--cache-dir", cache))):
                overviews, windows, fetches = [], [], []
                for attempt in range(args.runs):
                    local = work / f"local-{run}-{len(flags)}-{attempt}"
                    overview, window, metrics = first_views_s("s3://bench/traces", run, local, *flags)
                    overviews.append(overview)
                    windows.append(window)
                    if flags:
                        assert metrics["profscope_ingests_started_total{}"] == 0, "the replica parsed"
                        fetches.append(metrics["profscope_shared_cache_fetch_duration_seconds_sum{}"])
                    shutil.rmtree(local)
                fetch = _spread(fetches) if fetches else "-"
                print(f"| {label} | {index_s:.1f} | {bundle / 1e6:.0f} MB | {source} | {_spread(overviews)} | "
                      f"{_spread(windows)} | {fetch} |", flush=True)  # fmt: skip
            s3.delete_object(Bucket="bench", Key=f"traces/{run}/{path.name}")  # one trace per measurement
    finally:
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
