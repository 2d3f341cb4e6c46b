"""glibc malloc tuning for the parsing processes: peak memory and page faults of big traces.

Parsing a 1 GB trace allocates large numpy columns and 8 MB read buffers. glibc's defaults keep
freed heap memory resident (peak memory grows with every step) and, once tuned against that, hand
out every large buffer as fresh pages (page faults). These helpers choose per phase. Elsewhere than
glibc they do nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
from collections.abc import Iterator
from functools import cache
from typing import Any

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_SERVER_ARENAS = 2
_DIRECT_MAPPING_BYTES = 1 << 20
_HUGE_PAGE_ARRAY_BYTES = 4 << 20  # numpy advises huge pages for arrays from this size up
_HEAP_READ_BUFFERS_BYTES = 32 << 20  # glibc refuses more (DEFAULT_MMAP_THRESHOLD_MAX)
_DEFAULT_TRIM_BYTES = 128 << 10  # glibc's M_TRIM_THRESHOLD
_KEPT_HEAP_BYTES = 1 << 30  # while pieces are read: freed heap stays for the next piece (released after the parse)
_MOST_HELD_CHUNKS = 4096  # freed_heap_set_aside: a bound on the loop, far over what a parse leaves
_mapping_directly = False


@cache
def _libc() -> Any:
    """glibc by its soname; ``find_library`` only elsewhere: it runs ``ldconfig -p`` in a subprocess, ~11 ms on
    ``serve``'s way to its first parse."""
    with contextlib.suppress(OSError):
        return ctypes.CDLL("libc.so.6")
    library = ctypes.util.find_library("c")
    return ctypes.CDLL(library) if library else None


def _mallopt(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        _libc().mallopt(option, value)


def _heap_thresholds(mmap_bytes: int, trim_bytes: int) -> None:
    """Allocations from ``mmap_bytes`` up get a mapping of their own; freed heap over ``trim_bytes`` at its top
    goes back to the kernel."""
    _mallopt(_M_MMAP_THRESHOLD, mmap_bytes)
    _mallopt(_M_TRIM_THRESHOLD, trim_bytes)


def limit_heap_arenas(count: int = _SERVER_ARENAS) -> None:
    """Let the server's request threads share ``count`` glibc heaps instead of up to 8 per core.

    Each thread that allocates gets its own arena by default; freed memory stays in it, so under many
    concurrent requests the server's RSS crept up for minutes (bench/RESULTS.md, Reliability: 236 -> 265
    MiB and rising with the default, 141 -> 148 MiB with two arenas). Call it before threads start.
    """
    _mallopt(_M_ARENA_MAX, count)


def release_freed_memory() -> None:
    """Return freed heap pages to the OS (glibc keeps them otherwise), keeping peak memory down."""
    gc.collect()
    trim_freed_heap()


def trim_freed_heap() -> None:
    """Return the heap's free pages to the kernel (``malloc_trim``), without a garbage collection: for a loop that
    frees many chunks under the mapping threshold, each turn (the holes they leave are kept otherwise)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        _libc().malloc_trim(0)


def map_large_arrays_directly() -> None:
    """Make glibc serve allocations over 1 MiB (numpy columns) with their own mmap, returned on free, when no free
    chunk of its heap holds them (``freed_heap_set_aside`` sees to that after a parse).

    By default glibc raises that threshold after large frees, so later arrays come from the heap and
    a parse's temporaries stay resident: peak memory then grows with every analysis step.
    """
    global _mapping_directly
    _heap_thresholds(_DIRECT_MAPPING_BYTES, _DEFAULT_TRIM_BYTES)
    _mapping_directly = True


class FreedHeap:
    """The heap's freed room, set aside (``freed_heap_set_aside``); ``reused()`` opens a window where it is not."""

    def __init__(self, active: bool) -> None:
        self._active = active  # glibc's heap is tuned in this process (map_large_arrays_directly)
        self._held: list[int] = []

    def set_aside(self) -> None:
        """Hold every free chunk of the heap (trimmed first); from here only arrays from 4 MiB up are mapped."""
        if not self._active:
            return
        # meanwhile a size no free chunk holds is mapped, not taken from the heap's top (grown, or kept untrimmed
        # by the window ``reused`` closes): only free chunks are held
        _heap_thresholds(_DIRECT_MAPPING_BYTES, _DEFAULT_TRIM_BYTES)
        self._held += _hold_free_heap()
        # arrays under 4 MiB come from the top of the heap, which is kept up to that size: one freed there is
        # reused by the next, not handed back and faulted in again (nsres_x1GB's queries: 354k -> 280k faults)
        _heap_thresholds(_HUGE_PAGE_ARRAY_BYTES, _HUGE_PAGE_ARRAY_BYTES)

    @contextlib.contextmanager
    def reused(self) -> Iterator[None]:
        """Meanwhile arrays up to 32 MiB come from the top of the heap and reuse each other's pages, as one job that
        makes the same arrays over and over wants (the call tree: ~0.2 s of page faults at 1 GB otherwise); the
        room they leave is set aside afterwards. Meanwhile the heap's free top is not trimmed either: an array
        freed at the top would be handed back and faulted in again for the next (nsres_x1GB's call tree: 51k ->
        25k page faults, the same peak). Only where no process is forked meanwhile: a child would copy the pages
        it reuses."""
        if not self._active:
            yield
            return
        _heap_thresholds(_HEAP_READ_BUFFERS_BYTES, _KEPT_HEAP_BYTES)
        try:
            yield
        finally:
            self.set_aside()

    def release(self) -> None:
        if not self._active:
            return
        _heap_thresholds(_DIRECT_MAPPING_BYTES, _DEFAULT_TRIM_BYTES)
        for address in self._held:
            _libc().free(address)
        self._held = []


@contextlib.contextmanager
def freed_heap_set_aside() -> Iterator[FreedHeap]:
    """Meanwhile, large arrays get mappings of their own again, as ``map_large_arrays_directly`` means them to,
    though a parse left its heap full of freed room.

    glibc maps an allocation over the threshold only when no free chunk of its heap holds it. A parse's pieces
    (chunks under the threshold, joined into the tables at its end) leave hundreds of MB of freed heap below
    objects that live on, so the heap cannot shrink: the call tree and the queries then took their large arrays
    from it and kept every page they had touched once freed, each of the two processes computing views of a 1 GB
    trace ~200 MB of its own (bench/RESULTS.md, run 19). Here that room is handed back to the kernel (trimmed)
    and held by allocations nothing touches: address space, no memory. Forked children hold it too. Afterwards
    it is freed, for the next parse's pieces. Elsewhere than glibc on Linux this does nothing.

    Meanwhile only arrays from 4 MiB up are mapped: numpy asks huge pages for those, so a fresh one is faulted
    in 2 MiB at a time. Smaller ones (a 1 GB trace's per-kernel columns, its boolean masks of every event)
    would be faulted in 4 KiB at a time, each time: from the heap (above the room held) they are reused, and
    few of them live at once (nsres_x1GB: 1.12 -> 0.71 million page faults, the same peak).
    """
    heap = FreedHeap(_mapping_directly)
    heap.set_aside()
    try:
        yield heap
    finally:
        heap.release()


def _hold_free_heap() -> list[int]:
    """Allocate the free chunks of the main heap, from the largest size down to the mapping threshold, and
    return their addresses."""
    bounds = _heap_bounds()
    libc = _libc()
    if bounds is None or libc is None:
        return []
    libc.malloc_trim(0)  # the free chunks' pages go back to the kernel: held, they are address space alone
    low, high = bounds
    malloc, free = libc.malloc, libc.free
    malloc.restype, malloc.argtypes, free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    held: list[int] = []
    size = high - low
    while size >= _DIRECT_MAPPING_BYTES and len(held) < _MOST_HELD_CHUNKS:
        address = malloc(size)
        if address and low <= address and address + size <= high:  # a free chunk of the heap: keep it
            held.append(address)
            continue
        if address:  # a mapping of its own (or a grown heap): no free chunk this large is left
            free(address)
        size = size * 4 // 5
    return held


def _heap_bounds() -> tuple[int, int] | None:
    """The main heap's address range (``[heap]`` in /proc/self/maps: one line or several, split where huge pages
    or protections differ), None without one."""
    ranges = []
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        ranges = [line.split(maxsplit=1)[0].split("-") for line in maps if line.rstrip().endswith("[heap]")]
    if not ranges:
        return None
    return min(int(low, 16) for low, _ in ranges), max(int(high, 16) for _, high in ranges)


@contextlib.contextmanager
def read_buffers_from_heap() -> Iterator[None]:
    """While a trace's pieces are read, let glibc serve the ~8 MB read buffers and each piece's decoded
    columns from its heap, reused.

    Mapped one by one (``map_large_arrays_directly``), every piece's buffers were fresh pages: two
    thousand page faults per 8 MB copy, ~2 s of CPU for a 1 GB trace. Freed at the top of the heap, glibc
    also hands such a buffer back (trim) and faults it in again for the next piece: the trim threshold is
    raised too (kernel time of a 1 GB nsres parse: -0.7 s). Only the reading loop runs so: the tables are
    built with large arrays mapped directly again, and the caller releases what the heap kept.
    """
    if not _mapping_directly:  # glibc's default, dynamic threshold already reuses them
        yield
        return
    keep_heap_for_pieces()
    try:
        yield
    finally:
        _heap_thresholds(_DIRECT_MAPPING_BYTES, _DEFAULT_TRIM_BYTES)


def keep_heap_for_pieces() -> None:
    """``read_buffers_from_heap``'s setting, for good: in the decoding helper, which lives for one parse."""
    if _mapping_directly:
        _heap_thresholds(_HEAP_READ_BUFFERS_BYTES, _KEPT_HEAP_BYTES)


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection meanwhile, for work that makes many objects and next to no cyclic garbage: a
    parse's millions of short-lived rows, or imports' long-lived modules and classes (~15% of importing the web
    framework). Collections there only cost time, over and over."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def objects_frozen_for_fork() -> Iterator[None]:
    """Fork children inside this: every object that exists is moved to the collector's permanent generation
    (``gc.freeze``) in the child, whose collections then never walk them, which would write to, and so copy,
    every page holding one (an idle forked parse worker: ~18 MB of private memory; a forked helper's copy of
    its worker's objects). The parent's objects go back to the collected generations afterwards."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
