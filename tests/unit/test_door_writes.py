"""The door's protocol sends an answer's head with the first piece of its body, in one write.

Driven in-process: uvicorn's protocol, with the door, is given a transport that records each
``write``, as uvloop's would send each at once; the ASGI apps are the smallest that answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from chains.server.door import DoorLimits, guarded_http

REQUEST = b"POST /run_remote HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: 2\r\n\r\n{}"


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.protocol: Any = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_protocol(self) -> Any:
        return self.protocol

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol


def _open(app: Any) -> tuple[Any, _Transport]:
    """A connection of the door's protocol serving ``app``, on a recording transport."""
    config = uvicorn.Config(app, log_level="error", access_log=False, lifespan="off")
    config.load()
    protocol = guarded_http(DoorLimits())(config=config, server_state=ServerState(), app_state={})  # type: ignore[call-arg]
    transport = _Transport()
    transport.protocol = protocol
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


async def _passes(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def _serve(app: Any, request: bytes, passes: int) -> _Transport:
    protocol, transport = _open(app)
    protocol.data_received(request)
    await _passes(passes)
    protocol.connection_lost(None)
    return transport


async def test_a_unary_answer_goes_out_in_one_write() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        await send({"type": "http.response.body", "body": b"hello"})

    transport = await _serve(app, REQUEST, passes=5)
    assert len(transport.writes) == 1, transport.writes
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"\r\n\r\nhello")


async def test_two_answers_on_one_connection_go_out_one_write_each() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    transport = await _serve(app, REQUEST + REQUEST, passes=10)
    assert [w[-2:] for w in transport.writes] == [b"ok", b"ok"]
    assert all(w.startswith(b"HTTP/1.1 200 OK") for w in transport.writes)


async def test_a_streams_head_does_not_wait_for_its_first_item() -> None:
    first_item = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await first_item.wait()
        await send({"type": "http.response.body", "body": b"item", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    protocol, transport = _open(app)
    protocol.data_received(REQUEST)
    await _passes(5)
    assert len(transport.writes) == 1 and transport.writes[0].startswith(b"HTTP/1.1 200 OK")
    first_item.set()
    await _passes(5)
    protocol.connection_lost(None)
    assert b"".join(transport.writes).endswith(b"\r\n\r\n4\r\nitem\r\n0\r\n\r\n")


async def test_an_answer_that_closes_the_connection_sends_everything_first() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-length", b"3"), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"bye"})

    transport = await _serve(app, REQUEST, passes=5)
    assert transport.closed
    assert len(transport.writes) == 1 and transport.writes[0].endswith(b"bye")
