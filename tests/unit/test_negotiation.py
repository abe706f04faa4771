"""Negotiating a stream's form from a request's ``Accept`` header (the server's choice)."""

from __future__ import annotations

import doctest

import pydantic
import pytest

import chains.server.negotiation
from chains.server.negotiation import negotiate
from chains.streaming import (
    FRAMED_MEDIA_TYPE,
    NDJSON_MEDIA_TYPE,
    SSE_MEDIA_TYPE,
    TEXT_MEDIA_TYPE,
    StreamShape,
    encode_framed,
    encode_raw,
    encode_sse,
    kinds,
)


class Token(pydantic.BaseModel):
    text: str


TEXT = StreamShape.of(kinds.TEXT)
BYTES = StreamShape.of(kinds.BYTES)
EVENTS = StreamShape.of(kinds.SSE_EVENTS)
ITEMS = StreamShape.of(kinds.ITEMS, item_type=Token)


def test_module_doctests() -> None:
    assert doctest.testmod(chains.server.negotiation).failed == 0


# -- negotiation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "shape", "media_type"),
    [
        (None, TEXT, TEXT_MEDIA_TYPE),
        ("", ITEMS, NDJSON_MEDIA_TYPE),
        ("*/*", TEXT, TEXT_MEDIA_TYPE),  # curl
        ("*/*", BYTES, "application/octet-stream"),
        ("application/x-chains-stream", TEXT, FRAMED_MEDIA_TYPE),  # stubs
        ("text/event-stream", ITEMS, SSE_MEDIA_TYPE),  # EventSource
        ("Text/Event-Stream", TEXT, SSE_MEDIA_TYPE),
        ("text/*", ITEMS, SSE_MEDIA_TYPE),
        ("text/*", TEXT, TEXT_MEDIA_TYPE),
        ("application/x-chains-stream;q=0.5, text/event-stream;q=0.9", TEXT, SSE_MEDIA_TYPE),
        ("text/event-stream;q=0.2, application/x-chains-stream", TEXT, FRAMED_MEDIA_TYPE),
        ("text/event-stream, */*;q=0.1", TEXT, SSE_MEDIA_TYPE),
        ("*/*;q=0.8, text/plain;q=0", TEXT, SSE_MEDIA_TYPE),
        ("application/x-ndjson", ITEMS, NDJSON_MEDIA_TYPE),
        ("text/plain; charset=utf-8", TEXT, TEXT_MEDIA_TYPE),
        ("image/png", TEXT, TEXT_MEDIA_TYPE),  # nothing acceptable: raw rather than 406
        ("application/x-chains-stream;q=0", TEXT, TEXT_MEDIA_TYPE),
        ("application/x-chains-stream;q=oops, text/event-stream", TEXT, SSE_MEDIA_TYPE),
        ("*/*", EVENTS, SSE_MEDIA_TYPE),
        (None, EVENTS, SSE_MEDIA_TYPE),
    ],
)
def test_negotiate(accept: str | None, shape: StreamShape, media_type: str) -> None:
    assert negotiate(accept, shape).media_type == media_type


def test_negotiate_returns_the_matching_encoder() -> None:
    assert negotiate(None, TEXT).encoder is encode_raw
    assert negotiate("text/event-stream", TEXT).encoder is encode_sse
    assert negotiate("application/x-chains-stream", TEXT).encoder is encode_framed
    # An SSE stream: an Accept header gets the SSE form (with its end event), no header gets raw.
    assert negotiate("*/*", EVENTS).encoder is encode_sse
    assert negotiate(None, EVENTS).encoder is encode_raw
    media_type, encoder = negotiate("application/x-chains-stream", ITEMS)
    assert (media_type, encoder) == (FRAMED_MEDIA_TYPE, encode_framed)
