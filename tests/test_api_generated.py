"""Every operation of ``/openapi.json`` driven with generated input (schemathesis) against a real server with
access control on: without credentials every request is refused; with the token no input makes a server
error, and every answer is one the document promises (status code, content type, schema).

Reproducible: by default the examples are derandomized (the same inputs on every run, as in CI);
``bench/api_fuzz.py`` runs it long with a random seed it prints (``PROFSCOPE_API_SEED``,
``PROFSCOPE_API_EXAMPLES``), and the same seed replays the same inputs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from serving import running_server, wait_for
from test_access_control import TOKEN, _registered_paths, every_kind_of_file, one_source_file

GOOD = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES_PER_OPERATION = int(os.environ.get("PROFSCOPE_API_EXAMPLES", "30"))  # modest: ~25 operations, CI time
SEED = os.environ.get("PROFSCOPE_API_SEED")  # unset: derandomized, the same examples on every run
# Values that name something the server has, so generated values of the other parameters reach real data.
KNOWN = {"run": "cpu", "path": "train.py"}


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("generated")
    roots = every_kind_of_file(work / "traces")
    sources = one_source_file(work / "src")
    with running_server([roots], work / "cache", "--source-root", str(sources), "--auth-token", TOKEN) as base:
        wait_for(lambda: _parsed(base), timeout=120)
        yield base


def _parsed(base: str) -> bool:
    runs = httpx.get(f"{base}/api/runs", headers=GOOD).json()["runs"]
    return bool(runs) and all(r["state"] == "ready" for r in runs)


@pytest.fixture(scope="module")
def api_schema(token_server: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{token_server}/openapi.json", headers=GOOD)


schema = schemathesis.pytest.from_fixture("api_schema")


def test_the_document_lists_every_api_route(api_schema: schemathesis.BaseSchema) -> None:
    operations = {result.ok().path for result in api_schema.get_all_operations()}
    assert operations == {path for path in _registered_paths() if path.startswith("/api/")}


def _fixed_seed(test):  # type: ignore[no-untyped-def]
    return seed(int(SEED))(test) if SEED is not None else test


@schema.parametrize()
@schema.given(known=st.booleans())
@_fixed_seed
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=SEED is None,
    database=None,  # no replay of examples a previous local run saved: the seed alone decides
)
def test_generated_requests(case: schemathesis.Case, known: bool) -> None:
    if known and case.query:
        case.query.update({name: value for name, value in KNOWN.items() if name in case.query})
    refused = case.call()
    assert refused.status_code == 401, (case.method, case.path, refused.status_code)
    wrong = case.call(headers={"Authorization": f"Bearer {TOKEN}-not"})
    assert wrong.status_code == 401, (case.method, case.path, wrong.status_code)
    case.call_and_validate(
        headers=GOOD,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
    )


def test_probes_stay_open(token_server: str) -> None:
    for path in ("/healthz", "/readyz"):
        assert httpx.get(f"{token_server}{path}").status_code == 200
    assert httpx.get(f"{token_server}/openapi.json").status_code == 401


# What the generated requests found, as plain regressions.


def test_a_retry_while_the_trace_is_queued_is_not_a_server_error(token_server: str) -> None:
    for _ in range(3):  # the second used to find the trace queued but its state forgotten: KeyError, 500
        retried = httpx.post(f"{token_server}/api/retry", params={"run": "cpu"}, headers=GOOD)
        assert retried.status_code == 202, retried.text
    wait_for(lambda: _parsed(token_server), timeout=120)


def test_a_window_far_outside_the_trace_is_empty(token_server: str) -> None:
    def window(**bounds: float) -> httpx.Response:
        params = {"run": "cpu", "width_px": 500, **bounds}
        return httpx.get(f"{token_server}/api/timeline", params=params, headers=GOOD, timeout=60)

    duration_us = wait_for(lambda: _timeline_duration_us(token_server))
    # before the trace: a key of lane k minus a time reached lane k-1's slices (and far out, int64 overflow)
    for start_us, end_us in ((-duration_us, -1.0), (-9e14, -8e14), (2 * duration_us, 9e14)):
        answer = window(start_us=start_us, end_us=end_us)
        assert answer.status_code == 200, answer.text
        assert not any(t.get("slices") or t.get("merged") for t in answer.json()["tracks"]), (start_us, end_us)
    whole = window().json()
    assert any(t.get("slices") or t.get("merged") for t in whole["tracks"])
    assert window(start_us=0, end_us=1e16).status_code == 422  # beyond the documented bound


def _timeline_duration_us(base: str) -> float | None:
    listing = httpx.get(f"{base}/api/timeline/tracks", params={"run": "cpu"}, headers=GOOD, timeout=60)
    return listing.json()["duration_us"] if listing.status_code == 200 else None
