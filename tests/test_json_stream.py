"""The streaming reader: any chunk size gives the same tables; broken files fail with a clear message."""

from __future__ import annotations

import gc
import gzip
import io
import multiprocessing
import socket
import threading
import weakref

import numpy as np
import orjson
import pytest

from conftest import corpus_file
from profscope.ingest import json_stream, kineto, parallel_decode
from profscope.ingest.json_stream import SizeLimitExceeded, TraceFormatError
from profscope.ingest.kineto import KINETO_PIECES, parse_trace

RESNET = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


STRING_COLUMNS = {
    "name",
    "cat",
    "input_dims",
    "input_types",
    "call_stack",
    "collective_name",
    "dtype",
    "pg_name",
    "pg_desc",
    "pg_ranks",
    "series",
}


def _decoded(tables, table: str, column: str) -> np.ndarray:
    """Column values with string ids and track ids replaced by what they stand for."""
    values = np.asarray(tables.columns[table][column])
    if column in STRING_COLUMNS:
        return np.array([tables.strings[int(v)] for v in values], dtype=object)
    if column == "track":
        return np.array([(tables.tracks[int(v)].pid, tables.tracks[int(v)].tid) for v in values], dtype=object)
    return values


def _tables_equal(a, b) -> None:
    for table, columns in a.columns.items():
        for column in columns:
            np.testing.assert_array_equal(
                _decoded(a, table, column), _decoded(b, table, column), err_msg=f"{table}.{column}"
            )
    assert {k: v for k, v in a.meta.items() if k != "pieces"} == {k: v for k, v in b.meta.items() if k != "pieces"}


@pytest.fixture
def helper_started_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C decoder may finish a small trace before a spawned helper has even started: wait for it."""
    ready = parallel_decode.PieceRouter._helper_ready

    def wait_for_the_helper(router: parallel_decode.PieceRouter) -> bool:
        if router._connection is not None and not router._ready:
            router._connection.poll(60)
        return ready(router)

    monkeypatch.setattr(parallel_decode.PieceRouter, "_helper_ready", wait_for_the_helper)


@pytest.mark.parametrize(
    "started",
    [
        "forked before the parse, pieces in shared slots",
        "forked, pieces bigger than a slot (through the socket)",
        "forked, one slot (the reader decodes a piece when it is taken)",
        "spawned once the trace proves big (no fork here)",
    ],
)
def test_a_second_process_decoding_pieces_gives_identical_tables(
    monkeypatch: pytest.MonkeyPatch, helper_started_at_once: None, started: str
) -> None:
    data = corpus_file(RESNET).read_bytes()
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (1 << 16,))
    if "bigger than a slot" in started:
        monkeypatch.setattr(parallel_decode, "SLOT_BYTES", 1 << 10)
    if "one slot" in started:
        monkeypatch.setattr(parallel_decode, "RING_SLOTS", 1)
    if started.startswith("spawned"):  # where fork is not available
        monkeypatch.setattr(parallel_decode.PieceRouter, "start_early", lambda router: None)
    # the finish of a parse that had two cores joins, renumbers and reorders columns on two threads (a big
    # trace's only): here too, so that its tables are compared with one thread's
    monkeypatch.setattr(kineto, "THREADED_FINISH_ROWS", 0)
    thread_counts: list[int] = []
    each_on = kineto._each_on

    def counting(threads: int, function, items):
        thread_counts.append(threads)
        return each_on(threads, function, items)

    monkeypatch.setattr(kineto, "_each_on", counting)
    alone = parse_trace(io.BytesIO(data), use_second_core=False)
    assert set(thread_counts) == {1}
    shared = parse_trace(io.BytesIO(data), use_second_core=True)
    assert 2 in thread_counts  # the threaded finish ran
    assert alone.meta["pieces"]["decoded_by_second_process"] == 0
    assert shared.meta["pieces"]["decoded_by_second_process"] > 0  # the merge path really ran
    _tables_equal(alone, shared)
    # the same ids too: strings and tracks numbered as one process numbers them (kineto.FirstSightings), so
    # the cached results of a file do not depend on how its parse was shared
    assert shared.strings.strings == alone.strings.strings and shared.tracks == alone.tracks
    for table, columns in alone.columns.items():
        for column, values in columns.items():
            np.testing.assert_array_equal(shared.columns[table][column], values, err_msg=f"{table}.{column}")


def _chunks_of(gathered: dict) -> list[np.ndarray]:
    """The per-piece chunks a builder (or a builder's ``partial()``) holds until its finish joins them; the
    file order of the side tables is left out: joined after the events are sorted."""
    columns = [chunk for table in gathered["chunks"].values() for chunks in table.values() for chunk in chunks]
    times = [chunk for chunks in gathered["time_chunks"].values() for chunk in chunks]
    return [*columns, *times, *gathered["x_ts"], *gathered["x_dur"], *gathered["x_order"]]


def test_the_finish_frees_each_chunk_once_joined(monkeypatch: pytest.MonkeyPatch, helper_started_at_once: None) -> None:
    """A 1 GB trace's chunks are ~300 MB: held to the end of the finish (by the builder, or by the other
    process's part that a caller still holds), they stood beside the joined columns at its peak."""
    data = corpus_file(RESNET).read_bytes()
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (1 << 16,))
    watched: list[weakref.ref] = []
    parts: list[dict] = []  # as the parse's loop variable does, past the merge
    merge, finish, sort_events = kineto.TableBuilder.merge, kineto.TableBuilder.finish, kineto._sort_events

    def merge_watched(builder: kineto.TableBuilder, part: dict) -> None:
        parts.append(part)
        watched.extend(weakref.ref(chunk) for chunk in _chunks_of(part))
        merge(builder, part)

    def finish_watched(builder: kineto.TableBuilder, top_level: dict, threads: int = 1):
        gathered = {"chunks": builder._chunks, "time_chunks": builder._time_chunks, "x_ts": builder._x_ts,
                    "x_dur": builder._x_dur, "x_order": builder._x_order}  # fmt: skip
        watched.extend(weakref.ref(chunk) for chunk in _chunks_of(gathered))
        return finish(builder, top_level, threads)

    alive_when_sorted: list[int] = []

    def sort_watched(columns: dict, file_order: np.ndarray, threads: int = 1) -> None:
        gc.collect()
        alive_when_sorted.append(sum(ref() is not None for ref in watched))
        sort_events(columns, file_order, threads)

    monkeypatch.setattr(kineto.TableBuilder, "merge", merge_watched)
    monkeypatch.setattr(kineto.TableBuilder, "finish", finish_watched)
    monkeypatch.setattr(kineto, "_sort_events", sort_watched)
    tables = parse_trace(io.BytesIO(data), use_second_core=True)
    assert tables.meta["pieces"]["decoded_by_second_process"] > 0 and parts  # the other process's part was merged
    assert len(watched) > 100  # chunks of both processes
    assert alive_when_sorted == [0]


def _arrays_in(value: object) -> list[np.ndarray]:
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [array for item in value for array in _arrays_in(item)] if isinstance(value, list) else []


def test_the_helper_frees_each_array_of_its_tables_once_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper's partial tables (~150 MB of a 1 GB trace) stood whole in it while the parsing process received
    its copy: the parse's peak. Each array is freed once sent, and the heap pages of those sent are handed back as
    the sending goes (the helper in a thread here, fed pieces through a socket pair as the parsing process does)."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": i % 3, "ts": i, "dur": 1,
         "args": {"External id": i}}
        for i in range(300)
    ]  # fmt: skip
    pieces = [orjson.dumps(events[start : start + 50]) for start in range(0, len(events), 50)]
    watched: list[weakref.ref] = []
    partial = kineto.TableBuilder.partial

    def partial_watched(builder: kineto.TableBuilder) -> dict:
        part = partial(builder)
        watched.extend(weakref.ref(array) for array in _arrays_in(part))
        return part

    alive_at_send: list[int] = []  # once the partial tables exist: at each message sent (the head, then each array)
    alive_at_trim: list[int] = []
    send_bytes = parallel_decode.Channel.send_bytes

    def send_counted(channel: parallel_decode.Channel, data: bytes | memoryview) -> None:
        if watched:
            alive_at_send.append(sum(ref() is not None for ref in watched))
        send_bytes(channel, data)

    monkeypatch.setattr(kineto.TableBuilder, "partial", partial_watched)
    monkeypatch.setattr(parallel_decode.Channel, "send_bytes", send_counted)
    monkeypatch.setattr(parallel_decode, "TRIM_EVERY_BYTES", 1024)
    monkeypatch.setattr(
        parallel_decode, "trim_freed_heap", lambda: alive_at_trim.append(sum(ref() is not None for ref in watched))
    )
    parsing_end, helper_end = (parallel_decode.Channel(end) for end in socket.socketpair())
    received: list[object] = []

    def parsing_process() -> None:
        for index, piece in enumerate(pieces):
            parsing_end.send_bytes(index.to_bytes(8, "little"))
            parsing_end.send_bytes(piece)
        parsing_end.send_bytes(b"")
        while not (isinstance(message := parsing_end.recv(), dict) and "partial" in message):
            pass
        received.append(message)

    sender = threading.Thread(target=parsing_process)
    sender.start()
    collecting = gc.isenabled()
    try:
        parallel_decode._decode_pieces(helper_end, KINETO_PIECES, True)
    finally:
        if collecting:
            gc.enable()  # the helper's function turns the collection off for its process
    sender.join()
    parsing_end.close()
    helper_end.close()
    assert received and received[0]["partial"]["rows"] == len(events)
    arrays = len(watched)
    assert arrays > 20  # every column's chunk, the times, the file order, where each string was first seen
    # the head, then each array: those sent before it already freed
    assert alive_at_send == [arrays, *range(arrays, 0, -1)]
    assert len(alive_at_trim) > 1 and alive_at_trim == sorted(alive_at_trim, reverse=True) and alive_at_trim[-1] == 0


def test_a_helper_forked_for_a_trace_that_stays_small_leaves_when_the_parse_ends() -> None:
    """Forked before the parse knows the trace's size: a one-piece trace never sends it anything, and it must
    leave on its own when the parse closes its end (a copy of that end it kept would leave it waiting)."""
    router = parallel_decode.PieceRouter(enabled=True, decoder=KINETO_PIECES)
    router.start_early()
    process = router._process
    assert process is not None and process.is_alive()
    router.close()  # joins, and kills a helper still there after 5 s
    assert process.exitcode == 0
    tables = parse_trace(io.BytesIO(_separators_in_strings_and_arrays(20)), use_second_core=True)
    assert tables.row_count("events") == 20 and tables.meta["pieces"]["decoded_by_second_process"] == 0
    assert not multiprocessing.active_children()


def test_a_piece_ring_hands_out_each_slot_once_and_refuses_what_does_not_fit() -> None:
    ring = parallel_decode.PieceRing(2, 8)
    first, second = ring.put(b"12345678"), ring.put(memoryview(b"abc"))
    assert first is not None and second is not None and ring.free == []
    assert ring.put(b"x") is None  # every slot taken
    assert bytes(ring.view(first)) == b"12345678" and bytes(ring.view(second)) == b"abc"
    ring.free.append(parallel_decode.PieceRing.slot_of(first))
    assert ring.put(b"123456789") is None  # bigger than a slot
    again = ring.put(b"z")
    assert parallel_decode.PieceRing.slot_of(again) == parallel_decode.PieceRing.slot_of(first)
    assert bytes(ring.view(again)) == b"z" and bytes(ring.view(second)) == b"abc"
    ring.close()


def test_the_second_process_dying_gives_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, helper_started_at_once: None
) -> None:
    data = corpus_file(RESNET).read_bytes()
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (1 << 16,))
    route = parallel_decode.PieceRouter.route

    def route_and_kill(router: parallel_decode.PieceRouter, piece: bytes, here: bool = False) -> object:
        if router.sent == 3:  # killed with pieces in flight, as the kernel's OOM killer would
            router._process.kill()
            router._process.join()
        return route(router, piece, here)

    monkeypatch.setattr(parallel_decode.PieceRouter, "route", route_and_kill)
    with pytest.raises(TraceFormatError, match="the process decoding part of this trace died"):
        parse_trace(io.BytesIO(data), use_second_core=True)


class _Unseekable(io.BytesIO):
    def seekable(self) -> bool:
        return False


def _separators_in_strings_and_arrays(count: int) -> bytes:
    """Events whose strings and args arrays of objects hold the event separator ``}, {``."""
    tricky = '"}, {"ph": "X"}, {'
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i} {tricky}" if i % 2 else f"op{i}",
            "pid": 1,
            "tid": 1,
            "ts": i,
            "dur": 1,
            "args": {"External id": i, "parts": [{"a": i}, {"b": [{"c": tricky}, {"d": 2}]}, {"e": 3}]},
        }
        for i in range(count)
    ]
    return orjson.dumps({"traceEvents": events, "traceName": "x"}).replace(b"},{", b"}, {")


def test_a_wrong_cut_sent_to_the_second_process_gives_identical_tables(
    monkeypatch: pytest.MonkeyPatch, helper_started_at_once: None
) -> None:
    data = _separators_in_strings_and_arrays(400)
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (2048,))
    alone = parse_trace(io.BytesIO(data), use_second_core=False)
    shared = parse_trace(io.BytesIO(data), use_second_core=True)
    # the helper failed on a wrong cut and the trace was read again on one core
    assert shared.meta["pieces"]["decoded_by_second_process"] == 0
    assert alone.row_count("events") == 400
    _tables_equal(alone, shared)
    with pytest.raises(parallel_decode.SpeculationFailed):  # a stream that cannot be read again: the caller's turn
        parse_trace(_Unseekable(data), use_second_core=True)
    _tables_equal(alone, parse_trace(_Unseekable(data), use_second_core=False))


@pytest.mark.parametrize("damage", [b"} {", b"}, {]", b'}, {"cat": "\xff", ', b'}, {"name": "\\u12", '])
def test_a_malformed_piece_sent_to_the_second_process_fails_as_on_one_core(
    monkeypatch: pytest.MonkeyPatch, helper_started_at_once: None, damage: bytes
) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(3000)
    ]
    data = orjson.dumps({"traceEvents": events}).replace(b"},{", b"}, {")
    middle = data.index(b"}, {", len(data) * 2 // 3)
    data = data[:middle] + damage + data[middle + 4 :]
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (4096,))
    outcomes = []
    for use_second_core in (False, True):
        try:
            outcomes.append(parse_trace(io.BytesIO(data), use_second_core=use_second_core))
        except TraceFormatError as exc:
            outcomes.append(str(exc))
    if isinstance(outcomes[0], str):
        assert outcomes[0] == outcomes[1]
    else:  # bytes that are not UTF-8 are replaced, and counted alike
        _tables_equal(*outcomes)


@pytest.mark.parametrize("chunk_bytes", [1 << 10, 7919, 1 << 16])
def test_small_chunks_give_identical_tables(monkeypatch: pytest.MonkeyPatch, chunk_bytes: int) -> None:
    data = corpus_file(RESNET).read_bytes()
    whole = parse_trace(io.BytesIO(data))
    monkeypatch.setattr(json_stream, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (chunk_bytes,))
    chunked = parse_trace(io.BytesIO(data))
    _tables_equal(whole, chunked)


def test_event_separators_inside_strings_do_not_split_events(monkeypatch: pytest.MonkeyPatch) -> None:
    tricky = '"}, {"ph": "X"}, {'
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i} {tricky}" * 3, "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(300)
    ]
    data = orjson.dumps({"traceEvents": events, "traceName": "x"}).replace(b"},{", b"},\n  {")
    monkeypatch.setattr(json_stream.ChromeTraceReader.__init__, "__defaults__", (257,))
    tables = parse_trace(io.BytesIO(data))
    assert tables.row_count("events") == 300
    assert tables.strings[int(tables.events["name"][0])] == f"op0 {tricky}" * 3
    assert tables.meta["traceName"] == "x"


def test_keys_after_the_event_list_are_read() -> None:
    data = orjson.dumps(
        {
            "schemaVersion": 1,
            "traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}],
            "distributedInfo": {"rank": 3, "world_size": 4, "pg_config": [{"ranks": [0, 1]}]},
        }
    )
    tables = parse_trace(io.BytesIO(data))
    assert tables.meta["distributedInfo"]["rank"] == 3


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a JSON trace"),
        (b"hello", "not a JSON trace"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}, {"ph": "X", "na', "truncated"),
        (b'{"traceEvents": {"ph": "X"}}', "'traceEvents' is not a list"),
        (b'{"schemaVersion": 1}', "no 'traceEvents' list"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1} {"ph": "X"}]}', "malformed"),
        (b'{"traceEvents": []}', "no events"),
    ],
)
def test_broken_files_fail_with_a_message(data: bytes, message: str) -> None:
    with pytest.raises(TraceFormatError) as failure:
        parse_trace(io.BytesIO(data))
    assert message in str(failure.value)


def test_truncated_gzip_fails_with_a_message() -> None:
    data = gzip.compress(corpus_file(RESNET).read_bytes()[:0] + gzip.decompress(corpus_file(RESNET).read_bytes()))
    with pytest.raises(TraceFormatError) as failure:
        parse_trace(io.BytesIO(data[: len(data) // 2]))
    assert "truncated" in str(failure.value) or "decompress" in str(failure.value)


def test_decompressed_size_is_bounded() -> None:
    bomb = gzip.compress(b'{"traceEvents": [' + b" " * (20 << 20) + b"]}")
    assert len(bomb) < 100_000
    with pytest.raises(SizeLimitExceeded):
        parse_trace(io.BytesIO(bomb), max_trace_bytes=1 << 20)


def test_wrong_types_are_coerced_or_dropped_not_fatal() -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "str ts", "pid": 1, "tid": 1, "ts": "20", "dur": "5"},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "bad args",
            "pid": 1,
            "tid": 1,
            "ts": 30,
            "dur": 5,
            "args": {"External id": {"nested": True}, "Input Dims": "not a list"},
        },
        {"ph": "X", "cat": ["list"], "name": 42, "pid": [1], "tid": None, "ts": 40, "dur": -3},
        {"ph": "X", "name": "no ts", "dur": 1},
        "not an object",
    ]
    tables = parse_trace(io.BytesIO(orjson.dumps({"traceEvents": events})))
    assert tables.row_count("events") == 4
    assert (tables.events["dur_ns"] >= 0).all()
    assert any("ts" in w["message"] for w in tables.meta["warnings"])


@pytest.mark.parametrize("threads", [1, 2])
def test_rows_are_reordered_into_the_memory_of_the_columns_before_them(threads: int) -> None:
    """The parse's finish reorders each column into the memory of the previous one of its type (no second copy of
    the events table): every column ends up reordered, a column still held elsewhere is never written into, and
    the memory of the others is reused."""
    rng = np.random.default_rng(5)
    rows = 1000
    order = rng.permutation(rows)
    table = {
        "a": rng.integers(0, 1 << 40, rows),
        "b": rng.integers(0, 1 << 40, rows),
        "c": rng.integers(0, 1 << 40, rows),
        "d": rng.integers(0, 1 << 40, rows),
        "name": rng.integers(0, 100, rows).astype(np.int32),
        "track": rng.integers(0, 100, rows).astype(np.int32),
        "kind": rng.integers(0, 9, rows).astype(np.int8),
    }
    held = table["c"]  # as a caller still holding a column would
    held_before = held.copy()
    want = {column: values[order] for column, values in table.items()}
    before = {column: id(values) for column, values in table.items()}
    kineto._gather_rows(table, order, threads)
    for column, values in want.items():
        np.testing.assert_array_equal(table[column], values, err_msg=column)
        assert table[column].dtype == values.dtype
    np.testing.assert_array_equal(held, held_before)
    assert id(held) not in {id(values) for values in table.values()}
    reused = {id(values) for values in table.values()} & set(before.values())
    assert len(reused) >= 2  # int64 columns after the first of each thread's share went into freed columns
