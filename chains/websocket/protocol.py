"""What a WebSocket endpoint's ``run_remote`` is given: :class:`WebSocketProtocol`.

The same interface serves the three places a socket appears: the server side of a deployed
chainlet (``chains.server.websocket``), the client socket a stub opens to a WebSocket
dependency (``chains.websocket.client``), and both ends under ``chains.run_local``
(``chains.websocket.local``). Each is a :class:`SocketBase`, which builds the typed methods
on two primitives, so the three behave alike::

    class Echo(chains.ChainletBase):
        async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
            async for message in websocket:          # str or bytes, as the peer sent it
                await websocket.send(message)

This module stays light (no network library, no starlette): ``import chains`` loads it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["Message", "SocketBase", "WebSocketProtocol"]

Message = str | bytes
"""One WebSocket message: ``str`` for a text frame, ``bytes`` for a binary frame."""


@runtime_checkable
class WebSocketProtocol(Protocol):
    """A bidirectional socket: annotate ``run_remote``'s one parameter with it.

    ``receive_*`` raise :class:`chains.WebSocketDisconnect` once the peer has closed (a
    subclass of starlette's, so ``except fastapi.WebSocketDisconnect`` catches it when
    starlette is installed). Iterating yields messages until the peer closes, then stops.
    """

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def is_connected(self) -> bool: ...

    async def receive(self) -> Message: ...

    async def receive_text(self) -> str: ...

    async def receive_bytes(self) -> bytes: ...

    async def receive_json(self) -> Any: ...

    async def send(self, message: Message) -> None: ...

    async def send_text(self, data: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def send_json(self, data: Any) -> None: ...

    async def close(self, code: int = 1000, reason: str | None = None) -> None: ...

    def __aiter__(self) -> AsyncIterator[Message]: ...

    def iter_text(self) -> AsyncIterator[str]: ...

    def iter_bytes(self) -> AsyncIterator[bytes]: ...

    def iter_json(self) -> AsyncIterator[Any]: ...


class SocketBase:
    """The typed methods of :class:`WebSocketProtocol` over :meth:`receive` and :meth:`send`.

    Subclasses implement ``receive`` (the next message, raising ``WebSocketDisconnect`` once
    closed), ``send``, ``close``, ``headers`` and ``is_connected``.
    """

    _headers: Mapping[str, str] = {}

    @property
    def headers(self) -> Mapping[str, str]:
        """The upgrade request's headers, lower-cased names."""
        return self._headers

    @property
    def is_connected(self) -> bool:
        raise NotImplementedError

    async def receive(self) -> Message:
        raise NotImplementedError

    async def send(self, message: Message) -> None:
        raise NotImplementedError

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        raise NotImplementedError

    async def receive_text(self) -> str:
        message = await self.receive()
        if not isinstance(message, str):
            raise TypeError(f"expected a text message, received {len(message)} bytes in a binary one")
        return message

    async def receive_bytes(self) -> bytes:
        message = await self.receive()
        if not isinstance(message, bytes):
            raise TypeError(f"expected a binary message, received text {message[:60]!r}")
        return message

    async def receive_json(self) -> Any:
        return json.loads(await self.receive())

    async def send_text(self, data: str) -> None:
        if not isinstance(data, str):
            raise TypeError(f"send_text takes str, not {type(data).__name__}; use send_bytes for bytes")
        await self.send(data)

    async def send_bytes(self, data: bytes) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"send_bytes takes bytes, not {type(data).__name__}; use send_text for str")
        await self.send(bytes(data))

    async def send_json(self, data: Any) -> None:
        await self.send(json.dumps(data, separators=(",", ":"), ensure_ascii=False))

    def __aiter__(self) -> SocketBase:
        return self

    async def __anext__(self) -> Message:
        # A method rather than an async generator: a message costs one await less.
        from chains.websocket.disconnect import WebSocketDisconnect

        try:
            return await self.receive()
        except WebSocketDisconnect:
            raise StopAsyncIteration from None

    async def iter_text(self) -> AsyncIterator[str]:
        async for message in self:
            if not isinstance(message, str):
                raise TypeError(f"expected a text message, received {len(message)} bytes in a binary one")
            yield message

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        async for message in self:
            if not isinstance(message, bytes):
                raise TypeError(f"expected a binary message, received text {message[:60]!r}")
            yield message

    async def iter_json(self) -> AsyncIterator[Any]:
        async for message in self:
            yield json.loads(message)
