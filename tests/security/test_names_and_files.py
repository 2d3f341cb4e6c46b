"""Issue 21 items 4 and 9 (source viewer, non-trace files), and issue 17 item 8, over real HTTP.

4. A file or span name that looks numeric to ``str.isdigit`` but is not (``²``) is ordered without
   crashing: /api/runs and every page keep answering, and a span ``#²`` is just not found.
9. /api/source answers 4xx, never 500, for a huge line number, a long path component or a path of
   thousands of parts, and shows paths relative to the source root; a file that is not a trace
   fails with a message that does not quote its bytes.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import corpus_file
from serving import running_server, wait_for

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
SECRET = b"AKIAEXAMPLESECRETKEY-do-not-show"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    base = tmp_path_factory.mktemp("names")
    traces = base / "traces"
    (traces / "run" / "rank0").mkdir(parents=True)
    shutil.copy(corpus_file(TINYGPT), traces / "run" / "rank0" / "².json.gz")
    shutil.copy(corpus_file(TINYGPT), traces / "run" / "rank0" / "3.json.gz")
    (traces / "good").mkdir()
    shutil.copy(corpus_file(TINYGPT), traces / "good" / Path(TINYGPT).name)
    (traces / "good" / "worker1.1.pt.trace.json").write_bytes(SECRET + b" not a trace at all")
    (base / "src" / "pkg").mkdir(parents=True)
    (base / "src" / "pkg" / "train.py").write_text("".join(f"line {n}\n" for n in range(1, 101)))
    with running_server([traces], base / "cache", "--source-root", str(base / "src"), workers=1) as url:
        wait_for(lambda: all(r["state"] != "parsing" for r in httpx.get(f"{url}/api/runs").json()["runs"]), 120)
        yield url, base / "src"


def test_a_numeric_looking_name_is_ordered_and_fails_nothing(server: tuple[str, Path]) -> None:
    base, _ = server
    runs = httpx.get(f"{base}/api/runs")
    assert runs.status_code == 200
    listed = {run["run"]: run for run in runs.json()["runs"]}
    assert {"run", "good"} <= set(listed)
    assert listed["run"]["workers"] == [{"worker": "rank0", "spans": ["3", "²"]}]  # numbers first
    for view in ("overview", "distributed"):
        for span in ("#²", "²", "#1"):
            answer = httpx.get(f"{base}/api/{view}", params={"run": "run", "span": span}, timeout=30)
            assert answer.status_code in (200, 404, 422), (view, span, answer.status_code, answer.text[:200])
        missing = httpx.get(f"{base}/api/{view}", params={"run": "run", "span": "#²"}, timeout=30)
        assert missing.status_code == 404 and "#²" in missing.json()["detail"]
    assert httpx.get(f"{base}/overview", params={"run": "run"}).status_code == 200


def test_the_source_viewer_answers_4xx_to_what_it_cannot_show(server: tuple[str, Path]) -> None:
    base, root = server
    huge = httpx.get(f"{base}/api/source", params={"path": "train.py", "line": "203222061701438565238195647923879936"})
    assert huge.status_code == 422 and huge.json()["detail"][0]["loc"] == ["query", "line"]
    long_part = httpx.get(f"{base}/api/source", params={"path": "/" + "a" * 1000 + "/train.py"})
    assert long_part.status_code == 404
    long_name = httpx.get(f"{base}/api/source", params={"path": "/x/" + "b" * 300 + ".py"})
    assert long_name.status_code == 404 and "not a readable file" in long_name.json()["detail"]
    many_parts = httpx.get(f"{base}/api/source", params={"path": "/a" * 2000 + "/pkg/train.py"})
    assert many_parts.status_code == 400 and many_parts.json()["detail"] == "the path has more than 64 parts"
    too_long = httpx.get(f"{base}/api/source", params={"path": "/a" * 3000})
    assert too_long.status_code == 422
    shown = httpx.get(f"{base}/api/source", params={"path": "/home/someone/project/pkg/train.py", "line": 50})
    assert shown.status_code == 200
    assert shown.json()["resolved"] == "pkg/train.py" and str(root) not in shown.text
    assert shown.json()["lines"][0] == "line 20"


def test_a_file_that_is_not_a_trace_fails_without_quoting_its_bytes(server: tuple[str, Path]) -> None:
    base, _ = server
    run = httpx.get(f"{base}/api/run", params={"run": "good"}).json()
    answer = httpx.get(f"{base}/api/overview", params={"run": "good", "worker": "worker1"}, timeout=30)
    assert answer.status_code == 422
    assert "not a JSON trace: the file does not start with '{' or '['" in answer.json()["error"]
    for text in (answer.text, str(run)):
        assert "AKIA" not in text and "SECRET" not in text


def test_a_local_root_is_shown_by_its_folder_name_not_its_absolute_path(server: tuple[str, Path]) -> None:
    base, source_root = server
    answer = httpx.get(f"{base}/api/runs")
    assert answer.status_code == 200
    assert [root["root"] for root in answer.json()["roots"]] == ["traces"]
    assert str(source_root.parent) not in answer.text  # the temporary folder's absolute path is nowhere
