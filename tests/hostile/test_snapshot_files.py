"""Hostile and broken allocator snapshots (pickles): code is never run, bombs are stopped, bad values decided.

Decisions (asserted below): a pickle naming any Python object (a class, ``os.system``) is refused and
nothing runs; a pickle asking for more memory than ``--max-snapshot-bytes`` allows is refused while
decoding; a self-sharing structure (``[x, x]`` nested 40 times: 2**40 leaves when walked) and
nesting 100,000 levels deep are read without walking them (settings and annotations left out with a
warning, a name shown as ``<list>``); a snapshot whose structure is wrong (blocks not a list, an
unknown block state, a frame that is not a dict, an address beyond 64 bits) is refused saying where;
a scalar of the wrong type becomes the field's "unknown". ``tests/test_safe_pickle.py`` tests the
unpickler alone; here every case goes through the whole snapshot ingest.
"""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from profscope.ingest.snapshot import parse_snapshot
from profscope.snapshot_tables import ACTION, UNKNOWN_ACTION, SnapshotTables
from profscope.tables import NO_ID

from .hostile_files import (
    PLACEHOLDER,
    RunsACommand,
    SomeClass,
    nested_list_opcodes,
    pickle_with,
    self_sharing_list_opcodes,
    snapshot,
)
from .ingesting import ingest_in_process


def ingest(tmp_path: Path, data: bytes, **limits: Any) -> dict[str, Any]:
    return ingest_in_process(tmp_path, "snap.pickle", data, kind="snapshot", **limits)


def parse(data: bytes) -> SnapshotTables:
    return parse_snapshot(io.BytesIO(data), 1 << 30)


def test_a_pickle_that_references_a_class_is_refused(tmp_path: Path) -> None:
    answer = ingest(tmp_path, pickle.dumps(snapshot(extra=SomeClass())))
    assert answer == {
        "error": "snap.pickle: refused: the pickle asks for the Python object hostile.hostile_files.SomeClass; "
        "profscope reads only plain data (dicts, lists, numbers, strings) from a pickle, because loading "
        "objects can run code"
    }


def test_a_pickle_that_would_run_a_command_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "the-command-ran"
    hostile = pickle.dumps(snapshot(extra=RunsACommand(marker)))
    pickle.loads(hostile)  # loaded the ordinary way, it really runs the command
    assert marker.exists()
    marker.unlink()
    answer = ingest(tmp_path, hostile)
    assert "refused: the pickle asks for the Python object posix.system" in answer["error"]
    assert not marker.exists()


def test_a_pickle_declaring_a_huge_object_is_refused_before_allocating_it(tmp_path: Path) -> None:
    refused = (
        "snap.pickle: refused: the pickle asks for more memory than allowed at once (an object or memo table "
        "beyond the limit of 67,108,864 bytes, PROFSCOPE_MAX_SNAPSHOT_BYTES)"
    )
    binbytes = b"\x80\x03B" + (2**31).to_bytes(4, "little") + b"only a few bytes."
    assert ingest(tmp_path, binbytes, max_snapshot_bytes=64 << 20) == {"error": refused}
    binbytes8 = b"\x80\x04\x8e" + (2**62).to_bytes(8, "little") + b"xx."
    assert ingest(tmp_path, binbytes8, max_snapshot_bytes=64 << 20) == {"error": refused}


def test_a_memo_bomb_stops_at_the_memory_limit() -> None:
    """One dict, DUPed 48 million times then appended to a list: 48 MB of pickle, ~800 MB decoded."""
    script = (
        "import io, sys, tempfile\n"
        "from pathlib import Path\n"
        "from hostile.ingesting import ingest_in_process\n"
        "bomb = b'\\x80\\x04](}' + b'2' * 48_000_000 + b'e.'\n"
        "answer = ingest_in_process(Path(tempfile.mkdtemp()), 'bomb.pickle', bomb, kind='snapshot',\n"
        "                           max_snapshot_bytes=64 << 20)\n"
        "print(answer['error'])\n"
        "print(next(line for line in open('/proc/self/status') if line.startswith('VmHWM')).split()[1])\n"
    )
    tests = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tests, timeout=300)
    message, peak_kib = done.stdout.strip().splitlines()
    assert message.startswith("bomb.pickle: refused: decoding this pickle took more than 67,108,864 bytes of memory")
    assert int(peak_kib) < 1_000_000  # stopped well before the ~800 MB (plus the 48 MB input) it asks for


def test_a_memo_index_of_billions_is_refused_before_the_memo_table_grows(tmp_path: Path) -> None:
    """5 bytes (LONG_BINPUT 2**31) make the C unpickler allocate and zero 16 GB of memo slots."""
    script = (
        "import io\n"
        "from profscope.ingest.safe_pickle import PickleRefused, load_plain_data\n"
        "try:\n"
        "    load_plain_data(io.BytesIO(b'\\x80\\x04]r' + (2**31).to_bytes(4, 'little') + b'.'), 64 << 20)\n"
        "except PickleRefused as exc:\n"
        "    print(exc)\n"
        "print(next(line for line in open('/proc/self/status') if line.startswith('VmHWM')).split()[1])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    message, peak_kib = done.stdout.strip().splitlines()
    assert message == (
        "refused: the pickle asks for more memory than allowed at once (an object or memo table beyond the limit "
        "of 67,108,864 bytes, PROFSCOPE_MAX_SNAPSHOT_BYTES)"
    )
    assert int(peak_kib) < 500_000


@pytest.mark.parametrize("where", ["allocator_settings", "external_annotations"])
def test_a_self_sharing_structure_is_not_walked(where: str) -> None:
    bomb = self_sharing_list_opcodes(40)  # 2**40 leaves: walking it would take hours
    document = snapshot(**{where: {"a": PLACEHOLDER} if where == "allocator_settings" else [PLACEHOLDER]})
    started = time.monotonic()
    tables = parse(pickle_with(document, bomb))
    assert time.monotonic() - started < 60  # the copy stopped at its bound (a generous guard against hours)
    assert tables.meta["warnings"] == [f"'{where}' was left out: more than 1,000,000 values or 64 levels deep"]
    assert tables.meta["allocator_settings"] is None and tables.meta["external_annotations"] == []
    assert tables.row_count("entries") == 2


def test_a_self_sharing_structure_as_a_name_or_action_is_shown_by_its_type() -> None:
    frames = [{"filename": PLACEHOLDER, "line": 1, "name": "f"}]
    document = snapshot()
    document["device_traces"][0][0]["frames"] = frames
    tables = parse(pickle_with(document, self_sharing_list_opcodes(40)))
    assert "<list>" in tables.strings.strings
    document = snapshot()
    document["device_traces"][0][0]["action"] = PLACEHOLDER
    tables = parse(pickle_with(document, self_sharing_list_opcodes(40)))
    assert tables.meta["warnings"] == ["unknown trace actions kept as 'unknown': {'<list>': 1}"]


def test_nesting_a_hundred_thousand_levels_deep_is_read_without_recursing() -> None:
    document = snapshot(allocator_settings={"a": PLACEHOLDER})
    tables = parse(pickle_with(document, nested_list_opcodes(100_000)))
    left_out = "'allocator_settings' was left out: more than 1,000,000 values or 64 levels deep"
    assert tables.meta["warnings"] == [left_out]
    document = snapshot()
    document["device_traces"][0][0]["frames"] = [{"filename": PLACEHOLDER, "line": 1, "name": "f"}]
    assert "<list>" in parse(pickle_with(document, nested_list_opcodes(100_000))).strings.strings


# ---- wrong types in every field the snapshot reader reads --------------------------------------------
WRONG = [None, True, "s", 1.5, [1], {"a": 1}, (1, 2), b"b", -1, 2**64, float("nan")]


def _as_int(default: int) -> list[int]:
    """What each WRONG value becomes in an integer field whose unknown is ``default``."""
    return [default, 1, default, 1, default, default, default, default, -1, default, default]


ENTRY_FIELDS = {  # trace entry field: (column, expected for each WRONG value)
    "size": ("size", _as_int(0)),
    "stream": ("stream", _as_int(0)),
    "time_us": ("time_us", _as_int(NO_ID)),
    "device_free": ("device_free", _as_int(NO_ID)),
    "addr": ("addr", [0, 1, 0, 1, 0, 0, 0, 0, -1, "refused", 0]),
    "action": ("action", [UNKNOWN_ACTION] * 11),
    "frames": ("stack", [NO_ID] * 4 + ["refused"] + [NO_ID] * 6),
}


@pytest.mark.parametrize("field", ENTRY_FIELDS)
def test_every_trace_entry_field_survives_every_wrong_type(field: str, tmp_path: Path) -> None:
    column, expected = ENTRY_FIELDS[field]
    for wrong, wanted in zip(WRONG, expected, strict=True):
        document = snapshot()
        document["device_traces"][0][0][field] = wrong
        data = pickle.dumps(document)
        if wanted == "refused":
            error = ingest(tmp_path, data)["error"]
            assert error in (
                "snap.pickle: address 18446744073709551616 does not fit in 64 bits",
                "snap.pickle: a stack frame is a int, expected a dict",
            ), (field, wrong)
            continue
        entries = parse(data).columns["entries"]
        assert int(entries[column][0]) == wanted, (field, wrong)
        assert int(entries["action"][1]) == ACTION["free_completed"]  # the next entry is untouched


SEGMENT_FIELDS = {  # segment field: expected stored value for each WRONG value (or the refusal's words)
    "device": ("device", _as_int(0)),
    "total_size": ("total_size", [2 << 20, 1, 2 << 20, 1] + [2 << 20] * 4 + [-1, 2 << 20, 2 << 20]),
    "stream": ("stream", _as_int(0)),
    "address": ("address", [0, 1, 0, 1, 0, 0, 0, 0, -1, "does not fit in 64 bits", 0]),
    "blocks": ("block_count", [0, *["expected a list"] * 3, "is not a dict", *["expected a list"] * 6]),
}


@pytest.mark.parametrize("field", SEGMENT_FIELDS)
def test_every_segment_field_survives_every_wrong_type(field: str, tmp_path: Path) -> None:
    column, expected = SEGMENT_FIELDS[field]
    for wrong, wanted in zip(WRONG, expected, strict=True):
        document = snapshot()
        document["segments"][0][field] = wrong
        data = pickle.dumps(document)
        if isinstance(wanted, str):
            assert wanted in ingest(tmp_path, data)["error"], (field, wrong)
            continue
        assert int(parse(data).columns["segments"][column][0]) == wanted, (field, wrong)


@pytest.mark.parametrize("field", ["segment_type", "segment_pool_id", "is_expandable", "frames", "allocated_size"])
def test_other_segment_fields_of_the_wrong_type_are_read(field: str, tmp_path: Path) -> None:
    for wrong in WRONG:
        document = snapshot()
        document["segments"][0][field] = wrong
        answer = ingest(tmp_path, pickle.dumps(document))
        if field == "frames" and wrong == [1]:
            assert answer["error"] == "snap.pickle: a stack frame is a int, expected a dict"
        else:
            assert answer["view_errors"] == {} and answer["segments"] == 1, (field, wrong)


def test_every_block_field_survives_every_wrong_type(tmp_path: Path) -> None:
    for field in ("size", "requested_size", "address", "state", "frames", "history"):
        for wrong in WRONG:
            document = snapshot()
            document["segments"][0]["blocks"][0][field] = wrong
            answer = ingest(tmp_path, pickle.dumps(document))
            if field == "state":
                shown = wrong if isinstance(wrong, str | int | float) or wrong is None else f"<{type(wrong).__name__}>"
                assert answer["error"] == f"snap.pickle: block state '{shown}' of segment 0 is not a known state"
            elif (field, wrong) == ("address", 2**64):
                assert answer["error"] == "snap.pickle: address 18446744073709551616 does not fit in 64 bits"
            elif (field, wrong) == ("frames", [1]):
                assert answer["error"] == "snap.pickle: a stack frame is a int, expected a dict"
            else:
                assert answer["view_errors"] == {} and answer["blocks"] == 2, (field, wrong, answer)


def test_every_frame_field_of_the_wrong_type_is_shown_as_text() -> None:
    for field in ("filename", "line", "name"):
        for wrong in WRONG:
            document = snapshot()
            document["device_traces"][0][0]["frames"] = [{"filename": "a.py", "line": 3, "name": "f", field: wrong}]
            tables = parse(pickle.dumps(document))
            frames = tables.columns["frames"]
            row = int(np.asarray(tables.columns["stack_frames"]["frame"])[int(tables.columns["entries"]["stack"][0])])
            stored = {
                "filename": tables.strings[int(frames["filename"][row])],
                "line": int(frames["line"][row]),
                "name": tables.strings[int(frames["name"][row])],
            }[field]
            if field == "line":
                assert stored == _as_int(0)[WRONG.index(wrong)] if wrong == wrong else stored == 0, (field, wrong)
            elif isinstance(wrong, str | int | float) or wrong is None:
                assert stored == str(wrong), (field, wrong)
            else:
                assert stored == f"<{type(wrong).__name__}>", (field, wrong)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a readable pickle: EOFError: Ran out of input"),
        (pickle.dumps(snapshot())[:-20], "not a readable pickle: UnpicklingError: pickle data was truncated"),
        (b"\x1f\x8b\x08\x00 gzip", "not a readable pickle: UnpicklingError: invalid load key, '\\x1f'."),
        (b"\x80\x04\x95" + (2**64 - 1).to_bytes(8, "little") + b"N.", "not a readable pickle: OverflowError: FRAME"),
        (pickle.dumps([1, 2]), "segment 0 is a int, expected a dict"),
        (pickle.dumps({"segments": 5}), "'segments' and 'device_traces' must be lists"),
        (pickle.dumps("text"), "not a CUDA memory snapshot: expected a dict with 'segments'"),
    ],
)
def test_broken_pickles_are_refused_with_the_reason(data: bytes, message: str, tmp_path: Path) -> None:
    assert message in ingest(tmp_path, data)["error"]


def test_entries_out_of_order_and_duplicate_addresses_are_kept_in_file_order() -> None:
    document = snapshot()
    alloc, free = document["device_traces"][0]
    document["device_traces"][0] = [{**free, "time_us": 1}, alloc, alloc, {**alloc, "time_us": 2}]
    tables = parse(pickle.dumps(document))
    assert tables.columns["entries"]["time_us"].tolist() == [1, 5, 5, 2]
