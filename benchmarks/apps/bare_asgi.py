"""Lower bound: a plain ASGI callable with no framework, to show what routing and request objects cost."""

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from pydantic import ValidationError

from benchmarks.apps import GenerateRequest, respond

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON_HEADERS = [(b"content-type", b"application/json")]


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("client disconnected before sending the whole body")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    # Small bodies arrive in one message; skip the join copy for them.
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _send(send: Send, status: int, body: bytes) -> None:
    headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def lifespan(receive: Receive, send: Send) -> None:
    # Answering lifespan keeps uvicorn from logging that the protocol is unsupported on every start.
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    if scope["path"] != "/generate":
        await _send(send, 404, b'{"detail":"Not Found"}')
        return
    if scope["method"] != "POST":
        await _send(send, 405, b'{"detail":"Method Not Allowed"}')
        return
    try:
        parsed = GenerateRequest.model_validate_json(await read_body(receive))
    except ValidationError as exc:
        await _send(send, 422, exc.json().encode())
        return
    except ConnectionError:
        return
    await _send(send, 200, respond(parsed).model_dump_json().encode())
