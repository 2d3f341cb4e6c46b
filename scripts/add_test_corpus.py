"""Copy files of the project's shared corpus into tests/corpus, with their NOTICE entries.

    python scripts/add_test_corpus.py RELATIVE/PATH ... [--shared ../shared/corpus]

Only files whose MANIFEST.tsv license is MIT, BSD or Apache-2.0 are copied; each keeps its relative path
and gets an entry (repository, commit, original path, license, sha256) appended to tests/corpus/NOTICE,
which tests/test_fresh_clone.py checks.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_CORPUS = REPO / "tests" / "corpus"
ALLOWED_LICENSES = ("MIT", "BSD", "Apache-2.0")


def manifest(shared: Path) -> dict[str, dict[str, str]]:
    with (shared / "MANIFEST.tsv").open(newline="") as handle:
        return {row["dest"]: row for row in csv.DictReader(handle, delimiter="\t")}


def notice_entry(relative: str, row: dict[str, str], sha256: str) -> str:
    return (
        f"\n{relative}\n"
        f"  repository: https://github.com/{row['repo']}\n"
        f"  commit: {row['commit']}\n"
        f"  original path: {row['original_path']}\n"
        f"  license: {row['license']}\n"
        f"  sha256: {sha256}\n"
    )


def add(relative: str, shared: Path, rows: dict[str, dict[str, str]]) -> str:
    row = rows.get(relative)
    if row is None:
        raise SystemExit(f"{relative}: not in {shared / 'MANIFEST.tsv'}")
    if not row["license"].startswith(ALLOWED_LICENSES) or row["license"].startswith("MIT-style"):
        raise SystemExit(f"{relative}: license {row['license']!r} is not MIT, BSD or Apache-2.0")
    target = TEST_CORPUS / relative
    if target.exists():
        return f"{relative}: already in tests/corpus"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shared / relative, target)
    sha256 = hashlib.sha256(target.read_bytes()).hexdigest()
    with (TEST_CORPUS / "NOTICE").open("a") as notice:
        notice.write(notice_entry(relative, row, sha256))
    return f"{relative}: copied ({target.stat().st_size:,} bytes)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="paths relative to the shared corpus")
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "corpus")
    args = parser.parse_args()
    rows = manifest(args.shared)
    for relative in args.paths:
        print(add(relative, args.shared, rows), file=sys.stdout)


if __name__ == "__main__":
    main()
