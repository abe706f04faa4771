"""The raw form, for ``curl`` and plain HTTP clients: UTF-8 text, bytes as they are, SSE
event-stream text, or NDJSON of typed items. It carries no in-band end or error."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable
from contextlib import aclosing
from typing import Any

from chains.errors import ErrorDetail, RemoteError
from chains.streaming.forms.producer import ErrorHook, TaggedParts, aiter_any
from chains.streaming.framing import KIND_ERROR, KIND_FOOTER, KIND_HEADER, KIND_ITEM
from chains.streaming.shape import StreamShape

__all__ = ["decode_raw", "encode_raw", "raw_media_type"]


def raw_media_type(shape: StreamShape) -> str:
    """The Content-Type of the raw form of ``shape``'s stream."""
    return shape.kind.raw_media_type


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
    # No on_error here: raw re-raises the exception, and whoever catches it reports it.
    parts = TaggedParts(shape, source, shape.kind.raw_converter, chainlet=chainlet, on_error=None)
    structured = parts.structured
    async with aclosing(parts.parts()) as tagged:
        async for kind, payload in tagged:
            if kind == KIND_ITEM:
                if structured:
                    yield b'{"item":' + payload + b"}\n"
                elif payload:  # an empty chunk could read as the end of a chunked body
                    yield payload
            elif kind == KIND_HEADER:
                yield b'{"header":' + payload + b"}\n"
            elif kind == KIND_FOOTER:
                yield b'{"footer":' + payload + b"}\n"
            elif kind == KIND_ERROR:
                # An error frame the endpoint's own writer made has no exception: raise its detail.
                raise parts.failure or RemoteError.from_detail(ErrorDetail.model_validate_json(payload))


async def decode_raw(
    shape: StreamShape, chunks: AsyncIterable[bytes] | Iterable[bytes]
) -> AsyncGenerator[Any, None]:
    """A client's reading of the raw form: str pieces, bytes, SSE objects, or parsed items.

    Text is decoded incrementally, so a character split between chunks arrives whole (the
    pieces follow the transport's chunks, not the producer's items). NDJSON lines are parsed
    as the item type. The raw form carries no end marker: a cut stream cannot be told apart
    from a complete one here; use the framed form when that matters.
    """
    async with aclosing(shape.kind.decode_raw(shape.wire, aiter_any(chunks))) as values:
        async for value in values:
            yield value
