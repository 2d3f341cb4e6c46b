"""The parse workers' progress to the server: one pipe, many writers, and no lock.

A ``multiprocessing.SimpleQueue`` guards its writes with a lock shared by every writer. A worker killed
while it holds that lock (the watchdog's SIGKILL, the kernel's OOM killer, the pool's terminate at
shutdown) never releases it: every later ``put`` waits forever, the restarted pool's workers at their
first report and the server's own wake-up of its reader at shutdown, which then never exits.

Here a message is one ``write`` of at most ``PIPE_BUF`` bytes, which POSIX makes atomic among the
writers of a pipe: a writer killed at any moment has written all of its message or none of it, and
holds nothing the others need. Only the server reads (one thread), so reads need no lock either.
"""

from __future__ import annotations

import multiprocessing
import pickle
import select
from typing import Any

# send_bytes writes a 4-byte length and the payload in one write when the payload is small
MAX_MESSAGE_BYTES = select.PIPE_BUF - 4


class ProgressChannel:
    """``put`` from any process that holds the channel (workers get it pickled: the write end only);
    ``get`` in the process that made it."""

    def __init__(self) -> None:
        self._reader, self._writer = multiprocessing.Pipe(duplex=False)

    def put(self, item: Any) -> None:
        data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > MAX_MESSAGE_BYTES:  # two writes could interleave with another writer's
            raise ValueError(f"a progress message of {len(data)} bytes: at most {MAX_MESSAGE_BYTES} are atomic")
        self._writer.send_bytes(data)

    def get(self) -> Any:
        """The next message; EOFError once every write end is closed."""
        if self._reader is None:
            raise RuntimeError("only the process that made the channel reads it")
        return pickle.loads(self._reader.recv_bytes())

    def __getstate__(self) -> dict[str, Any]:
        return {"_reader": None, "_writer": self._writer}
