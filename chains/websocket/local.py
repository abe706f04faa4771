"""Both ends of a WebSocket conversation in one process, for ``chains.run_local``.

Under ``run_local`` a WebSocket dependency's stub opens a :func:`connect` to the chainlet
instance; a test talks to a WebSocket entrypoint the same way::

    with chains.run_local():
        head = Head()
        async with connect(head) as ws:
            await ws.send_text("hi")
            print(await ws.receive_text())

It behaves as the deployed socket does: messages cross as text or bytes (with ``serialize``,
text is encoded to UTF-8 and decoded again, as the wire would, so text a socket cannot carry
fails here); the endpoint raising reaches the client as :class:`RemoteError`; the client
leaving raises :class:`WebSocketDisconnect` in a waiting ``receive`` and otherwise cancels
the endpoint.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from chains.errors import ErrorDetail, RemoteError
from chains.websocket.disconnect import WebSocketDisconnect
from chains.websocket.protocol import Message, SocketBase, WebSocketProtocol
from chains.websocket.wire import CLOSE_NORMAL

__all__ = ["LocalSocket", "connect"]

_BUFFER = 16


class _Closed:
    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason


class LocalSocket(SocketBase):
    """One end of an in-process conversation; :func:`connect` makes the pair."""

    def __init__(self, headers: Mapping[str, str], serialize: bool) -> None:
        self._headers = headers
        self._serialize = serialize
        self._inbox: asyncio.Queue[Message | _Closed | ErrorDetail] = asyncio.Queue(_BUFFER)
        self.peer: LocalSocket | None = None
        self.closed = False
        self.receiving = False
        self._ended: BaseException | None = None

    @property
    def is_connected(self) -> bool:
        return not self.closed and self._ended is None

    async def receive(self) -> Message:
        if self._ended is not None:
            raise self._ended
        self.receiving = True
        try:
            item = await self._inbox.get()
        finally:
            self.receiving = False
        if isinstance(item, _Closed):
            self.closed = True
            self._ended = WebSocketDisconnect(item.code, item.reason)
            raise self._ended
        if isinstance(item, ErrorDetail):
            self.closed = True
            self._ended = RemoteError.from_detail(item)
            raise self._ended
        return item

    async def send(self, message: Message) -> None:
        if self.closed or self.peer is None:
            raise WebSocketDisconnect(CLOSE_NORMAL, "the socket is closed")
        if self._serialize:
            message = message.encode().decode() if isinstance(message, str) else bytes(message)
        await self.peer._inbox.put(message)

    async def close(self, code: int = CLOSE_NORMAL, reason: str | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        if self.peer is not None:
            self.peer._deliver_end(_Closed(code, reason or ""))

    def _deliver_end(self, end: _Closed | ErrorDetail) -> None:
        while True:  # the end goes in even when the inbox is full: the unread messages go
            try:
                self._inbox.put_nowait(end)
                return
            except asyncio.QueueFull:
                self._inbox.get_nowait()


@asynccontextmanager
async def connect(
    chainlet: Any, *, name: str | None = None, serialize: bool = True
) -> AsyncIterator[WebSocketProtocol]:
    """Open a conversation with ``chainlet``'s WebSocket ``run_remote`` in this process."""
    name = name or type(chainlet).__name__
    client = LocalSocket({}, serialize)
    server = LocalSocket({}, serialize)
    client.peer, server.peer = server, client

    async def serve() -> None:
        try:
            await chainlet.run_remote(server)
        except WebSocketDisconnect:
            pass
        except Exception as exc:
            if not server.closed:
                server.closed = True
                client._deliver_end(ErrorDetail.from_exception(exc, name))
            return
        await server.close(CLOSE_NORMAL)

    task = asyncio.ensure_future(serve())
    try:
        yield client
    finally:
        await client.close(CLOSE_NORMAL)
        if not server.receiving and not task.done():
            task.cancel()  # busy elsewhere: the client is gone, so stop, as a server does
        await asyncio.wait([task])  # its failure was the client's to receive, or is moot now
