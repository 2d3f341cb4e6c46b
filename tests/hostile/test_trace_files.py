"""Hostile and broken Chrome traces: each is refused with a clear message, or read to a decided result.

Decisions (asserted below): a file that is not a readable trace (corrupt or truncated gzip, past the
decompressed-size limit, malformed or truncated JSON, ``traceEvents`` not a list, JSON nested deeper
than the decoder's limit) raises ``TraceFormatError`` saying what is wrong; a readable trace with bad
values is read, and each bad value is coerced where its meaning is clear or becomes "unknown"
(``NO_ID`` / NaN / empty): times without a usable number drop their event, counted in the warnings;
bytes that are not UTF-8 become U+FFFD; duplicate ids are kept as they are; events out of order are
sorted. ``tests/test_json_stream.py`` has the first tests of a few of these; this file covers every one.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import corpus_file
from profscope.ingest.json_stream import SizeLimitExceeded, TraceFormatError
from profscope.ingest.kineto import parse_trace
from profscope.tables import NO_ID, TraceTables

from .hostile_files import (
    GOOD_EVENTS,
    KERNEL,
    MEMORY,
    METADATA,
    PYTHON,
    RUNTIME,
    deeply_nested,
    gzip_bomb,
    op,
    trace_bytes,
    with_event,
)
from .ingesting import ingest_in_process

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"


def parse(data: bytes, **kwargs: Any) -> TraceTables:
    return parse_trace(io.BytesIO(data), use_second_core=False, **kwargs)


def refusal(data: bytes, **kwargs: Any) -> str:
    with pytest.raises(TraceFormatError) as refused:
        parse(data, **kwargs)
    return str(refused.value)


GOOD_NAMES = [event["name"] for event in GOOD_EVENTS]


def names(tables: TraceTables) -> list[str]:
    return [tables.strings[int(i)] for i in tables.events["name"]]


def warnings(tables: TraceTables) -> dict[str, int]:
    return {w["message"]: w["count"] for w in tables.meta["warnings"]}


# ---- files that are not readable traces -------------------------------------------------------------
@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.999])
def test_truncated_gzip_is_refused_as_truncated_or_corrupt(fraction: float) -> None:
    data = corpus_file(TINYGPT).read_bytes()
    message = refusal(data[: int(len(data) * fraction)])
    assert "cannot decompress the file" in message and "(truncated or corrupt gzip?)" in message


def test_a_gzip_bomb_stops_at_the_decompressed_size_limit() -> None:
    bomb = gzip_bomb(256 << 20)
    assert len(bomb) < 1 << 20  # a 256 MiB document in less than 1 MiB
    with pytest.raises(SizeLimitExceeded) as refused:
        parse(bomb, max_trace_bytes=16 << 20)
    assert str(refused.value) == (
        "decompressed size exceeds the limit of 16,777,216 bytes (raise --max-trace-bytes to read it)"
    )
    assert names(parse(bomb, max_trace_bytes=300 << 20)) == ["ProfilerStep#1", "aten::mm", "aten::add"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"traceEvents": [{"ph": "X", "ts": 1} {"ph": "X"}]}', "malformed"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1,}]}', "malformed"),
        (b'{"traceEvents": [{"ph": "X", "ts": 01}]}', "malformed"),
        (b'{"traceEvents": [{"ph": "X", "ts": NaN}]}', "malformed"),
        (b"\x00\x01\x02 binary", "not a JSON trace: the file does not start with '{' or '['"),
        (b'{"traceEvents": [', "truncated"),
        (b"", "not a JSON trace"),
    ],
)
def test_malformed_json_is_refused_with_what_and_where(data: bytes, message: str) -> None:
    assert message in refusal(data)


def test_json_cut_at_every_byte_is_refused_never_read_half() -> None:
    data = trace_bytes([*GOOD_EVENTS, KERNEL, RUNTIME, PYTHON, MEMORY], deviceProperties=[{"id": 0}])
    kinds = ("not a JSON trace", "malformed JSON: Input data was truncated", "the trace ends before its event list")
    found = set()
    for cut in range(len(data)):
        message = refusal(data[:cut])
        found.add(next((kind for kind in kinds if message.startswith(kind)), message))
    assert found == set(kinds)


@pytest.mark.parametrize("value", ['"abc"', "5", "null", "true", '{"ph": "X"}'])
def test_trace_events_that_is_not_a_list_is_refused(value: str) -> None:
    assert refusal(b'{"traceEvents": ' + value.encode() + b"}") == "'traceEvents' is not a list"


@pytest.mark.parametrize(
    "where",
    [
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"Input Dims": NEST}}]}',
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"unread": NEST}}]}',
        '{"traceEvents": [{"ph": "X", "name": NEST, "ts": 1, "dur": 1}]}',
        '{"header": NEST, "traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}]}',
        '{"nested": {"traceEvents": 1}, "x": NEST}',
    ],
)
def test_json_nested_deeper_than_the_decoder_allows_is_refused(where: str) -> None:
    message = refusal(where.replace("NEST", deeply_nested(100_000)).encode())
    assert message.startswith("JSON nested too deeply (more than about 1,000 levels of '[' or '{')")
    assert "of the decompressed trace: not a profiler trace" in message


def test_args_nested_within_the_decoders_limit_are_read() -> None:
    tables = parse(with_event(op("deep", ts=30, args={"unread": json.loads(deeply_nested(400))})))
    assert names(tables)[-1] == "deep"


# ---- wrong types in every field the parser reads --------------------------------------------------
WRONG = [None, True, "12", "abc", 1.5, [1, 2], {"a": 1}, 2**70, -1]
# What each wrong value becomes, by the kind of field it was found in:
AS_ID = [NO_ID, NO_ID, 12, NO_ID, 1, NO_ID, NO_ID, NO_ID, -1]  # ids, counts, sizes: a number or unknown
AS_SIZE = [0, 0, 12, 0, 1, 0, 0, 0, -1]  # "[memory]" Bytes: unknown counts as 0
AS_FLOAT = [math.nan, math.nan, 12.0, math.nan, 1.5, math.nan, math.nan, float(2**70), -1.0]
AS_JSON = ["null", "true", '"12"', '"abc"', "1.5", "[1,2]", '{"a":1}', str(2**70), "-1"]  # shapes: kept as text
AS_TRIPLE = [(NO_ID,) * 3] * 5 + [(1, 2, NO_ID)] + [(NO_ID,) * 3] * 3  # grid / block: a list of up to 3 numbers
AS_TEXT = [None, "True", "12", "abc", "1.5", None, None, str(2**70), "-1"]  # names: text, or absent
AS_STACK = [None, None, "12", "abc", None, None, None, None, None]  # a call stack is a string or nothing

# (argument, event it is read from, table, column, expected for each WRONG value)
ARGS = [
    ("External id", op("under test", ts=30), "events", "external_id", AS_ID),
    ("external id", op("under test", ts=30), "events", "external_id", AS_ID),
    ("correlation", RUNTIME, "events", "correlation", AS_ID),
    ("device", KERNEL, "kernels", "device", AS_ID),
    ("stream", KERNEL, "kernels", "stream", AS_ID),
    ("registers per thread", KERNEL, "kernels", "registers_per_thread", AS_ID),
    ("shared memory", KERNEL, "kernels", "shared_memory", AS_ID),
    ("bytes", KERNEL, "kernels", "bytes", AS_ID),
    ("blocks per SM", KERNEL, "kernels", "blocks_per_sm", AS_FLOAT),
    ("est. achieved occupancy %", KERNEL, "kernels", "est_occupancy_pct", AS_FLOAT),
    ("grid", KERNEL, "kernels", "grid", AS_TRIPLE),
    ("block", KERNEL, "kernels", "block", AS_TRIPLE),
    ("Input Dims", op("under test", ts=30), "ops", "input_dims", AS_JSON),
    ("Input dims", op("under test", ts=30), "ops", "input_dims", AS_JSON),
    ("Input type", op("under test", ts=30, args={"Input Dims": [[1]]}), "ops", "input_types", AS_JSON),
    ("Sequence number", op("under test", ts=30, args={"Input Dims": [[1]]}), "ops", "sequence_number", AS_ID),
    ("Fwd thread id", op("under test", ts=30, args={"Input Dims": [[1]]}), "ops", "fwd_thread", AS_ID),
    ("Call stack", op("under test", ts=30, args={"Input Dims": [[1]]}), "ops", "call_stack", AS_STACK),
    ("Python id", PYTHON, "python", "python_id", AS_ID),
    ("Python parent id", PYTHON, "python", "parent_id", AS_ID),
    ("Python module id", PYTHON, "python", "module_id", AS_ID),
    ("Addr", MEMORY, "memory", "addr", AS_ID),
    ("Bytes", MEMORY, "memory", "bytes", AS_SIZE),
    ("Total Allocated", MEMORY, "memory", "total_allocated", AS_ID),
    ("Total Reserved", MEMORY, "memory", "total_reserved", AS_ID),
    ("Device Type", MEMORY, "memory", "device_type", AS_ID),
    ("Device Id", MEMORY, "memory", "device_id", AS_ID),
    ("Collective name", op("record_param_comms"), "collectives", "collective_name", AS_TEXT),
    ("In msg nelems", op("c", args={"Collective name": "all_reduce"}), "collectives", "in_nelems", AS_ID),
    ("Out msg nelems", op("c", args={"Collective name": "all_reduce"}), "collectives", "out_nelems", AS_ID),
    ("Group size", op("c", args={"Collective name": "all_reduce"}), "collectives", "group_size", AS_ID),
    ("Seq", op("c", args={"Collective name": "all_reduce"}), "collectives", "seq", AS_ID),
    ("dtype", op("c", args={"Collective name": "all_reduce"}), "collectives", "dtype", AS_TEXT),
    ("Process Group Name", op("c", args={"Collective name": "all_reduce"}), "collectives", "pg_name", AS_TEXT),
    ("Process Group Description", op("c", args={"Collective name": "ar"}), "collectives", "pg_desc", AS_TEXT),
    ("Process Group Ranks", op("c", args={"Collective name": "all_reduce"}), "collectives", "pg_ranks", AS_JSON),
    ("name", METADATA, "tracks", "process_name", AS_TEXT),
    ("labels", {**METADATA, "name": "process_labels"}, "tracks", "process_labels", AS_TEXT),
    ("sort_index", {**METADATA, "name": "process_sort_index"}, "tracks", "process_sort_index", AS_SIZE),
]
_STRING_COLUMNS = {"input_dims", "input_types", "call_stack", "collective_name", "dtype", "pg_name", "pg_desc"}


def _value(tables: TraceTables, event: dict[str, Any], table: str, column: str) -> Any:
    """The stored value of ``column`` for the event under test (or None when it has no row there)."""
    if table == "tracks":
        track = next(t for t in tables.tracks if t.pid == "1")
        value = getattr(track, column)
        return None if value == "" else value
    if table == "memory":
        rows = tables.columns["memory"]
        return int(rows[column][0]) if len(rows[column]) else None
    row = names(tables).index(event["name"])
    if table != "events":
        rows = tables.columns[table]
        matches = np.flatnonzero(rows["event"] == row)
        if not len(matches):
            return None
        row = int(matches[0])
    if column in ("grid", "block"):
        return tuple(int(tables.columns[table][f"{column}_{axis}"][row]) for axis in "xyz")
    value = tables.columns[table][column][row]
    if column in _STRING_COLUMNS or column == "pg_ranks":
        return None if value == NO_ID else tables.strings[int(value)]
    return float(value) if column in ("blocks_per_sm", "est_occupancy_pct") else int(value)


@pytest.mark.parametrize(("argument", "event", "table", "column", "expected"), ARGS, ids=[a[0] for a in ARGS])
def test_every_argument_the_parser_reads_survives_every_wrong_type(
    argument: str, event: dict[str, Any], table: str, column: str, expected: list[Any]
) -> None:
    for wrong, wanted in zip(WRONG, expected, strict=True):
        hostile = {**event, "args": {**event.get("args", {}), argument: wrong}}
        tables = parse(with_event(hostile))
        assert [n for n in names(tables) if n in GOOD_NAMES] == GOOD_NAMES, (argument, wrong)
        got = _value(tables, hostile, table, column)
        if isinstance(wanted, float) and math.isnan(wanted):
            assert math.isnan(got), (argument, wrong, got)
        else:
            assert got == wanted, (argument, wrong, got)


@pytest.mark.parametrize("wrong", WRONG, ids=[repr(w) for w in WRONG])
def test_args_of_the_wrong_type_are_ignored_and_the_event_kept(wrong: Any) -> None:
    tables = parse(with_event({**KERNEL, "args": wrong}))
    assert names(tables) == ["ProfilerStep#1", "aten::mm", "aten::add", "gemm"]
    assert tables.columns["kernels"]["device"].tolist() == [NO_ID]


EVENT_FIELDS: dict[str, list[Any]] = {
    # field: what the event under test reads back as, for each WRONG value ("dropped": not in the tables)
    "name": ["", "True", "12", "abc", "1.5", "[1, 2]", "{'a': 1}", str(2**70), "-1"],
    "ts": ["dropped", "dropped", 12_000, "dropped", 1_500, "dropped", "dropped", "dropped", -1_000],
    "dur": [0, 0, 12_000, 0, 1_500, 0, 0, 0, 0],
    "ph": ["dropped"] * 9,
    "pid": ["", "True", "12", "abc", "1.5", "[1, 2]", "{'a': 1}", str(2**70), "-1"],
}


@pytest.mark.parametrize("field", EVENT_FIELDS)
def test_every_event_field_survives_every_wrong_type(field: str) -> None:
    for wrong, wanted in zip(WRONG, EVENT_FIELDS[field], strict=True):
        tables = parse(with_event({**KERNEL, "name": "under test", field: wrong}))
        shown = names(tables)
        assert [n for n in shown if n in GOOD_NAMES] == GOOD_NAMES, (field, wrong)
        if wanted == "dropped":
            assert len(shown) == 3, (field, wrong)
            continue
        row = len(shown) - 1 if field != "ts" else shown.index("under test")
        if field == "ts":  # stored relative to the earliest event: add the origin back
            stored = int(tables.events["ts_ns"][row]) + round(tables.meta["origin_us"] * 1000)
            assert stored == wanted, (field, wrong, stored)
        elif field == "dur":
            assert int(tables.events["dur_ns"][row]) == wanted, (field, wrong)
        elif field == "name":
            assert shown[row] == wanted
        else:
            assert tables.tracks[int(tables.events["track"][row])].pid == wanted


@pytest.mark.parametrize("field", ["cat", "tid", "id", "bp", "s"])
def test_other_event_fields_of_the_wrong_type_keep_the_event(field: str) -> None:
    for wrong in WRONG:
        flow = {"ph": "s", "id": 7, "cat": "ac2g", "pid": 1, "tid": 1, "ts": 29, "bp": "e", field: wrong}
        tables = parse(trace_bytes([*GOOD_EVENTS, {**KERNEL, field: wrong}, flow]))
        assert names(tables) == ["ProfilerStep#1", "aten::mm", "aten::add", "gemm"], (field, wrong)
        assert len(tables.columns["flows"]["flow_id"]) == 1, (field, wrong)


def test_counters_and_metadata_of_the_wrong_type_are_skipped_or_coerced() -> None:
    counters = [
        {"ph": "C", "name": "mem", "pid": [1], "tid": {"a": 1}, "ts": 5, "args": {"used": 3, "bad": [1], "nan": "nan"}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": "soon", "args": {"used": 4}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 6, "args": 5},
    ]
    tables = parse(trace_bytes([*GOOD_EVENTS, *counters]))
    assert tables.columns["counters"]["value"].tolist() == [3.0]
    assert tables.tracks[int(tables.columns["counters"]["track"][0])].pid == "[1]"
    assert warnings(tables) == {"counter events without a usable 'ts' were skipped": 1}


# ---- times, names, encodings, ids, order ------------------------------------------------------------
def test_nan_huge_and_negative_times_and_durations() -> None:
    events = [
        *GOOD_EVENTS,
        op("nan ts", ts="NaN"),
        op("inf ts", ts="Infinity"),
        op("beyond the year 2096", ts=4.1e15),
        op("huge ts", ts=1e300),
        op("before 1970", ts=-5, dur=1),
        op("negative dur", ts=40, dur=-5),
        op("huge dur", ts=41, dur=1e300),
        op("nan dur", ts=42, dur="NaN"),
        {"ph": "i", "name": "instant far away", "pid": 1, "tid": 1, "ts": 1e18},
        {"ph": "s", "id": 1, "cat": "ac2g", "pid": 1, "tid": 1, "ts": -1e18},
        {"ph": "C", "name": "c", "pid": 1, "ts": 1e30, "args": {"v": 1}},
        {**MEMORY, "ts": "Infinity"},
    ]
    tables = parse(trace_bytes(events))
    assert names(tables) == ["before 1970", "ProfilerStep#1", "aten::mm", "aten::add", "negative dur", "huge dur",
                             "nan dur"]  # fmt: skip
    assert tables.meta["origin_us"] == -5.0
    assert tables.events["ts_ns"].tolist() == [0, 5_000, 15_000, 25_000, 45_000, 46_000, 47_000]
    assert tables.events["dur_ns"].tolist() == [1_000, 100_000, 5_000, 5_000, 0, 0, 0]
    assert warnings(tables) == {
        "events without a usable 'ts' were skipped": 4,
        "negative, huge or missing durations were set to 0": 3,
        "'i' events without a usable 'ts' were skipped": 1,
        "flow events without a usable 'ts' were skipped": 1,
        "counter events without a usable 'ts' were skipped": 1,
        "memory events without a usable 'ts' were skipped": 1,
    }
    assert all(len(tables.columns[t]["ts_ns"]) == 0 for t in ("instants", "flows", "counters", "memory"))


def test_ten_million_character_names_are_kept_whole(tmp_path: Path) -> None:
    long_name = "x" * 10_000_000
    data = trace_bytes([*GOOD_EVENTS, op(long_name, ts=30, args={"Call stack": "y" * 10_000_000})])
    tables = parse(data)
    assert names(tables)[-1] == long_name
    summary = ingest_in_process(tmp_path, "long.pt.trace.json", data)
    assert summary["events"] == 4 and summary["view_errors"] == {}


def test_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    data = trace_bytes([*GOOD_EVENTS, op("NAME", ts=30)]).replace(b"NAME", b"conv\xff\xfe_kernel")
    tables = parse(data)
    assert names(tables)[-1] == "conv\ufffd\ufffd_kernel"
    assert warnings(tables) == {"pieces of the trace had bytes that are not UTF-8 (shown as \ufffd)": 1}
    shapes = trace_bytes([op("shaped", ts=30, args={"Input Dims": ["NAME", [1, 2]], "grid": ["NAME", 1, 1]})])
    tables = parse(shapes.replace(b"NAME", b"\xff"))  # found by bench/fuzz.py: shapes are read raw, later
    assert tables.strings[int(tables.columns["ops"]["input_dims"][0])] == '["\ufffd", [1, 2]]'
    header = trace_bytes(GOOD_EVENTS, traceName="NAME").replace(b"NAME", b"run\xc3")
    assert parse(header).meta["traceName"] == "run\ufffd"


def test_bytes_that_are_not_utf8_in_a_piece_sent_to_the_second_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from profscope.ingest import json_stream

    events = [op(f"op{i} NAME", ts=i) for i in range(3000)]
    data = trace_bytes(events).replace(b"NAME", b"\xff")
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (1 << 12,))
    tables = parse_trace(io.BytesIO(data), use_second_core=True)
    assert sorted(names(tables)) == sorted(f"op{i} \ufffd" for i in range(3000))


def test_duplicate_ids_are_kept_as_they_are(tmp_path: Path) -> None:
    launch = {**RUNTIME, "args": {"correlation": 5, "External id": 1}}
    events = [
        op("aten::mm", ts=28, dur=10, args={"External id": 1}),
        op("aten::mm", ts=40, dur=10, args={"External id": 1}),
        launch,
        {**launch, "ts": 45},
        {**KERNEL, "args": {"correlation": 5, "External id": 1}},
        {**KERNEL, "ts": 50, "args": {"correlation": 5, "External id": 1}},
        {"ph": "s", "id": 5, "cat": "ac2g", "pid": 1, "tid": 1, "ts": 29},
        {"ph": "s", "id": 5, "cat": "ac2g", "pid": 1, "tid": 1, "ts": 45},
        {"ph": "f", "id": 5, "cat": "ac2g", "pid": 0, "tid": 7, "ts": 30, "bp": "e"},
        {**PYTHON, "args": {"Python id": 1, "Python parent id": 1}},
        {**PYTHON, "ts": 12, "args": {"Python id": 1, "Python parent id": 1}},
    ]
    data = trace_bytes(events)
    tables = parse(data)
    assert tables.row_count("events") == 8
    assert tables.events["correlation"].tolist().count(5) == 4
    assert tables.columns["flows"]["flow_id"].tolist() == [5, 5, 5]
    assert tables.columns["python"]["python_id"].tolist() == [1, 1]
    summary = ingest_in_process(tmp_path, "dup.pt.trace.json", data)
    assert summary["view_errors"] == {} and summary["kernels"] == 2


def test_events_out_of_order_are_sorted_by_start_then_longest_first() -> None:
    events = [op("c", ts=30), op("a", ts=10, dur=1), op("b", ts=20), op("a-long", ts=10, dur=9), op("first", ts=0)]
    tables = parse(trace_bytes(events))
    assert names(tables) == ["first", "a-long", "a", "b", "c"]
    assert tables.events["ts_ns"].tolist() == [0, 10_000, 10_000, 20_000, 30_000]


def test_string_flow_ids_are_the_same_in_every_process() -> None:
    """Pieces of one trace are decoded in two processes: a flow's ends must get one id in both."""
    import subprocess
    import sys

    code = "from profscope.ingest.kineto import _string_flow_id as f; print(f('flow-a'), f('0x10'), f('9' * 30))"
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}  # fmt: skip
    assert len(runs) == 1
    text_id, hex_id, huge_id = map(int, runs.pop().split())
    assert hex_id == 16 and 0 <= text_id < 2**63 and 0 <= huge_id < 2**63


def test_a_gzip_with_a_corrupt_checksum_is_refused() -> None:
    data = gzip.compress(trace_bytes(GOOD_EVENTS))
    corrupt = data[:-8] + b"\x00\x00\x00\x00" + data[-4:]
    assert "CRC check failed" in refusal(corrupt)


def test_header_values_of_the_wrong_type_are_dropped_before_any_view_reads_them(tmp_path: Path) -> None:
    """Found by bench/fuzz.py: views computed with deviceProperties and distributedInfo as they came."""
    header = {
        "deviceProperties": [{"id": {"a": 1}, "name": 5, "computeMajor": "1e+300", "computeMinor": 0, "x": [1]}, 7],
        "distributedInfo": {"rank": "0", "world_size": 2**70, "backend": "nccl", "pg_config": 5},
    }
    data = trace_bytes([*GOOD_EVENTS, {**KERNEL, "args": {"device": 0}}], **header)
    meta = parse(data).meta
    assert meta["deviceProperties"] == [{"computeMinor": 0}]
    assert meta["distributedInfo"] == {"backend": "nccl"}
    groups = {"pg_config": [{"pg_name": "0", "ranks": [0, "1"]}, {"pg_name": "1", "ranks": [0, 1]}, 3]}
    meta = parse(trace_bytes(GOOD_EVENTS, distributedInfo={"rank": 1, **groups})).meta
    assert meta["distributedInfo"]["pg_config"] == [{"pg_name": "0", "ranks": None}, {"pg_name": "1", "ranks": [0, 1]}]
    summary = ingest_in_process(tmp_path, "header.pt.trace.json", data)
    assert summary["view_errors"] == {}


def test_a_wrong_cut_found_by_the_second_process_makes_the_job_read_the_file_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from profscope.ingest import jobs
    from profscope.ingest.parallel_decode import SpeculationFailed

    calls = []
    parse_any_trace = jobs.TABLE_PARSERS[jobs.TRACE]

    def speculation_fails_once(raw: Any, **options: Any) -> Any:
        calls.append(options.get("use_second_core", True))
        if len(calls) == 1:
            raw.read(100)  # half-read, as a parse given up part-way leaves it
            raise SpeculationFailed("piece 5 did not decode in the second process")
        return parse_any_trace(raw, **options)

    monkeypatch.setitem(jobs.TABLE_PARSERS, jobs.TRACE, speculation_fails_once)
    data = trace_bytes(GOOD_EVENTS)
    summary = ingest_in_process(tmp_path, "cut.pt.trace.json", data)
    assert calls == [True, False]  # opened again, and read on one core
    assert "error" not in summary and summary["events"] == parse(data).row_count("events") > 0
