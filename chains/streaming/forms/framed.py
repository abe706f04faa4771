"""The framed form, ``application/x-chains-stream``: what stubs ask for and decode.

The server encodes the generator's values with :func:`encode_framed`; the stub decodes them
with :func:`decode_framed`. ``run_local`` chains the two::

    shape = StreamShape.of(ITEMS, item_type=Token)
    async for token in decode_framed(shape, encode_framed(shape, endpoint_generator)):
        ...
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable
from contextlib import aclosing
from typing import Any

from chains.streaming.forms.producer import (
    ErrorHook,
    StructuredYields,
    aiter_any,
    close_source,
    error_payload,
)
from chains.streaming.frame_reader import FrameReader
from chains.streaming.framing import END_FRAME, KIND_ERROR, KIND_ITEM, encode_frame
from chains.streaming.shape import StreamShape
from chains.wire import DEFAULT_MAX_FRAME_BYTES

__all__ = ["decode_framed", "encode_framed"]


async def encode_framed(
    shape: StreamShape,
    source: AsyncIterator[Any] | AsyncIterable[Any],
    *,
    chainlet: str = "",
    on_error: ErrorHook | None = None,
) -> AsyncGenerator[bytes, None]:
    """The framed form of an endpoint's stream (server side), one bytes per frame.

    The preamble goes out with the first frame, so a caller waiting for the first item gets
    it as soon as the generator yields it. When the generator finishes, the end frame is
    appended once; when it raises, an error frame describing the exception (as raised in
    ``chainlet``) ends the stream instead, and ``on_error`` is called with it::

        async for frame in encode_framed(StreamShape.of(TEXT), generator, chainlet="Entry"):
            await send(frame)
    """
    source = aiter_any(source)
    if shape.kind.yields_frames:
        async with aclosing(StructuredYields(shape, source, chainlet, on_error).chunks()) as chunks:
            async for chunk in chunks:
                yield chunk
        return
    produced = shape.kind.producer_values(source, chainlet)
    wire = shape.wire
    dump = wire.item.dump
    head = wire.preamble
    try:
        while True:
            try:
                payload = dump(await anext(produced))
            except StopAsyncIteration:
                break
            except Exception as exc:
                if on_error is not None:
                    on_error(exc)
                yield head + encode_frame(KIND_ERROR, error_payload(exc, chainlet))
                return
            if head:
                yield head + encode_frame(KIND_ITEM, payload)
                head = b""
            else:
                yield encode_frame(KIND_ITEM, payload)
        yield head + END_FRAME
    finally:
        await close_source(produced)


async def decode_framed(
    shape: StreamShape,
    chunks: AsyncIterable[bytes] | Iterable[bytes],
    *,
    max_frame_size: int = DEFAULT_MAX_FRAME_BYTES,
) -> AsyncGenerator[Any, None]:
    """The caller's values from the framed form (stub side): str, bytes, SSE or T.

    Raises StreamInterrupted if the bytes stop before the end frame, RemoteError for the
    producer's error frame, StreamSchemaMismatch if the producer streams another schema.
    A structured stream is passed through as plain bytes chunks: the caller reads them with
    ``chains.stream_reader(TYPES, ...)``, which does those same checks with its own types.
    """
    if shape.kind.yields_frames:
        # Plain bytes, so that run_local hands out what a remote stub would (no WriterChunk).
        source = aiter_any(chunks)
        try:
            async for chunk in source:
                yield bytes(chunk)
        finally:
            await close_source(source)
        return
    reader = FrameReader(shape.wire, chunks, max_frame_size=max_frame_size)
    try:
        async with aclosing(reader.items()) as values:
            async for value in values:
                yield value
    finally:
        await reader.aclose()
