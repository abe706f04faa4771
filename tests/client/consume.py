"""A consumer of the chains in ``kinds_chain.py``, run in a virtual environment that has only
pydantic, httpx and the chains package (installed without its dependencies).

It declares its own copies of the chain's models, as a consumer would, reads every kind of
output with the sync and the async client, and prints what it read as one JSON object.
``python consume.py URLS_JSON`` where URLS_JSON maps a chainlet name to its URL.
"""

import asyncio
import json
import sys
from typing import Any

import pydantic

from chains.client import AsyncClient, Client
from chains.errors import RemoteError, StreamInterrupted
from chains.streaming import SSE, stream_types


class Started(pydantic.BaseModel):
    prompt: str


class Token(pydantic.BaseModel):
    text: str
    index: int


class Usage(pydantic.BaseModel):
    tokens: int


class Summary(pydantic.BaseModel):
    words: list[str]
    raw: bytes


TOKENS = stream_types(Token, header_type=Started, footer_type=Usage)


def events(items: list[SSE]) -> list[list[Any]]:
    return [[e.event, e.data, e.id] for e in items]


def read_sync(urls: dict[str, str], key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with Client(urls["Unary"], api_key=key) as client:
        summary = client.call(Summary, text="a b c")
        out["unary"] = [summary.words, summary.raw.decode()]
        try:
            client.call(Summary, text="x", fail=True)
        except ValueError as exc:
            out["unary_error"] = [type(exc).__name__, isinstance(exc, RemoteError), exc.detail.message]
    with Client(urls["Items"], api_key=key) as client:
        out["items"] = [[t.text, t.index] for t in client.stream(Token, text="one two three")]
    with Client(urls["Structured"], api_key=key) as client, client.stream(TOKENS, prompt="x y") as reader:
        header = reader.read_header()
        tokens = [t.text for t in reader.read_items()]
        out["structured"] = [header.prompt, tokens, reader.read_footer().tokens]
    with Client(urls["Text"], api_key=key) as client:
        out["text"] = "".join(client.stream(str, prompt="hello there", max_tokens=3))
    with Client(urls["Bytes"], api_key=key) as client:
        out["bytes"] = b"".join(client.stream(bytes, size=1000)).hex()
    with Client(urls["Events"], api_key=key) as client:
        out["sse"] = events(list(client.stream(SSE, count=2)))
    with Client(urls["Cut"], api_key=key) as client:
        pieces: list[str] = []
        try:
            for piece in client.stream(str, pause=5.0):
                pieces.append(piece)
            out["cut"] = [pieces, None]
        except StreamInterrupted as exc:
            out["cut"] = [pieces, str(exc)]
    return out


async def read_async(urls: dict[str, str], key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with AsyncClient(urls["Unary"], api_key=key) as client:
        summary = await client.call(Summary, text="a b c")
        out["unary"] = [summary.words, summary.raw.decode()]
        try:
            await client.call(Summary, text="x", fail=True)
        except ValueError as exc:
            out["unary_error"] = [type(exc).__name__, isinstance(exc, RemoteError), exc.detail.message]
    async with AsyncClient(urls["Items"], api_key=key) as client:
        out["items"] = [[t.text, t.index] async for t in await client.stream(Token, text="one two three")]
    async with (
        AsyncClient(urls["Structured"], api_key=key) as client,
        await client.stream(TOKENS, prompt="x y") as reader,
    ):
        header = await reader.read_header()
        tokens = [t.text async for t in reader.read_items()]
        out["structured"] = [header.prompt, tokens, (await reader.read_footer()).tokens]
    async with AsyncClient(urls["Text"], api_key=key) as client:
        out["text"] = "".join([p async for p in await client.stream(str, prompt="hello there", max_tokens=3)])
    async with AsyncClient(urls["Bytes"], api_key=key) as client:
        out["bytes"] = b"".join([b async for b in await client.stream(bytes, size=1000)]).hex()
    async with AsyncClient(urls["Events"], api_key=key) as client:
        out["sse"] = events([e async for e in await client.stream(SSE, count=2)])
    async with AsyncClient(urls["Cut"], api_key=key) as client:
        pieces: list[str] = []
        try:
            async for piece in await client.stream(str, pause=5.0):
                pieces.append(piece)
            out["cut"] = [pieces, None]
        except StreamInterrupted as exc:
            out["cut"] = [pieces, str(exc)]
    return out


def main() -> None:
    urls = json.loads(sys.argv[1])
    key = sys.argv[2]
    result = {"sync": read_sync(urls, key), "async": asyncio.run(read_async(urls, key))}
    third_party = {name.split(".")[0] for name in sys.modules} - set(sys.stdlib_module_names)
    result["modules"] = sorted(third_party)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
