"""The WebSocket floor: a plain ASGI echo, or (with BARE_WS_UPSTREAM) a relay to such an echo
through one ``websockets`` client connection per socket, uncompressed as a chains stub's is.
``GET /readyz`` answers 200."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

UPSTREAM = os.environ.get("BARE_WS_UPSTREAM")


async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    if scope["type"] != "websocket":
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    if UPSTREAM is None:
        while (message := await receive())["type"] == "websocket.receive":
            await send({**message, "type": "websocket.send"})
        return
    from websockets.asyncio.client import connect

    async with connect(UPSTREAM, max_size=None, compression=None) as upstream:
        while (message := await receive())["type"] == "websocket.receive":
            data = message.get("text")
            await upstream.send(data if data is not None else message["bytes"])
            answer = await upstream.recv()
            await send({"type": "websocket.send", ("text" if isinstance(answer, str) else "bytes"): answer})
