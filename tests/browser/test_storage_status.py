"""Runs page while an S3 root cannot be listed (its emulator stopped), and after it comes back."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from serving import get_json, running_server, wait_for
from storage import emulators

from .support import corpus_path, screenshot

pytestmark = pytest.mark.browser

TINY = sorted(corpus_path("generated/tinygpt_cpu").iterdir())


def _root(base: str) -> dict:
    return get_json(f"{base}/api/runs")[1]["roots"][0]  # type: ignore[index]


def test_runs_page_shows_a_root_that_cannot_be_listed(page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "page-test"), ("AWS_SECRET_ACCESS_KEY", "page-test"),
                        ("AWS_DEFAULT_REGION", "us-east-1"), ("NO_PROXY", "127.0.0.1,localhost")):  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    store = emulators.moto(tmp_path / "moto.log").start()
    try:
        client = boto3.client("s3", endpoint_url=store.url)
        client.create_bucket(Bucket="page-status")
        for path in TINY:
            client.put_object(Bucket="page-status", Key=f"runs/tinygpt/{path.name}", Body=path.read_bytes())
        flags = ("--s3-endpoint-url", store.url, "--rescan-seconds", "0.5", "--storage-attempts", "2",
                 "--storage-timeout", "1")  # fmt: skip
        with running_server(["s3://page-status/runs"], tmp_path / "cache", *flags) as base:  # type: ignore[list-item]
            wait_for(lambda: get_json(f"{base}/api/runs")[1]["runs"][0]["state"] == "ready", timeout=90)
            store.kill()  # not stop(): a store stopping gracefully may answer one last listing, empty
            error = wait_for(lambda: _root(base)["error"], timeout=60)

            page.goto(f"{base}/")
            box = page.locator("#root-errors [data-testid=error]")
            box.wait_for()
            assert box.locator("strong").inner_text() == "Cannot list s3://page-status/runs"
            assert box.locator(".message").inner_text() == error
            status = box.get_by_test_id("root-status").inner_text()
            assert status.startswith(f"Showing the {len(TINY)} files listed at ") and "Retrying automatically" in status
            assert page.locator("[data-run='tinygpt'] .badge").inner_text().lower() == "ready"
            screenshot(page, "runs-storage-root-down")

            page.click("[data-run='tinygpt'] a.run-name")  # parsed runs stay readable while the store is down
            page.get_by_test_id("environment").wait_for()

            store.start()
            client.create_bucket(Bucket="page-status")
            for path in TINY:
                client.put_object(Bucket="page-status", Key=f"runs/tinygpt/{path.name}", Body=path.read_bytes())
            wait_for(lambda: (r := _root(base))["error"] is None and r["objects"] == len(TINY), timeout=60)
            page.goto(f"{base}/")
            page.locator("[data-run='tinygpt'] a.run-name").wait_for()
            assert page.locator("#root-errors [data-testid=error]").count() == 0
    finally:
        store.stop()
