"""uvicorn's HTTP/1.1 protocol with a deadline for request headers and a cap on open connections.

uvicorn (h11) closes idle keep-alive connections, but a client that sends a request's headers one
byte at a time, or connects and sends nothing, keeps its socket forever ("slowloris"). Here a
request whose headers are not complete ``header_timeout_s`` after its first byte (or after the
connection opened) is dropped, and a connection beyond ``max_connections`` is closed at once.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("profscope")


def guarded_protocol(header_timeout_s: float, max_connections: int) -> type[H11Protocol]:
    """The protocol class to give ``uvicorn.run(http=...)``."""

    class GuardedH11Protocol(H11Protocol):
        header_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                log.warning("more than %d open connections: closing a new one", max_connections)
                transport.close()
                return
            self._arm_header_deadline()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm_header_deadline()  # part of a request's headers came: they must all come in time
            else:
                self._disarm_header_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_deadline()
            super().connection_lost(exc)

        def _arm_header_deadline(self) -> None:
            if self.header_deadline is None:
                self.header_deadline = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm_header_deadline(self) -> None:
            if self.header_deadline is not None:
                self.header_deadline.cancel()
                self.header_deadline = None

        def _headers_too_slow(self) -> None:
            self.header_deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol
