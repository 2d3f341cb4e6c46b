"""The container image, built with podman from the Dockerfile and run as a user would run it:
against a read-only mounted corpus folder, and against an S3 emulator (moto) on the host. Its
answers over HTTP must equal a local (non-container) server's on the same traces."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from conftest import REPO, corpus_file
from serving import free_port, running_server, wait_for
from storage import emulators

RUN = "tinygpt_cpu"
CORPUS_RUN = f"generated/{RUN}"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
IMAGE = f"localhost/profscope-test:{hashlib.sha1(str(REPO).encode()).hexdigest()[:10]}"


def _podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def podman_env() -> None:
    """podman and the local base image (scripts/test.sh sets this up; done here when pytest runs alone)."""
    if not os.environ.get("PROFSCOPE_BASE_IMAGE") or not shutil.which("podman"):
        exports = subprocess.run(["bash", str(REPO / "scripts" / "podman-setup.sh")], capture_output=True,
                                 text=True, check=True, timeout=900).stdout  # fmt: skip
        for line in exports.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            os.environ[name] = value


@pytest.fixture(scope="module")
def image(podman_env: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    mounts = ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"] if CA_BUNDLE.exists() else []  # a TLS proxy's CA for pip
    build = subprocess.run(
        ["podman", "build", "--pull=never", "--format", "docker", *mounts,
         "--build-arg", f"BASE_IMAGE={os.environ['PROFSCOPE_BASE_IMAGE']}", "-t", IMAGE, str(REPO)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    (tmp_path_factory.mktemp("build") / "build.log").write_text(build.stdout + build.stderr)
    assert build.returncode == 0, (build.stdout + build.stderr)[-4000:]
    config = _podman("image", "inspect", IMAGE, "--format", "{{json .Config}}").stdout
    assert '"User":"10001:10001"' in config.replace(" ", "")
    return IMAGE


class Container:
    """``podman run -d --read-only`` (the image must run on a read-only root file system, as in Kubernetes)."""

    def __init__(self, image: str, port: int, options: list[str], command: list[str], publish: bool = True) -> None:
        network = ["-p", f"127.0.0.1:{port}:8080"] if publish else ["--network", "host", "-e", f"PROFSCOPE_PORT={port}"]
        self.id = _podman("run", "-d", "--read-only", "--http-proxy=false", *network, *options, image,
                          *command).stdout.strip()  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"

    def wait_ready(self, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = _podman("inspect", self.id, "--format", "{{.State.Status}}").stdout.strip()
            assert state == "running", f"the container stopped ({state}):\n{self.logs()}"
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"not ready in {timeout_s}s:\n{self.logs()}")

    def logs(self) -> str:
        result = _podman("logs", self.id, check=False)
        return (result.stdout + result.stderr)[-4000:]

    def remove(self) -> None:
        _podman("rm", "-f", "-t", "5", self.id, check=False)


@pytest.fixture(scope="module")
def local_answers(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What a local, non-container server answers for the run."""
    cache = tmp_path_factory.mktemp("local") / "cache"
    with running_server([corpus_file(CORPUS_RUN)], cache) as base:
        return _answers(base)


def _parsed(base: str) -> dict | None:
    body = httpx.get(f"{base}/api/runs", timeout=10).json()
    runs = body["runs"]
    return body if runs and all(r["state"] in ("ready", "error") for r in runs) else None


def _answers(base: str) -> dict:
    body = wait_for(lambda: _parsed(base), timeout=180)
    (run,) = body["runs"]
    overviews = {}
    for worker in run["workers"]:
        for span in worker["spans"]:
            params = {"run": RUN, "worker": worker["worker"], "span": span}
            response = httpx.get(f"{base}/api/overview", params=params, timeout=30)
            assert response.status_code == 200, response.text
            overviews[span] = response.json()
    operators = httpx.get(f"{base}/api/operators", params={"run": RUN, "sort": "-host_self_us"}, timeout=30).json()
    return {"run": run, "objects": [r["objects"] for r in body["roots"]], "overviews": overviews,
            "operators": operators}  # fmt: skip


def _without_seen_at(run: dict) -> dict:
    """The run as both servers know it: ``seen_at`` is the moment each server first listed a file, its own."""
    return {**run, "files": [{k: v for k, v in f.items() if k != "seen_at"} for f in run["files"]]}


def _assert_same(container: dict, local: dict) -> None:
    assert all(f["seen_at"] > 0 for f in container["run"]["files"] + local["run"]["files"])
    assert _without_seen_at(container["run"]) == _without_seen_at(local["run"])  # names, workers, spans, files, states
    assert container["objects"] == local["objects"]
    assert container["overviews"] == local["overviews"]  # every number of every span
    assert container["operators"] == local["operators"]
    assert len(local["overviews"]) == 2 and all(o["steps"] for o in local["overviews"].values())


@pytest.fixture()
def container() -> Iterator[list[Container]]:
    started: list[Container] = []
    yield started
    for c in started:
        c.remove()


def test_image_serves_a_mounted_folder(image: str, local_answers: dict, container: list[Container]) -> None:
    folder = corpus_file(CORPUS_RUN)
    # the documented `docker run -p 8080:8080 -v FOLDER:/traces/...:ro IMAGE serve /traces/...`
    served = Container(image, free_port(), ["-v", f"{folder}:/traces/{RUN}:ro"], ["serve", f"/traces/{RUN}"])
    container.append(served)
    served.wait_ready()
    assert httpx.get(f"{served.url}/healthz").json() == {"status": "ok"}
    _assert_same(_answers(served.url), local_answers)
    assert _podman("healthcheck", "run", served.id, check=False).returncode == 0  # the image's HEALTHCHECK
    assert _podman("exec", served.id, "id", "-u").stdout.strip() == "10001"
    cached = _podman("exec", served.id, "sh", "-c", "ls /var/cache/profscope/traces | wc -l").stdout.strip()
    assert int(cached) == 2  # the parsed traces live in the cache volume
    page = httpx.get(f"{served.url}/overview", params={"run": RUN})
    assert page.status_code == 200 and "/static/bundles/overview.js" in page.text
    bundle = httpx.get(f"{served.url}/static/bundles/overview.js")  # made in the container from the wheel's modules
    assert bundle.status_code == 200 and "/static/js/pages/overview.js and the modules it imports" in bundle.text


def test_image_serves_the_demo_run_with_no_root(image: str, container: list[Container]) -> None:
    served = Container(image, free_port(), [], [])  # the image's own CMD: `serve`, the demo run
    container.append(served)
    served.wait_ready()
    body = wait_for(lambda: _parsed(served.url), timeout=120)
    assert [r["run"] for r in body["runs"]] == ["demo_run"] and body["runs"][0]["state"] == "ready"


def test_image_serves_an_s3_bucket(image: str, local_answers: dict, container: list[Container],
                                   tmp_path: Path) -> None:  # fmt: skip
    moto = emulators.moto(tmp_path / "moto.log").start()  # on the host's loopback
    try:
        s3 = boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1", aws_access_key_id="AKIATEST",
                          aws_secret_access_key="container-test-secret")  # fmt: skip
        s3.create_bucket(Bucket="profiles")
        for path in sorted(corpus_file(CORPUS_RUN).iterdir()):
            s3.put_object(Bucket="profiles", Key=f"team/{RUN}/{path.name}", Body=path.read_bytes())
        env = {"AWS_ENDPOINT_URL": moto.url, "AWS_ACCESS_KEY_ID": "AKIATEST",
               "AWS_SECRET_ACCESS_KEY": "container-test-secret", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
        # host networking: the container reaches moto on the host's loopback, as it would reach MinIO
        served = Container(image, free_port(), [f"--env={k}={v}" for k, v in env.items()],
                           ["serve", f"s3://profiles/team/{RUN}"], publish=False)  # fmt: skip
        container.append(served)
        served.wait_ready()
        answers = _answers(served.url)
        _assert_same(answers, local_answers)
        assert "container-test-secret" not in served.logs()
    finally:
        moto.stop()
