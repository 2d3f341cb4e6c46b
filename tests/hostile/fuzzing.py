"""Mutation fuzzing of the trace parser and the snapshot loader, seeded from the real corpus.

One engine, two drivers: ``test_fuzz.py`` runs a fixed number of cases under hypothesis (which
hands the mutators a ``random.Random`` it controls, so a failure shrinks and replays), and
``bench/fuzz.py`` runs for N cases or T seconds with plain seeded ``Random`` instances.

Seeds are small samples of real files (every category of a few real traces, a few segments and
trace entries of real snapshots) so that each case is fast yet has every real field in it.
Mutations: byte flips, truncation, splices of two inputs, structural bytes inserted, and type swaps
in decoded events (a field's value replaced by a hostile one), optionally gzipped afterwards.

A case *crashes* when the loader raises anything but its documented refusal (``TraceFormatError``;
``PickleRefused`` / ``SnapshotFormatError``) or runs past the time limit. The payload builders run on
every accepted trace and snapshot too: a page must not break on what the parser accepted.
"""

from __future__ import annotations

import copy
import functools
import gzip
import io
import json
import pickle
import signal
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from random import Random
from typing import Any

from conftest import corpus_file
from profscope.ingest.json_stream import TraceFormatError
from profscope.ingest.kineto import parse_trace
from profscope.ingest.safe_pickle import PickleRefused, load_plain_data
from profscope.ingest.snapshot import SnapshotFormatError, parse_snapshot

TRACE_SEEDS = (
    "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz",
    "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
)
SNAPSHOT_SEEDS = (
    "memory-snapshots/ZijianDu_Attention/memory.pickle",
    "memory-snapshots/ZidongLiu_DeComFL/memory.pickle",
)
EVENTS_PER_CATEGORY = 25
MAX_TRACE_BYTES = 64 << 20
MAX_SNAPSHOT_BYTES = 256 << 20
CASE_TIMEOUT_S = 20

HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**31, 2**63, 2**64, -(2**63) - 1, 10**30, 0.5, 1e300, -1e300, 4.1e15,
    "", "NaN", "Infinity", "-1", "0x10", "\u0000", "\ufffd\ud7ff", "<script>alert(1)</script>", "x" * 5000,
    [], [1, 2, 3], [[[[]]]], [None, "a"], {}, {"a": 1}, {"ph": "X"},
]  # fmt: skip
# What a view says, on purpose, about a trace it cannot show (shown on that page alone, the others work)
VIEW_REFUSALS = {
    "trace too long to index for the timeline",  # the Trace view: times spread over decades
    "the trace has no timed events",  # Overview / Operator: only instants, counters or metadata
}
STRUCTURAL = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"\xff", b"\x00", b"-", b"e9", b"1e400", b"null"]


# ---- seeds --------------------------------------------------------------------------------------
@functools.cache
def trace_seeds() -> tuple[bytes, ...]:
    return tuple(_sample_trace(gzip.decompress(corpus_file(path).read_bytes())) for path in TRACE_SEEDS)


def _sample_trace(data: bytes) -> bytes:
    """The trace's header and up to EVENTS_PER_CATEGORY events of each (category, phase), in file order."""
    document = json.loads(data)
    taken: dict[tuple[str, str], int] = {}
    events = []
    for event in document.get("traceEvents", []):
        key = (str(event.get("cat")), str(event.get("ph")))
        if taken.get(key, 0) < EVENTS_PER_CATEGORY:
            taken[key] = taken.get(key, 0) + 1
            events.append(event)
    document["traceEvents"] = events
    return _kineto_layout(document)


def _kineto_layout(document: dict[str, Any]) -> bytes:
    """As kineto writes it: header keys, then one event per line."""
    events = document.pop("traceEvents", [])
    if not isinstance(events, list):
        return json.dumps({**document, "traceEvents": events}).encode()
    header = json.dumps(document)[:-1]
    lines = ",\n  ".join(json.dumps(e) for e in events)
    return (header + (", " if document else "") + '"traceEvents": [\n  ' + lines + "\n]}").encode()


@functools.cache
def snapshot_seeds() -> tuple[bytes, ...]:
    return tuple(_sample_snapshot(corpus_file(path).read_bytes()) for path in SNAPSHOT_SEEDS)


def _sample_snapshot(data: bytes) -> bytes:
    document = load_plain_data(io.BytesIO(data), MAX_SNAPSHOT_BYTES)
    if isinstance(document, dict):
        document["segments"] = document.get("segments", [])[:6]
        document["device_traces"] = [trace[:60] for trace in document.get("device_traces", [])]
    else:
        document = document[:6]
    return pickle.dumps(document, protocol=4)


# ---- mutations ------------------------------------------------------------------------------------
def _flip_bytes(data: bytes, rng: Random, _others: tuple[bytes, ...]) -> bytes:
    mutable = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if mutable:
            mutable[rng.randrange(len(mutable))] = rng.randrange(256)
    return bytes(mutable)


def _truncate(data: bytes, rng: Random, _others: tuple[bytes, ...]) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def _splice(data: bytes, rng: Random, others: tuple[bytes, ...]) -> bytes:
    other = rng.choice(others)
    return data[: rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1) :]


def _insert_structural(data: bytes, rng: Random, _others: tuple[bytes, ...]) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.choice(STRUCTURAL) + data[at:]


def _duplicate_region(data: bytes, rng: Random, _others: tuple[bytes, ...]) -> bytes:
    start = rng.randrange(len(data) + 1)
    end = min(len(data), start + rng.randrange(1, 4096))
    return data[:end] + data[start:end] + data[end:]


def _hostile_value(rng: Random) -> Any:
    value = rng.choice(HOSTILE_VALUES)
    return copy.deepcopy(value)


def _swap_in(container: Any, rng: Random) -> None:
    """Replace one value somewhere inside ``container`` (dicts and lists) with a hostile one."""
    for _ in range(rng.randint(1, 6)):
        if isinstance(container, dict) and container:
            key = rng.choice(list(container))
            if isinstance(container[key], dict | list) and rng.random() < 0.6:
                container = container[key]
                continue
            container[key] = _hostile_value(rng)
            return
        if isinstance(container, list) and container:
            index = rng.randrange(len(container))
            if isinstance(container[index], dict | list) and rng.random() < 0.8:
                container = container[index]
                continue
            container[index] = _hostile_value(rng)
            return
        return


def _swap_trace_types(data: bytes, rng: Random, _others: tuple[bytes, ...]) -> bytes:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return data
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        return data
    events = document["traceEvents"]
    if rng.random() < 0.2:  # the header: deviceProperties, distributedInfo, ...
        _swap_in({key: value for key, value in document.items() if key != "traceEvents"} | {"": document}, rng)
    for _ in range(rng.randint(1, 5)):
        if events:
            event = events[rng.randrange(len(events))]
            if isinstance(event, dict) and rng.random() < 0.3:
                event[rng.choice(["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "bp", "s"])] = (
                    _hostile_value(rng)
                )
            else:
                _swap_in(event, rng)
    return _kineto_layout(document)


def _swap_snapshot_types(data: bytes, rng: Random, _others: tuple[bytes, ...]) -> bytes:
    try:
        document = load_plain_data(io.BytesIO(data), MAX_SNAPSHOT_BYTES)
    except PickleRefused:
        return data
    for _ in range(rng.randint(1, 5)):
        _swap_in(document, rng)
    try:
        return pickle.dumps(document, protocol=rng.choice([2, 4]))
    except (pickle.PicklingError, RecursionError, ValueError):
        return data


Mutation = Callable[[bytes, Random, tuple[bytes, ...]], bytes]
BYTE_MUTATIONS: tuple[Mutation, ...] = (_flip_bytes, _truncate, _splice, _insert_structural, _duplicate_region)


def mutate(seeds: tuple[bytes, ...], rng: Random, swap_types: Mutation) -> bytes:
    """A seed with 1-4 mutations; type swaps (which keep the input readable) twice as likely as byte noise."""
    data = rng.choice(seeds)
    mutations = (*BYTE_MUTATIONS, swap_types, swap_types)
    for _ in range(rng.randint(1, 4)):
        data = rng.choice(mutations)(data, rng, seeds)
    return data


def trace_case(rng: Random) -> bytes:
    data = mutate(trace_seeds(), rng, _swap_trace_types)
    if rng.random() < 0.2:  # some gzipped, a few of those cut short
        data = gzip.compress(data, 1)
        if rng.random() < 0.1:
            data = data[: rng.randrange(len(data) + 1)]
    return data


def snapshot_case(rng: Random) -> bytes:
    return mutate(snapshot_seeds(), rng, _swap_snapshot_types)


# ---- running one case -----------------------------------------------------------------------------
class CaseTimeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def expire(_signum: int, _frame: Any) -> None:
        raise CaseTimeout(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Outcome:
    accepted: bool  # read (True) or refused with the documented error (False)
    crash: str | None = None  # the traceback of anything else


def run_trace_case(data: bytes) -> Outcome:
    from profscope.analysis.context import TraceContext
    from profscope.analysis.timeline_index import build_timeline_index
    from profscope.views.registry import queries

    def check() -> None:
        tables = parse_trace(io.BytesIO(data), use_second_core=False, max_trace_bytes=MAX_TRACE_BYTES)
        context = TraceContext(tables)
        for build in [*(q.build for q in queries("trace")), lambda _: build_timeline_index(tables)]:
            try:
                build(context)
            except ValueError as exc:
                if str(exc) not in VIEW_REFUSALS:
                    raise

    return _run(check, (TraceFormatError,))


def run_snapshot_case(data: bytes) -> Outcome:
    from profscope.analysis.snapshot_allocations import build_allocations, build_levels
    from profscope.analysis.snapshot_timeline import timeline
    from profscope.views.registry import queries

    def check() -> None:
        tables = parse_snapshot(io.BytesIO(data), MAX_SNAPSHOT_BYTES)
        tables.columns["allocations"] = build_allocations(tables)
        tables.columns["levels"], tables.columns["device_levels"] = build_levels(tables)
        for query in queries("snapshot"):
            query.build(tables)
        for device in tables.meta["devices"]:
            timeline(tables, device)

    return _run(check, (PickleRefused, SnapshotFormatError))


def _run(check: Callable[[], None], refusals: tuple[type[Exception], ...]) -> Outcome:
    try:
        with _time_limit(CASE_TIMEOUT_S):
            check()
    except refusals:
        return Outcome(accepted=False)
    except Exception:
        return Outcome(accepted=True, crash=traceback.format_exc())
    return Outcome(accepted=True)
