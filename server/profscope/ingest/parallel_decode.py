"""Decode a big trace on two cores: a second process builds the tables of every other piece.

The reader (decompression, cutting) stays in the parsing process. Once a trace has proved big
(``START_AFTER_PIECES`` pieces), two pieces in three are only checked to be well-formed JSON here —
which is what tells the reader its cut was right — and sent to a helper process that decodes it into
its own ``TableBuilder``. At the end the helper's partial tables are merged after this process's
rows (strings, tracks and row numbers renumbered), and the usual sort by time makes the order of
the pieces irrelevant.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import msgspec

from profscope.ingest.json_stream import TraceFormatError

START_AFTER_PIECES = 4  # small traces never pay for starting a process
# This process also inflates, cuts and checks every piece, so it decodes one piece in three and
# the helper two: measured on 1 GB traces, that keeps both cores busy to the end.
HERE_EVERY = 3
_VALIDATOR = msgspec.json.Decoder(list[msgspec.Raw])
_READY = b"ready"


@dataclass(frozen=True)
class PieceDecoder:
    """How a format decodes its pieces (module-level functions: the helper process receives them by name).

    ``decode(piece, native)`` returns a decoded piece; ``new_builder()`` a table builder with ``partial()``;
    ``add(builder, decoded, piece_index)`` adds a decoded piece to a builder."""

    decode: Callable[[bytes, bool], Any]
    new_builder: Callable[[], Any]
    add: Callable[[Any, Any, int], None]


class PieceRouter:
    """Decides per piece: decode here, or send to the helper. ``route`` returns (piece index, decoded or None)."""

    def __init__(self, enabled: bool, decoder: PieceDecoder, native: bool = True) -> None:
        self.enabled = enabled
        self.decoder = decoder
        self.native = native
        self.pieces = 0
        self._connection: Connection | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._ready = False
        self.sent = 0

    def route(self, piece: bytes) -> Any:
        if self.enabled and self.pieces == START_AFTER_PIECES and self._process is None:
            self._start()
        index = self.pieces
        if self._helper_ready() and index % HERE_EVERY != 0:
            _VALIDATOR.decode(piece)  # raises for a wrong cut, like a full decode would
            if not piece.isascii():  # Raw does not check strings: the reader replaces bad bytes on this error
                piece.decode("utf-8")
            try:
                self._connection.send_bytes(index.to_bytes(8, "little"))
                self._connection.send_bytes(piece)
            except OSError:
                raise TraceFormatError("the process decoding part of this trace died (out of memory?)") from None
            self.sent += 1
            decoded = None
        else:
            decoded = self.decoder.decode(piece, self.native)
        self.pieces += 1
        return index, decoded

    def _helper_ready(self) -> bool:
        """True once the helper said it is ready; a helper that could not start is given up silently."""
        if self._connection is None:
            return False
        if self._ready:
            return True
        if self._process is not None and not self._process.is_alive():
            self._give_up()
            return False
        if self._connection.poll():
            try:
                self._ready = self._connection.recv_bytes() == _READY
            except (EOFError, OSError):
                self._ready = False
            if not self._ready:
                self._give_up()
        return self._ready

    def _give_up(self) -> None:
        self.close()
        self._connection, self._process, self.enabled = None, None, False

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        process = context.Process(
            target=_decode_pieces, args=(theirs, self.decoder, self.native), name="profscope-second-core", daemon=True
        )
        try:
            process.start()
        except (OSError, AssertionError):  # no process can be started here: carry on with one core
            self.enabled = False
            return
        theirs.close()
        self._connection, self._process = ours, process

    def finish(self) -> Iterator[dict[str, Any]]:
        """The helper's partial tables (nothing if it never started)."""
        if self._connection is None or not self.sent:
            return
        self._connection.send_bytes(b"")
        try:
            result = self._connection.recv()
        except EOFError:
            raise TraceFormatError("the process decoding half of this trace died (out of memory?)") from None
        if result.get("out_of_memory"):  # the worker's memory cap applies to its helper too: same answer
            raise MemoryError(result["error"])
        if "error" in result:
            raise TraceFormatError(result["error"])
        yield result

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        if self._process is not None:
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()


def _decode_pieces(connection: Connection, decoder: PieceDecoder, native: bool) -> None:
    """The helper: decode pieces until the empty message, then send back the partial tables."""
    gc.disable()  # as in the parsing process: millions of short-lived objects, no cycles
    builder = decoder.new_builder()
    try:
        connection.send_bytes(_READY)
        while index := connection.recv_bytes():
            decoder.add(builder, decoder.decode(connection.recv_bytes(), native), int.from_bytes(index, "little"))
        connection.send(builder.partial())
    except (EOFError, BrokenPipeError):  # the parsing process finished or went away
        return
    except MemoryError:
        builder = None  # frees the partial tables, so that the answer can be sent
        with contextlib.suppress(OSError):
            connection.send({"error": "the second parser process ran out of memory", "out_of_memory": True})
    except Exception as exc:
        message = (
            str(exc)
            if isinstance(exc, TraceFormatError)
            else (f"internal error: {''.join(traceback.format_exception_only(type(exc), exc)).strip()}")
        )
        with contextlib.suppress(OSError):
            connection.send({"error": message})
