"""Load a pickle that may come from anywhere, as plain data only, within a memory budget.

A pickle is a program: its GLOBAL / STACK_GLOBAL opcodes import any callable and REDUCE calls it
(``os.system``, ``subprocess.Popen`` ...), so unpickling an untrusted file can run code. CUDA
memory snapshots are plain data (dicts, lists, tuples, strings, numbers), so the unpickler here
refuses every global and every persistent id. With no global, no class or function can ever reach
the stack: REDUCE / NEWOBJ / BUILD / EXT* have nothing to call and fail as well.

Decoding is bounded: a small pickle can still ask for a huge string (BINBYTES8 with a giant length)
or amplify a few bytes into many objects (EMPTY_DICT, DUP, memo GETs appended to lists). The reader
checks each request against the budget and, every time it reads more input (1 MiB at a time),
how much the process has grown since decoding began: over the budget,
decoding stops with :class:`PickleRefused` before memory runs out.

One opcode can also ask for gigabytes without reading anything: LONG_BINPUT with a memo index of
a billion makes the C unpickler grow its memo table to that many slots (8 GB, zeroed) from 5 bytes
of input. So while decoding, the process's address space may grow by the budget and a margin at
most (RLIMIT_AS, restored afterwards): past it the allocation fails and the pickle is refused.
"""

from __future__ import annotations

import io
import os
import pickle
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
READ_CHUNK = 1 << 20
LIMIT_SETTING = "--max-snapshot-bytes / PROFSCOPE_MAX_SNAPSHOT_BYTES"  # named in refusals: how to raise the limit
ADDRESS_SPACE_MARGIN = 1 << 30  # malloc arenas and thread stacks reserve address space they do not use


class PickleRefused(Exception):
    """The pickle is not plain data, or decoding it would take more memory than allowed."""


def resident_bytes() -> int:
    """Current resident memory of this process (Linux /proc; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def address_space_bytes() -> int:
    """Current virtual size of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[0]) * PAGE_BYTES
    except OSError:
        return 0


@contextmanager
def _address_space_growth_at_most(extra_bytes: int) -> Iterator[None]:
    """Within the block, allocations that would grow the address space past ``extra_bytes`` fail."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    current = address_space_bytes()
    limit = current + extra_bytes + ADDRESS_SPACE_MARGIN
    for bound in (soft, hard):
        if bound != resource.RLIM_INFINITY:
            limit = min(limit, bound)
    if not current:  # no /proc: nothing to measure from
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise PickleRefused(
            f"refused: the pickle asks for the Python object {module}.{name}; profscope reads only plain data "
            "(dicts, lists, numbers, strings) from a pickle, because loading objects can run code"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise PickleRefused("refused: the pickle refers to a persistent object id; profscope reads only plain data")


class _BudgetedReader(io.RawIOBase):
    """The pickle bytes, handed out while the decoded data stays within ``max_decoded_bytes``."""

    def __init__(
        self,
        raw: IO[bytes],
        max_decoded_bytes: int,
        on_progress: Callable[[int], None] | None,
        on_input: Callable[[int], None] | None,
    ) -> None:
        self.raw = raw
        self.max_decoded_bytes = max_decoded_bytes
        self.on_progress = on_progress
        self.on_input = on_input
        self.bytes_read = 0
        self.baseline = resident_bytes()
        self.peak_growth = 0

    def readable(self) -> bool:
        return True

    def refuse_size(self, wanted: int) -> None:
        raise PickleRefused(
            f"refused: the pickle declares a {wanted:,}-byte object, more than the limit of "
            f"{self.max_decoded_bytes:,} bytes ({LIMIT_SETTING})"
        )

    def _check(self, wanted: int) -> None:
        if wanted > self.max_decoded_bytes:
            self.refuse_size(wanted)
        growth = resident_bytes() - self.baseline
        self.peak_growth = max(self.peak_growth, growth)
        if growth > self.max_decoded_bytes:
            raise PickleRefused(
                f"refused: decoding this pickle took more than {self.max_decoded_bytes:,} bytes of memory after "
                f"{self.bytes_read:,} bytes of input ({LIMIT_SETTING})"
            )

    def readinto(self, buffer: Any) -> int:
        self._check(len(buffer))
        data = self.raw.read(len(buffer))
        buffer[: len(data)] = data
        self.bytes_read += len(data)
        if self.on_input is not None:
            self.on_input(self.bytes_read)
        if self.on_progress is not None:
            self.on_progress(self.bytes_read)
        return len(data)


class _BudgetedBuffer(io.BufferedReader):
    """Refuses a read larger than the budget before anything is allocated for it."""

    def __init__(self, raw: _BudgetedReader) -> None:
        super().__init__(raw, buffer_size=READ_CHUNK)
        self.budget = raw

    def read(self, size: int | None = -1) -> bytes:
        if size is not None and size > self.budget.max_decoded_bytes:
            self.budget.refuse_size(size)
        return super().read(size)


def load_plain_data(
    raw: IO[bytes],
    max_decoded_bytes: int,
    on_progress: Callable[[int], None] | None = None,
    on_input: Callable[[int, Any], None] | None = None,
) -> Any:
    """Unpickle ``raw`` allowing only plain data; raise :class:`PickleRefused` otherwise.

    ``on_input(bytes_read, unpickler)`` is called as input is consumed, so a caller can look at
    what has been decoded so far (the snapshot reader turns finished trace entries into columns).
    """
    unpickler: _DataOnlyUnpickler | None = None

    def input_hook(bytes_read: int) -> None:
        if on_input is not None:
            on_input(bytes_read, unpickler)

    budgeted = _BudgetedReader(raw, max_decoded_bytes, on_progress, input_hook)
    # buffered: the unpickler peeks ahead instead of asking for every opcode's bytes one call at a time
    unpickler = _DataOnlyUnpickler(_BudgetedBuffer(budgeted), buffers=None)
    try:
        with _address_space_growth_at_most(max_decoded_bytes):
            return unpickler.load()
    except PickleRefused:
        raise
    except MemoryError as exc:
        raise PickleRefused(
            f"refused: the pickle asks for more memory than allowed at once (an object or memo table beyond the "
            f"limit of {max_decoded_bytes:,} bytes, PROFSCOPE_MAX_SNAPSHOT_BYTES)"
        ) from exc
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        KeyError,
        IndexError,
        OverflowError,  # a FRAME length beyond 2**63
    ) as exc:
        raise PickleRefused(f"not a readable pickle: {type(exc).__name__}: {exc}") from exc
    finally:
        unpickler = None
