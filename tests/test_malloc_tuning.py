"""The worker's glibc tuning (ingest/malloc_tuning.py), seen from where glibc puts the arrays: in the heap or in
mappings of their own. Each case runs in a fresh interpreter, whose heap holds nothing of other tests."""

from __future__ import annotations

import json
import subprocess
import sys

_SCRIPT = """
import json
import numpy as np
from profscope.ingest import malloc_tuning as tuning

tuning.map_large_arrays_directly()


def heap():
    low, high = tuning._heap_bounds()
    resident = 0
    in_heap = False
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            in_heap = fields[-1] == "[heap]"
        elif in_heap and fields[0] == "Rss:":
            resident += int(fields[1]) << 10
    return low, high, resident


def where(values):
    low, high, _ = heap()
    return "heap" if low <= values.ctypes.data < high else "own mapping"


# a parse's pieces: chunks under the mapping threshold, freed below an object that lives on
pieces = [np.ones(110_000) for _ in range(400)]  # 0.9 MB each, 350 MB in all
lives_on = np.ones(110_000)
del pieces
seen = {"before": where(np.ones(2_000_000))}  # 16 MB
_, _, resident_before = heap()
with tuning.freed_heap_set_aside() as freed:
    _, _, resident_held = heap()
    seen["large"] = where(np.ones(2_000_000))
    small = np.ones(300_000)  # 2.4 MB
    seen["under 4 MiB"] = where(small)
    _, _, resident_in_use = heap()
    del small  # at the heap's top: kept for the next one
    _, _, resident_freed = heap()
    seen["small_handed_back_mb"] = (resident_in_use - resident_freed) >> 20
    with freed.reused():  # the call tree's window: its arrays reuse the heap's pages
        first = np.ones(2_000_000)
        seen["reused window"] = where(first)
        _, _, resident_in_use = heap()
        del first  # at the heap's top: kept for the next array, not handed back to be faulted in again
        _, _, resident_freed = heap()
        seen["window_handed_back_mb"] = (resident_in_use - resident_freed) >> 20
        second = np.ones(2_000_000)
    seen["after the window"] = where(np.ones(2_000_000))  # the room the window left is set aside too
    seen["kept from the window"] = where(second)
seen["after"] = where(np.ones(2_000_000))
seen["held_resident_mb"] = (resident_held - min(resident_before, resident_held)) >> 20
print(json.dumps(seen))
"""


def _run() -> dict:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_heap_a_parse_freed_is_set_aside_while_views_are_computed() -> None:
    """glibc gives an array over the mapping threshold a mapping of its own only when no freed heap chunk holds it:
    after a parse, the views' large arrays came from the heap and stayed resident once freed. Set aside, the freed
    room is held (trimmed first: no memory, address space only), large arrays are mapped on their own, those under
    4 MiB (no huge pages for them) come from the heap, whose top is kept up to that size; afterwards the room is
    free again, for the next parse. In the window ``reused()`` opens, large arrays come from the heap too, its top
    is not trimmed, and the room they leave is set aside after it."""
    seen = _run()
    assert seen["before"] == "heap"  # the case the set-aside is for
    assert seen["large"] == "own mapping"
    assert seen["under 4 MiB"] == "heap"
    assert seen["small_handed_back_mb"] < 1
    assert seen["reused window"] == "heap"
    assert seen["window_handed_back_mb"] < 2  # of 16 MB freed at the top
    assert seen["after the window"] == "own mapping"
    assert seen["kept from the window"] == "heap"
    assert seen["after"] == "heap"
    assert seen["held_resident_mb"] < 8  # 350 MB held, next to nothing of it resident
