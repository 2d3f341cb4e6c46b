"""Read InternLM's ``memory.log`` (``internlm/utils/simple_memory_profiler.py``, docs/definitions.md §8).

``SimpleMemoryProfiler`` appends one block per ``point()`` (at start, after each forward and backward
of a model chunk, at each optimizer step)::

    Memory State:
    time: <seconds since the profiler started>
    ---summary---
    total_memory: X MB
    params_memory: X MB, grads_memory: X MB, os_params_memory: X MB, os_state_memory: X MB, activation_memory: X MB
    ---Layout---                          (only when a layout was asked for)
    params_layout:
    layer: param_mem, layer_mem: X MB, total_mem: Y MB
    layer: param_mem.layer1, layer_mem: X MB, total_mem: Y MB
    ...                                   (grads_layout:, os_params_layout:, os_state_layout:, activation_base_layout:)
    <an empty line>

Sizes are tensor sizes (``element_size() * nelement()``), printed in MiB with two decimals: they are
read back as ``round(X * 2**20)`` bytes (within 5 KiB of the true size). A layout lists each tree
node (dotted module path under a root: ``param_mem``, ``grad_mem``, ``os_params_mem``,
``os_state_mem``, ``activations_<chunk>``) with its own bytes and its subtree's; only the last layout
of each kind is kept (the profiler's own sunbursts are drawn from the final state).

The log is appended while training runs, so its last block may be cut anywhere: a last block whose
summary is complete is kept (without a layout it had not finished), a shorter one is left out, and
both say so in ``warnings``. Anything else that is not this format is refused with the line number.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from profscope import parser_versions
from profscope.ingest.bounded_read import chunks_within

MEMORY_LOG_PARSER_VERSION = parser_versions.MEMORY_LOG  # bump it there when what a log is read into changes
MIB = 1 << 20

CATEGORIES = ("params", "grads", "os_params", "os_state", "activation")
LAYOUTS = ("params", "grads", "os_params", "os_state", "activation_base")
BLOCK_START = "Memory State:"

_NUMBER = r"-?\d{1,12}(?:\.\d+)?"  # up to 10**12 MiB: more would overflow the 64-bit byte counts
_TIME = re.compile(r"^time: (?P<seconds>\S+)$")
_TOTAL = re.compile(rf"^total_memory: (?P<total>{_NUMBER}) MB$")
_CATEGORIES = re.compile("^" + ", ".join(rf"{name}_memory: (?P<{name}>{_NUMBER}) MB" for name in CATEGORIES) + "$")
_SECTION = re.compile(r"^(?P<name>\w+)_layout:$")
_LAYER = re.compile(rf"^layer: (?P<path>.+), layer_mem: (?P<own>{_NUMBER}) MB, total_mem: (?P<total>{_NUMBER}) MB$")


class MemoryLogFormatError(Exception):
    """The file is not an InternLM memory.log profscope can read (the message says where and why)."""


def mib_to_bytes(text: str) -> int:
    return round(float(text) * MIB)


@dataclass
class Layout:
    """One layout section of one block: every node of the tree, in the order the profiler dumped them."""

    point: int  # index of the block (point) it was written with
    paths: list[str] = field(default_factory=list)
    own_bytes: list[int] = field(default_factory=list)
    total_bytes: list[int] = field(default_factory=list)


@dataclass
class MemoryLog:
    time_s: list[float] = field(default_factory=list)
    total_bytes: list[int] = field(default_factory=list)
    category_bytes: dict[str, list[int]] = field(default_factory=lambda: {name: [] for name in CATEGORIES})
    layouts: dict[str, Layout] = field(default_factory=dict)  # the last of each kind ("params", ...)
    warnings: list[str] = field(default_factory=list)

    @property
    def points(self) -> int:
        return len(self.time_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "time_s": self.time_s,
            "total_bytes": self.total_bytes,
            "category_bytes": self.category_bytes,
            "layouts": {name: layout.__dict__ for name, layout in self.layouts.items()},
            "warnings": self.warnings,
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> MemoryLog:
        return cls(
            time_s=body["time_s"],
            total_bytes=body["total_bytes"],
            category_bytes=body["category_bytes"],
            layouts={name: Layout(**layout) for name, layout in body["layouts"].items()},
            warnings=body["warnings"],
        )


def parse_memory_log(raw: IO[bytes], max_bytes: int, on_progress: Callable[[int], None] | None = None) -> MemoryLog:
    return parse_memory_log_text(_read_text(raw, max_bytes, on_progress))


def _read_text(raw: IO[bytes], max_bytes: int, on_progress: Callable[[int], None] | None) -> str:
    def too_large() -> MemoryLogFormatError:
        return MemoryLogFormatError(f"larger than {max_bytes:,} bytes (PROFSCOPE_MAX_TRACE_BYTES): not read")

    data = b"".join(chunks_within(raw, max_bytes, on_progress, too_large))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemoryLogFormatError(
            f"not text (byte {exc.start} is not UTF-8): an InternLM memory.log is the text SimpleMemoryProfiler writes"
        ) from None


def parse_memory_log_text(text: str) -> MemoryLog:
    log = MemoryLog()
    lines = text.split("\n")
    cut_line = lines.pop()  # "" when the text ends with a newline; else a line cut while being written
    starts = [number for number, line in enumerate(lines) if line == BLOCK_START]
    first = starts[0] if starts else len(lines)
    for number, line in enumerate(lines[:first]):
        if line.strip():
            raise _unexpected(number, line, f"{BLOCK_START!r} (an InternLM SimpleMemoryProfiler memory.log)")
    if cut_line and not starts and not BLOCK_START.startswith(cut_line):
        raise _unexpected(len(lines), cut_line, f"{BLOCK_START!r} (an InternLM SimpleMemoryProfiler memory.log)")
    for index, start in enumerate(starts):
        last = index == len(starts) - 1
        end = starts[index + 1] if not last else len(lines)
        _read_block(log, lines, start + 1, end, complete=not last or (not cut_line and _ends_blank(lines, end)))
    if not starts:
        log.warnings.append("no memory state was written yet (the log is empty)")
    return log


def _ends_blank(lines: list[str], end: int) -> bool:
    return end > 0 and lines[end - 1] == ""


def _read_block(log: MemoryLog, lines: list[str], first: int, end: int, complete: bool) -> None:
    """Lines ``first .. end - 1`` after a ``Memory State:`` line; ``complete``: the block was written whole.

    (``first``, a 0-based index, is also the 1-based number of the ``Memory State:`` line, as warnings show it.)
    """
    expected = [(_TIME, "time: <seconds>"), (None, "---summary---"), (_TOTAL, "total_memory: X MB")]
    expected.append((_CATEGORIES, "params_memory: X MB, grads_memory: X MB, ... activation_memory: X MB"))
    found = []
    for offset, (pattern, what) in enumerate(expected):
        number = first + offset
        if number >= end:
            if complete:
                raise _unexpected(number, "", what)
            log.warnings.append(
                f"the last memory state (line {first}) was cut before its summary was written: left out"
            )
            return
        line = lines[number]
        match = pattern.match(line) if pattern is not None else (line == what or None)
        if match is None or (pattern is _TIME and not math.isfinite(_seconds(match.group("seconds")))):
            raise _unexpected(number, line, what)
        found.append(match)
    log.time_s.append(_seconds(found[0].group("seconds")))
    log.total_bytes.append(mib_to_bytes(found[2].group("total")))
    for name in CATEGORIES:
        log.category_bytes[name].append(mib_to_bytes(found[3].group(name)))
    layouts = _read_layouts(lines, first + len(expected), end, log.points - 1)
    if complete:
        log.layouts.update(layouts)
    else:
        log.warnings.append(
            f"the last memory state (line {first}) was not finished when read: its summary is kept, "
            "any layout it was writing is left out"
        )


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _read_layouts(lines: list[str], number: int, end: int, point: int) -> dict[str, Layout]:
    """The layout sections of a block, up to the empty line that ends it (anything after must be blank)."""
    layouts: dict[str, Layout] = {}
    if number < end and lines[number] == "---Layout---":
        number += 1
        current: Layout | None = None
        while number < end and lines[number] != "":
            line = lines[number]
            section = _SECTION.match(line)
            layer = _LAYER.match(line) if section is None else None
            if section is not None:
                name = section.group("name")
                if name not in LAYOUTS:
                    raise _unexpected(number, line, f"a layout of {', '.join(LAYOUTS)}")
                current = layouts[name] = Layout(point=point)
            elif layer is not None and current is not None:
                current.paths.append(layer.group("path"))
                current.own_bytes.append(mib_to_bytes(layer.group("own")))
                current.total_bytes.append(mib_to_bytes(layer.group("total")))
            else:
                raise _unexpected(number, line, "'<kind>_layout:' or 'layer: <path>, layer_mem: X MB, total_mem: Y MB'")
            number += 1
    for rest in range(number, end):
        if lines[rest].strip():
            raise _unexpected(rest, lines[rest], f"an empty line, then {BLOCK_START!r}")
    return layouts


def _unexpected(number: int, line: str, expected: str) -> MemoryLogFormatError:
    shown = repr(line[:80]) if line else "the end of the file"
    return MemoryLogFormatError(f"line {number + 1}: expected {expected}, got {shown}")
