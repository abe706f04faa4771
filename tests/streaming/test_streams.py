"""stream_types, stream_writer and stream_reader: order, schema checks, truncation."""

from __future__ import annotations

import asyncio
import dataclasses
import doctest
import hashlib
import json
import re
import subprocess
import sys
import textwrap
import typing
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chains.streaming.types
from chains.errors import ChainsUsageError, ErrorDetail, RemoteError, StreamInterrupted
from chains.streaming import (
    FooterStreamReader,
    HeaderFooterStreamReader,
    StreamReader,
    StreamSchemaMismatch,
    StreamTypes,
    WriterChunk,
    stream_reader,
    stream_types,
    stream_writer,
)
from chains.streaming.framing import (
    FrameKind,
    FrameTooLarge,
    StreamProtocolError,
    UnknownFrameKind,
    encode_frame,
)

REPO = Path(__file__).resolve().parents[2]


class Token(pydantic.BaseModel):
    text: str


class Usage(pydantic.BaseModel):
    tokens: int


class Meta(pydantic.BaseModel):
    model: str
    temperature: float = 0.0


TOKENS = stream_types(Token, footer_type=Usage)
FULL = stream_types(Token, header_type=Meta, footer_type=Usage)
ITEMS = stream_types(Token)
END_FRAME_LEN = 5


def full_stream(texts: list[str], meta: Meta | None = None) -> bytes:
    writer = stream_writer(FULL)
    parts = [writer.yield_header(meta or Meta(model="m"))]
    parts += [writer.yield_item(Token(text=t)) for t in texts]
    parts += [writer.yield_footer(Usage(tokens=len(texts))), writer.end()]
    return b"".join(parts)


async def read_full(
    chunks: Iterable[bytes] | AsyncIterator[bytes], max_frame_size: int = 1 << 20
) -> tuple[Meta, list[Token], Usage]:
    reader = stream_reader(FULL, chunks, max_frame_size=max_frame_size)
    header = await reader.read_header()
    items = [item async for item in reader.read_items()]
    footer = await reader.read_footer()
    return header, items, footer


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted(min(max(c, 0), len(data)) for c in cuts)
    out, start = [], 0
    for point in points:
        out.append(data[start:point])
        start = point
    return [*out, data[start:]]


def test_module_doctests() -> None:
    assert doctest.testmod(chains.streaming.types).failed == 0


# -- stream_types -----------------------------------------------------------------------------


def test_stream_types_are_frozen_hashable_and_equal_by_value() -> None:
    again = stream_types(Token, footer_type=Usage)
    assert again == TOKENS and hash(again) == hash(TOKENS) and again.fingerprint == TOKENS.fingerprint
    assert {TOKENS: 1}[again] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        TOKENS.item_type = Usage  # type: ignore[misc]
    assert repr(FULL) == "stream_types(Token, header_type=Meta, footer_type=Usage)"


def test_fingerprint_differs_by_every_part() -> None:
    prints = {
        stream_types(Token).fingerprint,
        stream_types(Usage).fingerprint,
        stream_types(Token, header_type=Usage).fingerprint,
        stream_types(Token, footer_type=Usage).fingerprint,
        stream_types(Token, header_type=Usage, footer_type=Usage).fingerprint,
        stream_types(int).fingerprint,
        stream_types(list[int]).fingerprint,
    }
    assert len(prints) == 7
    assert all(re.fullmatch("[0-9a-f]{32}", p) for p in prints)
    # The digest is the documented one: sha256 of the parts' schemas as canonical JSON, so a
    # peer on another version computes the same.
    canonical = json.dumps(
        {"item": {"type": "integer"}, "header": None, "footer": None}, sort_keys=True, separators=(",", ":")
    )
    assert stream_types(int).fingerprint == hashlib.sha256(canonical.encode()).hexdigest()[:32]


def test_fingerprint_follows_the_schema_not_the_docstring() -> None:
    class Documented(pydantic.BaseModel):
        """Some words."""

        text: str = pydantic.Field(description="what was said")

    class Undocumented(pydantic.BaseModel):
        text: str

    class Retyped(pydantic.BaseModel):
        text: int

    Documented.__name__ = Undocumented.__name__ = Retyped.__name__ = "Same"
    for model in (Documented, Undocumented, Retyped):
        model.__qualname__ = "Same"
        model.model_rebuild(force=True)
    assert stream_types(Documented).fingerprint == stream_types(Undocumented).fingerprint
    assert stream_types(Retyped).fingerprint != stream_types(Undocumented).fingerprint


def test_fingerprint_is_the_same_in_another_process(tmp_path: Path) -> None:
    # A fresh interpreter has another hash seed and import order: the digest must not care.
    script = tmp_path / "fp.py"
    script.write_text(
        textwrap.dedent(
            """
            import pydantic
            from chains.streaming import stream_types

            class Token(pydantic.BaseModel):
                text: str

            class Usage(pydantic.BaseModel):
                tokens: int

            print(stream_types(Token, footer_type=Usage).fingerprint)
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, cwd=REPO, timeout=60
    )
    assert out.stdout.strip() == TOKENS.fingerprint


def test_an_unserializable_type_fails_where_the_stream_is_declared() -> None:
    class Opaque:
        pass

    with pytest.raises(ChainsUsageError, match=r"item type Opaque cannot be sent over the wire"):
        stream_types(Opaque)
    with pytest.raises(ChainsUsageError, match=r"footer type Opaque"):
        stream_types(Token, footer_type=Opaque)


def test_stream_types_refuses_nested_stream_types() -> None:
    with pytest.raises(ChainsUsageError, match="already a StreamTypes"):
        stream_types(TOKENS)


# -- writer -----------------------------------------------------------------------------------


def test_the_first_frame_carries_the_preamble_and_returns_a_writer_chunk() -> None:
    writer = stream_writer(ITEMS)
    first = writer.yield_item(Token(text="a"))
    second = writer.yield_item(Token(text="b"))
    assert isinstance(first, WriterChunk) and isinstance(first, bytes)
    assert first.startswith(b"P") and first.find(b'"fingerprint":"' + ITEMS.fingerprint.encode()) > 0
    assert second == encode_frame(FrameKind.ITEM, b'{"text":"b"}')
    assert writer.end() == encode_frame(FrameKind.END, b"")


async def test_a_writers_frames_alone_form_a_valid_stream() -> None:
    assert await read_full([full_stream(["a", "b"])]) == (
        Meta(model="m"),
        [Token(text="a"), Token(text="b")],
        Usage(tokens=2),
    )
    writer = stream_writer(ITEMS)
    reader = stream_reader(ITEMS, [writer.end()])  # an empty stream still carries its preamble
    assert [item async for item in reader.read_items()] == []


def test_writer_enforces_the_order_of_parts() -> None:
    writer = stream_writer(FULL)
    writer.yield_header(Meta(model="m"))
    with pytest.raises(ChainsUsageError, match="one header"):
        writer.yield_header(Meta(model="m"))
    writer.yield_item(Token(text="a"))
    writer.yield_footer(Usage(tokens=1))
    with pytest.raises(ChainsUsageError, match="no item may follow the footer"):
        writer.yield_item(Token(text="b"))
    with pytest.raises(ChainsUsageError, match="one footer"):
        writer.yield_footer(Usage(tokens=1))
    writer.end()
    assert writer.closed
    with pytest.raises(ChainsUsageError, match="already ended"):
        writer.end()
    with pytest.raises(ChainsUsageError, match="already ended"):
        writer.error(ValueError("late"))


def test_header_after_an_item_is_refused() -> None:
    writer = stream_writer(stream_types(Token, header_type=Meta))
    writer.yield_header(Meta(model="m"))
    writer.yield_item(Token(text="a"))
    with pytest.raises(ChainsUsageError, match="one header"):
        writer.yield_header(Meta(model="m"))
    headless = stream_writer(stream_types(Token, header_type=Meta))
    headless.yield_item(Token(text="a"))  # a declared header may be left out, not sent late
    with pytest.raises(ValueError, match="Cannot yield header after other data has been sent"):
        headless.yield_header(Meta(model="m"))


def test_the_error_names_the_writer_types() -> None:
    writer = stream_writer(TOKENS)
    writer.yield_footer(Usage(tokens=0))
    with pytest.raises(
        ChainsUsageError, match=r"stream_writer\(stream_types\(Token, footer_type=Usage\)\)\.yield_item"
    ):
        writer.yield_item(Token(text="x"))


def test_writer_validates_items_like_unary_results() -> None:
    writer = stream_writer(ITEMS)
    assert writer.yield_item({"text": "coerced"}).endswith(b'{"text":"coerced"}')  # type: ignore[arg-type]
    with pytest.raises(ChainsUsageError, match="the stream item must be a Token, got int 5"):
        writer.yield_item(5)  # type: ignore[arg-type]
    ints = stream_writer(stream_types(int))
    with pytest.raises(ChainsUsageError, match="must be a int, got str 'x'"):
        ints.yield_item("x")  # type: ignore[arg-type]


async def test_non_model_item_types_round_trip() -> None:
    types = stream_types(list[int])
    writer = stream_writer(types)
    data = writer.yield_item([1, 2]) + writer.yield_item([]) + writer.end()
    assert [item async for item in stream_reader(types, [data]).read_items()] == [[1, 2], []]
    with_bytes = stream_types(dict[str, bytes])
    writer2 = stream_writer(with_bytes)
    data2 = writer2.yield_item({"k": b"\xff\x00"}) + writer2.end()
    assert [item async for item in stream_reader(with_bytes, [data2])] == [{"k": b"\xff\x00"}]


async def test_writer_error_frame_reaches_the_reader_as_remote_error() -> None:
    writer = stream_writer(TOKENS)
    parts = [writer.yield_item(Token(text="a"))]
    try:
        raise ValueError("model exploded")
    except ValueError as exc:
        parts.append(writer.error(exc, chainlet="Generator"))
    assert writer.closed
    reader = stream_reader(TOKENS, parts)
    got = []
    with pytest.raises(ValueError, match="model exploded") as caught:
        async for item in reader.read_items():
            got.append(item)
    assert got == [Token(text="a")]
    assert isinstance(caught.value, RemoteError)
    assert caught.value.detail is not None and caught.value.detail.chainlet == "Generator"
    with pytest.raises(ValueError, match="model exploded"):  # the failure sticks
        await reader.read_footer()


# -- reader -----------------------------------------------------------------------------------


async def test_reader_kinds_follow_the_types() -> None:
    assert type(stream_reader(ITEMS, [])) is StreamReader
    assert type(stream_reader(TOKENS, [])) is FooterStreamReader
    assert type(stream_reader(FULL, [])) is HeaderFooterStreamReader
    assert not hasattr(stream_reader(ITEMS, []), "read_header")
    assert not hasattr(stream_reader(ITEMS, []), "read_footer")
    assert not hasattr(stream_writer(ITEMS), "yield_header")
    assert not hasattr(stream_writer(TOKENS), "yield_header")


async def test_an_unread_header_is_refused_and_read_footer_skips_unread_items() -> None:
    data = full_stream(["a", "b", "c"])
    reader = stream_reader(FULL, [data])
    with pytest.raises(ChainsUsageError, match=r"call `reader.read_header\(\)` first"):
        await anext(aiter(reader.read_items()))
    assert await reader.read_header() == Meta(model="m")
    async for item in reader.read_items():
        assert item == Token(text="a")
        break
    assert await reader.read_footer() == Usage(tokens=3)
    assert await reader.read_footer() == Usage(tokens=3)
    assert reader.items_read == 3  # the two skipped ones were still read and checked
    assert [item async for item in reader.read_items()] == []


async def test_footer_reader_checks_the_end_frame_after_the_footer() -> None:
    data = full_stream(["a"])
    reader = stream_reader(FULL, [data[:-END_FRAME_LEN]])
    assert await reader.read_header() == Meta(model="m")
    assert [item async for item in reader.read_items()] == [Token(text="a")]
    with pytest.raises(StreamInterrupted, match="after its footer"):
        await reader.read_footer()


async def test_fingerprint_mismatch_names_both_schemas() -> None:
    data = full_stream(["a"])
    reader = stream_reader(stream_types(Usage), [data])
    with pytest.raises(StreamSchemaMismatch) as caught:
        async for _ in reader.read_items():
            pass
    message = str(caught.value)
    assert "stream_types(Token, header_type=Meta, footer_type=Usage)" in message
    assert "stream_types(Usage)" in message
    assert FULL.fingerprint in message and stream_types(Usage).fingerprint in message


async def test_same_names_different_fields_says_the_versions_differ() -> None:
    writer = stream_writer(ITEMS)
    data = writer.yield_item(Token(text="a")) + writer.end()

    class Token2(pydantic.BaseModel):  # the consumer's other version of Token
        text: str
        logprob: float

    Token2.__name__ = Token2.__qualname__ = "Token"
    reader = stream_reader(stream_types(Token2), [data])
    with pytest.raises(StreamSchemaMismatch, match="different versions of these types"):
        await anext(aiter(reader))


async def test_stream_interrupted_at_every_offset_of_a_stream() -> None:
    data = full_stream(["alpha", "βeta", "ж" * 40, ""])
    expected = await read_full([data])
    for cut in range(len(data)):
        with pytest.raises(StreamInterrupted, match="without its end frame"):
            await read_full([data[:cut]])
    assert await read_full([data]) == expected


@settings(max_examples=25, deadline=None)
@given(
    texts=st.lists(st.text(max_size=12), max_size=8),
    cuts=st.lists(st.integers(0, 2000), max_size=6),
)
def test_random_items_and_chunkings_give_back_the_same_items(texts: list[str], cuts: list[int]) -> None:
    meta = Meta(model="m", temperature=0.5)
    data = full_stream(texts, meta)

    async def check() -> None:
        header, items, footer = await read_full(chunked(data, cuts))
        assert header == meta and [t.text for t in items] == texts and footer == Usage(tokens=len(texts))
        # Every cut of the same stream, re-chunked the same way, is refused: never a shorter result.
        for cut in range(len(data)):
            with pytest.raises(StreamInterrupted):
                await read_full(chunked(data[:cut], cuts))

    asyncio.run(check())


async def test_bytes_after_the_end_frame_are_refused() -> None:
    data = full_stream(["a"])
    with pytest.raises(StreamProtocolError, match="followed the end frame"):
        await read_full([data + encode_frame(FrameKind.ITEM, b'{"text":"b"}')])
    with pytest.raises(StreamProtocolError, match="followed the end frame"):
        await read_full([data, b"x"])


async def test_a_frame_over_the_readers_limit_is_refused() -> None:
    big = full_stream(["x" * 5000])
    with pytest.raises(FrameTooLarge, match="over this reader's limit of 1000 bytes"):
        await read_full([big], max_frame_size=1000)
    assert (await read_full([big], max_frame_size=6000))[1] == [Token(text="x" * 5000)]


async def test_unknown_kinds_and_missing_preamble_are_refused() -> None:
    preamble_and_item = stream_writer(ITEMS).yield_item(Token(text="a"))
    with pytest.raises(UnknownFrameKind):
        await anext(aiter(stream_reader(ITEMS, [preamble_and_item + b"Z\x00\x00\x00\x00"])))
    reader = stream_reader(ITEMS, [encode_frame(FrameKind.ITEM, b'{"text":"a"}')])
    with pytest.raises(StreamProtocolError, match="starts with a item frame instead of a preamble"):
        await anext(aiter(reader))


async def test_frames_out_of_order_are_protocol_errors() -> None:
    head = ITEMS.wire.preamble
    header = encode_frame(FrameKind.HEADER, b'{"model":"m"}')
    end = encode_frame(FrameKind.END, b"")
    with pytest.raises(
        StreamProtocolError, match="a header frame, but stream_types\\(Token\\) declares no header"
    ):
        async for _ in stream_reader(ITEMS, [head + header + end]):
            pass
    no_footer = TOKENS.wire.preamble + encode_frame(FrameKind.ITEM, b'{"text":"a"}') + end
    with pytest.raises(StreamProtocolError, match="Stream does not contain footer"):
        await stream_reader(TOKENS, [no_footer]).read_footer()
    no_header = FULL.wire.preamble + encode_frame(FrameKind.ITEM, b'{"text":"a"}')
    with pytest.raises(StreamProtocolError, match="Stream does not contain header"):
        await stream_reader(FULL, [no_header]).read_header()
    twice = FULL.wire.preamble + FULL.wire.preamble
    with pytest.raises(StreamProtocolError, match="a second preamble frame"):
        await stream_reader(FULL, [twice]).read_header()


async def test_an_invalid_item_payload_says_which_part_and_type() -> None:
    data = (
        ITEMS.wire.preamble + encode_frame(FrameKind.ITEM, b'{"nope":1}') + encode_frame(FrameKind.END, b"")
    )
    with pytest.raises(
        StreamProtocolError, match="item frame of the stream_types\\(Token\\) stream is not a valid Token"
    ):
        async for _ in stream_reader(ITEMS, [data]):
            pass


async def test_an_error_frame_before_any_item() -> None:
    detail = ErrorDetail(exc_type="KeyError", exc_module="builtins", message="'hf_token'", chainlet="Gen")
    data = TOKENS.wire.preamble + encode_frame(FrameKind.ERROR, detail.model_dump_json().encode())
    with pytest.raises(KeyError) as caught:
        async for _ in stream_reader(TOKENS, [data]).read_items():
            pass
    assert isinstance(caught.value, RemoteError) and "in chainlet Gen" in str(caught.value)


async def test_reader_reads_an_async_source_and_closes_it() -> None:
    closed = []
    data = full_stream(["a", "b"])

    async def source() -> AsyncIterator[bytes]:
        try:
            for i in range(0, len(data), 7):
                await asyncio.sleep(0)
                yield data[i : i + 7]
        finally:
            closed.append(True)

    assert (await read_full(source()))[1] == [Token(text="a"), Token(text="b")]
    assert closed == [True]
    closed.clear()
    async with stream_reader(FULL, source()) as reader:
        await reader.read_header()
    assert closed == [True]


async def test_reader_refuses_a_source_that_is_not_chunks() -> None:
    with pytest.raises(ChainsUsageError, match="iterator of bytes chunks"):
        stream_reader(ITEMS, b"abc")  # type: ignore[arg-type]
    with pytest.raises(ChainsUsageError, match="takes the StreamTypes"):
        stream_reader(Token, [])  # type: ignore[call-overload]


def test_stream_types_class_is_generic_for_annotations() -> None:
    # Annotations are not evaluated in this module (postponed), so resolve one explicitly.
    def consume(types: StreamTypes[Token, None, Usage]) -> None: ...

    hint = typing.get_type_hints(consume)["types"]
    assert typing.get_origin(hint) is StreamTypes
    assert typing.get_args(hint) == (Token, type(None), Usage)
