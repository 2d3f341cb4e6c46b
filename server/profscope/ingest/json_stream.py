"""Stream a Chrome trace's event array in bounded pieces, without holding the whole document.

A kineto trace is ``{header keys..., "traceEvents": [e1, e2, ...], footer keys...}`` (or, from some
third-party writers, a bare ``[e1, e2, ...]``). We read the decompressed stream in chunks, cut each
chunk after the last ``}`` that is followed by ``,`` and ``{`` and let the caller's typed decoder
parse the piece ``[`` + events + ``]``. A cut that falls inside a string makes the left piece
unparsable (its string never closes), so a wrong cut is always detected and the next candidate is
tried: correctness never depends on how the writer laid out whitespace.

Anything the fast path does not recognise (``traceEvents`` not near the start, odd nesting) falls
back to decoding the whole document at once, bounded by the configured size limit.

Hostile content is handled here, once, for every decode: bytes that are not UTF-8 (a mangled kernel
name) are replaced by U+FFFD and counted, so the rest of the trace stays readable; JSON nested deeper
than the decoder's recursion limit (about 1,000 levels) refuses the file with where it happened.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar

import msgspec

from profscope.sources.base import SourceError

T = TypeVar("T")

CHUNK_BYTES = 8 << 20
HEADER_SEARCH_BYTES = 64 << 20
MAX_CUT_ATTEMPTS = 64
MAX_EVENT_BYTES = 256 << 20  # one event larger than this is refused rather than buffered forever
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WHITESPACE = b" \t\r\n"
_DOCUMENT_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])


class TraceFormatError(ValueError):
    """The file is not a readable Chrome trace; the message says where and why."""


class SizeLimitExceeded(TraceFormatError):
    pass


def valid_utf8(data: bytes | memoryview) -> bytes:
    """``data`` with every byte sequence that is not UTF-8 replaced by U+FFFD."""
    return str(data, "utf-8", "replace").encode()


def failed_on_utf8(exc: Exception, data: bytes | memoryview) -> bool:
    """Whether decoding ``data`` failed with ``exc`` because its bytes are not UTF-8: msgspec up to 0.22 raises
    UnicodeDecodeError then, from 0.23 a DecodeError like any malformed JSON (``data`` is checked for that one)."""
    if isinstance(exc, UnicodeDecodeError):
        return True
    if not isinstance(exc, msgspec.DecodeError):
        return False
    try:
        str(data, "utf-8")
    except UnicodeDecodeError:
        return True
    return False


def decode_replacing_non_utf8(decode: Callable[[Any], T], data: bytes | memoryview) -> tuple[T, bool]:
    """``(decode(data), False)``, or when ``data`` is not UTF-8, ``decode`` of it with those bytes replaced by U+FFFD
    and True: what the reader and both decoding processes do with every piece."""
    try:
        return decode(data), False
    except (UnicodeDecodeError, msgspec.DecodeError) as exc:
        if not failed_on_utf8(exc, data):
            raise
    return decode(valid_utf8(data)), True


class CountingReader(io.RawIOBase):
    """Counts the bytes read from the underlying (usually compressed) stream, for progress."""

    def __init__(self, raw: IO[bytes], on_bytes: Callable[[int], None] | None = None) -> None:
        self._raw = raw
        self._on_bytes = on_bytes
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.bytes_read += n
        if self._on_bytes is not None and n:
            self._on_bytes(self.bytes_read)
        return n


def open_decompressed(raw: IO[bytes]) -> IO[bytes]:
    """Wrap a binary stream, transparently gunzipping it (sniffed from the magic bytes)."""
    buffered = io.BufferedReader(raw, buffer_size=1 << 20) if not isinstance(raw, io.BufferedReader) else raw
    magic = buffered.peek(2)[:2]
    if magic != b"\x1f\x8b":
        return buffered
    try:
        from isal import igzip_threaded  # ISA-L inflate: 2-3x faster than zlib on these files

        # a reader thread inflates (outside the GIL) while the parser works on the previous piece
        return igzip_threaded.open(buffered, "rb", threads=1)
    except ImportError:  # pragma: no cover - isal is a declared dependency
        return gzip.GzipFile(fileobj=buffered, mode="rb")


class LimitedReader:
    """Reads decompressed bytes, refusing to go past ``limit_bytes`` (gzip bombs)."""

    def __init__(self, stream: IO[bytes], limit_bytes: int) -> None:
        self._stream = stream
        self._limit = limit_bytes
        self.total = 0

    def read(self, n: int) -> bytes:
        data = self._call(self._stream.read, n)
        self._count(len(data))
        return data

    def readinto(self, view: memoryview) -> int:
        """Like ``read``, into ``view``: the reader's buffer, reused for every piece."""
        n = self._call(self._stream.readinto, view) or 0
        self._count(n)
        return n

    def _call(self, read: Callable[[Any], Any], argument: Any) -> Any:
        try:
            return read(argument)
        except SourceError:  # the storage failed, not the file: say so, and let it be retried
            raise
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(
                f"cannot decompress the file after {self.total:,} bytes: {exc} (truncated or corrupt gzip?)"
            ) from exc

    def _count(self, n: int) -> None:
        self.total += n
        if self.total > self._limit:
            raise SizeLimitExceeded(
                f"decompressed size exceeds the limit of {self._limit:,} bytes (raise --max-trace-bytes to read it)"
            )


def _error_offset(exc: Exception, default: int) -> int:
    match = re.search(r"byte (\d+)", str(exc))
    return int(match.group(1)) if match else default


def _describe_decode_error(exc: Exception, piece_offset: int) -> str:
    text = str(exc)
    match = re.search(r"byte (\d+)", text)
    if match:
        absolute = piece_offset + int(match.group(1)) - 1
        text = re.sub(r"\(byte \d+\)", f"(at byte {absolute:,} of the decompressed trace)", text)
    return text


class ChromeTraceReader:
    """Yields decoded event pieces; ``top_level`` holds every key other than ``traceEvents``."""

    def __init__(self, stream: IO[bytes], limit_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._reader = LimitedReader(stream, limit_bytes)
        self._chunk_bytes = chunk_bytes
        self.top_level: dict[str, Any] = {}
        self.is_bare_array = False
        self._consumed = 0  # decompressed offset of the current buffer's first byte
        self.non_utf8_pieces = 0  # pieces in which bytes that are not UTF-8 were replaced

    def _decode(self, decode: Callable[[Any], T], data: bytes | memoryview) -> T:
        """``decode(data)``, tolerating bytes that are not UTF-8 and refusing absurd nesting clearly."""
        try:
            decoded, replaced = decode_replacing_non_utf8(decode, data)
            self.non_utf8_pieces += replaced
            return decoded
        except RecursionError:
            raise TraceFormatError(
                f"JSON nested too deeply (more than about 1,000 levels of '[' or '{{') within the "
                f"{len(data):,} bytes after byte {self._consumed:,} of the decompressed trace: not a profiler trace"
            ) from None

    def pieces(self, decode: Callable[[Any], T], decode_last: Callable[[Any], T] | None = None) -> Iterator[T]:
        """Decode ``[piece]`` for successive pieces of the event array with ``decode``.

        ``decode`` receives a view of the reader's buffer, valid during the call only (it copies what it
        keeps). ``decode_last`` (default ``decode``) decodes the last piece: it must fail on a wrong cut,
        since that failure is how the end of the event array is found."""
        head = self._read_until(HEADER_SEARCH_BYTES, need_structure=True)
        start = self._events_start(head)
        if start is None:
            yield from self._whole_document(head, decode)
            return
        # One buffer for the whole read: "[" then the events not decoded yet. A piece is decoded in
        # place (a "]" written after it for the call), so no 8 MB piece is copied or freshly allocated.
        buffer = bytearray(b"[")
        buffer += memoryview(head)[start:]
        del head
        self._consumed += start  # decompressed offset of buffer[1]
        length = len(buffer)
        eof = False
        need_more = length - 1 < self._chunk_bytes
        while True:
            if need_more and not eof:
                read = self._read_into(buffer, length)
                eof = not read
                length += read
            if eof:
                yield from self._finish(bytes(memoryview(buffer)[1:length]), decode_last or decode)
                return
            cut = self._cut_and_decode(buffer, length, decode)
            if cut is None:
                need_more = True  # no complete event in the buffer yet
                continue
            decoded, comma = cut
            rest = length - comma - 1
            buffer[1 : 1 + rest] = buffer[comma + 1 : length]  # the start of the next event: small
            length = 1 + rest
            self._consumed += comma
            need_more = length - 1 < self._chunk_bytes
            yield decoded

    def _read_into(self, buffer: bytearray, length: int) -> int:
        """Read up to a chunk after ``buffer[:length]``, growing the buffer only if it has no room."""
        if len(buffer) < length + self._chunk_bytes:
            buffer.extend(bytes(length + self._chunk_bytes - len(buffer)))
        with memoryview(buffer) as view, view[length : length + self._chunk_bytes] as free:
            return self._reader.readinto(free)

    # ---- reading --------------------------------------------------------------------------
    def _read_until(self, limit: int, need_structure: bool) -> bytes:
        buffer = b""
        while len(buffer) < limit:
            more = self._reader.read(self._chunk_bytes)
            if not more:
                break
            buffer += more
            if need_structure and (_TRACE_EVENTS_KEY.search(buffer) or buffer.lstrip(_WHITESPACE)[:1] == b"["):
                break
        return buffer

    def _events_start(self, buffer: bytes) -> int | None:
        """Offset just after the event array's ``[``, parsing the header keys on the way."""
        stripped = buffer.lstrip(_WHITESPACE + b"\xef\xbb\xbf")
        lead = len(buffer) - len(stripped)
        if stripped[:1] == b"[":
            self.is_bare_array = True
            return lead + 1
        if stripped[:1] != b"{":
            # its first bytes are not quoted: the file may hold anything (a key, a token)
            raise TraceFormatError("not a JSON trace: the file does not start with '{' or '['")
        match = _TRACE_EVENTS_KEY.search(buffer)
        if match is None:
            return None
        header = buffer[lead + 1 : match.start()].rstrip(_WHITESPACE).rstrip(b",")
        try:
            self.top_level.update(self._decode(msgspec.json.decode, b"{" + header + b"}"))
        except msgspec.DecodeError:
            return None  # "traceEvents" was nested or quoted: use the slow, certain path
        return match.end()

    # ---- cutting --------------------------------------------------------------------------
    def _cut_and_decode(
        self, buffer: bytearray, length: int, decode: Callable[[memoryview], T]
    ) -> tuple[T, int] | None:
        """Decode ``buffer[:length]`` up to its last complete event (``buffer[0]`` is "["); return what
        ``decode`` gave and where the comma after that event is."""
        end = length
        last_error: Exception | None = None
        for _ in range(MAX_CUT_ATTEMPTS):
            brace = buffer.rfind(b"}", 1, end)
            if brace < 0:
                break
            rest = buffer[brace + 1 : min(brace + 256, length)].lstrip(_WHITESPACE)  # past length: stale bytes
            if rest[:1] == b"," and rest[1:].lstrip(_WHITESPACE)[:1] == b"{":
                after = buffer[brace + 1]
                buffer[brace + 1] = 0x5D  # "]" closes the piece in place, for the call
                try:
                    with memoryview(buffer) as view, view[: brace + 2] as piece:
                        decoded = self._decode(decode, piece)
                except msgspec.DecodeError as exc:
                    # A cut inside a string fails at or after the string's start, so the true
                    # boundary (or a real syntax error) lies before the reported position.
                    last_error = exc.with_traceback(None)  # its frames would hold the buffer's views
                    end = min(brace, _error_offset(exc, brace + 2) - 1)
                    continue
                finally:
                    buffer[brace + 1] = after
                return decoded, buffer.index(b",", brace + 1)
            end = brace
        if length - 1 > MAX_EVENT_BYTES:
            if last_error is not None:
                raise TraceFormatError(_describe_decode_error(last_error, self._consumed - 1))
            raise TraceFormatError(f"an event is larger than {MAX_EVENT_BYTES:,} bytes or the JSON is malformed")
        return None

    def _finish(self, buffer: bytes, decode: Callable[[bytes], T]) -> Iterator[T]:
        """The last piece: find where the event array closes and parse what follows it."""
        end = len(buffer)
        first_error: Exception | None = None
        for _ in range(MAX_CUT_ATTEMPTS):
            close = buffer.rfind(b"]", 0, end)
            if close < 0:
                break
            tail = buffer[close + 1 :].strip(_WHITESPACE)
            footer = self._parse_footer(tail)
            if footer is None:
                end = close
                continue
            piece = buffer[:close].rstrip(_WHITESPACE)
            if piece.endswith(b","):  # tolerate a trailing comma before "]"
                piece = piece[:-1]
            try:
                decoded = self._decode(decode, b"[" + piece + b"]")
            except msgspec.DecodeError as exc:
                first_error = first_error or exc
                end = close
                continue
            self.top_level.update(footer)
            yield decoded
            return
        if first_error is not None:
            raise TraceFormatError(_describe_decode_error(first_error, self._consumed - 1))
        raise TraceFormatError(
            f"the trace ends before its event list closes (after {self._reader.total:,} decompressed bytes):"
            " the file is truncated"
        )

    def _parse_footer(self, tail: bytes) -> dict[str, Any] | None:
        if self.is_bare_array:
            return {} if tail == b"" else None
        if not tail.endswith(b"}"):
            return None
        body = tail.lstrip(b",").lstrip(_WHITESPACE)
        try:
            footer = self._decode(msgspec.json.decode, b"{" + body if body != b"}" else b"{}")
        except msgspec.DecodeError:
            return None
        return footer if isinstance(footer, dict) else None

    def _whole_document(self, buffer: bytes, decode: Callable[[bytes], T]) -> Iterator[T]:
        while True:
            more = self._reader.read(self._chunk_bytes)
            if not more:
                break
            buffer += more
        try:
            document = self._decode(_DOCUMENT_DECODER.decode, buffer)
        except msgspec.DecodeError as exc:
            raise TraceFormatError(f"malformed JSON: {_describe_decode_error(exc, 0)}") from exc
        events = document.pop("traceEvents", None)
        if events is None:
            if "nodes" in document and ("schema" in document or "pid" in document):
                raise TraceFormatError(
                    "a PyTorch execution trace (ExecutionTraceObserver output), not a kineto trace: "
                    "open the *.pt.trace.json written next to it instead"
                )
            raise TraceFormatError("not a Chrome trace: the JSON object has no 'traceEvents' list")
        for key, raw in document.items():
            self.top_level[key] = self._decode(msgspec.json.decode, raw)
        raw_events = bytes(events)
        if raw_events.lstrip(_WHITESPACE)[:1] != b"[":
            raise TraceFormatError("'traceEvents' is not a list")
        yield self._decode(decode, raw_events)
