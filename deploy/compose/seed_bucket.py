"""Compose's one-shot init container: create the bucket and upload sample runs into it.

Runs in the profscope image (boto3 is there). Uploads the runs under SEED_DIR (default: the
built-in demo run shipped inside profscope) to s3://$BUCKET/$PREFIX/<run>/..., skipping objects that
are already there, so `docker compose up` can be run again. The endpoint and keys come from the
usual AWS variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import boto3
from botocore.exceptions import ClientError, EndpointConnectionError


def seed_dir() -> Path:
    """SEED_DIR when it holds any trace, else the demo run inside profscope."""
    given = Path(os.environ.get("SEED_DIR") or "/nonexistent")
    if any(p.name.endswith((".json", ".json.gz")) for p in given.rglob("*")):
        return given
    from profscope.assets import demo_traces

    return demo_traces()


def wait_for_store(s3, attempts: int = 60) -> None:  # type: ignore[no-untyped-def]
    for _ in range(attempts):
        try:
            s3.list_buckets()
            return
        except EndpointConnectionError:
            time.sleep(1)
    raise SystemExit("the object store did not answer")


def main() -> int:
    bucket, prefix = os.environ.get("BUCKET", "profscope"), os.environ.get("PREFIX", "runs").strip("/")
    s3 = boto3.client("s3")
    wait_for_store(s3)
    try:
        s3.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    existing = {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                for o in page.get("Contents", [])}  # fmt: skip
    root = seed_dir()
    uploaded = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "README.md"):
        key = f"{prefix}/{path.relative_to(root).as_posix()}" if prefix else path.relative_to(root).as_posix()
        if key not in existing:
            s3.upload_file(str(path), bucket, key)
            uploaded += 1
    print(f"s3://{bucket}/{prefix}: {uploaded} uploaded, {len(existing)} already there", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
