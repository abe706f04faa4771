"""chains.client_resumable without a network: a resumable stream's events read back as the
parts ``stream()`` gives, and what a run that started over does to a reader."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pydantic
import pytest

from chains import stream_reader, stream_types
from chains.client import StructuredStream, _shape
from chains.client_resumable import AsyncFrameSource, FrameSource, item_decoder, items
from chains.errors import ChainsUsageError, StreamInterrupted, StreamProtocolError
from chains.streaming.sse import SSE


class Started(pydantic.BaseModel):
    count: int


class Piece(pydantic.BaseModel):
    index: int


class Usage(pydantic.BaseModel):
    pieces: int


PIECES = stream_types(Piece, header_type=Started, footer_type=Usage)


def attempt(count: int, first_id: int, *, footer: bool = True) -> list[SSE]:
    """One attempt's events: a header, ``count`` items and (unless cut short) a footer."""
    events = [SSE(f'{{"count":{count}}}', event="header")]
    events += [SSE(f'{{"index":{i}}}') for i in range(count)]
    if footer:
        events.append(SSE(f'{{"pieces":{count}}}', event="footer"))
    return [SSE(e.data, event=e.event, id=str(first_id + n)) for n, e in enumerate(events)]


def restart(event_id: int, number: int = 2) -> SSE:
    return SSE(f'{{"attempt": {number}}}', event="restart", id=str(event_id))


class Closed:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1

    async def aclose(self) -> None:
        self.count += 1


def structured(events: list[SSE], closed: Closed | None = None) -> StructuredStream[Piece, Started, Usage]:
    source = FrameSource(PIECES, "run-1", iter(events), closed or Closed())
    return StructuredStream(_shape(PIECES), source)


async def aiter_of(events: list[SSE]) -> AsyncIterator[SSE]:
    for event in events:
        yield event


def test_the_parts_come_as_stream_gives_them_and_the_answer_is_released() -> None:
    closed = Closed()
    with structured(attempt(3, 1), closed) as reader:
        with pytest.raises(ChainsUsageError, match="read_header"):
            next(iter(reader.read_items()))  # the header first, as stream() says
        assert reader.read_header() == Started(count=3)
        assert [piece.index for piece in reader.read_items()] == [0, 1, 2]
        assert reader.read_footer() == Usage(pieces=3)
    assert closed.count >= 1


def test_a_part_that_does_not_validate_is_named_as_stream_names_it() -> None:
    bad_header = [SSE('{"count":"many"}', event="header", id="1"), *attempt(1, 2)[1:]]
    with pytest.raises(StreamProtocolError, match=r"(?s)header frame of the .* not a valid Started: .*count"):
        structured(bad_header).read_header()
    bad_footer = [*attempt(2, 1, footer=False), SSE('{"pieces":null}', event="footer", id="4")]
    reader = structured(bad_footer)
    reader.read_header()
    with pytest.raises(StreamProtocolError, match=r"(?s)footer frame of the .* not a valid Usage: .*pieces"):
        reader.read_footer()


def test_a_stream_that_leaves_out_its_footer_says_so() -> None:
    reader = structured(attempt(2, 1, footer=False))
    reader.read_header()
    with pytest.raises(StreamProtocolError, match="does not contain footer"):
        reader.read_footer()


def test_a_restart_after_parts_were_read_stops_the_reading_naming_the_new_attempt() -> None:
    events = [*attempt(3, 1, footer=False), restart(5), *attempt(3, 6)]
    reader = structured(events)
    assert reader.read_header() == Started(count=3)
    seen = []
    with pytest.raises(StreamInterrupted, match=r"attempt 2.*header and 3 items.*last_event_id=5\)"):
        for piece in reader.read_items():
            seen.append(piece.index)
    assert seen == [0, 1, 2]  # nothing of the new attempt was mixed in


def test_a_restart_before_anything_was_read_is_passed_over() -> None:
    reader = structured([restart(1), *attempt(2, 2)])
    assert reader.read_header() == Started(count=2)
    assert [piece.index for piece in reader.read_items()] == [0, 1]
    assert reader.read_footer() == Usage(pieces=2)


def test_an_item_reader_skips_the_parts_and_stops_at_a_restart_after_items() -> None:
    decode = item_decoder(Piece)
    # Only a header (which an item reader skips) came before the restart: nothing to discard.
    header_only = [SSE('{"count":2}', event="header", id="1"), restart(2), *attempt(2, 3)]
    assert [p.index for p in items(iter(header_only), decode, "run-1")] == [0, 1]
    seen: Iterator[Piece] = items(
        iter([*attempt(2, 1, footer=False), restart(4), *attempt(2, 5)]), decode, "r"
    )
    got = []
    with pytest.raises(StreamInterrupted, match=r"2 items .*job\('r'\)\.events\(last_event_id=4\)"):
        for piece in seen:
            got.append(piece.index)
    assert got == [0, 1]


async def test_the_async_reader_reads_the_same_parts_and_stops_at_the_same_restart() -> None:
    closed = Closed()
    source = AsyncFrameSource(PIECES, "run-1", aiter_of(attempt(2, 1)), closed.aclose)
    async with stream_reader(PIECES, source) as reader:
        assert await reader.read_header() == Started(count=2)
        assert [piece.index async for piece in reader.read_items()] == [0, 1]
        assert await reader.read_footer() == Usage(pieces=2)
    assert closed.count >= 1
    events = [*attempt(1, 1, footer=False), restart(3), *attempt(1, 4)]
    cut = stream_reader(PIECES, AsyncFrameSource(PIECES, "run-1", aiter_of(events), Closed().aclose))
    await cut.read_header()
    with pytest.raises(StreamInterrupted, match=r"last_event_id=3\)"):
        async for _ in cut.read_items():
            pass
