"""The frame format and the incremental FrameDecoder."""

from __future__ import annotations

import doctest
import struct
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chains.streaming.framing
from chains.errors import StreamInterrupted
from chains.streaming.framing import (
    HEADER_SIZE,
    FrameDecoder,
    FrameKind,
    FrameTooLarge,
    StreamProtocolError,
    UnknownFrameKind,
    encode_frame,
    encode_preamble,
    iter_frames,
    parse_preamble,
)

KINDS = [kind.value for kind in FrameKind]

frames_strategy = st.lists(
    st.tuples(st.sampled_from(KINDS), st.binary(max_size=300)),
    max_size=30,
)


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at the given offsets (any order, duplicates allowed: empty chunks)."""
    points = sorted(min(max(c, 0), len(data)) for c in cuts)
    chunks, start = [], 0
    for point in points:
        chunks.append(data[start:point])
        start = point
    chunks.append(data[start:])
    return chunks


def decode_all(chunks: list[bytes], max_frame_size: int = 1 << 20) -> list[tuple[int, bytes]]:
    decoder = FrameDecoder(max_frame_size)
    out: list[tuple[int, bytes]] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    assert decoder.at_boundary
    return out


def test_header_is_one_kind_byte_and_a_big_endian_length() -> None:
    frame = encode_frame(FrameKind.ITEM, b"hello")
    assert frame == b"I" + struct.pack(">I", 5) + b"hello"
    assert len(encode_frame(FrameKind.END, b"")) == HEADER_SIZE


def test_kinds_are_distinct_ascii_letters() -> None:
    letters = [chr(kind.value) for kind in FrameKind]
    assert len(set(letters)) == len(letters) == 6
    assert all(letter.isascii() and letter.isupper() for letter in letters)


def test_module_doctests() -> None:
    assert doctest.testmod(chains.streaming.framing).failed == 0


@settings(max_examples=150, deadline=None)
@given(frames=frames_strategy, cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_any_chunking_gives_back_the_same_frames(frames: list[tuple[int, bytes]], cuts: list[int]) -> None:
    data = b"".join(encode_frame(kind, payload) for kind, payload in frames)
    assert decode_all(split_at(data, cuts)) == frames


@settings(max_examples=30, deadline=None)
@given(frames=frames_strategy.filter(bool))
def test_byte_by_byte_gives_back_the_same_frames(frames: list[tuple[int, bytes]]) -> None:
    data = b"".join(encode_frame(kind, payload) for kind, payload in frames)
    assert decode_all([data[i : i + 1] for i in range(len(data))]) == frames


def test_bytearray_and_memoryview_chunks_give_bytes_payloads() -> None:
    data = encode_frame(FrameKind.ITEM, b"abc") + encode_frame(FrameKind.END, b"")
    decoder = FrameDecoder()
    frames = decoder.feed(bytearray(data[:3])) + decoder.feed(memoryview(data)[3:])
    assert frames == [(FrameKind.ITEM, b"abc"), (FrameKind.END, b"")]
    assert all(type(payload) is bytes for _, payload in frames)
    whole = FrameDecoder().feed(bytearray(data))
    assert whole == frames and all(type(payload) is bytes for _, payload in whole)


@pytest.mark.parametrize("split", [0, 1, 3, 4, 5])
def test_a_frame_over_the_limit_is_refused_from_its_header_alone(split: int) -> None:
    header = struct.pack(">BI", FrameKind.ITEM, 1001)
    decoder = FrameDecoder(max_frame_size=1000)
    with pytest.raises(FrameTooLarge) as caught:
        # Only the header is ever sent: the refusal cannot have waited for the payload.
        decoder.feed(header[:split])
        decoder.feed(header[split:])
    message = str(caught.value)
    assert "1001 bytes" in message and "1000 bytes" in message and "max_frame_size" in message
    assert decoder.buffered <= HEADER_SIZE


def test_a_huge_declared_length_is_refused_without_allocating_it() -> None:
    decoder = FrameDecoder()  # the 64 MiB default
    with pytest.raises(FrameTooLarge, match="over this reader's limit of 64 MiB"):
        decoder.feed(struct.pack(">BI", FrameKind.ITEM, 2**32 - 1) + b"x" * 10)


def test_a_frame_at_the_limit_is_accepted() -> None:
    payload = b"z" * 1000
    frames = decode_all([encode_frame(FrameKind.ITEM, payload)], max_frame_size=1000)
    assert frames == [(FrameKind.ITEM, payload)]


def test_the_decoder_never_holds_more_than_the_frame_in_progress() -> None:
    limit = 64 * 1024
    payload = bytes(range(256)) * (limit // 256)
    data = encode_frame(FrameKind.ITEM, payload) * 3
    decoder = FrameDecoder(max_frame_size=limit)
    seen = []
    for start in range(0, len(data), 1000):
        seen.extend(decoder.feed(data[start : start + 1000]))
        assert decoder.buffered <= HEADER_SIZE + limit
    assert seen == [(FrameKind.ITEM, payload)] * 3


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UnknownFrameKind) as caught:
        FrameDecoder().feed(encode_frame(FrameKind.ITEM, b"x") + b"Q\x00\x00\x00\x00")
    message = str(caught.value)
    assert "0x51" in message and "byte 6" in message and "I=item" in message


def test_plain_text_is_recognised_as_not_a_chains_stream() -> None:
    with pytest.raises(UnknownFrameKind, match="does not look like a chains stream"):
        FrameDecoder().feed(b"hello world")


def test_an_unknown_kind_split_across_chunks_is_reported_at_its_offset() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode_frame(FrameKind.ITEM, b"ab") + b"q\x00")
    with pytest.raises(UnknownFrameKind, match="at byte 7"):
        decoder.feed(b"\x00\x00\x01")


def test_preamble_round_trip_and_version_check() -> None:
    frame = encode_preamble("abc123", "stream_types(Token)")
    [(kind, payload)] = FrameDecoder().feed(frame)
    assert kind == FrameKind.PREAMBLE
    preamble = parse_preamble(payload)
    assert (preamble.fingerprint, preamble.schema, preamble.protocol) == ("abc123", "stream_types(Token)", 1)
    with pytest.raises(StreamProtocolError, match="protocol 2, this reader understands only protocol 1"):
        parse_preamble(b'{"chains_stream":2,"fingerprint":"x"}')
    with pytest.raises(StreamProtocolError, match="malformed preamble"):
        parse_preamble(b"not json")


async def test_iter_frames_raises_stream_interrupted_inside_a_frame() -> None:
    data = encode_frame(FrameKind.ITEM, b"abcdef")
    got = [frame async for frame in iter_frames([data])]
    assert got == [(FrameKind.ITEM, b"abcdef")]
    with pytest.raises(StreamInterrupted, match="middle of a frame"):
        async for _ in iter_frames([data[:-1]]):
            pass


async def test_iter_frames_takes_async_sources() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield encode_frame(FrameKind.ITEM, b"a")[:2]
        yield encode_frame(FrameKind.ITEM, b"a")[2:]

    assert [frame async for frame in iter_frames(chunks())] == [(FrameKind.ITEM, b"a")]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=5))
def test_garbage_only_ever_raises_protocol_errors(data: bytes, cuts: list[int]) -> None:
    decoder = FrameDecoder(max_frame_size=64)
    try:
        for chunk in split_at(data, cuts):
            decoder.feed(chunk)
    except StreamProtocolError:
        pass
    assert decoder.buffered <= HEADER_SIZE + 64
