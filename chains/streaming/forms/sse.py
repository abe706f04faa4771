"""The server-sent events form, ``text/event-stream``: for browsers and SSE clients."""

from __future__ import annotations

import base64
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, Final

from chains.streaming.forms.producer import ErrorHook, StructuredYields, aiter_any, converted, frames_of
from chains.streaming.framing import KIND_END, KIND_ERROR, KIND_FOOTER, KIND_HEADER, KIND_ITEM
from chains.streaming.kinds import as_event, as_text, dump_bytes
from chains.streaming.shape import StreamShape
from chains.streaming.sse import SSE

__all__ = ["encode_sse"]


_SSE_END: Final = b"event: end\ndata: \n\n"


def _sse_data(data: bytes, event: bytes = b"") -> bytes:
    # JSON from pydantic or json.dumps has no raw line breaks, so it is a single data line.
    return event + b"data: " + data + b"\n\n"


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
    source = aiter_any(source)
    if shape.kind == "structured":
        structured = StructuredYields(shape, source, chainlet, on_error)
        async with aclosing(frames_of(structured.chunks())) as frames:
            async for kind, payload in frames:
                if kind == KIND_ITEM:
                    yield _sse_data(payload)
                elif kind == KIND_HEADER:
                    yield _sse_data(payload, b"event: header\n")
                elif kind == KIND_FOOTER:
                    yield _sse_data(payload, b"event: footer\n")
                elif kind == KIND_ERROR:
                    yield _sse_data(payload, b"event: error\n")
                elif kind == KIND_END:
                    yield _SSE_END
        return
    failure: list[Exception] = []
    async with aclosing(converted(source, _sse_converter(shape), chainlet, on_error, failure)) as events:
        async for tag, data in events:
            if tag == KIND_ITEM:
                yield data
            elif tag == KIND_ERROR:
                yield _sse_data(data, b"event: error\n")
            else:
                yield _SSE_END


def _sse_converter(shape: StreamShape) -> Callable[[Any], bytes]:
    if shape.kind == "text":
        return lambda value: SSE(as_text(value)).encode().encode()
    if shape.kind == "bytes":
        return lambda value: _sse_data(base64.b64encode(dump_bytes(value)))
    if shape.kind == "sse":
        return lambda value: as_event(value).encode().encode()
    dump = shape.wire.item.dump
    return lambda value: _sse_data(dump(value))
