"""Every ``[memory]``-carrying trace of the corpus opens in the profiler memory view with the numbers an
independent reading of its JSON gives: devices, peaks, the drawn curve (its peak, trough and last point),
and the allocation / release pairs; traces whose events carry no totals say why nothing is drawn."""

from __future__ import annotations

import gzip
from functools import cache
from pathlib import Path

import orjson
import pytest

from conftest import CORPUS
from profscope.analysis.context import TraceContext
from profscope.analysis.memory import (
    attribute_memory,
    curve,
    curve_unavailable_reason,
    memory_events,
    memory_records,
    peaks,
)
from profscope.ingest.kineto import parse_trace_file


def _raw_events(path: Path) -> list[dict]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    document = orjson.loads(data)
    return document if isinstance(document, list) else document["traceEvents"]


def _with_memory() -> list[str]:
    found = []
    for path in sorted(CORPUS.rglob("*")):
        if not path.name.endswith((".json", ".json.gz")):
            continue
        data = path.read_bytes()
        if b"[memory]" in (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data):
            found.append(str(path.relative_to(CORPUS)))
    return found


WITH_MEMORY = _with_memory()


@cache
def _memory_events_by_device(relative: str) -> dict[str, list[dict]]:
    """The ``[memory]`` events of each device (CPU, GPU<id>), in time order (ties in file order)."""
    by_device: dict[str, list[dict]] = {}
    events = [e for e in _raw_events(CORPUS / relative) if e.get("name") == "[memory]" and e.get("ph") in ("i", "I")]
    for event in sorted(events, key=lambda e: float(e["ts"])):
        args = event["args"]
        kind = args.get("Device Type")
        name = "CPU" if kind == 0 else f"GPU{args.get('Device Id')}" if kind == 1 else None
        if name is not None:
            by_device.setdefault(name, []).append(args)
    return by_device


def _pairs_by_address(events: list[dict]) -> tuple[int, int, int]:
    """(paired allocations, their bytes, rows in the events table): an allocation is released by the next
    release of its address; an address allocated again while open leaves the first allocation unreleased."""
    open_allocs: dict[int, int] = {}
    paired = paired_bytes = rows = 0
    for args in events:
        if "Addr" not in args:
            continue
        addr, size = args["Addr"], args["Bytes"]
        if size > 0:
            if addr in open_allocs:
                rows += 1
            open_allocs[addr] = size
            continue
        rows += 1
        if addr in open_allocs:
            paired += 1
            paired_bytes += open_allocs.pop(addr)
    return paired, paired_bytes, rows + len(open_allocs)


def test_the_corpus_has_its_memory_traces() -> None:
    assert len(WITH_MEMORY) >= 14  # tests/corpus: see its NOTICE


@pytest.mark.parametrize("relative", WITH_MEMORY)
def test_memory_view_numbers_equal_the_raw_events(relative: str) -> None:
    tables = parse_trace_file(CORPUS / relative)
    records = memory_records(tables)
    attribution = attribute_memory(TraceContext(tables))
    expected = _memory_events_by_device(relative)
    assert records.names == sorted(expected, key=lambda n: (n != "CPU", int(n[3:]) if n != "CPU" else 0))
    device_peaks = peaks(records)
    for device, events in expected.items():
        allocated = [a["Total Allocated"] for a in events if "Total Allocated" in a]
        reserved = [a["Total Reserved"] for a in events if "Total Reserved" in a]
        assert device_peaks[device]["peak_allocated_bytes"] == (max(allocated) if allocated else None)
        assert device_peaks[device]["peak_reserved_bytes"] == (max(reserved) if reserved else None)
        drawn = curve(records, device)
        drawable = [a for a in events if "Addr" in a and "Total Allocated" in a and "Total Reserved" in a]
        reason = curve_unavailable_reason(records, device)
        if not drawable:  # Bytes only: the running sum of Bytes, as the Trace view draws it
            assert "Total Allocated" in reason and drawn["curve_kind"] == "bytes_running_sum"
            assert drawn["points_in_window"] == len(events)
            assert drawn["curve"][-1][1:] == [sum(a["Bytes"] for a in events), None]
        else:
            assert drawn["points_in_window"] == len(drawable)
            assert reason is None
            points = drawn["curve"]
            assert max(p[1] for p in points) == max(a["Total Allocated"] for a in drawable)
            assert min(p[1] for p in points) == min(a["Total Allocated"] for a in drawable)
            assert max(p[2] for p in points) == max(a["Total Reserved"] for a in drawable)
            assert points[-1][1:] == [drawable[-1]["Total Allocated"], drawable[-1]["Total Reserved"]]
        rows = memory_events(tables, records, attribution, device)
        paired, paired_bytes, row_count = _pairs_by_address(events)
        complete = [r for r in rows if r["alloc_time_us"] is not None and r["release_time_us"] is not None]
        assert (len(complete), sum(r["size_bytes"] for r in complete), len(rows)) == (paired, paired_bytes, row_count)
        assert all(r["duration_us"] >= 0 for r in complete)
