"""The shared cache's bundle and manifest (server/profscope/shared_cache.py), on real parsed corpus traces.

A bundle is an entry's files as one uncompressed tar, assembled on the fly; a reader unpacks it only
when its size and SHA-256 match the manifest and every member is a plain file of an entry. The
store side (publish, fetch, replicas) is tested against emulators in tests/storage/test_shared_cache.py.
"""

from __future__ import annotations

import filecmp
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import orjson
import pytest

from conftest import corpus_file
from profscope.analysis.overview import overview_payload
from profscope.analysis.payloads import query_of
from profscope.cache import TraceCache
from profscope.ingest.jobs import IngestRequest, run_ingest
from profscope.shared_cache import (
    BundleInvalid,
    BundleReader,
    entry_files,
    extract_bundle,
    parse_manifest,
)
from profscope.sources import LocalSource
from profscope.tables import TraceTables
from profscope.views.registry import queries

TRACE = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
KEY = "k" * 40
OVERVIEW = query_of(overview_payload).stored_name  # the overview's file name in a cache entry


@pytest.fixture(scope="module")
def entry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local cache entry of a real trace, as a server's worker writes it."""
    path = corpus_file(TRACE)
    cache = tmp_path_factory.mktemp("cache")
    request = IngestRequest(source=LocalSource(path.parent), key=path.name, size=path.stat().st_size,
                            cache_key=KEY, cache_root=str(cache), max_trace_bytes=1 << 30,
                            queries=queries("trace"))  # fmt: skip
    assert "error" not in run_ingest(request)
    return TraceCache(cache).directory(KEY)


def _bundle(files: list[tuple[str, Path]]) -> tuple[bytes, str]:
    with BundleReader(files) as reader:
        digest = reader.digest()
        return reader.read(), digest


def _tar(members: list[tuple[str, bytes]], kind: bytes = tarfile.REGTYPE) -> bytes:
    """A tar written by the standard library (not by BundleReader), for hostile bundles."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.type = len(data), kind
            if kind == tarfile.SYMTYPE:
                info.size, info.linkname = 0, "/etc/passwd"
            archive.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return out.getvalue()


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


# ---- what goes in ----------------------------------------------------------------------------------
def test_a_bundle_holds_every_file_of_the_entry_and_nothing_else(entry: Path) -> None:
    names = [name for name, _ in entry_files(entry)]
    on_disk = sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file())
    assert sorted(names) == on_disk
    assert names[-1] == "summary.json"  # last: a bundle cut short has no summary
    assert {n.split("/")[0] for n in names} == {"tables", "timeline", "views", "summary.json"}
    assert f"views/{OVERVIEW}.json" in names and "tables/events.ts_ns.npy" in names and "timeline/info.json" in names


def test_staging_leftovers_of_a_writer_stay_out(entry: Path, tmp_path: Path) -> None:
    copy = tmp_path / "entry"
    shutil.copytree(entry, copy)
    (copy / "views" / f".{OVERVIEW}.json.123.tmp").write_text("{half")  # write_atomic's staging name
    (copy / "tables.tmp99").mkdir()  # TraceTables.save's staging folder
    (copy / "tables.tmp99" / "events.ts_ns.npy").write_bytes(b"x")
    (copy / "error.json").write_text("{}")
    assert entry_files(copy) == [(name, copy / name) for name, _ in entry_files(entry)]


# ---- the tar ---------------------------------------------------------------------------------------
def test_a_bundle_is_a_standard_tar_with_fixed_headers(entry: Path, tmp_path: Path) -> None:
    files = entry_files(entry)
    data, digest = _bundle(files)
    assert len(data) % tarfile.RECORDSIZE == 0 and data[-1024:] == bytes(1024)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        members = archive.getmembers()
        assert [m.name for m in members] == [name for name, _ in files]
        for member, (_, path) in zip(members, files, strict=True):
            assert member.isreg() and member.mode == 0o644 and member.mtime == 0 and member.uid == 0
            assert archive.extractfile(member).read() == path.read_bytes()
    (tmp_path / "b.tar").write_bytes(data)  # and GNU tar reads it too
    listed = subprocess.run(["tar", "-tf", str(tmp_path / "b.tar")], capture_output=True, text=True, check=True)
    assert listed.stdout.split() == [name for name, _ in files]
    assert _bundle(files)[1] == digest == _sha(data)  # the same files make the same bytes


def test_the_reader_seeks_and_reads_in_any_pieces(entry: Path) -> None:
    data, _ = _bundle(entry_files(entry))
    with BundleReader(entry_files(entry)) as reader:
        assert reader.size == len(data) and reader.seekable()
        pieces = []
        while piece := reader.read(1000):  # pieces that straddle headers, contents and padding
            pieces.append(piece)
        assert b"".join(pieces) == data
        assert reader.seek(-700, io.SEEK_END) == len(data) - 700 and reader.read() == data[-700:]
        reader.seek(12345)
        assert reader.tell() == 12345 and reader.read(5000) == data[12345:17345]
        reader.seek(5000)
        assert reader.seek(100, io.SEEK_CUR) == 5100 and reader.read(1) == data[5100:5101]


def test_a_file_that_shrinks_while_bundled_is_an_error(entry: Path, tmp_path: Path) -> None:
    copy = tmp_path / "entry"
    shutil.copytree(entry, copy)
    with BundleReader(entry_files(copy)) as reader:
        (copy / "summary.json").write_bytes(b"{}")
        with pytest.raises(OSError, match="changed while it was being bundled"):
            reader.read()


# ---- unpacking -------------------------------------------------------------------------------------
def test_an_unpacked_bundle_is_the_entry_and_its_tables_map(entry: Path, tmp_path: Path) -> None:
    data, digest = _bundle(entry_files(entry))
    target = tmp_path / "cache" / KEY
    extract_bundle(io.BytesIO(data), len(data), digest, target)
    compared = filecmp.dircmp(entry, target)
    assert not compared.left_only and not compared.right_only and not compared.diff_files
    for name, sub in compared.subdirs.items():
        assert not sub.left_only and not sub.right_only and not sub.diff_files, name
        assert filecmp.cmpfiles(entry / name, target / name, sub.common_files, shallow=False)[1:] == ([], [])
    tables = TraceTables.load(target / "tables")
    assert isinstance(tables.columns["events"]["ts_ns"], np.memmap)
    assert tables.row_count("events") == TraceTables.load(entry / "tables").row_count("events") > 0
    assert sorted(p.name for p in target.parent.iterdir()) == [KEY]  # no staging folder left


def test_a_good_bundle_replaces_a_stale_partial_entry(entry: Path, tmp_path: Path) -> None:
    data, digest = _bundle(entry_files(entry))
    target = tmp_path / KEY
    (target / "views").mkdir(parents=True)
    (target / "views" / f"{OVERVIEW}.json").write_text("{stale")
    extract_bundle(io.BytesIO(data), len(data), digest, target)
    assert (target / "views" / f"{OVERVIEW}.json").read_bytes() == (entry / "views" / f"{OVERVIEW}.json").read_bytes()


def _refused(data: bytes, size: int, digest: str, tmp_path: Path, reason: str) -> None:
    target = tmp_path / "cache" / KEY
    with pytest.raises(BundleInvalid, match=reason):
        extract_bundle(io.BytesIO(data), size, digest, target)
    assert list((tmp_path / "cache").iterdir()) == []  # nothing visible, no staging left


def test_a_truncated_bundle_is_refused(entry: Path, tmp_path: Path) -> None:
    data, digest = _bundle(entry_files(entry))
    _refused(data[: len(data) // 2], len(data), digest, tmp_path, "not a whole tar archive")
    _refused(data[:-512], len(data), digest, tmp_path, "cut short")  # only padding missing: the size tells


def test_a_corrupt_or_longer_bundle_is_refused(entry: Path, tmp_path: Path) -> None:
    data, digest = _bundle(entry_files(entry))
    header = len(data) - 1024 - tarfile.RECORDSIZE  # somewhere in the last files' contents
    flipped = data[:header] + bytes([data[header] ^ 0xFF]) + data[header + 1 :]
    _refused(flipped, len(data), digest, tmp_path, "SHA-256 differs")
    _refused(data + b"more", len(data), digest, tmp_path, "more than the")
    _refused(data, len(data), _sha(b"another bundle"), tmp_path, "SHA-256 differs")


@pytest.mark.parametrize(
    ("members", "kind", "reason"),
    [
        ([("../escaped.json", b"{}")], tarfile.REGTYPE, "unexpected member '../escaped.json'"),
        ([("/etc/cron.d/x", b"")], tarfile.REGTYPE, "unexpected member"),
        ([("views/../../x.json", b"{}")], tarfile.REGTYPE, "unexpected member"),
        ([("tables/sub/x.npy", b"")], tarfile.REGTYPE, "unexpected member"),
        ([("notes.txt", b"")], tarfile.REGTYPE, "unexpected member"),
        ([("views/.hidden.json", b"")], tarfile.REGTYPE, "unexpected member"),
        ([("views/x.json", b"")], tarfile.SYMTYPE, "unexpected member"),
        ([("views/a.json", b"1"), ("views/a.json", b"2")], tarfile.REGTYPE, "twice"),
        ([("views/a.json", b"{}")], tarfile.REGTYPE, "no summary.json"),
    ],
)
def test_a_hostile_or_incomplete_bundle_is_refused_even_with_the_right_digest(
    members: list[tuple[str, bytes]], kind: bytes, reason: str, tmp_path: Path
) -> None:
    data = _tar(members, kind)
    _refused(data, len(data), _sha(data), tmp_path, reason)
    assert not (tmp_path / "escaped.json").exists()


# ---- the manifest -----------------------------------------------------------------------------------
def _manifest(**fields: object) -> bytes:
    digest = "ab" * 32
    base = {"cache_key": KEY, "state": "ready", "bundle": f"bundle-{digest}.tar", "bytes": 10240, "sha256": digest}
    return orjson.dumps({**base, **fields})


def test_a_manifest_names_its_bundle_by_digest_or_records_a_failure() -> None:
    assert parse_manifest(_manifest(), KEY)["bytes"] == 10240
    failure = orjson.dumps({"cache_key": KEY, "state": "error", "error": {"message": "the trace ends before"}})
    assert parse_manifest(failure, KEY)["error"]["message"] == "the trace ends before"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_manifest()[:-5], "not JSON"),
        (_manifest(cache_key="other"), "another entry"),
        (b"[]", "another entry"),
        (_manifest(bundle="../../secrets.tar"), "by its SHA-256"),
        (_manifest(bundle=f"bundle-{'cd' * 32}.tar"), "by its SHA-256"),
        (_manifest(bytes=0), "no bundle size"),
        (_manifest(bytes=True), "no bundle size"),
        (_manifest(bytes="10240"), "no bundle size"),
        (_manifest(state="writing"), "unknown state"),
        (orjson.dumps({"cache_key": KEY, "state": "error", "error": "x"}), "without a reason"),
    ],
)
def test_an_unusable_manifest_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(BundleInvalid, match=reason):
        parse_manifest(data, KEY)
