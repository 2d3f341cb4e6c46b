"""Hostile InternLM memory.log files: refused with the line and what was expected, or read as decided.

``tests/test_memory_log.py`` covers logs cut while written and plain garbage; here: numbers too big
for 64-bit byte counts, NUL and non-UTF-8 bytes, Windows line ends, 10-million-character lines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .hostile_files import MEMORY_LOG
from .ingesting import ingest_in_process


def ingest(tmp_path: Path, text: str | bytes) -> dict:
    data = text.encode() if isinstance(text, str) else text
    return ingest_in_process(tmp_path, "memory.log", data, kind="memory_log")


@pytest.mark.parametrize(
    ("hostile", "error"),
    [
        (MEMORY_LOG.replace("10.00 MB", "9" * 400 + " MB"), "line 4: expected total_memory: X MB, got 'total_memory"),
        (MEMORY_LOG.replace("layer_mem: 1.00", "layer_mem: " + "9" * 13), "line 9: expected '<kind>_layout:' or"),
        (MEMORY_LOG.replace("time: 0.5", "time: 1e400"), "line 2: expected time: <seconds>, got 'time: 1e400'"),
        (MEMORY_LOG.replace("time: 0.5", "time: nan"), "line 2: expected time: <seconds>, got 'time: nan'"),
        (MEMORY_LOG.replace("time", "ti\0me"), "line 2: expected time: <seconds>, got 'ti\\x00me: 0.5'"),
        (MEMORY_LOG.encode().replace(b"0.5", b"\xff"), "not text (byte 20 is not UTF-8)"),
        (MEMORY_LOG.replace("\n", "\r\n"), "line 1: expected 'Memory State:' (an InternLM SimpleMemoryProfiler"),
        (MEMORY_LOG.replace("params_layout", "evil_layout"), "line 7: expected a layout of params, grads"),
    ],
)
def test_hostile_memory_logs_are_refused_with_the_line(tmp_path: Path, hostile: str | bytes, error: str) -> None:
    assert ingest(tmp_path, hostile)["error"].startswith(f"memory.log: {error}")


def test_the_largest_size_that_fits_64_bits_is_read(tmp_path: Path) -> None:
    summary = ingest(tmp_path, MEMORY_LOG.replace("10.00 MB", "999999999999.99 MB"))
    assert summary["points"] == 1


def test_ten_million_character_lines_are_read_or_left_out(tmp_path: Path) -> None:
    long_path = MEMORY_LOG.replace("param_mem.layer1", "p" * 10_000_000)
    assert ingest(tmp_path, long_path)["layouts"] == ["params"]
    cut_while_written = MEMORY_LOG + "Memory State:\n" + "x" * 10_000_000
    summary = ingest(tmp_path, cut_while_written)
    assert summary["points"] == 1
    assert summary["warnings"] == ["the last memory state (line 11) was cut before its summary was written: left out"]
