"""The wire forms of one endpoint's stream, for the server, the stubs and ``run_local``.

An endpoint's stream has a *kind*, given by what its generator yields:

- ``text``: ``AsyncIterator[str]``, values ``str``;
- ``bytes``: ``AsyncIterator[bytes]``, values ``bytes``;
- ``sse``: ``AsyncIterator[chains.SSE]``, values :class:`chains.SSE`;
- ``items``: ``AsyncIterator[T]``, values of any serializable ``T``;
- ``structured``: ``Annotated[AsyncIterator[bytes], StreamTypes]``, the bytes a stream
  writer returns.

The server encodes the generator's values in the form the caller negotiated with
:func:`negotiate`: framed (:func:`encode_framed`, what stubs ask for), server-sent events
(:func:`encode_sse`) or raw (:func:`encode_raw`). The stub decodes the framed form with
:func:`decode_framed`. ``run_local`` chains the two::

    shape = StreamShape.of("items", item_type=Token)
    async for token in decode_framed(shape, encode_framed(shape, endpoint_generator)):
        ...

The formats are described in ``docs/wire-protocol.md``.
"""

from __future__ import annotations

import base64
import codecs
import json
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, Protocol, get_args

from chains.errors import ChainsUsageError, ErrorDetail, RemoteError
from chains.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    END_FRAME,
    KIND_END,
    KIND_ERROR,
    KIND_FOOTER,
    KIND_HEADER,
    KIND_ITEM,
    KIND_PREAMBLE,
    MAX_ENCODABLE_SIZE,
    FrameDecoder,
    StreamProtocolError,
    encode_frame,
)
from chains.sse import SSE
from chains.streams import (
    FrameReader,
    PartCodec,
    StreamTypes,
    StreamWriter,
    WireSchema,
    WriterChunk,
    stream_types,
    stream_writer,
)

__all__ = [
    "BYTES_MEDIA_TYPE",
    "FRAMED_MEDIA_TYPE",
    "NDJSON_MEDIA_TYPE",
    "SSE_MEDIA_TYPE",
    "TEXT_MEDIA_TYPE",
    "ErrorHook",
    "Negotiated",
    "StreamEncoder",
    "StreamKind",
    "StreamShape",
    "decode_framed",
    "decode_raw",
    "encode_framed",
    "encode_raw",
    "encode_sse",
    "negotiate",
    "raw_media_type",
    "shape_of",
]

StreamKind = Literal["text", "bytes", "sse", "items", "structured"]
STREAM_KINDS: Final[tuple[str, ...]] = get_args(StreamKind)

FRAMED_MEDIA_TYPE: Final = "application/x-chains-stream"
SSE_MEDIA_TYPE: Final = "text/event-stream"
TEXT_MEDIA_TYPE: Final = "text/plain; charset=utf-8"
BYTES_MEDIA_TYPE: Final = "application/octet-stream"
NDJSON_MEDIA_TYPE: Final = "application/x-ndjson"

ErrorHook = Callable[[BaseException], None]
"""Called with the producer's exception when the framed or SSE encoder turns it into an error
frame or event, since the exception itself then goes no further (the server logs it there)."""


# ---------------------------------------------------------------------------------------------
# Built-in wire schemas of the kinds that are not described by a StreamTypes.


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ChainsUsageError(
            f"this endpoint streams str (AsyncIterator[str]) but yielded {type(value).__name__} "
            f"{value!r:.80}; yield str values, or change the annotation"
        )
    return value


def _dump_text(value: Any) -> bytes:
    try:
        return _text(value).encode()
    except UnicodeEncodeError as exc:
        raise ChainsUsageError(
            f"a str item is not valid Unicode text ({exc}); it cannot be sent as UTF-8"
        ) from None


def _load_text(payload: bytes) -> str:
    return payload.decode()


def _dump_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise ChainsUsageError(
        f"this endpoint streams bytes (AsyncIterator[bytes]) but yielded {type(value).__name__} "
        f"{value!r:.80}; yield bytes values, or change the annotation"
    )


def _load_bytes(payload: bytes) -> bytes:
    return payload


def _sse_event(value: Any) -> SSE:
    if not isinstance(value, SSE):
        raise ChainsUsageError(
            f"this endpoint streams chains.SSE (AsyncIterator[chains.SSE]) but yielded "
            f"{type(value).__name__} {value!r:.80}; yield chains.SSE(data, event=..., id=...) objects"
        )
    return value


def _dump_sse(value: Any) -> bytes:
    value = _sse_event(value)
    fields: dict[str, Any] = {"data": value.data}
    if value.event is not None:
        fields["event"] = value.event
    if value.id is not None:
        fields["id"] = value.id
    if value.retry is not None:
        fields["retry"] = value.retry
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()


def _load_sse(payload: bytes) -> SSE:
    fields = json.loads(payload)
    if not isinstance(fields, dict):
        raise ValueError(f"an SSE item is a JSON object, got {payload[:80]!r}")
    try:
        return SSE(**fields)
    except (TypeError, ChainsUsageError) as exc:
        raise ValueError(f"not a valid SSE item: {exc}") from None


_TEXT_WIRE: Final = WireSchema("text", "AsyncIterator[str]", PartCodec("str", _dump_text, _load_text))
_BYTES_WIRE: Final = WireSchema("bytes", "AsyncIterator[bytes]", PartCodec("bytes", _dump_bytes, _load_bytes))
_SSE_WIRE: Final = WireSchema(
    "sse", "AsyncIterator[chains.SSE]", PartCodec("chains.SSE", _dump_sse, _load_sse)
)
_BUILTIN_WIRES: Final[dict[StreamKind, WireSchema]] = {
    "text": _TEXT_WIRE,
    "bytes": _BYTES_WIRE,
    "sse": _SSE_WIRE,
}
_BUILTIN_ITEMS: Final[dict[StreamKind, Any]] = {"text": str, "bytes": bytes, "sse": SSE}


# ---------------------------------------------------------------------------------------------
# StreamShape


@dataclass(frozen=True)
class StreamShape:
    """What one endpoint streams: its kind, and for ``items``/``structured`` its StreamTypes.

    For ``items`` the StreamTypes is ``stream_types(T)`` (so an item stream of ``T`` and a
    structured stream of ``stream_types(T)`` are the same frames); text, bytes and SSE streams
    have the built-in fingerprints ``"text"``, ``"bytes"`` and ``"sse"``::

        >>> StreamShape.of("text").fingerprint
        'text'
        >>> StreamShape.of("items", item_type=int).types
        stream_types(int)
    """

    kind: StreamKind
    types: StreamTypes[Any, Any, Any] | None = None

    @classmethod
    def of(
        cls, kind: StreamKind, item_type: Any = None, types: StreamTypes[Any, Any, Any] | None = None
    ) -> StreamShape:
        """The shape of a ``kind`` stream: ``items`` needs ``item_type``, ``structured`` ``types``."""
        if kind not in STREAM_KINDS:
            raise ChainsUsageError(f"unknown stream kind {kind!r}; use one of {', '.join(STREAM_KINDS)}")
        if kind == "structured":
            if not isinstance(types, StreamTypes):
                raise ChainsUsageError(
                    "a structured stream shape needs its StreamTypes: StreamShape.of(kind, types=...)"
                )
            return cls(kind, types)
        if types is not None:
            raise ChainsUsageError(f"only a structured stream takes StreamTypes, not a {kind} stream")
        if kind == "items":
            if item_type is None:
                raise ChainsUsageError(
                    "an items stream shape needs its item type: StreamShape.of('items', item_type=T)"
                )
            return cls(kind, stream_types(item_type))
        if item_type is not None and item_type is not _BUILTIN_ITEMS[kind]:
            raise ChainsUsageError(
                f"a {kind} stream yields {_BUILTIN_ITEMS[kind].__name__}, not {item_type!r}; "
                "use kind='items' for other item types"
            )
        return cls(kind)

    @classmethod
    def for_item_type(cls, item_type: Any, types: StreamTypes[Any, Any, Any] | None = None) -> StreamShape:
        """The shape for a generator yielding ``item_type`` (``bytes`` with ``types``: structured)."""
        if types is not None:
            return cls.of("structured", types=types)
        for kind, builtin in _BUILTIN_ITEMS.items():
            if item_type is builtin:
                return cls.of(kind)
        return cls.of("items", item_type=item_type)

    @property
    def wire(self) -> WireSchema:
        """The fingerprint, preamble and codecs the framed form uses."""
        if self.types is not None:
            return self.types.wire
        return _BUILTIN_WIRES[self.kind]

    @property
    def fingerprint(self) -> str:
        return self.wire.fingerprint

    @property
    def item_type(self) -> Any:
        """What a consumer of the decoded stream gets: str, bytes, SSE, T, or bytes (structured)."""
        if self.kind == "items" and self.types is not None:
            return self.types.item_type
        return _BUILTIN_ITEMS.get(self.kind, bytes)

    def __repr__(self) -> str:
        return f"StreamShape({self.kind!r}, {self.wire.name})"


class _EndpointLike(Protocol):
    @property
    def output_kind(self) -> str: ...
    @property
    def output_type(self) -> Any: ...
    @property
    def stream_types(self) -> StreamTypes[Any, Any, Any] | None: ...


_SHAPES: dict[tuple[str, Any, Any], StreamShape] = {}


def shape_of(endpoint: _EndpointLike) -> StreamShape:
    """The shape of a checked endpoint's stream (anything with ``output_kind``,
    ``output_type`` and ``stream_types``, such as ``chains.endpoint.EndpointSpec``); cached."""
    kind = endpoint.output_kind
    key = (kind, endpoint.output_type, endpoint.stream_types)
    try:
        return _SHAPES[key]
    except KeyError:
        shape = _build_shape(kind, endpoint.output_type, endpoint.stream_types)
        _SHAPES[key] = shape
        return shape
    except TypeError:  # unhashable type metadata: build it every time
        return _build_shape(kind, endpoint.output_type, endpoint.stream_types)


def _build_shape(kind: str, output_type: Any, types: StreamTypes[Any, Any, Any] | None) -> StreamShape:
    if kind == "structured":
        return StreamShape.of("structured", types=types)
    if kind == "items":
        return StreamShape.of("items", item_type=output_type)
    if kind == "text":
        return StreamShape.of("text")
    if kind == "bytes":
        return StreamShape.of("bytes")
    if kind == "sse":
        return StreamShape.of("sse")
    raise ChainsUsageError(
        f"the endpoint's output is {kind!r}, not a stream; only streaming endpoints have a shape"
    )


# ---------------------------------------------------------------------------------------------
# Reading the producer: values, or checked writer chunks, ending in end or error.


async def _close(source: Any) -> None:
    close = getattr(source, "aclose", None)
    if close is not None:
        await close()


def _aiter(source: AsyncIterable[Any] | Iterable[Any]) -> AsyncIterator[Any]:
    if isinstance(source, AsyncIterable):
        return aiter(source)
    return _from_sync(source)


async def _from_sync(source: Iterable[Any]) -> AsyncIterator[Any]:
    for value in source:
        yield value


def _error_payload(exc: BaseException, chainlet: str) -> bytes:
    return ErrorDetail.from_exception(exc, chainlet).model_dump_json().encode()


class _Structured:
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
                except ChainsUsageError as exc:  # a declared header or footer was never written
                    failed = self._fail(exc, writer)
                    if failed is not None:
                        yield failed
                    return
                yield end
        finally:
            await _close(source)


async def _converted(
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
                yield KIND_ERROR, _error_payload(exc, chainlet)
                return
            yield KIND_ITEM, data
        yield KIND_END, b""
    finally:
        await _close(source)


# ---------------------------------------------------------------------------------------------
# Framed: application/x-chains-stream


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

        async for frame in encode_framed(StreamShape.of("text"), generator, chainlet="Entry"):
            await send(frame)
    """
    source = _aiter(source)
    if shape.kind == "structured":
        async with aclosing(_Structured(shape, source, chainlet, on_error).chunks()) as chunks:
            async for chunk in chunks:
                yield chunk
        return
    wire = shape.wire
    dump = wire.item.dump
    head = wire.preamble
    try:
        while True:
            try:
                payload = dump(await anext(source))
            except StopAsyncIteration:
                break
            except Exception as exc:
                if on_error is not None:
                    on_error(exc)
                yield head + encode_frame(KIND_ERROR, _error_payload(exc, chainlet))
                return
            if head:
                yield head + encode_frame(KIND_ITEM, payload)
                head = b""
            else:
                yield encode_frame(KIND_ITEM, payload)
        yield head + END_FRAME
    finally:
        await _close(source)


async def decode_framed(
    shape: StreamShape,
    chunks: AsyncIterable[bytes] | Iterable[bytes],
    *,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
) -> AsyncGenerator[Any, None]:
    """The caller's values from the framed form (stub side): str, bytes, SSE or T.

    Raises StreamInterrupted if the bytes stop before the end frame, RemoteError for the
    producer's error frame, StreamSchemaMismatch if the producer streams another schema.
    A structured stream is passed through as plain bytes chunks: the caller reads them with
    ``chains.stream_reader(TYPES, ...)``, which does those same checks with its own types.
    """
    if shape.kind == "structured":
        # Plain bytes, so that run_local hands out what a remote stub would (no WriterChunk).
        source = _aiter(chunks)
        try:
            async for chunk in source:
                yield bytes(chunk)
        finally:
            await _close(source)
        return
    reader = FrameReader(shape.wire, chunks, max_frame_size=max_frame_size)
    try:
        async with aclosing(reader.items()) as values:
            async for value in values:
                yield value
    finally:
        await reader.aclose()


# ---------------------------------------------------------------------------------------------
# Server-sent events: text/event-stream

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
    source = _aiter(source)
    if shape.kind == "structured":
        structured = _Structured(shape, source, chainlet, on_error)
        async with aclosing(_frames_of(structured.chunks())) as frames:
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
    async with aclosing(_converted(source, _sse_converter(shape), chainlet, on_error, failure)) as events:
        async for tag, data in events:
            if tag == KIND_ITEM:
                yield data
            elif tag == KIND_ERROR:
                yield _sse_data(data, b"event: error\n")
            else:
                yield _SSE_END


def _sse_converter(shape: StreamShape) -> Callable[[Any], bytes]:
    if shape.kind == "text":
        return lambda value: SSE(_text(value)).encode().encode()
    if shape.kind == "bytes":
        return lambda value: _sse_data(base64.b64encode(_dump_bytes(value)))
    if shape.kind == "sse":
        return lambda value: _sse_event(value).encode().encode()
    dump = shape.wire.item.dump
    return lambda value: _sse_data(dump(value))


async def _frames_of(
    chunks: AsyncGenerator[bytes, None],
) -> AsyncGenerator[tuple[int, bytes], None]:
    """The frames in a structured endpoint's checked chunks, without the preamble."""
    decoder = FrameDecoder(max_frame_size=MAX_ENCODABLE_SIZE)
    async with aclosing(chunks):
        async for chunk in chunks:
            for kind, payload in decoder.feed(chunk):
                if kind != KIND_PREAMBLE:
                    yield kind, payload


# ---------------------------------------------------------------------------------------------
# Raw: text/plain, application/octet-stream, NDJSON


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
    source = _aiter(source)
    if shape.kind == "structured":
        # No on_error here: raw re-raises the exception, and whoever catches it reports it.
        structured = _Structured(shape, source, chainlet, None)
        async with aclosing(_frames_of(structured.chunks())) as frames:
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
    async with aclosing(_converted(source, _raw_converter(shape), chainlet, None, failure)) as values:
        async for tag, data in values:
            if tag == KIND_ITEM:
                if data:  # an empty chunk could read as the end of a chunked body
                    yield data
            elif tag == KIND_ERROR:
                raise failure[0]


def _raw_converter(shape: StreamShape) -> Callable[[Any], bytes]:
    if shape.kind == "text":
        return _dump_text
    if shape.kind == "bytes":
        return _dump_bytes
    if shape.kind == "sse":
        return lambda value: _sse_event(value).encode().encode()
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
    source = _aiter(chunks)
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


# ---------------------------------------------------------------------------------------------
# Content negotiation


class StreamEncoder(Protocol):
    """The signature shared by :func:`encode_framed`, :func:`encode_sse` and :func:`encode_raw`."""

    def __call__(
        self,
        shape: StreamShape,
        source: AsyncIterator[Any] | AsyncIterable[Any],
        *,
        chainlet: str = "",
        on_error: ErrorHook | None = None,
    ) -> AsyncGenerator[bytes, None]: ...


class Negotiated(NamedTuple):
    """The outcome of :func:`negotiate`: the Content-Type to send and the encoder to use."""

    media_type: str
    encoder: StreamEncoder


def _accepted(header: str) -> list[tuple[str, str, float]]:
    ranges: list[tuple[str, str, float]] = []
    for part in header.split(","):
        media, *params = part.split(";")
        media = media.strip().lower()
        if media == "*":
            media = "*/*"
        main, slash, sub = media.partition("/")
        if not slash or not main or not sub:
            continue
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = min(max(float(value.strip()), 0.0), 1.0)
                except ValueError:
                    quality = -1.0  # a malformed range is ignored
        if quality >= 0:
            ranges.append((main, sub, quality))
    return ranges


def _quality(media_type: str, ranges: list[tuple[str, str, float]]) -> tuple[float, int]:
    """The quality the client gives ``media_type``, from its most specific matching range."""
    main, _, sub = media_type.split(";")[0].strip().partition("/")
    best_specificity, best_quality = -1, 0.0
    for range_main, range_sub, quality in ranges:
        if range_main == main and range_sub == sub:
            specificity = 2
        elif range_main == main and range_sub == "*":
            specificity = 1
        elif range_main == "*" and range_sub == "*":
            specificity = 0
        else:
            continue
        if specificity > best_specificity:
            best_specificity, best_quality = specificity, quality
    return best_quality, best_specificity


_NDJSON_ALIASES: Final = ("application/x-ndjson", "application/ndjson", "application/jsonl")


def negotiate(accept_header: str | None, shape: StreamShape) -> Negotiated:
    """Pick the stream's form for a request's ``Accept`` header.

    ``application/x-chains-stream`` gives the framed form, ``text/event-stream`` SSE, and
    anything else the raw form of the kind (``text/plain; charset=utf-8``,
    ``application/octet-stream``, NDJSON). The highest quality value wins; at equal quality
    an exact media type beats ``type/*``, which beats ``*/*``; remaining ties prefer raw,
    then SSE, then framed, so ``curl`` (``*/*``) sees plain tokens. No header, or a header
    that accepts none of the forms, gives raw (RFC 9110 lets a server disregard Accept
    rather than answer 406). An SSE stream has no separate raw form for an Accept header:
    ``*/*`` or ``text/event-stream`` give its events followed by ``event: end``; raw (events
    only) is for requests without Accept::

        >>> negotiate("application/x-chains-stream", StreamShape.of("text")).media_type
        'application/x-chains-stream'
        >>> negotiate("*/*", StreamShape.of("text")).media_type
        'text/plain; charset=utf-8'
    """
    raw = Negotiated(raw_media_type(shape), encode_raw)
    if accept_header is None or not accept_header.strip():
        return raw
    ranges = _accepted(accept_header)
    candidates: list[tuple[float, int, int, Negotiated]] = []
    if shape.kind != "sse":
        names = _NDJSON_ALIASES if raw.media_type == NDJSON_MEDIA_TYPE else (raw.media_type,)
        quality, specificity = max(_quality(name, ranges) for name in names)
        candidates.append((quality, specificity, 3, raw))
    quality, specificity = _quality(SSE_MEDIA_TYPE, ranges)
    candidates.append((quality, specificity, 2, Negotiated(SSE_MEDIA_TYPE, encode_sse)))
    quality, specificity = _quality(FRAMED_MEDIA_TYPE, ranges)
    candidates.append((quality, specificity, 1, Negotiated(FRAMED_MEDIA_TYPE, encode_framed)))
    best = max(candidates, key=lambda c: c[:3])
    if best[0] <= 0:
        return raw
    return best[3]
