"""Profiler memory view (anchors.md §1.8): numbers against torch-tb-profiler 0.4.3 and by hand."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from conftest import corpus_file
from profscope.analysis.context import TraceContext
from profscope.analysis.memory import (
    STAT_COLUMNS,
    attribute_memory,
    curve,
    memory_events,
    memory_records,
    memory_statistics,
    peaks,
)
from profscope.ingest.kineto import parse_trace_file
from profscope.tables import NO_ID

REFERENCE = Path(__file__).resolve().parent / "reference_data"
WITH_MEMORY = {
    "generated__tinygpt_cpu__worker0.1795315486519085323.pt.trace.tbprof-main.json": (
        "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
    ),
    "generated__tinygpt_cpu__worker0.1795315486718467596.pt.trace.tbprof-main.json": (
        "generated/tinygpt_cpu/worker0.1795315486718467596.pt.trace.json.gz"
    ),
    "generated__tinygpt_ddp4_gloo__rank0.1795315503706026973.pt.trace.tbprof-main.json": (
        "generated/tinygpt_ddp4_gloo/rank0.1795315503706026973.pt.trace.json.gz"
    ),
    "kineto-tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.tbprof-main.json": (
        "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    ),
    "traces__AMD-AGI_TraceLens__tests__traces__h100__gaunernst_bert-small-uncased__1016001.tbprof-main.json": (
        "traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    ),
}


@cache
def analysed(source: str) -> tuple:
    tables = parse_trace_file(corpus_file(source))
    return tables, memory_records(tables), attribute_memory(TraceContext(tables))


@pytest.mark.parametrize("reference", WITH_MEMORY)
def test_statistics_per_operator_equal_the_plugins(reference: str) -> None:
    expected = json.loads((REFERENCE / reference).read_text())["memory"]
    tables, records, attribution = analysed(WITH_MEMORY[reference])
    stats = memory_statistics(tables, records, attribution)
    assert {device: len(rows) for device, rows in stats.items()} == expected["stats_rows_total"]
    for device, rows in expected["stats"].items():
        mine = {row["operator"]: row for row in stats[device]}
        for row in rows:
            assert {k: mine[row["operator"]][k] for k in ("calls", *STAT_COLUMNS)} == {
                k: row[k] for k in ("calls", *STAT_COLUMNS)
            }, (device, row["operator"])


def _event_key(row: dict) -> tuple:
    when = row["alloc_time_us"] if row["alloc_time_us"] is not None else row["release_time_us"]
    release = row["release_time_us"] if row["release_time_us"] is not None else float("inf")
    return (when, release, row["operator"], row["size_bytes"])


def _same_event(mine: dict, plugin: dict) -> bool:
    """Same operator and size; times equal to the plugin's 2-decimal rounding (it rounds float µs)."""
    if (mine["operator"], mine["size_bytes"]) != (plugin["operator"], int(plugin["size_bytes"])):
        return False
    for key in ("alloc_time_us", "release_time_us", "duration_us"):
        if (mine[key] is None) != (plugin[key] is None):
            return False
        if mine[key] is not None and abs(mine[key] - plugin[key]) > 0.0051:
            return False
    return True


@pytest.mark.parametrize("reference", WITH_MEMORY)
def test_memory_events_pair_and_name_like_the_plugin(reference: str) -> None:
    expected = json.loads((REFERENCE / reference).read_text())["memory"]
    tables, records, attribution = analysed(WITH_MEMORY[reference])
    for device in records.names:
        mine = memory_events(tables, records, attribution, device)
        assert len(mine) == expected["events_rows"].get(device, 0)
        wanted = expected["events"].get(device, [])
        shown = sorted(mine, key=_event_key)[: len(wanted)]
        differing = [(a, b) for a, b in zip(shown, wanted, strict=True) if not _same_event(a, b)]
        assert not differing, (device, differing[:3])


@pytest.mark.parametrize("reference", WITH_MEMORY)
def test_peak_is_the_largest_total_allocated_of_each_device(reference: str) -> None:
    expected = json.loads((REFERENCE / reference).read_text())["memory"]
    tables, records, _ = analysed(WITH_MEMORY[reference])
    memory = tables.table("memory")
    mine = peaks(records)
    for peak in expected["peaks_bytes"]:
        name = "CPU" if peak["device_type"] == "CPU" else f"GPU{peak['device_id']}"
        assert mine[name]["peak_allocated_bytes"] == peak["peak_allocated_bytes"]
    for name, values in mine.items():
        on_device = np.asarray(memory["device_type"]) == (0 if name == "CPU" else 1)
        allocated = np.asarray(memory["total_allocated"])[on_device]
        allocated = allocated[allocated != NO_ID]
        assert values["peak_allocated_bytes"] == (int(allocated.max()) if len(allocated) else None)


def _op(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}


def _mem(ts: float, addr: int, nbytes: int, allocated: int, device: int = 0) -> dict:
    args = {
        "Addr": addr,
        "Bytes": nbytes,
        "Total Allocated": allocated,
        "Total Reserved": 4096,
        "Device Type": 1,
        "Device Id": device,
    }
    return {
        "ph": "i",
        "s": "t",
        "cat": "cpu_instant_event",
        "name": "[memory]",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "args": args,
    }


def test_hand_computed_pairing_naming_and_statistics(tmp_path: Path) -> None:
    """aten::zeros (100-200) calls aten::empty (110-120, allocates 512 at A); aten::add (300-400) allocates
    256 at B and frees A; B is never freed; a stray free of C at 500 has no allocation."""
    events = [
        _op("aten::zeros", 100, 100),
        _op("aten::empty", 110, 10),
        _op("aten::add", 300, 100),
        _mem(115, 0xA00, 512, 512),
        _mem(310, 0xB00, 256, 768),
        _mem(350, 0xA00, -512, 256),
        _mem(500, 0xC00, -64, 192),
    ]
    path = tmp_path / "hand.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    tables = parse_trace_file(path)
    records = memory_records(tables)
    attribution = attribute_memory(TraceContext(tables))
    assert records.names == ["GPU0"]
    assert peaks(records) == {"GPU0": {"peak_allocated_bytes": 768, "peak_reserved_bytes": 4096}}
    rows = sorted(memory_events(tables, records, attribution, "GPU0"), key=_event_key)
    assert rows == [
        {
            "operator": "aten::zeros (aten::empty)",
            "size_bytes": 512,
            "alloc_time_us": 15.0,
            "release_time_us": 250.0,
            "duration_us": 235.0,
        },
        {
            "operator": "aten::add",
            "size_bytes": 256,
            "alloc_time_us": 210.0,
            "release_time_us": None,
            "duration_us": None,
        },
        {
            "operator": "<unknown>",
            "size_bytes": 64,
            "alloc_time_us": None,
            "release_time_us": 400.0,
            "duration_us": None,
        },
    ]
    stats = {row["operator"]: row for row in memory_statistics(tables, records, attribution)["GPU0"]}
    assert stats["aten::empty"] == {
        "operator": "aten::empty",
        "calls": 1,
        "size_increase_bytes": 512,
        "self_size_increase_bytes": 512,
        "allocation_count": 1,
        "self_allocation_count": 1,
        "allocation_size_bytes": 512,
        "self_allocation_size_bytes": 512,
    }
    assert stats["aten::zeros"]["self_size_increase_bytes"] == 0 and stats["aten::zeros"]["size_increase_bytes"] == 512
    assert stats["aten::add"]["self_size_increase_bytes"] == 256 - 512  # its own allocation and the release
    assert stats["aten::add"]["self_allocation_size_bytes"] == 256 and stats["aten::add"]["allocation_count"] == 1
    # a window around aten::add only: aten::zeros and aten::empty drop out
    window = memory_statistics(tables, records, attribution, start_us=200.0, end_us=300.0)
    assert sorted(r["operator"] for r in window["GPU0"]) == ["aten::add"]
    # the release of A is in the window, its allocation is not: an unpaired release, named after its allocation
    assert [r["operator"] for r in memory_events(tables, records, attribution, "GPU0", 200.0, 300.0)] == [
        "aten::add",
        "aten::zeros (aten::empty)",
    ]
    drawn = curve(records, "GPU0")
    assert drawn["curve"] == [[15.0, 512, 4096], [210.0, 768, 4096], [250.0, 256, 4096], [400.0, 192, 4096]]


def test_downsampled_curve_keeps_every_peak() -> None:
    _, records, _ = analysed("traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    full = curve(records, "GPU0", width_px=10_000)["curve"]
    small = curve(records, "GPU0", width_px=10)["curve"]
    assert len(small) < len(full)
    assert max(p[1] for p in small) == max(p[1] for p in full) == peaks(records)["GPU0"]["peak_allocated_bytes"]
    assert min(p[1] for p in small) == min(p[1] for p in full)
    assert max(p[2] for p in small) == max(p[2] for p in full)
