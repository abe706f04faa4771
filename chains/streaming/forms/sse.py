"""The server-sent events form, ``text/event-stream``: for browsers and SSE clients."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from contextlib import aclosing
from typing import Any

from chains.streaming.forms.producer import ErrorHook, TaggedParts
from chains.streaming.framing import KIND_END, KIND_ERROR, KIND_FOOTER, KIND_HEADER, KIND_ITEM
from chains.streaming.shape import StreamShape
from chains.streaming.sse import END_EVENT, data_event

__all__ = ["encode_sse"]


async def encode_sse(
    shape: StreamShape,
    source: AsyncIterator[Any] | AsyncIterable[Any],
    *,
    chainlet: str = "",
    on_error: ErrorHook | None = None,
) -> AsyncGenerator[bytes, None]:
    """The ``text/event-stream`` form: items as ``data:`` events, the rest as named events.

    Items are unnamed (``message``) events: text as is (a multi-line str becomes several
    ``data:`` lines), bytes base64-encoded, typed items as JSON. A structured stream's header
    and footer are ``event: header`` / ``event: footer`` with JSON data. The stream ends with
    ``event: end`` (so an ``EventSource`` knows to close rather than reconnect), or with
    ``event: error`` whose data is the JSON error detail. An SSE stream's own events go out
    as they are, then ``event: end``.
    """
    parts = TaggedParts(shape, source, shape.kind.sse_converter, chainlet=chainlet, on_error=on_error)
    structured = parts.structured
    async with aclosing(parts.parts()) as tagged:
        async for kind, payload in tagged:
            if kind == KIND_ITEM:
                # A structured stream's item is its JSON; any other value is converted already.
                yield data_event(payload) if structured else payload
            elif kind == KIND_HEADER:
                yield data_event(payload, b"event: header\n")
            elif kind == KIND_FOOTER:
                yield data_event(payload, b"event: footer\n")
            elif kind == KIND_ERROR:
                yield data_event(payload, b"event: error\n")
            elif kind == KIND_END:
                yield END_EVENT
