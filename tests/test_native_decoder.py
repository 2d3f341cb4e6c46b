"""The C decoder of complete events gives exactly the tables of the Python parser, on every input.

Each input is parsed twice in this process, with the extension (``native=True``) and without, and the
two results must be identical: every column of every table (dtype and values), the string table in
the same order, the tracks, the warnings and the rest of the metadata — or the same error.
"""

from __future__ import annotations

import gzip
import io
import random
from pathlib import Path

import msgspec
import numpy as np
import orjson
import pytest

from conftest import CORPUS, corpus_file
from profscope.ingest import json_stream, native_events
from profscope.ingest.json_stream import TraceFormatError
from profscope.ingest.kineto import parse_trace
from profscope.tables import TraceTables

RESNET = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
NSRES = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
NCCL = "hta/nccl_parser_config/nccl_data.json.gz"
DECODER_METADATA = ("pieces", "decoder")  # says which decoder ran: the only allowed difference


def _chrome_traces() -> list[str]:
    files = sorted(p for p in CORPUS.rglob("*") if p.name.endswith((".json", ".json.gz", ".raw.gz")))
    return [str(p.relative_to(CORPUS)) for p in files]


def _parse(data: bytes, native: bool) -> TraceTables | str:
    try:
        return parse_trace(io.BytesIO(data), use_second_core=False, native=native)
    except TraceFormatError as exc:
        return f"TraceFormatError: {exc}"


def _differences(python: TraceTables | str, native: TraceTables | str) -> list[str]:
    if isinstance(python, str) or isinstance(native, str):
        return [] if python == native else [f"python: {python!r}, native: {native!r}"]
    found = []
    for table, columns in python.columns.items():
        for column, expected in columns.items():
            got = native.columns[table][column]
            if got.dtype != expected.dtype or not np.array_equal(got, expected, equal_nan=expected.dtype.kind == "f"):
                found.append(f"{table}.{column}")
    if native.strings.strings != python.strings.strings:
        found.append("strings")
    if [t.to_json() for t in native.tracks] != [t.to_json() for t in python.tracks]:
        found.append("tracks")
    ours = {k: v for k, v in native.meta.items() if k not in DECODER_METADATA}
    if ours != {k: v for k, v in python.meta.items() if k not in DECODER_METADATA}:
        found.append("meta")
    return found


def _parse_both(data: bytes) -> tuple[TraceTables | str, TraceTables | str]:
    python, native = _parse(data, native=False), _parse(data, native=True)
    assert _differences(python, native) == []
    return python, native


def test_the_extension_is_built() -> None:
    # without it every comparison below would compare the Python parser with itself
    assert native_events.DECODER == "native"


@pytest.mark.parametrize("relative", _chrome_traces())
def test_every_corpus_trace_gives_identical_tables(relative: str) -> None:
    _parse_both(corpus_file(relative).read_bytes())


@pytest.mark.parametrize("relative", [RESNET, NSRES, NCCL])
def test_typical_traces_are_decoded_natively(relative: str) -> None:
    _, native = _parse_both(corpus_file(relative).read_bytes())
    pieces = native.meta["pieces"]
    assert pieces["decoded_natively"] == pieces["total"]
    assert native.meta["decoder"] == "native"


def test_collective_args_go_through_the_python_parser() -> None:
    _, native = _parse_both(corpus_file(NCCL).read_bytes())
    assert native.row_count("collectives") > 0


def _trace(*events: object) -> bytes:
    return orjson.dumps({"traceEvents": list(events), "traceName": "edge"})


def _op(name: str = "aten::mm", **fields: object) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2, "ts": 100, "dur": 10, **fields}


GOOD = _op(args={"External id": 7, "Input Dims": [[2, 3], []], "Sequence number": 4})
KERNEL = {
    "ph": "X",
    "cat": "kernel",
    "name": "volta_sgemm",
    "pid": 0,
    "tid": 7,
    "ts": 105,
    "dur": 3.5,
    "args": {
        "correlation": 9,
        "device": 0,
        "stream": 7,
        "grid": [80, 1, 1],
        "block": [256, 1, 1],
        "registers per thread": 32,
        "shared memory": 1024,
        "blocks per SM": 0.5,
        "est. achieved occupancy %": 12,
        "External id": 7,
    },
}
RAW_EDGE_CASES = {
    "escapes in names": rb'{"traceEvents": [{"ph": "X", "name": "a\"b\\c\/d\n\u00e9\ud83d\ude00", "cat": "cpu_op",'
    rb' "ts": 1, "dur": 1}]}',
    "lone surrogate": rb'{"traceEvents": [{"ph": "X", "name": "\ud800", "ts": 1, "dur": 1}]}',
    "raw UTF-8": '{"traceEvents": [{"ph": "X", "name": "żółw ✓", "cat": "cpu_op", "ts": 1, "dur": 1}]}'.encode(),
    "invalid UTF-8": b'{"traceEvents": [{"ph": "X", "name": "a\xff\xfe", "ts": 1, "dur": 1}]}',
    "overlong UTF-8": b'{"traceEvents": [{"ph": "X", "name": "\xc0\xaf", "ts": 1, "dur": 1}]}',
    "control character": b'{"traceEvents": [{"ph": "X", "name": "a\x01b", "ts": 1, "dur": 1}]}',
    "duplicate key": b'{"traceEvents": [{"ph": "X", "name": "a", "name": "b", "ts": 1, "dur": 1}]}',
    "duplicate args key": b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": {"device": 1, "device": 2}}]}',
    "escaped key": rb'{"traceEvents": [{"p\u0068": "X", "name": "a", "ts": 1, "dur": 1}]}',
    "escaped memory name": rb'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1},'
    rb' {"ph": "i", "name": "\u005bmemory]", "ts": 2, "args": {"Bytes": 8}},'
    rb' {"ph": "i", "name": "[memory]", "ts": 3, "args": {"Bytes": 16}}]}',
    "leading zero": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 01, "dur": 1}]}',
    "bare minus": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": -, "dur": 1}]}',
    "exponents": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1.5e3, "dur": 2E-1},'
    b' {"ph": "X", "name": "b", "ts": 12345678901234567.25e-3, "dur": -0.0},'
    b' {"ph": "X", "name": "c", "ts": 0.1000000000000000055511151231257827, "dur": 1e0}]}',
    "overflowing float": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1e400, "dur": 1}]}',
    "big integers": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 12345678901234567890, "dur": 1,'
    b' "args": {"External id": 123456789012345678901234}}, {"ph": "X", "name": "b", "pid": 99999999999999999999,'
    b' "ts": 2, "dur": 1}]}',
    "whitespace everywhere": b' {\n"traceEvents" :\r\n[ {\t"ph" : "X" , "name" : "a" , "ts" : 1 , "dur" : 2 ,'
    b' "args" : { "Input Dims" : [ [ 1 , 2 ] ] , "Call stack" : "f.py(1): g" } } ,\n {"ph":"X","name":"a","ts":3,'
    b'"dur":1,"args":{"Input Dims":[[1,2]]}} ] , "traceName" : "x" } ',
    "trailing comma": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1},]}',
    "deep nesting": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "extra": '
    + b"[" * 600
    + b"]" * 600
    + b"}]}",
    "literals": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "x": [true, false, null, {}]}]}',
    "bad literal": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "x": nul}]}',
    # msgspec refuses floats beyond the double range even in keys nobody reads (found by mutation)
    "overflowing float where nobody reads it": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1,'
    b' "args": {"extra": [1e400]}}]}',
    "long overflowing float": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "x": 1'
    + b"0" * 400
    + b".0}]}",
    "long float": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1.' + b"5" * 100 + b', "dur": 1}]}',
}
EVENT_EDGE_CASES = {
    "plain": [GOOD, KERNEL],
    "wrong types": [
        GOOD,
        _op(ts="20", dur="5"),
        _op(args={"External id": {"nested": True}, "Input Dims": "not a list"}),
        {"ph": "X", "cat": ["list"], "name": 42, "pid": [1], "tid": None, "ts": 40, "dur": -3},
        {"ph": "X", "name": "no ts", "dur": 1},
        "not an object",
    ],
    "numbers where strings go": [GOOD, _op(name=5), {**GOOD, "cat": 3.5}],
    "booleans": [GOOD, _op(args={"device": True})],
    "floats where ints go": [GOOD, _op(args={"External id": 7.0, "Sequence number": 1.5})],
    "strings where numbers go": [GOOD, _op(args={"correlation": "12"}), {**KERNEL, "args": {"grid": "x"}}],
    "durations": [GOOD, _op(dur=-1), _op(dur=1e16), _op(dur=None), _op(name="no dur", dur=None)],
    "no duration": [GOOD, {k: v for k, v in GOOD.items() if k != "dur"}],
    "times": [GOOD, _op(ts=2e17), _op(ts=None), _op(ts=1.25, dur=0.001)],
    "pid and tid": [
        _op(pid=1, tid=2),
        _op(pid="1", tid="2"),
        _op(pid=1.0, tid=2),
        {k: v for k, v in GOOD.items() if k not in ("pid", "tid")},
        _op(pid="host", tid="stream 7"),
    ],
    "pid and tid that are not int or str": [GOOD, _op(pid=None, tid=2.5)],
    "int32 overflow": [KERNEL, {**KERNEL, "args": {**KERNEL["args"], "device": 1 << 40}}],
    "args null or absent": [_op(args=None), _op(), _op(args={})],
    "args not an object": [GOOD, _op(args=[1, 2])],
    "op args": [
        _op(args={"Input dims": [[1]], "Input type": ["float"]}),
        _op(args={"Input Dims": [[1]], "Input dims": [[2]]}),
        _op(args={"Input Dims": [[1, 2]], "Input type": ["float", ""]}),
        _op(args={"Input Dims": [[1, 2]]}),
        _op(args={"Call stack": ""}),
        _op(args={"Call stack": None, "Sequence number": None}),
        _op(args={"Call stack": "a.py(1): f;b.py(2): g"}),
        _op(args={"Sequence number": 3, "Fwd thread id": 2}),
        _op(args={"Input Dims": None}),
        {**_op(args={"Input Dims": [[9]]}), "cat": "user_annotation"},
        {**_op(args={"Input Dims": [[9]]}), "cat": "Operator"},
        {**_op(args={"Input Dims": [[8]]}), "cat": "kernel"},
    ],
    "call stack not a string": [GOOD, _op(args={"Call stack": 12})],
    "python functions": [
        {
            "ph": "X",
            "cat": "python_function",
            "name": "f",
            "pid": 1,
            "tid": 2,
            "ts": 1,
            "dur": 5,
            "args": {"Python id": 3, "Python parent id": 1, "Python module id": 9},
        },
        {"ph": "X", "cat": "python_function", "name": "g", "pid": 1, "tid": 2, "ts": 2, "dur": 1},
    ],
    "collectives": [
        GOOD,
        _op(
            name="record_param_comms",
            args={
                "Collective name": "allreduce",
                "In msg nelems": 10,
                "Out msg nelems": 10,
                "Group size": 2,
                "dtype": "Float",
                "Process Group Name": "0",
                "Process Group Ranks": [0, 1],
            },
        ),
        _op(args={"Collective name": None}),
    ],
    "memcpy and memset": [
        {**KERNEL, "cat": "gpu_memcpy", "name": "Memcpy HtoD", "args": {"bytes": 4096, "device": 0, "stream": 7}},
        {**KERNEL, "cat": "Memset", "args": {"bytes": 1, "grid": [1, 2]}},
        {**KERNEL, "args": {"grid": [1, 2, 3, 4], "block": []}},
    ],
    "other phases among complete events": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
        GOOD,
        {"ph": "B", "name": "begun", "cat": "user_annotation", "pid": 1, "tid": 2, "ts": 101},
        KERNEL,
        {"ph": "E", "pid": 1, "tid": 2, "ts": 104},
        {
            "ph": "i",
            "name": "[memory]",
            "pid": 1,
            "tid": 2,
            "ts": 103,
            "args": {"Addr": 1, "Bytes": 64, "Total Allocated": 64},
        },
        {"ph": "s", "id": 9, "cat": "ac2g", "name": "flow", "pid": 1, "tid": 2, "ts": 102, "bp": "e"},
        {"ph": "f", "id": 9, "cat": "ac2g", "name": "flow", "pid": 0, "tid": 7, "ts": 105, "bp": "e"},
        {"ph": "C", "name": "util", "pid": 1, "ts": 100, "args": {"GPU 0": 12.5}},
        {"ph": "i", "name": "marker", "pid": 1, "tid": 2, "ts": 106, "s": "t"},
        {"ph": "E", "pid": 1, "tid": 9, "ts": 104},
        {"ph": "Q", "pid": 1, "tid": 9, "ts": 104},
        {},
        {"ph": 5, "ts": 1},
    ],
    "flows": [
        GOOD,
        {"ph": "s", "id": 9, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 2, "ts": 102.5},
        {"ph": "t", "id": 9, "cat": "fwdbwd", "pid": 1, "tid": 3, "ts": 103, "bp": "x"},
        {"ph": "f", "id": 9, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 105, "bp": "e"},
        {"ph": "f", "id": None, "pid": "0", "tid": "7", "ts": 106, "bp": 1},
        {"ph": "s", "ts": 107},
        {"ph": "i", "name": "[memory]", "pid": 5, "tid": 5, "ts": 103, "args": {"Bytes": 64}},
    ],
    "memory events": [
        GOOD,
        {
            "ph": "i",
            "name": "[memory]",
            "pid": 5,
            "tid": 5,
            "ts": 103,
            "s": "t",
            "args": {
                "Addr": 140000,
                "Bytes": 512,
                "Total Allocated": 1024,
                "Total Reserved": 2048,
                "Device Type": 1,
                "Device Id": 0,
            },
        },
        {"ph": "I", "name": "[memory]", "pid": 5, "tid": 6, "ts": 104.5, "args": {"Bytes": None, "Addr": None}},
        {"ph": "n", "name": "[memory]", "ts": 105, "args": {"Bytes": -512}},
        {"ph": "R", "name": "[memory]", "pid": "5", "tid": "5", "ts": 106},
        {"ph": "X", "name": "[memory]", "cat": "cpu_op", "pid": 5, "tid": 5, "ts": 107, "dur": 1},
        {"ph": "i", "name": "not memory", "pid": 5, "tid": 5, "ts": 108},
        {"ph": "s", "id": 1, "cat": "ac2g", "pid": 5, "tid": 6, "ts": 102},
    ],
    "memory events with odd values": [GOOD, {"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": 1.5}}],
    "memory events beyond int8": [GOOD, {"ph": "i", "name": "[memory]", "ts": 1, "args": {"Device Type": 300}}],
    "memory events without a time": [GOOD, {"ph": "i", "name": "[memory]", "args": {"Bytes": 8}}],
    "memory events with a string time": [GOOD, {"ph": "i", "name": "[memory]", "ts": "4", "args": {"Bytes": 8}}],
    "flows with a string id": [GOOD, {"ph": "s", "id": "0x1f", "cat": "ac2g", "pid": 1, "tid": 2, "ts": 1}],
    "flows with a float id": [GOOD, {"ph": "s", "id": 3.0, "cat": "ac2g", "pid": 1, "tid": 2, "ts": 1}],
    "flows without a time": [GOOD, {"ph": "f", "id": 3, "cat": "ac2g", "pid": 1, "tid": 2}],
    "flows with a string time": [GOOD, {"ph": "f", "id": 3, "cat": "ac2g", "pid": 1, "tid": 2, "ts": "5"}],
    "other events of odd types": [GOOD, {"ph": "i", "name": "x", "pid": 1, "ts": 1, "args": {"Addr": [1]}}],
}


@pytest.mark.parametrize("case", sorted(RAW_EDGE_CASES))
def test_hostile_json_gives_identical_results(case: str) -> None:
    _parse_both(RAW_EDGE_CASES[case])


@pytest.mark.parametrize("case", sorted(EVENT_EDGE_CASES))
def test_unusual_events_give_identical_tables(case: str) -> None:
    _parse_both(_trace(*EVENT_EDGE_CASES[case]))


@pytest.mark.parametrize("case", sorted(EVENT_EDGE_CASES))
def test_unusual_events_in_small_pieces_give_identical_tables(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    # pieces of a few events: natively decoded pieces and pieces left to Python alternate and share strings
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (300,))
    events = EVENT_EDGE_CASES[case]
    _parse_both(_trace(*events, *EVENT_EDGE_CASES["plain"], *events, *EVENT_EDGE_CASES["op args"]))


def test_small_pieces_of_a_real_trace_give_identical_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (64 << 10,))
    _, native = _parse_both(gzip.decompress(corpus_file(RESNET).read_bytes()))
    assert native.meta["pieces"]["decoded_natively"] == native.meta["pieces"]["total"] > 100


def test_the_plain_case_is_decoded_natively() -> None:
    _, native = _parse_both(_trace(*EVENT_EDGE_CASES["plain"]))
    assert native.meta["pieces"]["decoded_natively"] == 1
    assert native.row_count("kernels") == 1 and native.row_count("ops") == 1


def test_mutated_pieces_are_decoded_only_when_msgspec_reads_them_and_alike() -> None:
    # a small fuzzer: random edits of real events; the extension must never accept what msgspec
    # refuses (the reader relies on a failed decode to find a wrong cut), and what it accepts must
    # give the Python parser's tables
    data = gzip.decompress(corpus_file(NSRES).read_bytes())
    start = data.index(b"[", data.index(b"traceEvents"))
    events = data[start : start + 20_000]
    events = events[: events.rindex(b"},") + 1] + b"]"
    rng = random.Random(20261124)
    alphabet = b'{}[]",:\\0123456789.eE-+ tfnulX\x00\xff\xc3\xa9'
    accepted = 0
    for _ in range(3000):
        mutated = bytearray(events)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(mutated))
            edit = rng.random()
            if edit < 0.4:
                mutated[at] = rng.choice(alphabet)
            elif edit < 0.7:
                del mutated[at : at + rng.randint(1, 20)]
            else:
                mutated[at:at] = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))
        piece = bytes(mutated)
        if native_events.decode(piece) is None:
            continue
        accepted += 1
        msgspec.json.decode(piece)  # raises if msgspec refuses what the extension accepted
        if accepted % 25 == 0:
            _parse_both(b'{"traceEvents": ' + piece + b"}")
    assert accepted > 100


def test_what_the_decoder_gives_up_on() -> None:
    assert native_events.decode(b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1}]') is not None
    assert native_events.decode(b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1}, 3]') is None
    assert native_events.decode(b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1}') is None
    assert native_events.decode(b'[{"ph": "X", "name": "a", "ts": "1", "dur": 1}]') is None


def test_other_events_are_handed_over_as_json() -> None:
    piece = native_events.decode(b'[{"ph": "M", "name": "a"}, {"ph": "X", "ts": 1}, {"ph": "i", "ts": 2}]')
    assert piece is not None
    assert orjson.loads(piece.others) == [{"ph": "M", "name": "a"}, {"ph": "i", "ts": 2}]
    assert piece.other_count == 2 and len(piece.rows) == 1
    assert piece.names == [""] and piece.tracks == [(0, 0)]


def test_ingest_reports_the_decoder(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(_trace(GOOD, KERNEL))
    with open(path, "rb") as raw:
        assert parse_trace(raw).meta["decoder"] == "native"


def _numbers_of_every_length() -> list[bytes]:
    """Integers and decimals of 1 to 20 digits on each side, signed, some followed by an exponent."""
    digits = b"98765432101234567890"
    numbers = []
    for length in range(1, 21):
        whole = digits[:length]
        numbers += [whole, b"-" + whole, b"1" + b"0" * (length - 1)]
        for fraction in (1, 3, 7, 8, 9, 16):
            numbers.append(whole[:12] + b"." + digits[:fraction])
        numbers += [whole[:10] + b"e" + str(length).encode(), whole[:9] + b".5E-" + str(length).encode()]
    return numbers


def test_numbers_of_every_length_are_read_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    # the decoder reads up to 8 digits at once where 8 bytes follow, and one at a time near the end; small
    # pieces: those with integers too big for its columns go to the Python parser, the others do not
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (300,))
    events = []
    for i, number in enumerate(_numbers_of_every_length()):
        integer = number if number.lstrip(b"-").isdigit() else b"null"  # an int field's float: Python's
        events.append(
            b'{"ph": "X", "name": "n%d", "cat": "kernel", "ts": 1, "dur": 1, "args": {"correlation": %s, '
            b'"blocks per SM": %s, "est. achieved occupancy %%": %s}}' % (i, integer, number, number)
        )
    for number in (b"7", b"12345678", b"123456789", b"1.25", b"1234567.5"):  # the piece's last bytes
        events.append(b'{"ph": "X", "name": "end", "ts": 1, "dur": %s}' % number)
    _, native = _parse_both(b'{"traceEvents": [' + b",\n".join(events) + b"]}")
    assert native.meta["pieces"]["decoded_natively"] > native.meta["pieces"]["total"] * 3 // 4


def test_every_length_of_a_single_number_piece() -> None:
    # a number ending 0 to 9 bytes before the end of a piece, and digits followed by bytes of every kind
    for length in range(1, 21):
        number = b"1234567890123456789012"[:length]
        pieces = {"dur": b'[{"ph": "X", "ts": 1, "dur": %s}]' % number, "ts": b'[{"ph": "X", "ts": %s}]' % number}
        for field, limit in (("dur", 15), ("ts", 16)):  # the longest the decoder takes (1e15, 4e15: kineto limits)
            piece = pieces[field]
            decoded = native_events.decode(piece)
            assert (decoded is not None) == (length <= limit)
            if decoded is not None:
                assert decoded.rows[field].tolist() == [float(number)]
        for after in (b"\xfa", b"\xff", b"a", b"/", b":", b"\x00"):
            piece = b'[{"ph": "X", "ts": 1, "dur": %s%s, "x": 1}]' % (number, after)
            assert native_events.decode(piece) is None


def test_keys_like_the_fields_the_decoder_reads() -> None:
    # keys of a field's length and first letter, prefixes, long and non-ASCII keys: skipped, not read
    odd_keys = {
        "Input Dimz": [[1]],
        "Input dim": [[2]],
        "Python parent ix": 5,
        "Python module idx": 6,
        "External i": 1,
        "external ID": 2,
        "x" * 40: 3,
        "éxternal id": 4,
        "": 5,
        "d": 6,
        "de": 7,
        "dev": 8,
        "p": 1,
        "pi": 2,
        "ph2": "X",
    }
    kernel = {**KERNEL, "args": {**KERNEL["args"], **odd_keys}}
    op = _op(args={"Input Dims": [[1]], **odd_keys})
    event_keys = {"na": "x", "nam": "y", "names": "z", "t": 1, "tss": 2, "durr": 3, "arg": {}, "argss": {"a": 1}}
    _, native = _parse_both(_trace(kernel, op, {**GOOD, **event_keys}, GOOD))
    assert native.meta["pieces"]["decoded_natively"] == 1


def test_repeated_and_alternating_names_and_tracks() -> None:
    # the decoder remembers the last key of each table: neighbours alike, prefixes of each other, a track
    # whose pid and tid split the same digits differently
    events = []
    for name, pid, tid in [
        ("ab", 1, 23),
        ("ab", 1, 23),
        ("abc", 12, 3),
        ("abc", 12, 3),
        ("ab", 1, 23),
        ("a", "1", "23"),
        ("a", 1, "23"),
        ("", 1, 23),
        ("ab", 1, 23),
    ]:
        events.append(_op(name=name, pid=pid, tid=tid, args={"Input Dims": [[len(name)]], "Call stack": name}))
        events.append({**KERNEL, "name": name, "pid": pid, "tid": tid})
    _, native = _parse_both(_trace(*events))
    assert native.meta["pieces"]["decoded_natively"] == 1


def test_whitespace_of_every_kind_between_tokens() -> None:
    separators = [b" ", b"  ", b"\n", b" \n    ", b"\t", b"\r\n", b" " * 20, b" \t \n"]
    for separator in separators:
        event = b'{"ph": "X",%s"name":%s"a", "ts": 1,%s"dur" :%s2, "args":%s{"device":%s0}%s}' % ((separator,) * 7)
        _parse_both(b'{"traceEvents": [' + event + b"," + separator + event + b"]}")


def test_start_times_past_the_timelines_range_are_dropped_as_in_python() -> None:
    """A start time beyond kineto.MAX_ABS_TS_US (4e15 µs: in nanoseconds from the first event it no longer fits an
    int64) is dropped with a warning by the Python parser; the C decoder hands such events to it (it kept those up
    to 1e17 µs, whose nanoseconds then overflowed)."""
    for ts in (4e15, 4.000001e15, 5e15, -5e15, 1e16, 9.9e16, 1e17, 2e17, 9876543210e20):
        python, _ = _parse_both(
            _trace({"ph": "X", "name": "a", "ts": 1, "dur": 1}, {"ph": "X", "name": "b", "ts": ts, "dur": 1})
        )
        assert python.row_count("events") == (2 if abs(ts) <= 4e15 else 1), ts
