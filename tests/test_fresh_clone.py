"""The tests travel with the code: a clone with nothing beside it collects every test, and every corpus file
the tests name is in ``tests/corpus`` (with its source and license in ``tests/corpus/NOTICE``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

CORPUS_IN_REPO = REPO / "tests" / "corpus"
# A corpus path as the tests write it: a top folder of the corpus, then the rest of the path.
CORPUS_PATH = re.compile(
    r"""["']((?:generated|hta|kineto-tb_plugin|memory-snapshots|nsys-sqlite|paddle|traces)/[^"'{}\s]+)["']"""
)


def _named_corpus_paths() -> set[str]:
    named = set()
    for source in (REPO / "tests").rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        if "node_modules" not in source.parts and re.search(r"corpus_file|corpus_path|CORPUS\b", text):
            named.update(CORPUS_PATH.findall(text))  # modules that read the corpus (not, e.g., name-parsing cases)
    for reference in (REPO / "tests" / "reference_data").glob("*.json"):
        named.add(json.loads(reference.read_text())["source"])
    return named


def test_every_corpus_path_the_tests_name_is_in_the_repository() -> None:
    named = _named_corpus_paths()
    assert len(named) >= 30  # the scan finds the paths (a broken pattern would find none and pass)
    missing = sorted(p for p in named if not (CORPUS_IN_REPO / p).exists())
    assert not missing, f"named by tests but not in tests/corpus: {missing}"


def test_every_corpus_file_is_in_the_notice() -> None:
    notice = (CORPUS_IN_REPO / "NOTICE").read_text()
    files = [p for p in CORPUS_IN_REPO.rglob("*") if p.is_file() and p.name != "NOTICE"]
    third_party = [
        str(p.relative_to(CORPUS_IN_REPO)) for p in files if not p.is_relative_to(CORPUS_IN_REPO / "generated")
    ]
    assert third_party and all(f"\n{path}\n" in notice for path in third_party)
    licenses = [line.strip() for line in notice.splitlines() if line.startswith("  license: ")]
    assert len(licenses) == len(third_party)
    assert all(re.fullmatch(r"license: (MIT \(.*|BSD-.*|Apache-2\.0.*)", line) for line in licenses), licenses


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _collect(repo: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "PROFSCOPE_CORPUS"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_a_fresh_clone_with_nothing_beside_it_collects_every_test(tmp_path: Path) -> None:
    """Cloned at this checkout's HEAD into an empty folder (no ../shared): collection finds the same tests as
    here, and none errors."""
    head = _git("rev-parse", "HEAD", cwd=REPO)
    clone = tmp_path / "empty" / "profscope"
    _git("clone", "--quiet", "--no-checkout", str(REPO), str(clone), cwd=tmp_path)
    _git("checkout", "--quiet", head, cwd=clone)
    assert sorted(p.name for p in clone.parent.parent.iterdir()) == ["empty"]
    code, output = _collect(clone)
    assert code == 0, output[-3000:]
    counted = re.search(r"^(\d+) tests? collected", output, re.M)
    assert counted and int(counted.group(1)) > 500, output[-3000:]
    assert " error" not in output.splitlines()[-1], output[-3000:]
    if not _git("status", "--porcelain", "--untracked-files=no", "tests", cwd=REPO):  # compare with a clean tree
        _, here = _collect(REPO)
        assert re.search(r"^(\d+) tests? collected", here, re.M).group(1) == counted.group(1)
