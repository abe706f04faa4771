"""The few ASGI primitives the chainlet server needs: headers, bodies, plain responses."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from chains.wire import JSON_MEDIA_TYPE

__all__ = [
    "BodyTooLarge",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "header_map",
    "read_body",
    "send_bytes",
    "send_json",
]

_JSON = JSON_MEDIA_TYPE.encode()

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = Iterable[tuple[bytes, bytes]]


class BodyTooLarge(Exception):
    """The request body is over the configured limit."""


class ClientGone(Exception):
    """The client disconnected before its request body arrived whole."""


def header_map(scope: Scope) -> dict[str, str]:
    """Request headers by lower-case name (the last one wins for repeated names)."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}


async def read_body(receive: Receive, limit: int, content_length: str | None) -> bytes:
    """The whole request body, refused as soon as it is known to exceed ``limit`` bytes."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            declared = 0
        if declared > limit:
            raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def send_bytes(
    send: Send, status: int, body: bytes, content_type: bytes, headers: Headers = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, content: Any, headers: Headers = ()) -> None:
    body = json.dumps(content, separators=(",", ":")).encode()
    await send_bytes(send, status, body, _JSON, headers)
