"""Credentials never leave the process: not in logs (even at debug level), /api/runs, pages or error messages.

Covers an AWS secret key, an Azure SAS token in the root URL, and an Azure connection string with an
account key; each also in a failing case, since error paths are where SDK text leaks.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from serving import running_server, wait_for

from . import emulators
from .conftest import AWS_SECRET, new_bucket
from .snapshots import TRACES, corpus_tree, runs_when_parsed

DEBUG = ("--log-level", "debug", "--storage-attempts", "1", "--storage-timeout", "5")


def _everything_shown(base: str, cache: Path) -> str:
    """All text a user or an operator can see: API answers, the runs page, server logs (stdout + stderr)."""
    shown = [httpx.get(f"{base}/api/runs").text, httpx.get(f"{base}/").text, httpx.get(f"{base}/openapi.json").text]
    for run in httpx.get(f"{base}/api/runs").json()["runs"]:
        shown.append(httpx.get(f"{base}/api/overview", params={"run": run["run"]}).text)
    return "\n".join(shown)


def _logs(cache: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in cache.parent.glob(f"server-{cache.name}-*.log"))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus_tree(tmp_path_factory.mktemp("tree") / "runs")


def test_aws_secret_key_is_never_shown(storage_env: dict[str, str], tree: Path, tmp_path: Path) -> None:
    bucket = new_bucket("s3")
    bucket.upload_tree(tree, "runs")
    bucket.put("runs/broken/worker0.1.pt.trace.json", b'{"traceEvents": [{"ph": "X", "na')
    roots = [bucket.uri("runs"), f"s3://missing-{bucket.name}/runs"]
    cache = tmp_path / "cache"
    with running_server(roots, cache, *DEBUG) as base:  # type: ignore[arg-type]
        runs = wait_for(lambda: _settled(base, 3))
        assert runs["broken"]["state"] == "error"  # the first root's runs keep their folder names
        shown = _everything_shown(base, cache)
    assert "does not exist" in shown  # the failing root is reported...
    assert AWS_SECRET not in shown + _logs(cache)  # ...and the secret appears nowhere
    assert "Sending http request" in _logs(cache)  # debug logging was really on


def _settled(base: str, count: int) -> dict[str, dict] | None:
    runs = {r["run"]: r for r in httpx.get(f"{base}/api/runs").json()["runs"]}
    return runs if len(runs) == count and all(r["state"] != "parsing" for r in runs.values()) else None


def test_sas_token_and_account_key_are_never_shown(
    storage_env: dict[str, str], tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``https://ACCOUNT.blob.core.windows.net/container/prefix?SAS``, pointed at Azurite by --azure-account-url."""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    bucket = new_bucket("az")
    bucket.upload_tree(tree, "runs")
    sas = generate_container_sas(
        emulators.AZURITE_ACCOUNT,
        bucket.name,
        account_key=emulators.AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    signature = dict(part.split("=", 1) for part in sas.split("&"))["sig"]
    forged = sas.replace(signature, "Zm9yZ2VkLXNpZ25hdHVyZS1mb3ItdGVzdHM%3D")
    url = f"https://{emulators.AZURITE_ACCOUNT}.blob.core.windows.net/{bucket.name}"
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")  # only the SAS in the URL grants access
    cache = tmp_path / "cache"
    flags = ("--azure-account-url", f"{storage_env['AZURE']}/{emulators.AZURITE_ACCOUNT}", *DEBUG)
    with running_server([f"{url}/runs?{sas}", f"{url}/forged?{forged}"], cache, *flags) as base:  # type: ignore[list-item]
        runs = runs_when_parsed(base, len(TRACES))
        assert all(run["state"] == "ready" for run in runs.values())
        roots = httpx.get(f"{base}/api/runs").json()["roots"]
        assert [r["root"] for r in roots] == [f"{url}/runs", f"{url}/forged"]
        assert roots[0]["error"] is None
        assert roots[1]["error"] == f"{url}/forged: access denied with the SAS token in the URL (AuthorizationFailure)"
        shown = _everything_shown(base, cache)
    for secret in (signature, "Zm9yZ2VkLXNpZ25hdHVyZS1mb3ItdGVzdHM", emulators.AZURITE_KEY):
        assert secret not in shown + _logs(cache)


def test_connection_string_is_never_shown(storage_env: dict[str, str], tree: Path, tmp_path: Path) -> None:
    bucket = new_bucket("az")
    bucket.upload_tree(tree, "runs")
    cache = tmp_path / "cache"
    with running_server([bucket.uri("runs"), "az://no-such-container/x"], cache, *DEBUG) as base:  # type: ignore[list-item]
        runs_when_parsed(base, len(TRACES))
        roots = httpx.get(f"{base}/api/runs").json()["roots"]
        assert roots[1]["error"].startswith("az://no-such-container/x: the container no-such-container does not exist")
        shown = _everything_shown(base, cache)
    connection_string = storage_env["AZURE_STORAGE_CONNECTION_STRING"]
    for secret in (connection_string, emulators.AZURITE_KEY, emulators.AZURITE_KEY[:20]):
        assert secret not in shown + _logs(cache)
