"""Reading the producer's generator for the encoders: its values, or, for a structured stream,
the checked chunks of its stream writer, ending in the end frame or an error."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterable
from contextlib import aclosing
from typing import Any, Protocol

from chains.errors import ChainsUsageError, ErrorDetail
from chains.streaming.framing import (
    KIND_END,
    KIND_ERROR,
    KIND_ITEM,
    KIND_PREAMBLE,
    MAX_ENCODABLE_SIZE,
    FrameDecoder,
)
from chains.streaming.schema import WireSchema
from chains.streaming.shape import StreamShape
from chains.streaming.writer import StreamWriter, WriterChunk, stream_writer

__all__ = [
    "ErrorHook",
    "StreamEncoder",
    "StructuredYields",
    "TaggedParts",
    "aiter_any",
    "close_source",
    "converted",
    "error_payload",
    "frames_of",
]

ErrorHook = Callable[[BaseException], None]
"""Called with the producer's exception when the framed or SSE encoder turns it into an error
frame or event, since the exception itself then goes no further (the server logs it there)."""


class StreamEncoder(Protocol):
    """The signature shared by ``encode_framed``, ``encode_sse`` and ``encode_raw``."""

    def __call__(
        self,
        shape: StreamShape,
        source: AsyncIterator[Any] | AsyncIterable[Any],
        *,
        chainlet: str = "",
        on_error: ErrorHook | None = None,
    ) -> AsyncGenerator[bytes, None]: ...


async def close_source(source: Any) -> None:
    close = getattr(source, "aclose", None)
    if close is not None:
        await close()


def aiter_any(source: AsyncIterable[Any] | Iterable[Any]) -> AsyncIterator[Any]:
    if isinstance(source, AsyncIterable):
        return aiter(source)
    return _from_sync(source)


async def _from_sync(source: Iterable[Any]) -> AsyncIterator[Any]:
    for value in source:
        yield value


def error_payload(exc: BaseException, chainlet: str) -> bytes:
    return ErrorDetail.from_exception(exc, chainlet).model_dump_json().encode()


class StructuredYields:
    """Checks a structured endpoint's yields and completes its stream.

    Only bytes made by ``chains.stream_writer`` for the endpoint's types are accepted, from
    one writer, each yielded once and in order; when the generator finishes the writer's
    end frame is appended (unless the generator yielded it), and when it raises, an error
    frame. ``failure`` keeps the exception for the raw form, which re-raises it.
    """

    __slots__ = ("chainlet", "failure", "on_error", "shape", "source")

    def __init__(
        self, shape: StreamShape, source: AsyncIterator[Any], chainlet: str, on_error: ErrorHook | None
    ) -> None:
        self.shape = shape
        self.source = source
        self.chainlet = chainlet
        self.on_error = on_error
        self.failure: BaseException | None = None

    def _problem(self, chunk: Any, writer: StreamWriter[Any] | None) -> str:
        types = self.shape.types
        if not isinstance(chunk, WriterChunk):
            return (
                f"this endpoint streams {types!r} (Annotated[AsyncIterator[bytes], ...]) and must "
                f"yield what its chains.stream_writer({types!r}) returns from yield_item/yield_header/"
                f"yield_footer, but it yielded {type(chunk).__name__} {chunk!r:.60}, which no writer made"
            )
        origin = chunk.writer
        if writer is None:
            if origin is None:
                return (
                    "the first chunk the stream writer made (it carries the stream's preamble) was never "
                    "yielded; yield every value writer.yield_*() returns, in order"
                )
            if origin.types.fingerprint != self.shape.fingerprint:
                return (
                    f"this endpoint declares {types!r} but yielded frames of "
                    f"stream_writer({origin.types!r}); build the writer with the annotation's StreamTypes"
                )
        elif origin is not None:
            return (
                "the endpoint yielded frames of two different stream writers; use one stream_writer per call"
            )
        return ""

    @staticmethod
    def _unyielded(writer: StreamWriter[Any], received: int) -> str:
        made = writer.chunks_made
        if made == received:
            return ""
        if made > received:
            count = "a chunk" if made - received == 1 else f"{made - received} chunks"
            return (
                f"{count} made by the stream writer never reached the stream; yield every value "
                "writer.yield_*() returns, in the order they were made"
            )
        return "the endpoint yielded a stream writer's chunk more than once; yield each one once"

    def _writer(self) -> StreamWriter[Any]:
        types = self.shape.types
        assert types is not None
        writer: StreamWriter[Any] = stream_writer(types)
        return writer

    def _fail(self, exc: Exception, writer: StreamWriter[Any] | None) -> bytes | None:
        """The error frame ending the stream, or None when its end frame already went out."""
        self.failure = exc
        if self.on_error is not None:
            self.on_error(exc)
        if writer is None:
            writer = self._writer()
        if writer.closed:
            return None
        return writer.error(exc, chainlet=self.chainlet)

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        source = self.source
        writer: StreamWriter[Any] | None = None
        received = 0
        failed: bytes | None
        try:
            while True:
                try:
                    chunk = await anext(source)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    failed = self._fail(exc, writer)
                    if failed is not None:
                        yield failed
                    return
                # The per-chunk check is a type test; which writer made it is on its first chunk.
                if writer is None or type(chunk) is not WriterChunk or chunk.writer is not None:
                    problem = self._problem(chunk, writer)
                    if problem:
                        failed = self._fail(ChainsUsageError(problem), writer)
                        if failed is not None:
                            yield failed
                        return
                    writer = chunk.writer
                received += 1
                yield chunk
            if writer is None:
                writer = self._writer()
            problem = self._unyielded(writer, received)
            if problem:
                failed = self._fail(ChainsUsageError(problem), writer)
                if failed is not None:
                    yield failed
                return
            if not writer.closed:
                try:
                    end = writer.end()
                except ChainsUsageError as exc:  # the writer refuses to end: its reason goes to the caller
                    failed = self._fail(exc, writer)
                    if failed is not None:
                        yield failed
                    return
                yield end
        finally:
            await close_source(source)


async def converted(
    source: AsyncIterator[Any],
    convert: Callable[[Any], bytes],
    chainlet: str,
    on_error: ErrorHook | None,
    failure: list[Exception],
) -> AsyncGenerator[tuple[int, bytes], None]:
    """(ITEM, convert(value)) for each value, then (END, b"") or (ERROR, error detail JSON).

    ``convert`` runs inside the ``try``, so a value of the wrong type becomes an error like
    any other producer failure. Yields stay outside it: an exception thrown into this
    generator by its consumer must not be reported as the producer's.
    """
    try:
        while True:
            try:
                data = convert(await anext(source))
            except StopAsyncIteration:
                break
            except Exception as exc:
                failure.append(exc)
                if on_error is not None:
                    on_error(exc)
                yield KIND_ERROR, error_payload(exc, chainlet)
                return
            yield KIND_ITEM, data
        yield KIND_END, b""
    finally:
        await close_source(source)


async def frames_of(
    chunks: AsyncGenerator[bytes, None],
) -> AsyncGenerator[tuple[int, bytes], None]:
    """The frames in a structured endpoint's checked chunks, without the preamble."""
    decoder = FrameDecoder(max_frame_size=MAX_ENCODABLE_SIZE)
    async with aclosing(chunks):
        async for chunk in chunks:
            for kind, payload in decoder.feed(chunk):
                if kind != KIND_PREAMBLE:
                    yield kind, payload


class TaggedParts:
    """The producer's stream as (kind, bytes) parts, for the encoders that rewrite it (SSE, raw).

    A structured stream gives its header, items and footer as JSON, read from its checked
    writer chunks; any other stream gives ``(ITEM, convert(value))`` per value, ``convert``
    being what ``converter(shape.wire)`` makes. Both end with ``(END, b"")`` or with
    ``(ERROR, error detail JSON)``, after which :attr:`failure` is the producer's exception
    (None for an error frame the endpoint's own writer made)::

        parts = TaggedParts(shape, source, shape.kind.sse_converter, chainlet="Entry", on_error=None)
        async with aclosing(parts.parts()) as tagged:
            async for kind, payload in tagged:
                ...
    """

    __slots__ = ("_converted", "_source", "_structured", "chainlet", "converter", "on_error", "shape")

    def __init__(
        self,
        shape: StreamShape,
        source: AsyncIterable[Any] | Iterable[Any],
        converter: Callable[[WireSchema], Callable[[Any], bytes]],
        *,
        chainlet: str,
        on_error: ErrorHook | None,
    ) -> None:
        self.shape = shape
        self.converter = converter
        self.chainlet = chainlet
        self.on_error = on_error
        self._source = aiter_any(source)
        self._structured = (
            StructuredYields(shape, self._source, chainlet, on_error) if shape.kind.yields_frames else None
        )
        self._converted: list[Exception] = []

    @property
    def structured(self) -> bool:
        """Whether the parts are a structured stream's frames (items as JSON, not converted)."""
        return self._structured is not None

    @property
    def failure(self) -> BaseException | None:
        if self._structured is not None:
            return self._structured.failure
        return self._converted[0] if self._converted else None

    def parts(self) -> AsyncGenerator[tuple[int, bytes], None]:
        if self._structured is not None:
            return frames_of(self._structured.chunks())
        produced = self.shape.kind.producer_values(self._source, self.chainlet)
        convert = self.converter(self.shape.wire)
        return converted(produced, convert, self.chainlet, self.on_error, self._converted)
