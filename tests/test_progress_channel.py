"""The parse workers' progress pipe: a writer killed at any moment leaves the channel usable by every other.

A ``multiprocessing.SimpleQueue`` failed this: a worker killed inside ``put`` kept its write lock forever,
and the server's ``put`` of its shutdown sentinel waited for it (``profscope serve`` hung on SIGTERM,
once in a CI run). Replacing ``ProgressChannel`` by ``SimpleQueue`` below makes the first test hang at its
first few kills.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import random
import signal
import threading
import time
from typing import Any

import pytest

from profscope.ingest.progress_channel import MAX_MESSAGE_BYTES, ProgressChannel

KILLS = 40
SEED = 20261207


def _report_forever(channel: ProgressChannel, key: str) -> None:
    count = 0
    while True:
        channel.put((key, "bytes", count))
        count += 1


def _done_within(action: Any, seconds: float) -> list[Any]:
    """``action()``'s result, or a failure once it has not returned in ``seconds`` (it is blocked)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(action()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{action} still blocked after {seconds} s"
    return result


def _read_until(channel: ProgressChannel, end: Any) -> list[Any]:
    items = []
    while (item := channel.get()) != end:
        items.append(item)
    return items


def test_a_writer_killed_at_any_moment_blocks_no_other_writer_and_tears_no_message() -> None:
    context = multiprocessing.get_context("fork")  # forked writers: ~2 ms each, so many kills are cheap
    channel = ProgressChannel()
    rng = random.Random(SEED)
    for kill in range(KILLS):
        read: list[list[Any]] = []  # the server's reader thread, draining the pipe as the writer fills it
        reader = threading.Thread(target=lambda read=read: read.append(_read_until(channel, None)), daemon=True)
        reader.start()
        writer = context.Process(target=_report_forever, args=(channel, f"trace-{kill}"))
        writer.start()
        time.sleep(rng.uniform(0.001, 0.02))
        os.kill(writer.pid, signal.SIGKILL)  # as the watchdog and the OOM killer do: no clean-up runs
        writer.join()
        # another worker's report, then the server's shutdown sentinel, each written at once
        _done_within(functools.partial(channel.put, ("next", "worker", kill)), 10)
        _done_within(functools.partial(channel.put, None), 10)
        reader.join(10)
        assert not reader.is_alive(), "the reader never got the sentinel"
        [items] = read
        assert items[-1] == ("next", "worker", kill)
        counts = [item[2] for item in items[:-1]]
        assert all(item[:2] == (f"trace-{kill}", "bytes") for item in items[:-1])
        assert counts == list(range(len(counts)))  # whole messages, in order, none torn or lost before the kill


def _put_in_spawned(channel: ProgressChannel) -> None:
    channel.put(("spawned", "worker", os.getpid()))
    with pytest.raises(RuntimeError, match="only the process that made the channel reads it"):
        channel.get()


def test_a_spawned_worker_gets_the_write_end_only() -> None:
    context = multiprocessing.get_context("spawn")
    channel = ProgressChannel()
    worker = context.Process(target=_put_in_spawned, args=(channel,))
    worker.start()
    [item] = _done_within(channel.get, 60)
    worker.join(60)
    assert item == ("spawned", "worker", worker.pid)
    assert worker.exitcode == 0  # its get() was refused: it has no read end


def test_a_message_too_long_for_one_atomic_write_is_refused() -> None:
    channel = ProgressChannel()
    key = "k" * MAX_MESSAGE_BYTES
    with pytest.raises(ValueError, match="at most"):
        channel.put((key, "bytes", 1))
    channel.put((key[:3000], "bytes", 1))  # a cache key is ~100 bytes; 3,000 still fits one write
    assert channel.get() == (key[:3000], "bytes", 1)
