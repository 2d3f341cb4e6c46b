"""Offline checks of what deploys profscope: the Dockerfile (hadolint), the compose file (rendered by
podman-compose, its seed script run against an S3 emulator) and the Kubernetes manifests (rendered
by kustomize, validated against the Kubernetes schemas, and cross-checked with each other and with
the image)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import kubernetes_validate
import pytest
import yaml

from conftest import REPO
from profscope.assets import demo_traces
from serving import running_server, wait_for
from storage import emulators

DEPLOY = REPO / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
KUBERNETES_VERSION = "1.30.0"  # the oldest version still supported by the big clouds when written


def _tool(name: str) -> str:
    """A console script installed by pip next to this interpreter, or on PATH."""
    for folder in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        if (folder / name).exists():
            return str(folder / name)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: run scripts/test.sh (pip install -e '.[test]')")
    return found


def _dockerfile() -> str:
    return (REPO / "Dockerfile").read_text()


# ---- the image ----------------------------------------------------------------------------------
def test_dockerfile_is_hadolint_clean() -> None:
    result = subprocess.run([_tool("hadolint"), "--no-color", str(REPO / "Dockerfile")], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_dockerfile_contract() -> None:
    text = _dockerfile()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.12-slim$", text, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.M)
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert re.search(r'^VOLUME \["/var/cache/profscope"\]$', text, re.M)
    assert "PROFSCOPE_CACHE_DIR=/var/cache/profscope" in text and "PROFSCOPE_HOST=0.0.0.0" in text
    assert re.search(r"^EXPOSE 8080$", text, re.M)
    assert re.search(r"^HEALTHCHECK .*\n.*/healthz", text, re.M)
    assert re.search(r'^ENTRYPOINT \["profscope"\]$', text, re.M) and re.search(r'^CMD \["serve"\]$', text, re.M)
    assert "pip install --no-cache-dir --no-deps ." in text  # a regular install, not an editable one


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    rules = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert rules[0] == "*"
    kept = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    copied = {part.rstrip("/").removeprefix("./") for line in re.findall(r"^COPY (?!--from)(.+) \S+$",
              _dockerfile(), re.M) for part in line.split()}  # fmt: skip
    assert copied == kept == {"pyproject.toml", "setup.py", "README.md", "server", "web"}


# ---- docker compose -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    rendered = subprocess.run([_tool("podman-compose"), "-f", str(COMPOSE), "config"], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "MINIO_ROOT_PASSWORD": ""})  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    return yaml.safe_load(rendered.stdout)


def test_compose_wires_profscope_to_minio(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"minio", "seed", "profscope"}
    minio, seed, app = services["minio"], services["seed"], services["profscope"]
    assert app["command"] == ["serve", f"s3://{seed['environment']['BUCKET']}/{seed['environment']['PREFIX']}"]
    assert app["environment"]["PROFSCOPE_S3_ENDPOINT_URL"] == seed["environment"]["AWS_ENDPOINT_URL"]
    assert app["environment"]["PROFSCOPE_S3_ENDPOINT_URL"] == "http://minio:9000"
    for client in (seed, app):  # both sign with MinIO's root user
        assert client["environment"]["AWS_ACCESS_KEY_ID"] == minio["environment"]["MINIO_ROOT_USER"]
        assert client["environment"]["AWS_SECRET_ACCESS_KEY"] == minio["environment"]["MINIO_ROOT_PASSWORD"]
    assert minio["environment"]["MINIO_ROOT_PASSWORD"]  # an empty variable falls back to the default
    assert app["depends_on"]["seed"]["condition"] == "service_completed_successfully"
    assert seed["depends_on"]["minio"]["condition"] == "service_healthy" and "healthcheck" in minio
    assert "profscope-cache:/var/cache/profscope" in app["volumes"] and app["read_only"] is True
    assert app["ports"] == ["127.0.0.1:8080:8080"]
    assert Path(seed["build"]["context"]).resolve() == REPO == Path(app["build"]["context"]).resolve()
    mounted = {v.split(":")[0] for v in seed["volumes"]}
    assert mounted == {"./seed_bucket.py", "./sample-runs"}
    assert all((COMPOSE.parent / m).exists() for m in mounted)


def test_compose_seed_script_fills_the_bucket_profscope_serves(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    moto = emulators.moto(tmp_path / "moto.log").start()
    try:
        env = {"AWS_ENDPOINT_URL": moto.url, "AWS_ACCESS_KEY_ID": "AKIASEED", "AWS_SECRET_ACCESS_KEY": "seed-secret",
               "AWS_DEFAULT_REGION": "us-east-1", "BUCKET": "profscope", "PREFIX": "runs",
               "SEED_DIR": str(COMPOSE.parent / "sample-runs")}  # fmt: skip
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        script = [sys.executable, str(COMPOSE.parent / "seed_bucket.py")]
        first = subprocess.run(script, capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stderr
        demo = sorted(p.relative_to(demo_traces()).as_posix() for p in demo_traces().rglob("*") if p.is_file())
        assert f"{len(demo)} uploaded, 0 already there" in first.stdout  # sample-runs/ is empty: the demo run
        s3 = boto3.client("s3")
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="profscope")["Contents"])
        assert keys == [f"runs/{k}" for k in demo]
        again = subprocess.run(script, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and f"0 uploaded, {len(demo)} already there" in again.stdout
        with running_server(["s3://profscope/runs"], tmp_path / "cache") as base:  # what compose's profscope runs
            runs = wait_for(lambda: _ready_runs(base))
            assert [r["run"] for r in runs] == ["demo_run"] and runs[0]["state"] == "ready"
    finally:
        moto.stop()


def _ready_runs(base: str) -> list[dict] | None:
    runs = httpx.get(f"{base}/api/runs").json()["runs"]
    return runs if runs and all(r["state"] != "parsing" for r in runs) else None


# ---- Kubernetes --------------------------------------------------------------------------------------
OVERLAYS = ["base", "shared-cache", "oauth2-proxy", "object-cache"]


def _render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl (for `kubectl kustomize`, offline) is not installed")
    result = subprocess.run([kubectl, "kustomize", str(KUBERNETES / overlay)], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _one(docs: list[dict], kind: str) -> dict:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def _containers(docs: list[dict]) -> Iterator[tuple[dict, dict]]:
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                yield doc, container


def _env(container: dict) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _probe_target(probe: dict) -> str:
    if "httpGet" in probe:
        return probe["httpGet"]["path"]
    command = " ".join(probe["exec"]["command"])
    return re.search(r"http://127\.0\.0\.1:8080(/\w+)", command).group(1)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubernetes_manifests_are_valid(overlay: str) -> None:
    docs = _render(overlay)
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{overlay}: {doc['kind']} {doc['metadata']['name']}: {error.message} at {list(error.path)}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubernetes_deployment_contract(overlay: str) -> None:
    docs = _render(overlay)
    deployment, service, config = _one(docs, "Deployment"), _one(docs, "Service"), _one(docs, "ConfigMap")
    pvcs = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    pod = deployment["spec"]["template"]
    (app,) = [c for c in pod["spec"]["containers"] if c["name"] == "profscope"]
    assert app["image"].startswith("registry.example.com/") and ":" in app["image"]
    # probes: liveness on /healthz, readiness on /readyz
    assert _probe_target(app["livenessProbe"]) == "/healthz"
    assert _probe_target(app["readinessProbe"]) == "/readyz"
    if "httpGet" in app["livenessProbe"]:
        assert app["livenessProbe"]["httpGet"]["port"] in [p["name"] for p in app["ports"]]
    # non-root, read-only root file system, the image's user, the cache on the claim at the image's path
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 10001 and security["fsGroup"] == 10001
    for _, container in _containers(docs):
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, container["name"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, container["name"]
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], container["name"]
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), container["name"]
        assert {"cpu", "memory"} <= set(container["resources"]["limits"]), container["name"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in app["volumeMounts"]}
    cache_volume = volumes[mounts["/var/cache/profscope"]]
    assert "emptyDir" in volumes[mounts["/tmp"]]  # the only other writable place
    assert "PROFSCOPE_CACHE_DIR=/var/cache/profscope" in _dockerfile()
    if pvcs:  # the cache on a volume: one writer unless the volume is shared
        (pvc,) = pvcs
        assert set(cache_volume) == {"name", "persistentVolumeClaim"}
        assert cache_volume["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
        if deployment["spec"]["replicas"] > 1:
            assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        else:
            assert deployment["spec"]["strategy"]["type"] == "Recreate"
    else:  # the cache in object storage: each pod's local copies on its own disk
        assert set(cache_volume) == {"name", "emptyDir"} and cache_volume["emptyDir"]["sizeLimit"]
        assert config["data"]["PROFSCOPE_CACHE_DIR"].startswith(("s3://", "gs://", "az://"))
        assert config["data"]["PROFSCOPE_LOCAL_CACHE_DIR"] == "/var/cache/profscope"
        assert "PROFSCOPE_CACHE_DIR" not in _env(app)  # which would hide the ConfigMap's URI
    # settings and credentials: ConfigMap and Secret, never literal secrets in the manifests
    assert {"configMapRef": {"name": config["metadata"]["name"]}} in app["envFrom"]
    assert config["data"]["PROFSCOPE_ROOTS"].startswith(("s3://", "gs://", "az://"))
    env = _env(app)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "PROFSCOPE_AUTH_TOKEN"):
        assert env[name]["secretKeyRef"]["name"] == "profscope-credentials", name
    # the Service reaches the pod's serving port
    labels = pod["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in ports


def test_kubernetes_secret_references_exist() -> None:
    """Every secretKeyRef names a key that the documented Secret (or the overlay's instructions) provides."""
    example = yaml.safe_load((KUBERNETES / "base" / "secret.example.yaml").read_text())
    provided = {example["metadata"]["name"]: set(example["stringData"])}
    for overlay in OVERLAYS:
        docs = _render(overlay)
        instructions = (KUBERNETES / overlay / "kustomization.yaml").read_text()
        for name, keys in re.findall(r"create secret generic (\S+) \\\n((?:.*--from-literal=.*\n)+)", instructions):
            provided.setdefault(name, set()).update(re.findall(r"--from-literal=([\w-]+)=", keys))
        for _, container in _containers(docs):
            for value in _env(container).values():
                if isinstance(value, dict) and "secretKeyRef" in value:
                    ref = value["secretKeyRef"]
                    assert ref["key"] in provided.get(ref["name"], set()), (overlay, container["name"], ref)
            for item in container.get("env", []):
                assert "secret" not in item["name"].lower() or "valueFrom" in item, (overlay, item["name"])


def test_kubernetes_index_job_shards_into_the_servers_cache() -> None:
    docs = _render("shared-cache")
    job, config, pvc = _one(docs, "Job"), _one(docs, "ConfigMap"), _one(docs, "PersistentVolumeClaim")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["parallelism"] == spec["completions"] > 1
    (container,) = spec["template"]["spec"]["containers"]
    assert _env(container)["PROFSCOPE_SHARD_COUNT"] == str(spec["completions"])
    args = container["args"]
    assert args[0] == "index" and args[1] == config["data"]["PROFSCOPE_ROOTS"]  # the root names the cache keys
    assert args[args.index("--cache-dir") + 1] == "/var/cache/profscope"
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    (cache_mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/var/cache/profscope"]
    assert volumes[cache_mount["name"]]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    # the command line the Job runs is the one profscope understands
    from profscope.cli import build_parser

    os.environ.pop("JOB_COMPLETION_INDEX", None)
    parsed = build_parser().parse_args(args)
    assert parsed.command == "index" and parsed.root == config["data"]["PROFSCOPE_ROOTS"]


def test_kubernetes_index_job_and_replicas_share_a_bucket_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The object-cache overlay: the Indexed Job writes the bucket cache the replicas read; no shared volume."""
    from profscope.cli import _cache_locations, _settings_from, build_parser

    docs = _render("object-cache")
    job, config, deployment = _one(docs, "Job"), _one(docs, "ConfigMap"), _one(docs, "Deployment")
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert deployment["spec"]["replicas"] > 1 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["parallelism"] == spec["completions"] > 1
    (container,) = spec["template"]["spec"]["containers"]
    assert _env(container)["PROFSCOPE_SHARD_COUNT"] == str(spec["completions"])
    (app,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "profscope"]
    for pod_container in (container, app):
        assert {"configMapRef": {"name": config["metadata"]["name"]}} in pod_container["envFrom"]
        assert "PROFSCOPE_CACHE_DIR" not in _env(pod_container)  # both take the cache URI from the ConfigMap
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    (scratch,) = [m for m in container["volumeMounts"] if m["mountPath"] == config["data"]["PROFSCOPE_LOCAL_CACHE_DIR"]]
    assert "emptyDir" in volumes[scratch["name"]]
    # what profscope makes of these command lines in these environments (the image's own ENV underneath)
    image_env = {"PROFSCOPE_CACHE_DIR": "/var/cache/profscope", "PROFSCOPE_HOST": "0.0.0.0"}
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    for name, value in {**image_env, **config["data"], **_plain_env(container), "JOB_COMPLETION_INDEX": "3"}.items():
        monkeypatch.setenv(name, value)
    index = build_parser().parse_args(container["args"])
    assert index.command == "index" and index.root == config["data"]["PROFSCOPE_ROOTS"]  # the root names the keys
    assert index.shard == f"3/{spec['completions']}"
    cache_uri = config["data"]["PROFSCOPE_CACHE_DIR"]
    assert _cache_locations(index, [index.root]) == (Path("/var/cache/profscope"), cache_uri)
    for name in [*_plain_env(container), "JOB_COMPLETION_INDEX"]:
        monkeypatch.delenv(name)
    for name, value in _plain_env(app).items():
        monkeypatch.setenv(name, value)
    settings = _settings_from(build_parser().parse_args(app["args"]))
    assert settings.shared_cache == cache_uri and settings.shared_cache_write
    assert settings.cache_dir == Path("/var/cache/profscope") and settings.roots == [index.root]


def _plain_env(container: dict) -> dict[str, str]:
    return {name: value for name, value in _env(container).items() if isinstance(value, str)}


def test_oauth2_proxy_overlay_trusts_the_header_only_on_loopback() -> None:
    docs = _render("oauth2-proxy")
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    app, proxy = containers["profscope"], containers["oauth2-proxy"]
    env = _env(app)
    assert env["PROFSCOPE_TRUST_PROXY_HEADER"] == "X-Forwarded-User" and env["PROFSCOPE_HOST"] == "127.0.0.1"
    assert "--upstream=http://127.0.0.1:8080/" in proxy["args"] and "--pass-user-headers=true" in proxy["args"]
    assert {"--skip-auth-route=^/healthz$", "--skip-auth-route=^/readyz$"} <= set(proxy["args"])
    assert _one(docs, "Service")["spec"]["ports"][0]["targetPort"] == "proxy"
    assert all("httpGet" not in app[p] for p in ("livenessProbe", "readinessProbe", "startupProbe"))
    assert json.dumps(app).count("127.0.0.1:8080") == 3
