"""The C decoder of a piece's complete events (``_native_events.c``), used when it was compiled.

A piece of a big trace is mostly complete ("X") events; msgspec decoding them into ``Event`` objects
and Python reading each field back into columns cost ~4-5 µs per event. The extension reads the
piece's bytes once and writes the same columns (~0.2 µs per event), flows and memory events included, leaving the other
events (metadata, counters, instants, ``B``/``E``) and collective args, as JSON, to the Python parser. It gives up
(returns None) on anything it does not handle exactly as the Python parser would, which then decodes
the whole piece: the Python parser stays the reference, and a test checks both give identical tables.

Installs without a C compiler have no extension and parse in pure Python (``DECODER == "python"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    from profscope.ingest import _native_events
except ImportError:  # built without a compiler (the extension is optional): the Python parser does it all
    _native_events = None

DECODER = "python" if _native_events is None else "native"


def _row_dtype(fields: list[tuple[str, str, int]], size: int) -> np.dtype:
    """The numpy view of the extension's C struct: (name, type, offset) of each field, and its size."""
    return np.dtype(
        {
            "names": [name for name, _, _ in fields],
            "formats": [fmt for _, fmt, _ in fields],
            "offsets": [offset for _, _, offset in fields],
            "itemsize": size,
        }
    )


if _native_events is not None:
    ROW_DTYPE = _row_dtype(_native_events.ROW_FIELDS, _native_events.ROW_SIZE)
    FLOW_DTYPE = _row_dtype(_native_events.FLOW_FIELDS, _native_events.FLOW_SIZE)
    MEMORY_DTYPE = _row_dtype(_native_events.MEMORY_FIELDS, _native_events.MEMORY_SIZE)


@dataclass
class NativePiece:
    """A piece decoded by the extension. Ids in ``rows`` index this piece's own tables (first seen first)."""

    rows: np.ndarray  # one structured row per complete event, fields as in ROW_DTYPE
    flows: np.ndarray  # one structured row per flow event (ph s / t / f), fields as in FLOW_DTYPE
    memory: np.ndarray  # one structured row per "[memory]" instant, fields as in MEMORY_DTYPE
    others: bytes  # the piece's other events, as a JSON array (b"" if none)
    other_count: int
    names: list[str]
    cats: list[str]
    tracks: list[tuple[Any, Any]]  # (pid, tid) as msgspec decodes them: int or str
    call_stacks: list[str]
    raws: list[bytes]  # exact JSON text of Input Dims / Input type / grid / block values
    collectives: list[tuple[int, bytes]]  # (row, args JSON) of events with collective args
    flow_cats: list[str]  # the flows' own tables: the Python parser interns them before the others'
    flow_tracks: list[tuple[Any, Any]]
    memory_tracks: list[tuple[Any, Any]]  # memory events' tracks come first of all in the Python parser


def decode(piece: bytes) -> NativePiece | None:
    """The piece's columns, or None when the extension is absent or the piece needs the Python parser."""
    if _native_events is None:
        return None
    result = _native_events.decode(piece)
    if result is None:
        return None
    rows, row_count, memory, memory_count, flows, flow_count, others, other_count, *tables = result
    names, cats, tracks, call_stacks, raws, collectives, flow_cats, flow_tracks, memory_tracks = tables
    return NativePiece(
        rows=np.frombuffer(rows, dtype=ROW_DTYPE, count=row_count),
        flows=np.frombuffer(flows, dtype=FLOW_DTYPE, count=flow_count),
        memory=np.frombuffer(memory, dtype=MEMORY_DTYPE, count=memory_count),
        others=others,
        other_count=other_count,
        names=names,
        cats=cats,
        tracks=tracks,
        call_stacks=call_stacks,
        raws=raws,
        collectives=collectives,
        flow_cats=flow_cats,
        flow_tracks=flow_tracks,
        memory_tracks=memory_tracks,
    )
