"""The answer a chainlet's port gives while its process is down for a while: 503 at once.

A replica that keeps crashing waits seconds to minutes before its next start (the back-off).
Calls left in its socket's backlog meanwhile would wait all that time; the supervisor
answers them itself instead, on the same listening socket, with ``503`` and ``Retry-After``,
until it starts the process again::

    answer = await DownAnswer.open(sock, lambda: "Doubler is down after 6 crashes; next start in 40s")
    ...
    answer.close()  # the new process accepts from the socket from now on
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable

__all__ = ["DownAnswer"]

# Short on purpose: a stub honours Retry-After before it tries again, and a caller should
# not sleep through the back-off of a replica that may be back sooner (a restart on request).
RETRY_AFTER_SEC = 1
_HEAD_LIMIT = 64 * 1024


class _Answer(asyncio.Protocol):
    def __init__(self, detail: Callable[[], str]) -> None:
        self._detail = detail
        self._head = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        # Answered once the request's head is in (or too long to be one): a client that sent
        # a body too gets its answer and a closed connection, as any 503 with Connection: close.
        self._head += data
        if b"\r\n\r\n" in self._head or len(self._head) > _HEAD_LIMIT:
            self._send()

    def _send(self) -> None:
        if self._transport is None:
            return
        body = json.dumps({"detail": self._detail()}).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\n"
            "content-type: application/json\r\n"
            f"retry-after: {RETRY_AFTER_SEC}\r\n"
            f"content-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        ).encode()
        self._transport.write(head + body)
        self._transport.close()
        self._transport = None


class DownAnswer:
    """503s served on a copy of a listening socket; closing it leaves the socket listening."""

    def __init__(self, server: asyncio.base_events.Server) -> None:
        self._server = server

    @classmethod
    async def open(cls, sock: socket.socket, detail: Callable[[], str]) -> DownAnswer:
        # A duplicate descriptor of the same socket: the server closes its copy when it
        # closes, the backlog and the port stay with the original.
        copy = sock.dup()
        copy.setblocking(False)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Answer(detail), sock=copy, backlog=1024)
        return cls(server)

    def close(self) -> None:
        self._server.close()
