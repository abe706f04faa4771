"""The kinds of output an endpoint has: one result, or a stream of text, bytes, SSE events,
typed items, or structured parts. One object per kind carries what differs between them.

Each kind is one class with a single instance (:data:`UNARY`, :data:`TEXT`, :data:`BYTES`,
:data:`SSE_EVENTS`, :data:`ITEMS`, :data:`STRUCTURED`, :data:`WEBSOCKET`): its wire codec, the
media types of its raw form, and how its values become server-sent events and raw bytes and back. Code that
handles every kind asks the kind instead of comparing names, so a new kind is a new class.
Where a kind is written down (``chainlet.json``, the state file) it is its :attr:`~OutputKind.name`,
read back with :func:`kind_named`::

    >>> kind_named("text") is TEXT, TEXT.name, TEXT.raw_media_type
    (True, 'text', 'text/plain; charset=utf-8')
    >>> stream_kind_for(int), stream_kind_for(str)
    (<stream kind 'items'>, <stream kind 'text'>)
"""

from __future__ import annotations

import base64
import codecs
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, ClassVar, Final

from chains.errors import ChainsUsageError
from chains.streaming.framing import StreamProtocolError
from chains.streaming.schema import PartCodec, WireSchema
from chains.streaming.sse import SSE, data_event
from chains.streaming.types import StreamTypes, stream_types
from chains.streaming.writer import WriterChunk
from chains.wire import BYTES_MEDIA_TYPE, NDJSON_MEDIA_TYPE, SSE_MEDIA_TYPE, TEXT_MEDIA_TYPE

__all__ = [
    "BYTES",
    "ITEMS",
    "KINDS",
    "SSE_EVENTS",
    "STRUCTURED",
    "TEXT",
    "UNARY",
    "WEBSOCKET",
    "BytesStream",
    "EventStream",
    "ItemStream",
    "OutputKind",
    "StreamKind",
    "StructuredStream",
    "TextStream",
    "Unary",
    "WebSocketKind",
    "as_event",
    "as_text",
    "dump_bytes",
    "dump_text",
    "kind_named",
    "stream_kind_for",
    "stream_kind_named",
]

Converter = Callable[[Any], bytes]


class OutputKind:
    """What ``run_remote`` gives its caller; see the module docstring for the kinds."""

    __slots__ = ()

    name: ClassVar[str]
    """The kind's stable name, as written in ``chainlet.json`` and the state file."""
    is_stream: ClassVar[bool] = True
    has_item_schema: ClassVar[bool] = False
    """Whether the endpoint's ``output_type`` has the JSON schema of what the caller gets: the
    result of a unary call, or each item of a typed item stream."""
    yields_frames: ClassVar[bool] = False
    """The generator yields frames a stream writer made, which the encoders check and
    complete, rather than values the encoders convert."""
    is_socket: ClassVar[bool] = False
    """A bidirectional conversation over a WebSocket rather than one request and its answer."""

    def __repr__(self) -> str:
        return f"<{'stream ' if self.is_stream else ''}kind {self.name!r}>"

    def __reduce__(self) -> tuple[Callable[[str], OutputKind], tuple[str]]:
        return kind_named, (self.name,)


class Unary(OutputKind):
    """One JSON (or msgpack) result."""

    __slots__ = ()
    name = "unary"
    is_stream = False
    has_item_schema = True


class WebSocketKind(OutputKind):
    """``run_remote(self, websocket: chains.WebSocketProtocol) -> None``: both ends send
    messages (text or binary frames) until one closes; served by ``chains.server.websocket``,
    called through ``chains.websocket.client``."""

    __slots__ = ()
    name = "websocket"
    is_stream = False
    is_socket = True


class StreamKind(OutputKind):
    """A stream: the framed form carries its values with :meth:`wire`'s codecs; the SSE and raw
    forms with :meth:`sse_converter` and :meth:`raw_converter`."""

    __slots__ = ()

    item_type: ClassVar[Any] = None
    """The type a built-in kind yields (str, bytes, SSE); None when a StreamTypes says it."""
    raw_media_type: ClassVar[str]
    """The Content-Type of the raw form."""
    accepted_raw_types: ClassVar[tuple[str, ...]] = ()
    """Media types an ``Accept`` header names to ask for the raw form; none when the raw form
    is one of the other forms already."""

    def stream_types_for(
        self, item_type: Any, types: StreamTypes[Any, Any, Any] | None
    ) -> StreamTypes[Any, Any, Any] | None:
        """The StreamTypes of a stream of this kind yielding ``item_type``; refuses what does not fit."""
        if types is not None:
            raise ChainsUsageError(f"only a structured stream takes StreamTypes, not a {self.name} stream")

        if item_type is not None and item_type is not self.item_type:
            raise ChainsUsageError(
                f"a {self.name} stream yields {self.item_type.__name__}, not {item_type!r}; "
                "use the items kind for other item types"
            )
        return None

    def wire(self, types: StreamTypes[Any, Any, Any] | None) -> WireSchema:
        """The fingerprint, preamble and codecs of the framed form."""
        if types is None:
            raise ChainsUsageError(f"a {self.name} stream's wire schema comes from its StreamTypes")
        return types.wire

    def decoded_type(self, types: StreamTypes[Any, Any, Any] | None) -> Any:
        """What a consumer of the decoded framed stream gets."""
        return self.item_type

    def producer_values(self, source: AsyncIterator[Any], chainlet: str) -> AsyncIterator[Any]:
        """What the encoders read of the endpoint's generator: for most kinds, the generator."""
        return source

    def sse_converter(self, wire: WireSchema) -> Converter:
        """One value to its ``text/event-stream`` event."""
        dump = wire.item.dump
        return lambda value: data_event(dump(value))

    def raw_converter(self, wire: WireSchema) -> Converter:
        """One value to its raw bytes."""
        dump = wire.item.dump
        return lambda value: dump(value) + b"\n"

    def decode_raw(self, wire: WireSchema, source: AsyncIterator[bytes]) -> AsyncGenerator[Any, None]:
        """The values of the raw form, as a plain HTTP client reads them."""
        return _ndjson(wire.item.load, source)


class TextStream(StreamKind):
    """``AsyncIterator[str]``: UTF-8 text, raw as ``text/plain``."""

    __slots__ = ()
    name = "text"
    item_type = str
    raw_media_type = TEXT_MEDIA_TYPE
    accepted_raw_types = (TEXT_MEDIA_TYPE,)

    def wire(self, types: StreamTypes[Any, Any, Any] | None) -> WireSchema:
        return _TEXT_WIRE

    def sse_converter(self, wire: WireSchema) -> Converter:
        return lambda value: SSE(as_text(value)).encode().encode()

    def raw_converter(self, wire: WireSchema) -> Converter:
        return dump_text

    def decode_raw(self, wire: WireSchema, source: AsyncIterator[bytes]) -> AsyncGenerator[Any, None]:
        return _utf8(source)


class BytesStream(StreamKind):
    """``AsyncIterator[bytes]``: bytes as they are raw, base64 in SSE."""

    __slots__ = ()
    name = "bytes"
    item_type = bytes
    raw_media_type = BYTES_MEDIA_TYPE
    accepted_raw_types = (BYTES_MEDIA_TYPE,)

    def wire(self, types: StreamTypes[Any, Any, Any] | None) -> WireSchema:
        return _BYTES_WIRE

    def sse_converter(self, wire: WireSchema) -> Converter:
        return lambda value: data_event(base64.b64encode(dump_bytes(value)))

    def raw_converter(self, wire: WireSchema) -> Converter:
        return dump_bytes

    def decode_raw(self, wire: WireSchema, source: AsyncIterator[bytes]) -> AsyncGenerator[Any, None]:
        return _chunks(source)

    def producer_values(self, source: AsyncIterator[Any], chainlet: str) -> AsyncIterator[Any]:
        return _writer_completed(source, chainlet)


async def _writer_completed(source: AsyncIterator[Any], chainlet: str) -> AsyncGenerator[Any, None]:
    """A bytes stream as Truss Chains producers write a structured one: declared
    ``AsyncIterator[bytes]``, yielding what a ``chains.stream_writer`` makes. The writer's
    end frame is appended when the generator finishes, or its error frame before the
    generator's exception goes on, as the structured kind does; otherwise the reader at the
    other end would take the stream for a cut one. Other bytes pass as they are.
    """
    writer = None
    try:
        while True:
            try:
                chunk = await anext(source)
            except StopAsyncIteration:
                break
            except Exception as exc:
                if writer is not None and not writer.closed:
                    yield writer.error(exc, chainlet=chainlet)
                raise
            if writer is None and type(chunk) is WriterChunk and chunk.writer is not None:
                writer = chunk.writer
            yield chunk
        if writer is not None and not writer.closed:
            yield writer.end()
    finally:
        close = getattr(source, "aclose", None)
        if close is not None:
            await close()


class EventStream(StreamKind):
    """``AsyncIterator[chains.SSE]``: the endpoint's own events. Its raw form is the event
    stream itself, so an ``Accept`` header always gets the SSE form (with its end event)."""

    __slots__ = ()
    name = "sse"
    item_type = SSE
    raw_media_type = SSE_MEDIA_TYPE

    def wire(self, types: StreamTypes[Any, Any, Any] | None) -> WireSchema:
        return _SSE_WIRE

    def sse_converter(self, wire: WireSchema) -> Converter:
        return lambda value: as_event(value).encode().encode()

    raw_converter = sse_converter

    def decode_raw(self, wire: WireSchema, source: AsyncIterator[bytes]) -> AsyncGenerator[Any, None]:
        return _events(source)


class ItemStream(StreamKind):
    """``AsyncIterator[T]`` of any serializable ``T``: the frames of ``stream_types(T)``,
    NDJSON raw."""

    __slots__ = ()
    name = "items"
    raw_media_type = NDJSON_MEDIA_TYPE
    accepted_raw_types = (NDJSON_MEDIA_TYPE, "application/ndjson", "application/jsonl")
    has_item_schema = True

    def stream_types_for(
        self, item_type: Any, types: StreamTypes[Any, Any, Any] | None
    ) -> StreamTypes[Any, Any, Any] | None:
        if types is not None:
            raise ChainsUsageError("only a structured stream takes StreamTypes, not an items stream")
        if item_type is None:
            raise ChainsUsageError(
                "an items stream shape needs its item type: StreamShape.of(ITEMS, item_type=T)"
            )
        return stream_types(item_type)

    def decoded_type(self, types: StreamTypes[Any, Any, Any] | None) -> Any:
        return None if types is None else types.item_type


class StructuredStream(StreamKind):
    """``Annotated[AsyncIterator[bytes], StreamTypes]``: what a stream writer makes; NDJSON of
    tagged parts raw, and read by consumers with ``chains.stream_reader``."""

    __slots__ = ()
    name = "structured"
    raw_media_type = NDJSON_MEDIA_TYPE
    accepted_raw_types = ItemStream.accepted_raw_types
    yields_frames = True

    def stream_types_for(
        self, item_type: Any, types: StreamTypes[Any, Any, Any] | None
    ) -> StreamTypes[Any, Any, Any] | None:
        if not isinstance(types, StreamTypes):
            raise ChainsUsageError(
                "a structured stream shape needs its StreamTypes: StreamShape.of(STRUCTURED, types=...)"
            )
        return types

    def decoded_type(self, types: StreamTypes[Any, Any, Any] | None) -> Any:
        return bytes

    def decode_raw(self, wire: WireSchema, source: AsyncIterator[bytes]) -> AsyncGenerator[Any, None]:
        raise ChainsUsageError(
            "a structured stream is read in its framed form, with chains.stream_reader(TYPES, ...)"
        )


UNARY: Final = Unary()
TEXT: Final = TextStream()
BYTES: Final = BytesStream()
SSE_EVENTS: Final = EventStream()
ITEMS: Final = ItemStream()
STRUCTURED: Final = StructuredStream()
WEBSOCKET: Final = WebSocketKind()

KINDS: Final[Mapping[str, OutputKind]] = {
    kind.name: kind for kind in (UNARY, TEXT, BYTES, SSE_EVENTS, ITEMS, STRUCTURED, WEBSOCKET)
}
_BUILTIN: Final[tuple[StreamKind, ...]] = (TEXT, BYTES, SSE_EVENTS)


def kind_named(name: str) -> OutputKind:
    """The kind whose :attr:`~OutputKind.name` is ``name`` (as read from JSON)."""
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise ChainsUsageError(f"unknown output kind {name!r}; use one of {', '.join(KINDS)}") from None


def stream_kind_named(name: str) -> StreamKind:
    """The stream kind named ``name``; refuses ``unary`` and unknown names."""
    kind = KINDS.get(name) if isinstance(name, str) else None
    if not isinstance(kind, StreamKind):
        names = ", ".join(n for n, k in KINDS.items() if k.is_stream)
        raise ChainsUsageError(f"unknown stream kind {name!r}; use one of {names}")
    return kind


def stream_kind_for(item_type: Any, types: StreamTypes[Any, Any, Any] | None = None) -> StreamKind:
    """The kind of a generator yielding ``item_type``: structured with ``types``, a built-in
    kind for str, bytes and SSE, items otherwise."""
    if types is not None:
        return STRUCTURED
    for kind in _BUILTIN:
        if item_type is kind.item_type:
            return kind
    return ITEMS


# ---------------------------------------------------------------------------------------------
# The values of the built-in kinds, checked, and their codecs.


def as_text(value: Any) -> str:
    if not isinstance(value, str):
        raise ChainsUsageError(
            f"this endpoint streams str (AsyncIterator[str]) but yielded {type(value).__name__} "
            f"{value!r:.80}; yield str values, or change the annotation"
        )
    return value


def dump_text(value: Any) -> bytes:
    try:
        return as_text(value).encode()
    except UnicodeEncodeError as exc:
        raise ChainsUsageError(
            f"a str item is not valid Unicode text ({exc}); it cannot be sent as UTF-8"
        ) from None


def _load_text(payload: bytes) -> str:
    return payload.decode()


def dump_bytes(value: Any) -> bytes:
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


def as_event(value: Any) -> SSE:
    if not isinstance(value, SSE):
        raise ChainsUsageError(
            f"this endpoint streams chains.SSE (AsyncIterator[chains.SSE]) but yielded "
            f"{type(value).__name__} {value!r:.80}; yield chains.SSE(data, event=..., id=...) objects"
        )
    return value


def _dump_sse(value: Any) -> bytes:
    value = as_event(value)
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


_TEXT_WIRE: Final = WireSchema("text", "AsyncIterator[str]", PartCodec("str", dump_text, _load_text))
_BYTES_WIRE: Final = WireSchema("bytes", "AsyncIterator[bytes]", PartCodec("bytes", dump_bytes, _load_bytes))
_SSE_WIRE: Final = WireSchema(
    "sse", "AsyncIterator[chains.SSE]", PartCodec("chains.SSE", _dump_sse, _load_sse)
)


async def _utf8(source: AsyncIterator[bytes]) -> AsyncGenerator[str, None]:
    # Incremental, so that a character split between chunks arrives whole (the pieces follow
    # the transport's chunks, not the producer's items).
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


async def _events(source: AsyncIterator[bytes]) -> AsyncGenerator[SSE, None]:
    async for event in SSE.from_chunks(source):
        yield event


async def _chunks(source: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    async for chunk in source:
        yield bytes(chunk)


async def _ndjson(load: Callable[[bytes], Any], source: AsyncIterator[bytes]) -> AsyncGenerator[Any, None]:
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
