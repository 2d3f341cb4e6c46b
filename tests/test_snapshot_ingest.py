"""Allocator snapshots: every real one in the corpus opens with consistent numbers; every documented shape reads."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pytest

from conftest import CORPUS
from profscope.analysis.snapshot_allocations import build_allocations, device_memory
from profscope.ingest import snapshot as snapshot_module
from profscope.ingest.snapshot import SnapshotFormatError, parse_snapshot_file
from profscope.snapshot_tables import ACTION, BLOCK_STATE, SnapshotTables

SNAPSHOTS = sorted(str(p.relative_to(CORPUS)) for p in (CORPUS / "memory-snapshots").rglob("*.pickle"))


def test_the_corpus_has_its_snapshots() -> None:
    # tests/corpus carries the two Apache-2.0 snapshots (with and without history); a larger corpus may have more
    assert {
        "memory-snapshots/ZidongLiu_DeComFL/memory.pickle",
        "memory-snapshots/ZijianDu_Attention/memory.pickle",
    } <= set(SNAPSHOTS)


def read(path: Path | bytes) -> SnapshotTables:
    if isinstance(path, bytes):
        tables = snapshot_module.parse_snapshot(io.BytesIO(path), max_decoded_bytes=1 << 30)
    else:
        tables = parse_snapshot_file(path)
    tables.columns["allocations"] = build_allocations(tables)
    return tables


def replay_like_memory_viz(snapshot: dict, device: int) -> tuple[int, int]:
    """An independent replay of ``process_alloc_data``: (peak, end) allocated bytes."""
    live: dict[int, int] = {}
    initially = 0
    level, peak = 0, 0
    deltas = []
    for entry in snapshot["device_traces"][device]:
        if entry["action"] == "alloc":
            live[entry["addr"]] = entry["size"]
            deltas.append(entry["size"])
        elif entry["action"] in ("free_completed", "free"):
            if entry["addr"] in live:
                deltas.append(-live.pop(entry["addr"]))
            else:
                initially += entry["size"]
                deltas.append(-entry["size"])
    for segment in snapshot["segments"]:
        if segment["device"] != device:
            continue
        for block in segment["blocks"]:
            if block["state"] == "active_allocated" and block["address"] not in live:
                initially += block["requested_size"]
    level = peak = initially
    for delta in deltas:
        level += delta
        peak = max(peak, level)
    return peak, level


@pytest.mark.parametrize("relative", SNAPSHOTS)
def test_real_snapshot_numbers_agree(relative: str) -> None:
    path = CORPUS / relative
    with open(path, "rb") as f:  # the corpus is trusted: the plain unpickler gives the reference objects
        raw = pickle.load(f)
    tables = read(path)
    blocks, segments = tables.table("blocks"), tables.table("segments")
    assert tables.row_count("blocks") == sum(len(s["blocks"]) for s in raw["segments"])
    assert tables.row_count("entries") == sum(len(t) for t in raw["device_traces"])
    for device in tables.meta["devices"]:
        memory = device_memory(tables, device)
        peak, end = replay_like_memory_viz(raw, device)
        assert memory.peak_allocated == peak
        assert memory.end_allocated == end
        active = (np.asarray(blocks["state"]) == BLOCK_STATE["active_allocated"]) & (
            np.asarray(segments["device"])[np.asarray(blocks["segment"])] == device
        )
        # what the replay ends with is exactly what the allocator says is allocated
        assert memory.end_allocated == int(np.asarray(blocks["requested_size"])[active].sum())
        assert memory.peak_allocated == max(memory.initial_allocated, int(memory.allocated.max(initial=0)))
        reserved_at_end = sum(s["total_size"] for s in raw["segments"] if s["device"] == device)
        if len(memory.reserved):
            assert memory.reserved[-1] == reserved_at_end


def test_segments_only_snapshot_is_all_initial_allocations() -> None:
    tables = read(CORPUS / "memory-snapshots/ZijianDu_Attention/memory.pickle")
    assert tables.row_count("entries") == 0
    allocations = tables.table("allocations")
    assert tables.row_count("allocations") == 2524 and np.all(allocations["initial"] == 1)
    assert device_memory(tables, 0).peak_allocated == 8_521_811_504


def test_windows_paths_and_frames_are_kept() -> None:
    tables = read(CORPUS / "memory-snapshots/ZidongLiu_DeComFL/memory.pickle")
    stack = int(tables.table("entries")["stack"][0])
    frames = [tables.frame(int(r)) for r in tables.stack_frame_rows(stack)]
    assert frames[0]["filename"].startswith("C:\\research\\DeComFL\\.venv\\lib\\site-packages\\torch")
    assert frames[0] == {"filename": frames[0]["filename"], "line": 1357, "name": "convert"}


def test_decoding_in_sweeps_gives_the_same_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries turned into columns (and emptied) while the unpickler runs: nothing lost or changed."""
    path = CORPUS / "memory-snapshots/ZidongLiu_DeComFL/memory.pickle"
    whole = parse_snapshot_file(path)
    monkeypatch.setattr(snapshot_module, "SWEEP_EVERY_BYTES", 64 << 10)
    swept = parse_snapshot_file(path)
    for table, columns in whole.columns.items():
        for column, values in columns.items():
            assert np.array_equal(values, swept.columns[table][column]), (table, column)
    assert whole.strings.strings == swept.strings.strings


# ---- shapes the corpus does not have, written from the documented format (anchors.md §3.2) ------------
FRAME = {"filename": "train.py", "line": 10, "name": "step"}


def block(address: int, size: int, state: str = "active_allocated", **extra) -> dict:
    return {"address": address, "size": size, "requested_size": size, "state": state, "frames": [FRAME], **extra}


def segment(device: int, address: int, blocks: list[dict], **extra) -> dict:
    total = sum(b["size"] for b in blocks)
    return {
        "device": device,
        "address": address,
        "total_size": total,
        "stream": 0,
        "segment_type": "large",
        "allocated_size": 0,
        "active_size": 0,
        "requested_size": 0,
        "blocks": blocks,
        **extra,
    }


def entry(action: str, addr: int, size: int, time_us: int | None = None, **extra) -> dict:
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "frames": [FRAME], **extra}
    if time_us is not None:
        e["time_us"] = time_us
    return e


def test_oldest_shape_a_bare_list_of_segments_with_block_history() -> None:
    legacy = [
        {
            "device": 0,
            "address": 4096,
            "total_size": 3072,
            "stream": 0,
            "segment_type": "small",
            "allocated_size": 1024,
            "active_size": 1024,
            "blocks": [
                {
                    "size": 1024,
                    "state": "active_allocated",
                    "history": [{"addr": 4096, "real_size": 1000, "frames": [FRAME]}],
                },
                {"size": 2048, "state": "inactive"},
            ],
        }
    ]
    tables = read(pickle.dumps(legacy, protocol=2))
    assert tables.meta["shape"] == "segments list"
    assert tables.table("blocks")["address"].tolist() == [4096, 5120]  # addresses from the segment's layout
    assert tables.table("blocks")["requested_size"].tolist() == [1000, 0]
    assert device_memory(tables, 0).end_allocated == 1000


def test_entries_without_time_several_devices_expandable_segments_and_oom() -> None:
    snapshot = {
        "segments": [
            segment(0, 1 << 20, [block(1 << 20, 512), block((1 << 20) + 512, 512, "inactive")], is_expandable=True),
            segment(1, 1 << 30, [block(1 << 30, 256)]),
        ],
        "device_traces": [
            [
                entry("segment_map", 1 << 20, 1024),
                entry("alloc", 1 << 20, 512),
                entry("alloc", (1 << 20) + 512, 512),
                entry("free_requested", (1 << 20) + 512, 512),
                entry("free_completed", (1 << 20) + 512, 512),
                {"action": "oom", "size": 4096, "device_free": 100, "stream": 0, "frames": [FRAME]},
            ],
            [entry("free_completed", 7 << 30, 64), entry("alloc", 1 << 30, 256)],
        ],
        "allocator_settings": {"expandable_segments": True, "roundup_power2_divisions": {"1": 0}},
    }
    tables = read(pickle.dumps(snapshot, protocol=4))
    assert tables.meta["devices"] == [0, 1]
    assert not tables.meta["has_time"]
    assert tables.meta["allocator_settings"]["expandable_segments"] is True
    entries = tables.table("entries")
    assert entries["action"].tolist()[:6] == [
        ACTION[a] for a in ("segment_map", "alloc", "alloc", "free_requested", "free_completed", "oom")
    ]
    assert entries["device_free"][5] == 100 and entries["size"][5] == 4096
    zero, one = device_memory(tables, 0), device_memory(tables, 1)
    assert zero.allocated.tolist() == [0, 512, 1024, 1024, 512, 512]
    assert zero.reserved.tolist() == [1024, 1024, 1024, 1024, 1024, 1024] and zero.initial_reserved == 0
    # device 1: a free without its alloc was allocated before the trace began
    assert one.initial_allocated == 64 and one.allocated.tolist() == [0, 256] and one.peak_allocated == 256


def test_not_a_snapshot_is_refused_with_the_reason() -> None:
    with pytest.raises(SnapshotFormatError, match="expected a dict with 'segments'"):
        read(pickle.dumps({"model": [1, 2, 3]}))
