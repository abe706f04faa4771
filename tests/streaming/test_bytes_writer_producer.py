"""A bytes stream whose producer yields stream_writer frames (Truss Chains' way of writing a
structured stream) gets the writer's end frame, or its error frame, added by every form."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import pytest

import chains
from chains.streaming import BYTES, StreamShape, decode_framed, encode_framed, encode_raw, encode_sse
from chains.streaming.framing import END_FRAME
from chains.streaming.sse import END_EVENT

TYPES = chains.stream_types(int, footer_type=str)
SHAPE = StreamShape.of(BYTES)


async def _producer(fail: bool) -> AsyncIterator[bytes]:
    writer = chains.stream_writer(TYPES)
    for i in range(3):
        yield writer.yield_item(i)
    if fail:
        raise ValueError("broke after three")
    yield writer.yield_footer("done")


async def _read(chunks: AsyncIterator[bytes]) -> tuple[list[int], str]:
    reader = chains.stream_reader(TYPES, chunks)
    items = [item async for item in reader.read_items()]
    return items, await reader.read_footer()


async def test_the_framed_form_carries_a_complete_structured_stream() -> None:
    decoded = decode_framed(SHAPE, encode_framed(SHAPE, _producer(False)))
    assert await _read(decoded) == ([0, 1, 2], "done")


async def test_the_raw_form_is_the_structured_stream_itself() -> None:
    assert await _read(encode_raw(SHAPE, _producer(False))) == ([0, 1, 2], "done")


async def test_an_error_reaches_the_reader_as_the_producers_error() -> None:
    errors: list[BaseException] = []
    # Sent whole, as a server sends it: the producer's error is reported once, by the encoder.
    framed = [f async for f in encode_framed(SHAPE, _producer(True), chainlet="P", on_error=errors.append)]
    decoded = decode_framed(SHAPE, framed)
    with pytest.raises(ValueError, match="broke after three"):
        await _read(decoded)
    assert [str(e) for e in errors] == ["broke after three"]


async def test_the_sse_form_ends_with_its_end_event() -> None:
    events = [chunk async for chunk in encode_sse(SHAPE, _producer(False))]
    assert events[-1] == END_EVENT
    # Three item chunks (the first with the preamble) and the footer as the producer yielded
    # them, then the writer's end frame that was added, then the SSE form's own end event.
    assert len(events) == 6 and events[-2] == b"data: " + base64.b64encode(END_FRAME) + b"\n\n"


async def test_plain_bytes_pass_as_they_are() -> None:
    async def plain() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b"c"

    assert [b async for b in decode_framed(SHAPE, encode_framed(SHAPE, plain()))] == [b"ab", b"c"]
