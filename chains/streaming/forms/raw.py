"""The raw form, for ``curl`` and plain HTTP clients: UTF-8 text, bytes as they are, SSE
event-stream text, or NDJSON of typed items. It carries no in-band end or error."""

from __future__ import annotations

import codecs
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterable
from contextlib import aclosing
from typing import Any

from chains.errors import ChainsUsageError, ErrorDetail, RemoteError
from chains.streaming.forms.producer import ErrorHook, StructuredYields, aiter_any, converted, frames_of
from chains.streaming.framing import KIND_ERROR, KIND_FOOTER, KIND_HEADER, KIND_ITEM, StreamProtocolError
from chains.streaming.kinds import as_event, dump_bytes, dump_text
from chains.streaming.media import BYTES_MEDIA_TYPE, NDJSON_MEDIA_TYPE, SSE_MEDIA_TYPE, TEXT_MEDIA_TYPE
from chains.streaming.shape import StreamShape
from chains.streaming.sse import SSE

__all__ = ["decode_raw", "encode_raw", "raw_media_type"]


def raw_media_type(shape: StreamShape) -> str:
    """The Content-Type of the raw form of ``shape``'s stream."""
    if shape.kind == "text":
        return TEXT_MEDIA_TYPE
    if shape.kind == "bytes":
        return BYTES_MEDIA_TYPE
    if shape.kind == "sse":
        return SSE_MEDIA_TYPE
    return NDJSON_MEDIA_TYPE


async def encode_raw(
    shape: StreamShape,
    source: AsyncIterator[Any] | AsyncIterable[Any],
    *,
    chainlet: str = "",
    on_error: ErrorHook | None = None,
) -> AsyncGenerator[bytes, None]:
    """The raw form, for ``curl`` and plain HTTP clients; see :func:`raw_media_type`.

    Text goes out as UTF-8 and bytes as they are, typed items as NDJSON (one JSON value per
    line), SSE objects as their event-stream text. A structured stream is NDJSON of tagged
    objects: ``{"header": ...}``, then ``{"item": ...}`` per item, then ``{"footer": ...}``.

    Raw has no in-band end or error: when the producer raises, this raises the same
    exception after yielding everything before it, so the server aborts the chunked response
    (no terminating chunk) and the client sees a broken transfer, not a complete body.
    ``on_error`` is not called (the exception itself reaches the server); it is accepted so
    that all encoders share one signature.
    """
    source = aiter_any(source)
    if shape.kind == "structured":
        # No on_error here: raw re-raises the exception, and whoever catches it reports it.
        structured = StructuredYields(shape, source, chainlet, None)
        async with aclosing(frames_of(structured.chunks())) as frames:
            async for kind, payload in frames:
                if kind == KIND_ITEM:
                    yield b'{"item":' + payload + b"}\n"
                elif kind == KIND_HEADER:
                    yield b'{"header":' + payload + b"}\n"
                elif kind == KIND_FOOTER:
                    yield b'{"footer":' + payload + b"}\n"
                elif kind == KIND_ERROR:
                    # The writer's own error() frame has no exception here: raise its detail.
                    raise structured.failure or RemoteError.from_detail(
                        ErrorDetail.model_validate_json(payload)
                    )
        return
    failure: list[Exception] = []
    async with aclosing(converted(source, _raw_converter(shape), chainlet, None, failure)) as values:
        async for tag, data in values:
            if tag == KIND_ITEM:
                if data:  # an empty chunk could read as the end of a chunked body
                    yield data
            elif tag == KIND_ERROR:
                raise failure[0]


def _raw_converter(shape: StreamShape) -> Callable[[Any], bytes]:
    if shape.kind == "text":
        return dump_text
    if shape.kind == "bytes":
        return dump_bytes
    if shape.kind == "sse":
        return lambda value: as_event(value).encode().encode()
    dump = shape.wire.item.dump
    return lambda value: dump(value) + b"\n"


async def decode_raw(
    shape: StreamShape, chunks: AsyncIterable[bytes] | Iterable[bytes]
) -> AsyncGenerator[Any, None]:
    """A client's reading of the raw form: str pieces, bytes, SSE objects, or parsed items.

    Text is decoded incrementally, so a character split between chunks arrives whole (the
    pieces follow the transport's chunks, not the producer's items). NDJSON lines are parsed
    as the item type. The raw form carries no end marker: a cut stream cannot be told apart
    from a complete one here; use the framed form when that matters.
    """
    source = aiter_any(chunks)
    if shape.kind == "text":
        utf8 = codecs.getincrementaldecoder("utf-8")()
        try:
            async for chunk in source:
                text = utf8.decode(chunk)
                if text:
                    yield text
            tail = utf8.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise StreamProtocolError(f"the raw text stream is not valid UTF-8: {exc}") from None
        if tail:
            yield tail
    elif shape.kind == "bytes":
        async for chunk in source:
            yield bytes(chunk)
    elif shape.kind == "sse":
        async for event in SSE.from_chunks(source):
            yield event
    elif shape.kind == "items":
        load = shape.wire.item.load
        pending: list[bytes] = []
        async for chunk in source:
            start = 0
            while (newline := chunk.find(b"\n", start)) >= 0:
                line = chunk[start:newline]
                if pending:
                    pending.append(line)
                    line = b"".join(pending)
                    pending.clear()
                if line.strip():
                    yield load(line)
                start = newline + 1
            if start < len(chunk):
                pending.append(chunk[start:])
        if pending and b"".join(pending).strip():
            yield load(b"".join(pending))
    else:
        raise ChainsUsageError(
            "a structured stream is read in its framed form, with chains.stream_reader(TYPES, ...)"
        )
