"""chains.SSE: wire text, and parsing per the WHATWG event-stream rules from any chunking."""

from __future__ import annotations

import asyncio
import doctest
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chains.streaming.sse
from chains.errors import ChainsUsageError
from chains.streaming.sse import SSE, SSEDecoder


def parse(*chunks: str | bytes) -> list[SSE]:
    decoder = SSEDecoder()
    events: list[SSE] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def test_module_doctests() -> None:
    assert doctest.testmod(chains.streaming.sse).failed == 0


# -- encode -----------------------------------------------------------------------------------


def test_encode_writes_fields_then_one_data_line_per_line() -> None:
    assert SSE("hi").encode() == "data: hi\n\n"
    assert SSE("a\nb\r\nc\rd", event="e", id="7", retry=1500).encode() == (
        "event: e\nid: 7\nretry: 1500\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
    )


def test_empty_data_is_still_dispatched_and_leading_spaces_survive() -> None:
    assert parse(SSE("").encode()) == [SSE("")]
    assert parse(SSE("  two spaces").encode()) == [SSE("  two spaces")]
    assert parse(SSE("\n").encode()) == [SSE("\n")]


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"data": b"x"}, "data must be a str"),
        ({"data": "x", "event": "a\nb"}, "event cannot contain a line break"),
        ({"data": "x", "id": "1\r"}, "id cannot contain a line break"),
        ({"data": "x", "id": "a\0b"}, "cannot contain NUL"),
        ({"data": "x", "retry": -1}, "retry is a delay in milliseconds"),
        ({"data": "x", "retry": True}, "retry is a delay in milliseconds"),
    ],
)
def test_invalid_events_are_refused(kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(ChainsUsageError, match=problem):
        SSE(**kwargs)  # type: ignore[arg-type]


# -- parse: the examples of the WHATWG specification ------------------------------------------


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert parse("data: YHOO\ndata: +2\ndata: 10\n\n") == [SSE("YHOO\n+2\n10")]


def test_comments_ids_and_an_undispatched_last_event() -> None:
    text = ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n"
    assert parse(text) == [SSE("first event", id="1"), SSE("second event", id=None)]


def test_data_lines_without_values() -> None:
    # Empty data, then a lone newline; the last block has no blank line and is dropped.
    assert parse("data\n\ndata\ndata\n\ndata:") == [SSE(""), SSE("\n")]


def test_one_space_after_the_colon_is_stripped() -> None:
    assert parse("data:test\n\ndata: test\n\n") == [SSE("test"), SSE("test")]


# -- parse: the rest of the rules ---------------------------------------------------------


@pytest.mark.parametrize("newline", ["\n", "\r", "\r\n"])
def test_every_line_ending(newline: str) -> None:
    text = f"event: add{newline}data: 1{newline}data: 2{newline}{newline}data: x{newline}{newline}"
    assert parse(text) == [SSE("1\n2", event="add"), SSE("x")]


def test_mixed_line_endings_in_one_stream() -> None:
    assert parse("data: a\r\ndata: b\rdata: c\n\r\n") == [SSE("a\nb\nc")]


def test_a_blank_line_without_data_dispatches_nothing_and_resets_the_event_type() -> None:
    assert parse("event: x\n\ndata: y\n\n") == [SSE("y")]


def test_the_last_event_id_persists_until_changed_or_reset() -> None:
    text = "id: 5\ndata: a\n\ndata: b\n\nid\ndata: c\n\nid: 6\n\ndata: d\n\n"
    assert parse(text) == [SSE("a", id="5"), SSE("b", id="5"), SSE("c"), SSE("d", id="6")]


def test_an_id_with_nul_is_ignored() -> None:
    assert parse("id: 1\n\nid: 2\0\ndata: a\n\n") == [SSE("a", id="1")]


def test_retry_takes_only_ascii_digits() -> None:
    assert parse("retry: 3000\ndata: a\n\nretry: 3s\ndata: b\n\nretry: ٣\ndata: c\n\n") == [
        SSE("a", retry=3000),
        SSE("b"),
        SSE("c"),
    ]


def test_unknown_fields_and_field_names_are_case_sensitive() -> None:
    assert parse("Data: no\nfoo: bar\ndata: yes\n\n") == [SSE("yes")]


def test_a_colon_only_line_is_a_comment_and_colons_in_values_stay() -> None:
    assert parse(":\n: keep-alive\ndata: a: b:c\n\n") == [SSE("a: b:c")]


def test_a_leading_bom_is_skipped_once() -> None:
    assert parse(b"\xef\xbb\xbfdata: a\n\n") == [SSE("a")]
    assert parse("\ufeffdata: a\n\n") == [SSE("a")]
    assert parse(b"\xef", b"\xbb", b"\xbfdata: a\n\n") == [SSE("a")]
    # Only at the very start: a second BOM is part of the field name, which is then unknown.
    assert parse(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n") == []


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert parse(b"data: a\xffb\n\n") == [SSE("a\ufffdb")]


def test_str_and_bytes_chunks_are_not_mixed() -> None:
    decoder = SSEDecoder()
    decoder.feed("data: a")
    with pytest.raises(ChainsUsageError, match="bytes chunk after str chunks"):
        decoder.feed(b"\n\n")


async def test_from_chunks_reads_async_and_sync_sources() -> None:
    async def source() -> AsyncIterator[bytes]:
        for piece in (b"data: h", b"\xc3", b"\xa9\r", b"\n\r\n"):
            await asyncio.sleep(0)
            yield piece

    assert [event async for event in SSE.from_chunks(source())] == [SSE("hé")]
    assert [event async for event in SSE.from_chunks(["data: x\n", "\n"])] == [SSE("x")]


# -- any chunking -------------------------------------------------------------------------

RICH = (
    "\ufeff: comment ünïcode\r\n"
    "event: grüße\r"
    "id: 𝄞-1\n"
    "data: first 🙂 line\r\n"
    "data:second\r"
    "\r"
    "retry: 250\n"
    "data: 中文\n"
    "\n"
    "data: tail without blank line"
)
RICH_EVENTS = [
    SSE("first 🙂 line\nsecond", event="grüße", id="𝄞-1"),
    SSE("中文", id="𝄞-1", retry=250),
]


def test_rich_text_parses_as_expected() -> None:
    assert parse(RICH) == RICH_EVENTS
    assert parse(RICH.encode()) == RICH_EVENTS


def test_bytes_split_at_every_offset_including_inside_characters() -> None:
    data = RICH.encode()
    for cut in range(len(data) + 1):
        assert parse(data[:cut], data[cut:]) == RICH_EVENTS, cut


def test_str_split_at_every_offset_including_inside_crlf() -> None:
    for cut in range(len(RICH) + 1):
        assert parse(RICH[:cut], RICH[cut:]) == RICH_EVENTS, cut


def test_one_byte_at_a_time() -> None:
    data = RICH.encode()
    assert parse(*(data[i : i + 1] for i in range(len(data)))) == RICH_EVENTS


field_text = st.text(st.characters(exclude_characters="\r\n\0", exclude_categories=["Cs"]), max_size=8)
events_strategy = st.lists(
    st.builds(
        SSE,
        data=st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
        event=st.none() | field_text,
        id=st.none() | field_text,
        retry=st.none() | st.integers(0, 10**6),
    ),
    max_size=6,
)


def as_received(sent: list[SSE]) -> list[SSE]:
    """What a client sees: line breaks in data become \\n and the last event id carries over."""
    last_id = ""
    out = []
    for event in sent:
        if event.id is not None:
            last_id = event.id
        data = event.data.replace("\r\n", "\n").replace("\r", "\n")
        out.append(SSE(data, event=event.event or None, id=last_id or None, retry=event.retry))
    return out


@settings(max_examples=80, deadline=None)
@given(events=events_strategy, cuts=st.lists(st.integers(0, 400), max_size=6), as_bytes=st.booleans())
def test_encoded_events_split_anywhere_come_back(events: list[SSE], cuts: list[int], as_bytes: bool) -> None:
    text = "".join(event.encode() for event in events)
    data: str | bytes = text.encode() if as_bytes else text
    points = sorted(min(c, len(data)) for c in cuts)
    chunks, start = [], 0
    for point in points:
        chunks.append(data[start:point])
        start = point
    chunks.append(data[start:])
    assert parse(*chunks) == as_received(events)


@settings(max_examples=40, deadline=None)
@given(events=events_strategy.filter(bool))
def test_encoded_events_split_at_every_byte_offset(events: list[SSE]) -> None:
    data = "".join(event.encode() for event in events).encode()
    expected = as_received(events)
    for cut in range(len(data) + 1):
        assert parse(data[:cut], data[cut:]) == expected
