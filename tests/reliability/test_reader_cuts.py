"""A typed stream read outside a chain, over a plain HTTP client, whose connection is cut.

``chains.stream_reader(TYPES, response.aiter_bytes())`` is how a program that is not a
chainlet reads a structured stream. When a proxy or the peer cuts the connection mid-stream,
the HTTP client raises its own error (httpx's ``RemoteProtocolError`` or ``ReadError``,
aiohttp's ``ClientPayloadError``); the reader must report ``StreamInterrupted``, as it does
when the bytes simply stop, so that one ``except`` holds whatever client fed it.

The server is a real socket on 127.0.0.1 that answers with a chunked response carrying the
frames of a few items and then closes the connection: at a chunk boundary, inside a chunk,
or with a reset.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import httpx
import pydantic
import pytest

import chains
from tests.reliability.conftest import record


class Token(pydantic.BaseModel):
    text: str


TOKENS = chains.stream_types(Token)
SENT = 3


def _frames() -> bytes:
    writer = chains.stream_writer(TOKENS)
    return b"".join(writer.yield_item(Token(text=f"t{i}")) for i in range(SENT))


CUTS = ("chunk_boundary", "inside_chunk", "reset")


@asynccontextmanager
async def cutting_server(cut: str) -> AsyncIterator[str]:
    """An HTTP server that sends SENT items of a stream that never ends, then cuts as told."""
    body = _frames()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-chains-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        if cut == "inside_chunk":  # a chunk announced longer than what follows
            writer.write(f"{len(body) + 100:x}\r\n".encode() + body)
        else:
            writer.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)  # the client reads the items before the cut
        if cut == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/stream"
    finally:
        server.close()
        await server.wait_closed()


async def _read_httpx(url: str, seen: list[Token]) -> None:
    async with (
        httpx.AsyncClient(timeout=10) as client,
        client.stream("GET", url) as response,
    ):
        async for token in chains.stream_reader(TOKENS, response.aiter_bytes()):
            seen.append(token)


async def _read_aiohttp(url: str, seen: list[Token]) -> None:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.get(url) as response,
    ):
        async for token in chains.stream_reader(TOKENS, response.content.iter_any()):
            seen.append(token)


CLIENTS: dict[str, Callable[[str, list[Token]], Any]] = {"httpx": _read_httpx, "aiohttp": _read_aiohttp}


@pytest.mark.parametrize("cut", CUTS)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_cut_connection_is_a_stream_interruption_for_any_http_client(client: str, cut: str) -> None:
    async def scenario() -> chains.StreamInterrupted:
        seen: list[Token] = []
        async with cutting_server(cut) as url:
            with pytest.raises(chains.StreamInterrupted) as info:
                await asyncio.wait_for(CLIENTS[client](url, seen), 20)
        assert seen == [Token(text=f"t{i}") for i in range(SENT)]
        return info.value

    interrupted = asyncio.run(scenario())
    message = str(interrupted)
    assert f"broke off after {SENT} items" in message and "incomplete" in message
    cause = interrupted.__cause__
    assert cause is not None and type(cause).__name__ in message
    record(
        f"reader_cut_{client}_{cut}",
        items_before_cut=SENT,
        client_error=type(cause).__name__,
        raised=type(interrupted).__name__,
    )
