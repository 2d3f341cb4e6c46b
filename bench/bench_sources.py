"""Object-store sources: time to first view from the S3 emulator vs local disk, and listing a 100-run bucket.

- Time to first view: a fresh ``profscope serve ROOT`` (cold cache, 1 worker) is asked for
  ``/api/overview?run=R`` as soon as it is ready, and polled until the JSON is there: request ->
  overview JSON ready, which covers streaming the object, parsing it and computing every view.
  Then the server is restarted on the same cache and asked again (warm: the cached payload).
- Listing: 100 run prefixes with 2 small objects each, listed by each source's ``list()`` (one
  1000-key page, and 50-key pages to show what pagination costs), and local disk for comparison.

The emulators are the tests' (tests/storage/emulators.py): moto, fake-gcs-server, Azurite, on free
ports, all on this machine, so network latency is loopback's. Real clouds add their round trips.

    python bench/bench_sources.py            # --runs 3 by default; prints a Markdown table
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
CORPUS = Path(os.environ.get("PROFSCOPE_CORPUS", REPO.parent / "shared" / "corpus"))

from serving import running_server  # noqa: E402
from storage import emulators  # noqa: E402

TRACES = {
    "resnet50 (1.1 MB gz)": "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "owlv2 (3.1 MB gz, 56 MB json)": "traces/AMD-AGI_TraceLens/tests/traces/h100/"
    "google_owlv2-large-patch14-ensemble__1016001.json.gz",
}
SMALL = "traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"


def first_view_s(root: str, run: str, cache: Path, *flags: str) -> float:
    with running_server([root], cache, *flags, workers=1) as base:  # type: ignore[list-item]
        started = time.perf_counter()
        while True:
            response = httpx.get(f"{base}/api/overview", params={"run": run}, timeout=120)
            if response.status_code == 200:
                return time.perf_counter() - started
            if response.status_code not in (202, 404):  # 404 until the first listing names the run
                raise RuntimeError(f"{root}: {response.status_code} {response.text[:300]}")
            time.sleep(0.02)


def put_s3(bucket: str, key: str, data: bytes) -> None:
    import boto3

    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=data)


def median_s(action, runs: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _spread(times: list[float], digits: int) -> str:
    """median (min-max)"""
    return f"{statistics.median(times):.{digits}f} ({min(times):.{digits}f}-{max(times):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="profscope-bench-sources-"))
    started = [emulators.moto(), emulators.fake_gcs(), emulators.azurite()]
    try:
        for emulator in started:
            emulator.start()
        s3, gcs, azure = started
        os.environ.update(
            AWS_ENDPOINT_URL=s3.url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1", STORAGE_EMULATOR_HOST=gcs.url,
            AZURE_STORAGE_CONNECTION_STRING=emulators.azurite_connection_string(azure.url),
            NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
        )  # fmt: skip
        import boto3

        boto3.client("s3").create_bucket(Bucket="bench")
        print(f"| trace | source | first view, cold cache (s), median (min-max) of {args.runs} | same, cached (s) |")
        print("| --- | --- | ---: | ---: |")
        for label, relative in TRACES.items():
            path = CORPUS / relative
            run = f"run{len(label)}"
            local = work / "local" / run
            local.mkdir(parents=True)
            shutil.copy(path, local / path.name)
            put_s3("bench", f"traces/{run}/{path.name}", path.read_bytes())
            for source, root in (("local disk", str(local.parent)), ("S3 (moto)", "s3://bench/traces")):
                cold, warm = [], []
                for i in range(args.runs):
                    cache = work / f"cache-{run}-{source[:2]}-{i}"
                    cold.append(first_view_s(root, run, cache))
                    warm.append(first_view_s(root, run, cache))
                print(f"| {label} | {source} | {_spread(cold, 2)} | {_spread(warm, 3)} |", flush=True)
            shutil.rmtree(work / "local")

        data = (CORPUS / SMALL).read_bytes()
        keys = [f"many/run{i:03d}/worker{w}.1.pt.trace.json.gz" for i in range(100) for w in range(2)]
        from profscope.sources import StorageOptions, open_source

        sys.path.insert(0, str(REPO / "tests"))
        from storage.conftest import new_bucket

        buckets = {kind: new_bucket(kind) for kind in ("s3", "gs", "az")}
        for key in keys:
            for bucket in buckets.values():
                bucket.put(key, data)
            (work / "listing" / key).parent.mkdir(parents=True, exist_ok=True)
            (work / "listing" / key).write_bytes(data)
        print()
        print(f"| 100-run listing ({len(keys)} objects) | page size | list() median of {args.runs * 3} (ms) |")
        print("| --- | ---: | ---: |")
        local_source = open_source(str(work / "listing" / "many"))
        print(f"| local disk | - | {1000 * median_s(local_source.list, args.runs * 3):.1f} |")
        for kind, bucket in buckets.items():
            for page_size in (1000, 50):
                source = open_source(bucket.uri("many"), options=StorageOptions())
                source.page_size = page_size
                assert len(source.list()) == len(keys)
                print(f"| {kind} emulator | {page_size} | {1000 * median_s(source.list, args.runs * 3):.1f} |")
        with running_server([buckets["s3"].uri("many")], work / "cache-listing") as base:
            runs = httpx.get(f"{base}/api/runs").json()["runs"]
            assert len(runs) == 100, len(runs)
    finally:
        for emulator in started:
            emulator.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
