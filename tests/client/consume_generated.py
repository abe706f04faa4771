"""A consumer of the generated client packages of ``kinds_chain.py`` (and examples/streaming),
run in the virtual environment that has only pydantic, httpx, chains (without its
dependencies) and those packages. Prints what it read as one JSON object.

``python consume_generated.py URLS_JSON KEY``.
"""

import asyncio
import json
import sys
from typing import Any

import bytes_client
import events_client
import items_client
import slow_client
import streaming_client
import structured_client
import unary_client

from chains.errors import RemoteError, StreamInterrupted


def read_sync(urls: dict[str, str], key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with unary_client.Client(urls["Unary"], api_key=key) as unary:
        summary = unary.run_remote("a b c")
        out["unary"] = [type(summary).__module__, summary.words, summary.raw.decode()]
        try:
            unary.run_remote("x", fail=True)
        except ValueError as exc:
            out["unary_error"] = isinstance(exc, RemoteError)
    with items_client.Client(urls["Items"], api_key=key) as items:
        out["items"] = [[t.text, t.index] for t in items.run_remote("one two")]
    with (
        structured_client.Client(urls["Structured"], api_key=key) as structured,
        structured.run_remote("x y") as reader,
    ):
        header = reader.read_header()
        tokens = [t.text for t in reader.read_items()]
        out["structured"] = [header.prompt, tokens, reader.read_footer().tokens]
    with streaming_client.Client(urls["Text"], api_key=key) as text:
        out["text"] = "".join(text.run_remote("hello there", max_tokens=3))
    with bytes_client.Client(urls["Bytes"], api_key=key) as raw:
        out["bytes"] = len(b"".join(raw.run_remote(300)))
    with events_client.Client(urls["Events"], api_key=key) as events:
        out["sse"] = [e.data for e in events.run_remote(2)]
    with slow_client.Client(urls["Cut"], api_key=key) as slow:
        try:
            out["cut"] = list(slow.run_remote(5.0))
        except StreamInterrupted:
            out["cut"] = "interrupted"
    return out


async def read_async(urls: dict[str, str], key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with unary_client.AsyncClient(urls["Unary"], api_key=key) as unary:
        summary = await unary.run_remote("a b c")
        out["unary"] = [type(summary).__module__, summary.words, summary.raw.decode()]
        try:
            await unary.run_remote("x", fail=True)
        except ValueError as exc:
            out["unary_error"] = isinstance(exc, RemoteError)
    async with items_client.AsyncClient(urls["Items"], api_key=key) as items:
        out["items"] = [[t.text, t.index] async for t in await items.run_remote("one two")]
    async with structured_client.AsyncClient(urls["Structured"], api_key=key) as structured:
        reader = await structured.run_remote("x y")
        header = await reader.read_header()
        tokens = [t.text async for t in reader.read_items()]
        out["structured"] = [header.prompt, tokens, (await reader.read_footer()).tokens]
    async with streaming_client.AsyncClient(urls["Text"], api_key=key) as text:
        out["text"] = "".join([p async for p in await text.run_remote("hello there", max_tokens=3)])
    async with bytes_client.AsyncClient(urls["Bytes"], api_key=key) as raw:
        out["bytes"] = len(b"".join([b async for b in await raw.run_remote(300)]))
    async with events_client.AsyncClient(urls["Events"], api_key=key) as events:
        out["sse"] = [e.data async for e in await events.run_remote(2)]
    async with slow_client.AsyncClient(urls["Cut"], api_key=key) as slow:
        try:
            out["cut"] = [p async for p in await slow.run_remote(5.0)]
        except StreamInterrupted:
            out["cut"] = "interrupted"
    return out


def main() -> None:
    urls, key = json.loads(sys.argv[1]), sys.argv[2]
    print(json.dumps({"sync": read_sync(urls, key), "async": asyncio.run(read_async(urls, key))}))


if __name__ == "__main__":
    main()
