"""Checked by mypy in test_typing.py: each `# E:` line must fail with that text, no other line may.

A reader or writer only has the methods of the parts its StreamTypes declares, and so has what
a client's stream() and resumable_stream() return.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, assert_type

import pydantic

from chains.client import AsyncClient, Client, StructuredStream
from chains.streaming import (
    FooterStreamReader,
    HeaderFooterStreamReader,
    HeaderFooterStreamWriter,
    StreamReader,
    StreamTypes,
    StreamWriter,
    stream_reader,
    stream_types,
    stream_writer,
)


class Token(pydantic.BaseModel):
    text: str


class Usage(pydantic.BaseModel):
    tokens: int


class Meta(pydantic.BaseModel):
    model: str


ITEMS = stream_types(Token)
TOKENS = stream_types(Token, footer_type=Usage)
HEADED = stream_types(Token, header_type=Meta)
FULL = stream_types(Token, header_type=Meta, footer_type=Usage)
OPTIONAL = stream_types(int | None)

assert_type(ITEMS, StreamTypes[Token, None, None])
assert_type(TOKENS, StreamTypes[Token, None, Usage])
assert_type(HEADED, StreamTypes[Token, Meta, None])
assert_type(FULL, StreamTypes[Token, Meta, Usage])
assert_type(OPTIONAL, StreamTypes[Any, None, None])


async def consume(source: AsyncIterator[bytes]) -> None:
    tokens = stream_reader(TOKENS, source)
    assert_type(tokens, FooterStreamReader[Token, Usage])
    async for token in tokens.read_items():
        assert_type(token, Token)
    assert_type(await tokens.read_footer(), Usage)
    await tokens.read_header()  # E: "FooterStreamReader[Token, Usage]" has no attribute "read_header"

    items = stream_reader(ITEMS, source)
    assert_type(items, StreamReader[Token])
    await items.read_header()  # E: "StreamReader[Token]" has no attribute "read_header"
    await items.read_footer()  # E: "StreamReader[Token]" has no attribute "read_footer"

    headed = stream_reader(HEADED, source)
    assert_type(await headed.read_header(), Meta)
    await headed.read_footer()  # E: has no attribute "read_footer"

    full = stream_reader(FULL, source)
    assert_type(await full.read_header(), Meta)
    assert_type(await full.read_footer(), Usage)
    async for token in full:
        assert_type(token, Token)


def produce() -> None:
    writer = stream_writer(TOKENS)
    writer.yield_item(Token(text="a"))
    writer.yield_footer(Usage(tokens=1))
    writer.yield_header(Meta(model="m"))  # E: has no attribute "yield_header"
    writer.yield_item(Usage(tokens=1))  # E: incompatible type "Usage"; expected "Token"
    writer.yield_footer(Token(text="a"))  # E: incompatible type "Token"; expected "Usage"

    plain = stream_writer(ITEMS)
    assert_type(plain, StreamWriter[Token])
    plain.yield_footer(Usage(tokens=1))  # E: "StreamWriter[Token]" has no attribute "yield_footer"
    plain.yield_header(Meta(model="m"))  # E: "StreamWriter[Token]" has no attribute "yield_header"

    full = stream_writer(FULL)
    assert_type(full, HeaderFooterStreamWriter[Token, Meta, Usage])
    full.yield_header(Meta(model="m"))
    full.yield_item(Token(text="a"))
    full.yield_footer(Usage(tokens=1))
    full.end()


def resume(client: Client) -> None:
    full = client.resumable_stream(FULL, prompt="hi")
    assert_type(full, StructuredStream[Token, Meta, Usage])
    assert_type(full.read_header(), Meta)
    assert_type(full.read_footer(), Usage)
    assert_type(client.resumable_stream(Token, prompt="hi"), Iterator[Token])


async def resume_async(client: AsyncClient) -> None:
    tokens = await client.resumable_stream(TOKENS, prompt="hi")
    assert_type(tokens, FooterStreamReader[Token, Usage])
    await tokens.read_header()  # E: "FooterStreamReader[Token, Usage]" has no attribute "read_header"
    full = await client.resumable_stream(FULL, prompt="hi")
    assert_type(full, HeaderFooterStreamReader[Token, Meta, Usage])
    assert_type(await full.read_header(), Meta)
    assert_type(await client.resumable_stream(Token, prompt="hi"), AsyncIterator[Token])
