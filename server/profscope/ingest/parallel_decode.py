"""Decode a big trace on two cores: a second process builds the tables of most pieces.

The reader (decompression, cutting) stays in the parsing process. Once a trace has proved big
(``START_AFTER_PIECES`` pieces), two pieces in three are sent to a helper process that decodes them
into its own ``TableBuilder``. At the end the helper's partial tables are merged after this process's
rows (strings, tracks and row numbers renumbered), and the usual sort by time makes the order of
the pieces irrelevant.

The reader does not check the pieces it sends (checking cost it as much as decoding them): it
speculates that its cut (after a ``}`` followed by ``, {``) is right. A wrong cut — ``}, {`` inside a
string or inside an array of objects — leaves that piece unparsable, so the helper's decode fails on
it; any piece failing there (malformed or hostile bytes alike) raises ``SpeculationFailed``, and the
trace is read again on the certain, one-process path, which gives the same tables or the same error
as if no piece had ever been sent.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import multiprocessing
import pickle
import queue
import select
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from profscope.ingest.json_stream import TraceFormatError, decode_replacing_non_utf8, failed_on_utf8
from profscope.ingest.malloc_tuning import keep_heap_for_pieces, objects_frozen_for_fork, trim_freed_heap

START_AFTER_PIECES = 4  # small traces never pay for starting a process
# This process also inflates, cuts and sends every piece, merges and sorts at the end: it decodes
# one piece in HERE_EVERY and the helper the others (1 GB traces: 4 left the helper last, 2 this process).
HERE_EVERY = 3
# A forked helper reads its pieces from shared memory: the reader copies a piece into a free slot and sends
# only where it is (sending every piece through a socket, ~580 MB of a 1 GB trace, copied each twice more:
# the parse's CPU was 5.55 s with it, 5.3 s without). A piece too big for a slot goes through the socket;
# with every slot still taken, the reader decodes the piece itself rather than wait.
RING_SLOTS = 3
SLOT_BYTES = 16 << 20  # pieces are ~8 MB (json_stream.CHUNK_BYTES) and a little more
_FREED = "freed"
_READY = "ready"
_SYNC = b"sync"  # asks the helper to answer once it has decoded every piece sent before
_SYNCED = "synced"
TRIM_EVERY_BYTES = 16 << 20  # Channel.send_pickled: the sent arrays' heap pages go back to the kernel this often
_DIED = "the process decoding part of this trace died (out of memory?)"


class SpeculationFailed(Exception):
    """A piece sent unchecked to the helper did not decode: read the trace again, on one process.

    Not a ``TraceFormatError``: the file may be fine (a cut fell inside a string), so no caller
    may record it as the file's error."""


def pickled(message: Any) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """``message`` pickled (protocol 5), and the buffers of its arrays, out of band (``Channel.send_pickled``)."""
    buffers: list[pickle.PickleBuffer] = []
    return pickle.dumps(message, protocol=5, buffer_callback=buffers.append), buffers


class Channel:
    """One end of a socket pair carrying length-prefixed messages: pieces, and pickled answers.

    multiprocessing's Connection reads a big message in socket-sized reads, each allocating a bytes
    of the whole remaining size, then copies it twice more (0.8 s for the helper's 110 MB of partial
    tables from a 1 GB trace). Here a message is received straight into one buffer — the helper's
    pieces into one reused buffer, and the arrays of a pickled answer (protocol 5, out of band)
    each into its own, which the unpickled arrays then use as they are."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._outbox: queue.Queue[tuple[bytes, ...] | None] | None = None
        self._sender: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"sock": self.sock}  # the helper's end is pickled to start it, before any thread

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["sock"])

    def send_later(self, *messages: bytes) -> None:
        """Send ``messages`` from a thread, after those queued before: the reader goes on cutting and
        decoding its own pieces while the helper is still reading the last one (a blocking send kept it
        waiting 1.0-1.8 s of a 1 GB trace). At most two are queued: the memory stays bounded."""
        if self._outbox is None:
            self._outbox = queue.Queue(maxsize=2)
            self._sender = threading.Thread(target=self._send_queued, name="profscope-piece-sender", daemon=True)
            self._sender.start()
        self._outbox.put(messages)

    def _send_queued(self) -> None:
        failed = False
        while (messages := self._outbox.get()) is not None:
            if failed:
                continue  # drop: the reader learns that the helper is gone from the end of the channel
            try:
                for message in messages:
                    self.send_bytes(message)
            except OSError:
                failed = True

    def send_bytes(self, data: bytes | memoryview) -> None:
        self.sock.sendall(len(data).to_bytes(8, "little"))
        self.sock.sendall(data)

    def recv_bytes(self, into: bytearray | None = None) -> memoryview:
        """The next message, in ``into`` (grown if too small) or in a buffer of its own, not zeroed first: a
        ``bytearray`` is, and the helper's partial tables (~150 MB at 1 GB, in ~3000 buffers) were written twice."""
        size = int.from_bytes(self._receive_exactly(memoryview(bytearray(8))), "little")
        if into is None:
            return self._receive_exactly(memoryview(np.empty(size, dtype=np.uint8)))
        if len(into) < size:
            into.extend(bytes(size - len(into)))
        with memoryview(into) as view:
            return self._receive_exactly(view[:size])

    def send(self, message: Any) -> None:
        self.send_pickled(*pickled(message))

    def send_pickled(self, head: bytes, buffers: list[pickle.PickleBuffer]) -> None:
        """A message as ``pickled`` gives it. ``buffers`` is emptied as they are sent: an array that nothing else
        holds is freed once sent, and the heap pages of those sent are handed back every ``TRIM_EVERY_BYTES`` (the
        helper's partial tables, ~150 MB of chunks under the mapping threshold at 1 GB, otherwise stood whole in
        the helper while the parsing process received its copy: the parse's peak)."""
        self.send_bytes(len(buffers).to_bytes(8, "little") + head)
        buffers.reverse()  # popped from the end: sent in order, and no longer held once sent
        untrimmed = 0
        while buffers:
            buffer = buffers.pop()
            with buffer.raw() as data:
                self.send_bytes(data)
                untrimmed += data.nbytes
            buffer.release()  # its array, if nothing else holds it
            if untrimmed >= TRIM_EVERY_BYTES or (untrimmed and not buffers):
                trim_freed_heap()
                untrimmed = 0

    def recv(self) -> Any:
        head = self.recv_bytes()
        buffers = [self.recv_bytes() for _ in range(int.from_bytes(head[:8], "little"))]
        return pickle.loads(head[8:], buffers=buffers)

    def poll(self, timeout: float = 0.0) -> bool:
        """True if a message (or the end of the channel) is waiting."""
        poller = select.poll()  # not select.select: it cannot watch descriptors above 1023
        poller.register(self.sock, select.POLLIN)
        return bool(poller.poll(timeout * 1000))

    def close(self) -> None:
        if self._sender is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)  # a send blocked on a full socket fails at once
            self._outbox.put(None)
            self._sender.join()
        self.sock.close()

    def _receive_exactly(self, view: memoryview) -> memoryview:
        done = 0
        while done < len(view):
            n = self.sock.recv_into(view[done:])
            if not n:
                raise EOFError("the other process closed the channel")
            done += n
        return view


class PieceRing:
    """Slots of memory shared with a forked helper (made before the fork): the reader writes a piece into a
    free slot, the helper decodes it in place and says when the slot is free again."""

    def __init__(self, slots: int, slot_bytes: int) -> None:
        self.memory = mmap.mmap(-1, slots * slot_bytes)  # anonymous and shared: pages are used as written
        self.slot_bytes = slot_bytes
        self.free = list(range(slots))

    def put(self, piece: bytes | memoryview) -> bytes | None:
        """Write ``piece`` into a free slot; the message that tells the helper where, or None if no slot fits."""
        if not self.free or len(piece) > self.slot_bytes:
            return None
        slot = self.free.pop()
        offset = slot * self.slot_bytes
        self.memory[offset : offset + len(piece)] = piece
        return slot.to_bytes(8, "little") + len(piece).to_bytes(8, "little")

    def view(self, where: bytes) -> memoryview:
        """The piece a ``put`` message points at (the helper's side)."""
        slot, size = int.from_bytes(where[:8], "little"), int.from_bytes(where[8:16], "little")
        offset = slot * self.slot_bytes
        return memoryview(self.memory)[offset : offset + size]

    @staticmethod
    def slot_of(where: bytes) -> int:
        return int.from_bytes(where[:8], "little")

    def close(self) -> None:
        with contextlib.suppress(BufferError):  # a view still held by a failing decode: freed with the process
            self.memory.close()


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
        self._connection: Channel | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._ring: PieceRing | None = None  # a forked helper's shared slots
        self._ready = False
        self.sent = 0
        self._confirmed = 0  # pieces the helper said it decoded (at the last sync)
        self.non_utf8_pieces = 0  # the helper's pieces in which bytes that are not UTF-8 were replaced

    def route(self, piece: bytes, here: bool = False) -> Any:
        if self.enabled and self.pieces >= START_AFTER_PIECES and self._process is None:
            self._start()
        index = self.pieces
        decoded = None
        if not here and self._helper_ready() and index % HERE_EVERY != 0:
            self._check_helper()
            if self._ring is None:
                self._connection.send_later(index.to_bytes(8, "little"), bytes(piece))  # piece: the reader's buffer
                self.sent += 1
            elif (where := self._ring.put(piece)) is not None:
                self._connection.send_later(index.to_bytes(8, "little") + where)
                self.sent += 1
            elif len(piece) > self._ring.slot_bytes:
                self._connection.send_later(index.to_bytes(8, "little"), bytes(piece))
                self.sent += 1
            else:  # the helper still has every slot: this process is the one with time for it
                decoded = self._decode_here(piece)
        else:
            decoded = self._decode_here(piece)
        self.pieces += 1
        return index, decoded

    def route_here(self, piece: bytes) -> Any:
        """``route`` for a piece that must be decoded here (the last: its decode finds where the array ends)."""
        return self.route(piece, here=True)

    def _decode_here(self, piece: bytes) -> Any:
        """A piece that fails here may start where a wrong cut sent to the helper ended: ask the helper
        first, rather than searching for a cut that does not exist."""
        try:
            return self.decoder.decode(piece, self.native)
        except Exception as exc:
            if not failed_on_utf8(exc, piece):  # else the reader replaces the bytes and decodes again: not a cut
                self.check_speculation()
            raise

    def check_speculation(self) -> None:
        """Raise ``SpeculationFailed`` if a piece sent to the helper did not decode (waits for its answer)."""
        if self._connection is None or self.sent == self._confirmed:
            return
        self._connection.send_later(_SYNC)
        while self._receive() != _SYNCED:
            pass
        self._confirmed = self.sent

    def _check_helper(self) -> None:
        """Without waiting: stop speculating as soon as the helper reports a piece that failed."""
        while self._connection.poll():
            self._receive()

    def _receive(self) -> Any:
        try:
            message = self._connection.recv()
        except (EOFError, OSError):
            raise TraceFormatError(_DIED) from None
        if isinstance(message, tuple) and message[0] == _FREED:
            self._ring.free.append(message[1])
            return message
        if isinstance(message, dict):
            if message.get("failed"):
                raise SpeculationFailed(f"piece {message['piece']} did not decode in the second process")
            if message.get("out_of_memory"):  # the worker's memory cap applies to its helper too: same answer
                raise MemoryError(message["error"])
            if "error" in message:
                raise TraceFormatError(message["error"])
        return message

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
                self._ready = self._connection.recv() == _READY
            except (EOFError, OSError):
                self._ready = False
            if not self._ready:
                self._give_up()
        return self._ready

    def _give_up(self) -> None:
        self.close()
        self._connection, self._process, self.enabled = None, None, False

    def start_early(self) -> None:
        """Fork the helper now, before the inflating thread starts: it begins decoding with the first piece
        it is sent, where a helper spawned once the trace proves big (``route``) first spends ~0.5 s of CPU
        starting Python and importing the parser: most of a 200 MB trace's parse. A small trace's helper
        idles and leaves. Off Linux (where forking after numpy's imports is not safe everywhere) or where no
        process can start here: the spawned one, later."""
        if self.enabled and self._process is None and sys.platform.startswith("linux"):
            self._start("fork")

    def _start(self, method: str = "spawn") -> None:
        context = multiprocessing.get_context(method)
        ours, theirs = (Channel(end) for end in socket.socketpair())
        # a forked helper holds a copy of our end too: it closes it first, or it would never see ours close
        inherited = ours if method == "fork" else None
        ring = PieceRing(RING_SLOTS, SLOT_BYTES) if method == "fork" else None
        process = context.Process(
            target=_decode_pieces,
            args=(theirs, self.decoder, self.native, inherited, ring),
            name="profscope-second-core",
            daemon=True,
        )
        try:
            with objects_frozen_for_fork():
                process.start()
        except (OSError, AssertionError):  # no process can be started here: carry on with one core
            self.enabled = False
            if ring is not None:
                ring.close()
            return
        theirs.close()
        self._connection, self._process, self._ring = ours, process, ring

    def finish(self) -> Iterator[dict[str, Any]]:
        """The helper's partial tables (nothing if it never started)."""
        if self._connection is None or not self.sent:
            return
        self._connection.send_later(b"")
        while "partial" not in (result := self._receive()):
            pass
        self.non_utf8_pieces = result["non_utf8_pieces"]
        yield result["partial"]

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        if self._process is not None:
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
        if self._ring is not None:
            self._ring.close()


def _decode_checked(decoder: PieceDecoder, piece: memoryview, native: bool) -> tuple[Any, int]:
    """A piece decoded as the reader would (bytes that are not UTF-8 replaced), and 1 if some were."""
    decoded, replaced = decode_replacing_non_utf8(lambda data: decoder.decode(data, native), piece)
    return decoded, int(replaced)


def _decode_pieces(
    connection: Channel,
    decoder: PieceDecoder,
    native: bool,
    inherited: Channel | None = None,
    ring: PieceRing | None = None,
) -> None:
    """The helper: decode pieces until the empty message, then send back the partial tables.

    A piece that fails is reported at once (the reader stops sending and starts again on one
    process); the pieces still in the pipe are then read and dropped. ``inherited``: the parsing
    process's end, which a forked helper holds a copy of."""
    if inherited is not None:
        inherited.close()
    keep_heap_for_pieces()  # as the reading loop of the parsing process does (malloc_tuning)
    gc.disable()  # as in the parsing process: millions of short-lived objects, no cycles
    builder = decoder.new_builder()
    failed = False
    non_utf8_pieces = 0
    buffer = bytearray()  # every piece is received here: no 8 MB allocation per piece
    try:
        connection.send(_READY)
        while header := bytes(connection.recv_bytes()):
            if header == _SYNC:
                connection.send(_SYNCED)
                continue
            index, where = int.from_bytes(header[:8], "little"), header[8:]  # where: its slot, if in the ring
            decoded = None
            with ring.view(where) if where else connection.recv_bytes(buffer) as piece:
                if not failed:
                    try:
                        decoded, replaced = _decode_checked(decoder, piece, native)
                    except MemoryError:
                        raise
                    except Exception:  # a wrong cut, or a malformed piece: the one-process path says which
                        failed, builder = True, None
                        connection.send({"failed": True, "piece": index})
            if where:
                connection.send((_FREED, PieceRing.slot_of(where)))
            if decoded is not None:
                decoder.add(builder, decoded, index)
                non_utf8_pieces += replaced
        if not failed:
            message = pickled({"partial": builder.partial(), "non_utf8_pieces": non_utf8_pieces})
            builder = decoded = None  # the partial tables' arrays are held by the buffers alone: freed as sent
            connection.send_pickled(*message)
    except (EOFError, OSError):  # the parsing process finished or went away
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
