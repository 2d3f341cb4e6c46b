"""Read back what PaddlePaddle's ``Profiler.summary()`` printed (tests/data/paddle/*.summary_*.txt).

The printout is a set of fixed-width tables under titles like ``----Overview Summary----``; rows are
cells separated by two or more spaces, nested rows indented by two spaces per level, and the
statistics columns read ``Total / Avg / Max / Min / Ratio(%)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_TITLE = re.compile(r"^-{3,}(?P<title>[A-Za-z][^-].*?[^-])-{3,}\s*$")
_SEPARATOR = re.compile(r"^[-\s]+$")
_CELLS = re.compile(r"\s{2,}")
_STAT_HEADERS = ("Name", "Event Type", "Device", "")


@dataclass
class Row:
    name: str
    depth: int  # 0, or 1 / 2 for rows nested under the row above
    cells: list[str]


@dataclass
class Section:
    title: str
    time_unit: str | None = None
    lines: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


def read_printout(path: Path) -> dict[str, Section]:
    """Sections by title; the Operator / UserDefined tables keep their "All threads merged" rows only."""
    sections: dict[str, Section] = {}
    current: Section | None = None
    for line in path.read_text().splitlines():
        title = _TITLE.match(line)
        if title and not title.group("title").startswith("Thread:"):
            current = sections.setdefault(title.group("title").strip(), Section(title.group("title").strip()))
            continue
        if current is not None:
            current.lines.append(line)
    for section in sections.values():
        _read_rows(section)
    return sections


def _read_rows(section: Section) -> None:
    in_notes = False
    for line in section.lines:
        if line.startswith("Time unit:"):
            section.time_unit = line.split(":", 1)[1].strip()
            continue
        if line.startswith("Note:"):
            in_notes = True
        if in_notes or not line.strip() or _SEPARATOR.match(line) or line.startswith("Peak "):
            continue
        if "Thread: " in line:
            continue
        cells = _CELLS.split(line.strip())
        if cells[0] in _STAT_HEADERS or line.startswith(" " * 20):  # headers, and the GPU header of Overview
            continue
        indent = len(line) - len(line.lstrip(" "))
        section.rows.append(Row(name=cells[0], depth=indent // 2, cells=cells[1:]))


def peaks(section: Section) -> dict[str, int]:
    found = {}
    for line in section.lines:
        match = re.match(r"^Peak (Allocated|Reserved) Memory: (\d+)", line)
        if match:
            found[match.group(1).lower()] = int(match.group(2))
    return found


def statistics(cell: str) -> list[float | None]:
    """``"1.38 / 0.46 / 0.56 / 0.40 / 38.06"`` -> numbers; ``-`` (no value) is None."""
    return [None if part.strip() == "-" else float(part) for part in cell.split("/")]


def name_matches(printed: str, name: str) -> bool:
    """Paddle cuts long names to its column width and ends them with ``...``."""
    return printed == name or (printed.endswith("...") and name.startswith(printed[:-3]))
