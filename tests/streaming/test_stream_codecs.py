"""The wire forms of an endpoint's stream: framed, SSE and raw, and negotiating between them."""

from __future__ import annotations

import asyncio
import base64
import doctest
import json
import pickle
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chains.streaming.kinds
import chains.streaming.shape
from chains.errors import ChainsUsageError, RemoteError, StreamInterrupted, StreamProtocolError
from chains.streaming import (
    NDJSON_MEDIA_TYPE,
    TEXT_MEDIA_TYPE,
    StreamSchemaMismatch,
    StreamShape,
    StreamTypes,
    WriterChunk,
    decode_framed,
    decode_raw,
    encode_framed,
    encode_raw,
    encode_sse,
    kinds,
    raw_media_type,
    shape_of,
    stream_reader,
    stream_types,
    stream_writer,
)
from chains.streaming.framing import FrameDecoder, FrameKind, FrameTooLarge, encode_frame
from chains.streaming.sse import SSE


class Token(pydantic.BaseModel):
    text: str


class Usage(pydantic.BaseModel):
    tokens: int


class Meta(pydantic.BaseModel):
    model: str


TOKENS = stream_types(Token, footer_type=Usage)
FULL = stream_types(Token, header_type=Meta, footer_type=Usage)
TEXT = StreamShape.of(kinds.TEXT)
BYTES = StreamShape.of(kinds.BYTES)
EVENTS = StreamShape.of(kinds.SSE_EVENTS)
ITEMS = StreamShape.of(kinds.ITEMS, item_type=Token)


async def produce(values: Iterable[Any], fail: BaseException | None = None) -> AsyncIterator[Any]:
    for value in values:
        await asyncio.sleep(0)
        yield value
    if fail is not None:
        raise fail


async def collect(source: AsyncIterator[Any]) -> list[Any]:
    return [value async for value in source]


async def round_trip(shape: StreamShape, values: list[Any]) -> list[Any]:
    return await collect(decode_framed(shape, encode_framed(shape, produce(values))))


def frames_of(chunks: list[bytes]) -> list[tuple[int, bytes]]:
    decoder = FrameDecoder()
    return [frame for chunk in chunks for frame in decoder.feed(chunk)]


def rechunk(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted(min(c, len(data)) for c in cuts)
    out, start = [], 0
    for point in points:
        out.append(data[start:point])
        start = point
    return [*out, data[start:]]


def failing_generator_error() -> ValueError:
    return ValueError("the model ran out of tokens")


def test_module_doctests() -> None:
    assert doctest.testmod(chains.streaming.shape).failed == 0
    assert doctest.testmod(chains.streaming.kinds).failed == 0


# -- shapes -----------------------------------------------------------------------------------


def test_shapes_and_their_fingerprints() -> None:
    assert (TEXT.fingerprint, BYTES.fingerprint, EVENTS.fingerprint) == ("text", "bytes", "sse")
    assert ITEMS.types == stream_types(Token) and ITEMS.fingerprint == stream_types(Token).fingerprint
    assert StreamShape.of(kinds.STRUCTURED, types=TOKENS).types is TOKENS
    assert StreamShape.for_item_type(str) == TEXT
    assert StreamShape.for_item_type(SSE) == EVENTS
    assert StreamShape.for_item_type(Token) == ITEMS
    assert StreamShape.for_item_type(bytes, TOKENS).kind is kinds.STRUCTURED
    assert ITEMS.item_type is Token and TEXT.item_type is str
    assert hash(StreamShape.of(kinds.ITEMS, item_type=Token)) == hash(ITEMS)


def test_kinds_are_read_back_from_their_names() -> None:
    every = [kinds.UNARY, kinds.TEXT, kinds.BYTES, kinds.SSE_EVENTS, kinds.ITEMS, kinds.STRUCTURED]
    assert [kind.name for kind in every] == ["unary", "text", "bytes", "sse", "items", "structured"]
    assert all(kinds.kind_named(kind.name) is kind for kind in every)
    assert all(pickle.loads(pickle.dumps(kind)) is kind for kind in every)
    assert [kind.is_stream for kind in every] == [False, True, True, True, True, True]
    assert kinds.stream_kind_named("sse") is kinds.SSE_EVENTS


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (lambda: StreamShape.of(kinds.ITEMS), "needs its item type"),
        (lambda: StreamShape.of(kinds.STRUCTURED), "needs its StreamTypes"),
        (lambda: StreamShape.of(kinds.TEXT, types=TOKENS), "only a structured stream takes StreamTypes"),
        (lambda: StreamShape.of(kinds.TEXT, item_type=int), "a text stream yields str"),
        (lambda: kinds.stream_kind_named("rows"), "unknown stream kind 'rows'"),
        (lambda: kinds.stream_kind_named("unary"), "unknown stream kind 'unary'"),
        (lambda: kinds.kind_named("rows"), "unknown output kind 'rows'"),
        (lambda: StreamShape.of("text"), "takes a stream kind"),  # type: ignore[arg-type]
    ],
)
def test_shape_misuse_is_explained(call: Any, problem: str) -> None:
    with pytest.raises(ChainsUsageError, match=problem):
        call()


@dataclass(frozen=True)
class FakeEndpoint:
    output_kind: kinds.OutputKind
    output_type: Any
    stream_types: StreamTypes[Any, Any, Any] | None = None


def test_shape_of_an_endpoint_is_cached() -> None:
    first = shape_of(FakeEndpoint(kinds.ITEMS, list[int]))
    assert first is shape_of(FakeEndpoint(kinds.ITEMS, list[int]))
    assert shape_of(FakeEndpoint(kinds.STRUCTURED, bytes, TOKENS)).types is TOKENS
    assert shape_of(FakeEndpoint(kinds.TEXT, str)) == TEXT
    with pytest.raises(ChainsUsageError, match="not a stream"):
        shape_of(FakeEndpoint(kinds.UNARY, int))


# -- framed -----------------------------------------------------------------------------------


async def test_every_kind_round_trips_framed() -> None:
    assert await round_trip(TEXT, ["héllo", "", "🙂\nline"]) == ["héllo", "", "🙂\nline"]
    assert await round_trip(BYTES, [b"\x00\xff", b"", bytearray(b"ab")]) == [b"\x00\xff", b"", b"ab"]
    events = [SSE("a\nb", event="e", id="1", retry=5), SSE("")]
    assert await round_trip(EVENTS, events) == events
    assert await round_trip(ITEMS, [Token(text="a"), {"text": "coerced"}]) == [
        Token(text="a"),
        Token(text="coerced"),
    ]
    optional = StreamShape.of(kinds.ITEMS, item_type=int | None)
    assert await round_trip(optional, [1, None, 3]) == [1, None, 3]


async def test_one_frame_per_value_with_the_preamble_first_and_the_end_once() -> None:
    chunks = await collect(encode_framed(ITEMS, produce([Token(text="a"), Token(text="b")])))
    assert len(chunks) == 3
    frames = frames_of(chunks)
    assert [kind for kind, _ in frames] == [FrameKind.PREAMBLE, FrameKind.ITEM, FrameKind.ITEM, FrameKind.END]
    assert chunks[0].startswith(ITEMS.wire.preamble) and chunks[-1] == encode_frame(FrameKind.END, b"")
    empty = await collect(encode_framed(TEXT, produce([])))
    assert empty == [TEXT.wire.preamble + encode_frame(FrameKind.END, b"")]


async def test_item_frames_are_the_same_as_a_structured_writers() -> None:
    chunks = await collect(encode_framed(ITEMS, produce([Token(text="x")])))
    reader = stream_reader(stream_types(Token), chunks)
    assert [token async for token in reader] == [Token(text="x")]


async def test_a_producer_error_becomes_an_error_frame_then_a_remote_error() -> None:
    seen: list[BaseException] = []
    error = failing_generator_error()
    framed = await collect(
        encode_framed(TEXT, produce(["a", "b"], fail=error), chainlet="Generator", on_error=seen.append)
    )
    assert [kind for kind, _ in frames_of(framed)][-1] == FrameKind.ERROR
    assert FrameKind.END not in [kind for kind, _ in frames_of(framed)]
    assert seen == [error]
    got: list[str] = []
    with pytest.raises(ValueError, match="the model ran out of tokens") as caught:
        async for text in decode_framed(TEXT, produce(framed)):
            got.append(text)
    assert got == ["a", "b"]
    assert isinstance(caught.value, RemoteError)
    assert caught.value.detail is not None and caught.value.detail.chainlet == "Generator"
    assert "produce" in caught.value.detail.traceback  # the producer's frame travels


async def test_an_error_before_the_first_item_still_sends_the_preamble() -> None:
    framed = await collect(encode_framed(ITEMS, produce([], fail=KeyError("hf_token"))))
    assert len(framed) == 1 and framed[0].startswith(ITEMS.wire.preamble)
    with pytest.raises(KeyError):
        await collect(decode_framed(ITEMS, framed))


async def test_a_value_of_the_wrong_type_is_reported_to_the_consumer() -> None:
    with pytest.raises(RemoteError, match=r"streams str \(AsyncIterator\[str\]\) but yielded int 3"):
        await round_trip(TEXT, ["ok", 3])
    with pytest.raises(RemoteError, match="the stream item must be a Token, got int 3"):
        await round_trip(ITEMS, [3])
    with pytest.raises(RemoteError, match=r"streams chains.SSE .* but yielded str"):
        await round_trip(EVENTS, ["data: x"])


async def test_the_first_item_is_not_held_back_while_the_producer_waits() -> None:
    released = asyncio.Event()

    async def slow() -> AsyncIterator[str]:
        yield "first"
        await released.wait()  # only the consumer, having seen "first", can release this
        yield "second"

    async def consume() -> list[str]:
        got = []
        async for text in decode_framed(TEXT, encode_framed(TEXT, slow())):
            got.append(text)
            released.set()
        return got

    assert await asyncio.wait_for(consume(), timeout=5) == ["first", "second"]


@pytest.mark.parametrize("encoder", [encode_framed, encode_sse, encode_raw])
async def test_stopping_early_closes_the_producer(encoder: Any) -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[str]:
        try:
            while True:
                yield "tick"
                await asyncio.sleep(0)
        finally:
            closed.set()

    stream = encoder(TEXT, endless())
    await anext(stream)
    await anext(stream)
    await stream.aclose()
    assert closed.is_set()


async def test_cancellation_is_not_turned_into_an_error_frame() -> None:
    async def cancelled() -> AsyncIterator[str]:
        yield "a"
        raise asyncio.CancelledError

    stream = encode_framed(TEXT, cancelled())
    await anext(stream)
    with pytest.raises(asyncio.CancelledError):
        await anext(stream)


async def test_a_cut_framed_stream_is_never_a_shorter_result() -> None:
    framed = b"".join(await collect(encode_framed(ITEMS, produce([Token(text=t) for t in "abc"]))))
    for cut in range(len(framed)):
        with pytest.raises(StreamInterrupted):
            await collect(decode_framed(ITEMS, [framed[:cut]]))
    assert len(await collect(decode_framed(ITEMS, [framed]))) == 3


async def test_decode_framed_checks_the_schema_and_the_size() -> None:
    text_frames = await collect(encode_framed(TEXT, produce(["a"])))
    with pytest.raises(
        StreamSchemaMismatch, match=r"sends AsyncIterator\[str\].*built for AsyncIterator\[bytes\]"
    ):
        await collect(decode_framed(BYTES, text_frames))
    big = await collect(encode_framed(BYTES, produce([b"x" * 2000])))
    with pytest.raises(FrameTooLarge):
        await collect(decode_framed(BYTES, big, max_frame_size=1000))


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.text(max_size=10), max_size=10), cuts=st.lists(st.integers(0, 400), max_size=8))
def test_random_text_items_survive_any_rechunking(texts: list[str], cuts: list[int]) -> None:
    async def check() -> None:
        framed = b"".join(await collect(encode_framed(TEXT, produce(texts))))
        assert await collect(decode_framed(TEXT, rechunk(framed, cuts))) == texts

    asyncio.run(check())


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(st.dictionaries(st.text(max_size=4), st.integers() | st.none(), max_size=3), max_size=6),
    cuts=st.lists(st.integers(0, 300), max_size=6),
)
def test_random_typed_items_survive_any_rechunking_and_any_cut(values: list[Any], cuts: list[int]) -> None:
    shape = StreamShape.of(kinds.ITEMS, item_type=dict[str, int | None])

    async def check() -> None:
        framed = b"".join(await collect(encode_framed(shape, produce(values))))
        assert await collect(decode_framed(shape, rechunk(framed, cuts))) == values
        for cut in range(len(framed)):
            with pytest.raises(StreamInterrupted):
                await collect(decode_framed(shape, rechunk(framed[:cut], cuts)))

    asyncio.run(check())


# -- structured -------------------------------------------------------------------------------

STRUCTURED = StreamShape.of(kinds.STRUCTURED, types=TOKENS)
FULL_SHAPE = StreamShape.of(kinds.STRUCTURED, types=FULL)


async def tokens_endpoint(n: int) -> AsyncIterator[bytes]:
    writer = stream_writer(TOKENS)
    for i in range(n):
        yield writer.yield_item(Token(text=f"t{i}"))
    yield writer.yield_footer(Usage(tokens=n))


async def test_structured_frames_pass_through_and_the_end_is_appended() -> None:
    chunks = await collect(encode_framed(STRUCTURED, tokens_endpoint(2)))
    assert [kind for kind, _ in frames_of(chunks)] == [
        FrameKind.PREAMBLE,
        FrameKind.ITEM,
        FrameKind.ITEM,
        FrameKind.FOOTER,
        FrameKind.END,
    ]
    passed = await collect(decode_framed(STRUCTURED, produce(chunks)))
    assert all(type(chunk) is bytes for chunk in passed)  # as a remote stub would hand them out
    reader = stream_reader(TOKENS, produce(passed))
    assert [t.text async for t in reader.read_items()] == ["t0", "t1"]
    assert await reader.read_footer() == Usage(tokens=2)


async def test_a_generator_that_yields_its_own_end_gets_no_second_one() -> None:
    async def ends_itself() -> AsyncIterator[bytes]:
        writer = stream_writer(stream_types(Token))
        yield writer.yield_item(Token(text="a"))
        yield writer.end()

    shape = StreamShape.of(kinds.STRUCTURED, types=stream_types(Token))
    frames = frames_of(await collect(encode_framed(shape, ends_itself())))
    assert [kind for kind, _ in frames].count(FrameKind.END) == 1


async def test_an_empty_structured_stream() -> None:
    plain = StreamShape.of(kinds.STRUCTURED, types=stream_types(Token))
    chunks = await collect(encode_framed(plain, produce([])))
    assert chunks == [stream_types(Token).wire.preamble + encode_frame(FrameKind.END, b"")]
    # Declared footer never written: the consumer hears why.
    with pytest.raises(StreamProtocolError, match="Stream does not contain footer"):
        await stream_reader(TOKENS, encode_framed(STRUCTURED, produce([]))).read_footer()


async def _read_all(chunks: AsyncIterator[bytes]) -> None:
    reader = stream_reader(TOKENS, chunks)
    async for _ in reader.read_items():
        pass
    await reader.read_footer()


async def test_bytes_not_made_by_a_writer_are_refused_with_the_fix() -> None:
    async def raw_bytes() -> AsyncIterator[bytes]:
        yield b'{"text": "hand made"}'

    with pytest.raises(RemoteError, match=r"must yield what its chains.stream_writer\(stream_types\(Token"):
        await _read_all(encode_framed(STRUCTURED, raw_bytes()))


async def test_frames_of_another_writer_are_refused() -> None:
    async def wrong_types() -> AsyncIterator[bytes]:
        yield stream_writer(FULL).yield_header(Meta(model="m"))

    with pytest.raises(
        RemoteError, match=r"declares stream_types\(Token, footer_type=Usage\) but yielded frames of"
    ):
        await _read_all(encode_framed(STRUCTURED, wrong_types()))

    async def two_writers() -> AsyncIterator[bytes]:
        yield stream_writer(TOKENS).yield_item(Token(text="a"))
        yield stream_writer(TOKENS).yield_item(Token(text="b"))

    with pytest.raises(RemoteError, match="two different stream writers"):
        await _read_all(encode_framed(STRUCTURED, two_writers()))


async def test_a_chunk_made_but_not_yielded_is_caught() -> None:
    async def skips() -> AsyncIterator[bytes]:
        writer = stream_writer(TOKENS)
        yield writer.yield_item(Token(text="a"))
        writer.yield_item(Token(text="lost"))
        yield writer.yield_footer(Usage(tokens=2))

    with pytest.raises(RemoteError, match="a chunk made by the stream writer never reached the stream"):
        await _read_all(encode_framed(STRUCTURED, skips()))

    async def skips_the_first() -> AsyncIterator[bytes]:
        writer = stream_writer(TOKENS)
        writer.yield_item(Token(text="lost"))
        yield writer.yield_item(Token(text="b"))

    with pytest.raises(RemoteError, match="carries the stream's preamble"):
        await _read_all(encode_framed(STRUCTURED, skips_the_first()))

    async def twice() -> AsyncIterator[bytes]:
        writer = stream_writer(TOKENS)
        yield writer.yield_item(Token(text="a"))
        chunk = writer.yield_item(Token(text="b"))
        yield chunk
        yield chunk
        yield writer.yield_footer(Usage(tokens=2))

    with pytest.raises(RemoteError, match="more than once"):
        await _read_all(encode_framed(STRUCTURED, twice()))


async def test_chunks_made_ahead_and_yielded_in_order_are_fine() -> None:
    async def ahead() -> AsyncIterator[bytes]:
        writer = stream_writer(TOKENS)
        chunks = [writer.yield_item(Token(text=t)) for t in "ab"] + [writer.yield_footer(Usage(tokens=2))]
        for chunk in chunks:
            yield chunk

    reader = stream_reader(TOKENS, encode_framed(STRUCTURED, ahead()))
    assert [t.text async for t in reader.read_items()] == ["a", "b"]
    assert await reader.read_footer() == Usage(tokens=2)


async def test_a_structured_producer_error_reaches_the_reader() -> None:
    async def fails() -> AsyncIterator[bytes]:
        writer = stream_writer(TOKENS)
        yield writer.yield_item(Token(text="a"))
        raise failing_generator_error()

    reader = stream_reader(TOKENS, encode_framed(STRUCTURED, fails(), chainlet="Gen"))
    got = []
    with pytest.raises(ValueError, match="ran out of tokens"):
        async for token in reader.read_items():
            got.append(token)
    assert got == [Token(text="a")]


def test_writer_chunks_are_bytes() -> None:
    chunk = stream_writer(TOKENS).yield_item(Token(text="a"))
    assert isinstance(chunk, WriterChunk) and isinstance(chunk, bytes)


# -- SSE --------------------------------------------------------------------------------------


async def sse_events(shape: StreamShape, source: AsyncIterator[Any]) -> list[SSE]:
    body = await collect(encode_sse(shape, source))
    return await collect(SSE.from_chunks(produce(body)))


async def test_sse_items_are_data_events_and_the_stream_ends_with_an_end_event() -> None:
    assert await sse_events(TEXT, produce(["one", "two\nlines"])) == [
        SSE("one"),
        SSE("two\nlines"),
        SSE("", event="end"),
    ]
    events = await sse_events(ITEMS, produce([Token(text="a")]))
    assert events[0] == SSE('{"text":"a"}') and events[-1].event == "end"
    blob = await sse_events(BYTES, produce([b"\x00\xff"]))
    assert base64.b64decode(blob[0].data) == b"\x00\xff"


async def test_sse_streams_go_out_as_they_are() -> None:
    mine = [SSE("x", event="tick", id="1"), SSE("y", retry=10)]
    assert await sse_events(EVENTS, produce(mine)) == [
        *mine[:1],
        SSE("y", id="1", retry=10),
        SSE("", id="1", event="end"),
    ]


async def test_sse_structured_parts_are_named_events() -> None:
    async def full() -> AsyncIterator[bytes]:
        writer = stream_writer(FULL)
        yield writer.yield_header(Meta(model="m"))
        yield writer.yield_item(Token(text="a"))
        yield writer.yield_footer(Usage(tokens=1))

    events = await sse_events(FULL_SHAPE, full())
    assert [(e.event, e.data) for e in events] == [
        ("header", '{"model":"m"}'),
        (None, '{"text":"a"}'),
        ("footer", '{"tokens":1}'),
        ("end", ""),
    ]


async def test_sse_error_event_carries_the_json_detail() -> None:
    reported: list[BaseException] = []
    body = await collect(
        encode_sse(TEXT, produce(["a"], fail=failing_generator_error()), on_error=reported.append)
    )
    events = await collect(SSE.from_chunks(produce(body)))
    assert [e.event for e in events] == [None, "error"]
    assert [type(exc) for exc in reported] == [ValueError]
    detail = json.loads(events[-1].data)
    assert detail["exc_type"] == "ValueError" and detail["message"] == "the model ran out of tokens"

    async def fails() -> AsyncIterator[bytes]:
        yield stream_writer(TOKENS).yield_item(Token(text="a"))
        raise failing_generator_error()

    structured = await sse_events(STRUCTURED, fails())
    assert [e.event for e in structured] == [None, "error"]


# -- raw --------------------------------------------------------------------------------------


async def test_raw_forms() -> None:
    assert raw_media_type(TEXT) == TEXT_MEDIA_TYPE and raw_media_type(ITEMS) == NDJSON_MEDIA_TYPE
    assert await collect(encode_raw(TEXT, produce(["hé", "", "llo"]))) == ["hé".encode(), b"llo"]
    assert await collect(encode_raw(BYTES, produce([b"\x00", b""]))) == [b"\x00"]
    assert await collect(encode_raw(ITEMS, produce([Token(text="a")]))) == [b'{"text":"a"}\n']
    assert await collect(encode_raw(EVENTS, produce([SSE("x")]))) == [b"data: x\n\n"]


async def test_raw_structured_is_tagged_ndjson() -> None:
    async def full() -> AsyncIterator[bytes]:
        writer = stream_writer(FULL)
        yield writer.yield_header(Meta(model="m"))
        yield writer.yield_item(Token(text="a"))
        yield writer.yield_footer(Usage(tokens=1))

    lines = b"".join(await collect(encode_raw(FULL_SHAPE, full()))).splitlines()
    assert [json.loads(line) for line in lines] == [
        {"header": {"model": "m"}},
        {"item": {"text": "a"}},
        {"footer": {"tokens": 1}},
    ]


async def test_raw_raises_the_producers_error_after_what_came_before() -> None:
    error = failing_generator_error()
    got = []
    reported: list[BaseException] = []
    with pytest.raises(ValueError) as caught:
        async for chunk in encode_raw(TEXT, produce(["a", "b"], fail=error), on_error=reported.append):
            got.append(chunk)
    assert caught.value is error and got == [b"a", b"b"]
    assert reported == []  # the exception itself reaches the server: nothing to report twice

    async def fails() -> AsyncIterator[bytes]:
        yield stream_writer(TOKENS).yield_item(Token(text="a"))
        raise error

    got = []
    with pytest.raises(ValueError) as caught:
        async for chunk in encode_raw(STRUCTURED, fails()):
            got.append(chunk)
    assert caught.value is error and got == [b'{"item":{"text":"a"}}\n']


async def test_decode_raw_text_keeps_characters_whole_at_every_split() -> None:
    text = "añ🙂中\n"
    data = text.encode()
    for cut in range(len(data) + 1):
        pieces = await collect(decode_raw(TEXT, [data[:cut], data[cut:]]))
        assert "".join(pieces) == text and all("\ufffd" not in piece for piece in pieces)


async def test_decode_raw_ndjson_at_every_split() -> None:
    data = b"".join(await collect(encode_raw(ITEMS, produce([Token(text="a"), Token(text="ü")]))))
    for cut in range(len(data) + 1):
        assert await collect(decode_raw(ITEMS, [data[:cut], data[cut:]])) == [
            Token(text="a"),
            Token(text="ü"),
        ]
