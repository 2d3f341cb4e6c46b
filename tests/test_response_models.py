"""Typed JSON twins (issue 12, item 6): every /api route documents its answer in /openapi.json, and the real
answers on corpus files validate against the declared models (which refuse unknown keys)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter, ValidationError

from conftest import app_routes, corpus_file
from nsys_export import two_rank_nccl_run
from profscope.app import create_app
from profscope.config import Settings
from serving import running_server, wait_for

RESNET = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
DDP = "generated/tinygpt_ddp4_gloo"
SNAPSHOT = "memory-snapshots/ZijianDu_Attention/memory.pickle"
MEMORY_LOG = Path(__file__).resolve().parent / "data/internlm/memory_trace"
PADDLE_GPU = Path(__file__).resolve().parent / "data/paddle/gpu"  # two hand-written ranks


def _models() -> dict[tuple[str, str], Any]:
    """(method, path) -> the response model each /api route declares."""

    routes = [route for route in app_routes(create_app(Settings()).routes) if route.path.startswith("/api/")]
    return {(method, route.path): route.response_model for route in routes for method in route.methods}


MODELS = _models()

# (path, query) of real answers to check: each route, and the variants whose answers differ in shape
REQUESTS: list[tuple[str, str, dict[str, str]]] = [
    ("GET", "/api/runs", {}),
    ("GET", "/api/run", {"run": "gpu"}),
    ("GET", "/api/overview", {"run": "gpu"}),
    ("GET", "/api/overview", {"run": "cpu"}),
    ("GET", "/api/operators", {"run": "gpu"}),
    ("GET", "/api/operators", {"run": "gpu", "group_by": "operator_input_shape", "top": "5"}),
    ("GET", "/api/overview", {"run": "nsys", "worker": "rank0", "step_range": "ncclAllReduce"}),  # a picked step
    ("GET", "/api/operators", {"run": "nsys", "worker": "rank0"}),  # no operator: empty_reason says why
    ("GET", "/api/operators/stacks", {"run": "cpu", "name": "aten::mm"}),
    ("GET", "/api/kernels", {"run": "gpu"}),
    ("GET", "/api/kernels", {"run": "gpu", "group_by": "kernel_op"}),
    ("GET", "/api/kernels", {"run": "cpu"}),
    ("GET", "/api/modules", {"run": "cpu"}),
    ("GET", "/api/modules", {"run": "gpu"}),
    ("GET", "/api/memory", {"run": "gpu"}),
    ("GET", "/api/memory", {"run": "cpu"}),
    ("GET", "/api/memory/snapshot", {"run": "gpu"}),
    ("GET", "/api/memory/snapshot/timeline", {"run": "gpu"}),
    ("GET", "/api/memory/snapshot/timeline", {"run": "gpu", "width_px": "300"}),
    ("GET", "/api/memory/snapshot/segments", {"run": "gpu"}),
    ("GET", "/api/memory/snapshot/top", {"run": "gpu"}),
    ("GET", "/api/memory/snapshot/stacks", {"run": "gpu", "moment": "end"}),
    ("GET", "/api/memory/snapshot/oom", {"run": "gpu"}),
    ("GET", "/api/memory/snapshot/allocation", {"run": "gpu", "id": "0"}),
    ("GET", "/api/memory/log", {"run": "memory_trace"}),
    ("GET", "/api/memory/log/layers", {"run": "memory_trace"}),
    ("GET", "/api/distributed", {"run": "ddp"}),
    ("GET", "/api/distributed", {"run": "cpu"}),  # not distributed: {applies: false, reason}
    ("GET", "/api/paddle/summary", {"run": "paddle"}),
    ("GET", "/api/paddle/summary", {"run": "cpu", "unit": "us"}),  # not Paddle's: {applies: false, reason}
    ("GET", "/api/runs/moved", {"run": "elsewhere/gpu"}),
    ("GET", "/api/diff", {"run": "cpu", "base_run": "gpu"}),
    ("GET", "/api/timeline/tracks", {"run": "gpu"}),
    ("GET", "/api/timeline", {"run": "gpu", "width_px": "800"}),
    ("GET", "/api/timeline/slice", {"run": "gpu", "id": "5"}),
    ("GET", "/api/timeline/search", {"run": "gpu", "q": "conv"}),
    ("GET", "/api/timeline/search", {"run": "gpu", "q": "no such name anywhere"}),
    ("GET", "/api/timeline/summary", {"run": "gpu"}),
    ("GET", "/api/timeline/export", {"run": "gpu", "limit": "50"}),
    ("GET", "/api/source", {"line": "3"}),  # path: added by the test
    ("POST", "/api/retry", {"run": "cpu"}),  # last: the run is parsed again
]


def test_every_api_route_documents_its_answer() -> None:
    spec = create_app(Settings()).openapi()
    undocumented = [
        f"{method.upper()} {path}"
        for path, operations in spec["paths"].items()
        if path.startswith("/api/")
        for method, operation in operations.items()
        if "schema" not in operation["responses"]["200" if method != "post" else "202"]["content"]["application/json"]
        or not operation["responses"]["200" if method != "post" else "202"]["content"]["application/json"]["schema"]
    ]
    assert undocumented == []
    assert all(model is not None for model in MODELS.values())
    assert {path for _, path, _ in REQUESTS} == {path for _, path in MODELS}, "a route is missing from REQUESTS"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("roots") / "traces"
    (root / "gpu").mkdir(parents=True)
    shutil.copy(corpus_file(RESNET), root / "gpu" / Path(RESNET).name)
    shutil.copy(corpus_file(SNAPSHOT), root / "gpu" / "rank0_memory.pickle")
    (root / "cpu").mkdir()
    shutil.copy(corpus_file(TINYGPT), root / "cpu" / Path(TINYGPT).name)
    shutil.copytree(corpus_file(DDP), root / "ddp")
    shutil.copytree(MEMORY_LOG, root / "memory_trace")
    shutil.copytree(PADDLE_GPU, root / "paddle", ignore=shutil.ignore_patterns("*.py"))
    (root / "nsys").mkdir()
    two_rank_nccl_run(root / "nsys")  # Nsight Systems exports
    sources = tmp_path_factory.mktemp("sources")
    (sources / "train.py").write_text("import torch\n\nmodel = torch.nn.Linear(4, 4)\n")
    cache = tmp_path_factory.mktemp("cache") / "c"
    with running_server([root], cache, "--source-root", str(sources)) as base:
        wait_for(lambda: _parsed(base), timeout=300)
        yield base, sources


def _parsed(base: str) -> bool:
    runs = httpx.get(f"{base}/api/runs").json()["runs"]
    return len(runs) == 6 and all(run["state"] == "ready" for run in runs)


@pytest.mark.parametrize(("method", "path", "query"), REQUESTS, ids=[f"{p}?{q}" for _, p, q in REQUESTS])
def test_answers_match_their_models(server, method: str, path: str, query: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    base, sources = server
    if path == "/api/source":
        query = {**query, "path": str(sources / "train.py")}
    response = httpx.request(method, f"{base}{path}", params=query, timeout=60)
    assert response.status_code == (202 if method == "POST" else 200), response.text
    model = MODELS[(method, path)]
    try:
        TypeAdapter(model).validate_python(response.json())  # a model, or a union of models
    except ValidationError as error:
        pytest.fail(f"{method} {path}?{query} does not match {model}:\n{error}")


def test_a_renamed_key_fails_its_model() -> None:
    """The models refuse what a page would not read: a key renamed in a real answer."""
    model = MODELS[("GET", "/api/timeline/summary")]
    answer = {"run": "r", "worker": "w", "span": "s", "file": "f", "start_us": 0, "end_us": 1, "slices": 0,
              "names": 0, "by_name": [], "by_track": []}  # fmt: skip
    model.model_validate(answer)
    answer["slice_count"] = answer.pop("slices")
    with pytest.raises(ValidationError):
        model.model_validate(answer)
