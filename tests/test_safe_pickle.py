"""The snapshot unpickler loads plain data only, and refuses code and bombs before they do harm."""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from profscope.ingest.safe_pickle import PickleRefused, load_plain_data

LIMIT = 64 << 20


class RunsACommand:
    """Pickles to GLOBAL/STACK_GLOBAL os.system + REDUCE: unpickling it normally runs the command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_plain_data_round_trips() -> None:
    value = {"segments": [{"address": 1 << 40, "size": 2.5, "pool": (0, 1), "ok": True, "no": None}]}
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):  # (bytes need a global before protocol 3)
        assert load_plain_data(io.BytesIO(pickle.dumps(value, protocol=protocol)), LIMIT) == value


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_pickle_that_would_run_a_command_is_refused_and_runs_nothing(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "the-command-ran"
    hostile = pickle.dumps({"segments": [RunsACommand(marker)]}, protocol=protocol)
    assert b"system" in hostile  # the pickle really names os.system ...
    pickle.loads(hostile)  # ... and really runs it when loaded the ordinary way
    assert marker.exists()
    marker.unlink()

    with pytest.raises(PickleRefused, match=r"asks for the Python object posix\.system.*can run code"):
        load_plain_data(io.BytesIO(hostile), LIMIT)
    assert not marker.exists()


def test_persistent_ids_are_refused() -> None:
    class WithIds(pickle.Pickler):
        def persistent_id(self, obj):
            return "tensor-storage-0" if obj == "storage" else None

    buffer = io.BytesIO()
    WithIds(buffer, protocol=4).dump({"data": "storage"})
    with pytest.raises(PickleRefused, match="persistent object id"):
        load_plain_data(io.BytesIO(buffer.getvalue()), LIMIT)


def test_a_huge_declared_length_is_refused_before_it_is_allocated() -> None:
    binbytes = b"\x80\x03B" + struct.pack("<I", 2**31) + b"only a few bytes."
    with pytest.raises(PickleRefused, match=r"more memory than allowed at once \(an object or memo table beyond"):
        load_plain_data(io.BytesIO(binbytes), LIMIT)
    binbytes8 = b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b"xx."
    with pytest.raises(PickleRefused, match="refused"):
        load_plain_data(io.BytesIO(binbytes8), LIMIT)


AMPLIFIERS = {
    # 2 bytes of input become one empty dict (~80 bytes) in a list: 16 MB of input -> ~650 MB
    "empty dicts appended one by one": b"\x80\x04]" + b"}a" * 8_000_000 + b".",
    # 1 byte of input becomes one 8-byte reference on the stack: 48 MB -> ~400 MB, then a list as big
    "DUP of one dict, then APPENDS": b"\x80\x04](}" + b"2" * 48_000_000 + b"e.",
}


@pytest.mark.parametrize("name", AMPLIFIERS)
def test_amplifying_bombs_stop_at_the_limit(name: str) -> None:
    """Run in a fresh process so its peak memory is the bomb's alone."""
    script = (
        "import io, sys\n"
        "from profscope.ingest.safe_pickle import PickleRefused, load_plain_data, resident_bytes\n"
        "data = sys.stdin.buffer.read()\n"
        "before = resident_bytes()\n"
        "try:\n"
        f"    load_plain_data(io.BytesIO(data), {LIMIT})\n"
        "    print('LOADED')\n"
        "except PickleRefused as exc:\n"
        "    print(exc)\n"
        # the high-water mark of this process image (ru_maxrss would include the forking parent's)
        "hwm = next(line for line in open('/proc/self/status') if line.startswith('VmHWM'))\n"
        "print(int(hwm.split()[1]) * 1024 - before)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=AMPLIFIERS[name], capture_output=True, check=True, timeout=120
    )
    message, growth = done.stdout.decode().strip().splitlines()
    assert "took more than 67,108,864 bytes of memory" in message
    # checked every 1 MiB of input: at most one chunk's amplification (~80x) beyond the limit
    assert int(growth) < LIMIT + 160 * (1 << 20)
