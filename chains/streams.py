"""Typed structured streams: a header, items and a footer, framed for the wire.

Producer and consumer share one :class:`StreamTypes`; the producer's endpoint yields the bytes
its writer returns, and the consumer wraps what its stub yields in a reader::

    TOKENS = chains.stream_types(Token, footer_type=Usage)

    # producer (an endpoint annotated Annotated[AsyncIterator[bytes], TOKENS])
    writer = chains.stream_writer(TOKENS)
    yield writer.yield_item(Token(text="hi"))
    yield writer.yield_footer(Usage(tokens=1))

    # consumer
    reader = chains.stream_reader(TOKENS, stub.run_remote(prompt))
    async for token in reader.read_items():
        ...
    usage = await reader.read_footer()

The writer and reader are typed by which parts the types declare: a reader of a stream
without a header has no ``read_header`` for a type checker, a writer without a footer type
has no ``yield_footer``. Frames and their order are described in ``docs/wire-protocol.md``.
"""

from __future__ import annotations

import hashlib
import json
import typing
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from types import TracebackType
from typing import Any, Final, Generic, TypeVar, overload

import pydantic
import pydantic_core

from chains.errors import ChainsUsageError, ErrorDetail, RemoteError, StreamInterrupted, StreamSchemaMismatch
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
    Frame,
    FrameDecoder,
    StreamProtocolError,
    encode_frame,
    encode_preamble,
    kind_name,
    pack_header,
    parse_preamble,
)
from chains.wire import wire_adapter

__all__ = [
    "FooterStreamReader",
    "FooterStreamWriter",
    "HeaderFooterStreamReader",
    "HeaderFooterStreamWriter",
    "HeaderStreamReader",
    "HeaderStreamWriter",
    "PartCodec",
    "StreamReader",
    "StreamSchemaMismatch",
    "StreamTypes",
    "StreamWriter",
    "WireSchema",
    "WriterChunk",
    "stream_reader",
    "stream_types",
    "stream_writer",
]

ItemT = TypeVar("ItemT")
HeaderT = TypeVar("HeaderT")
FooterT = TypeVar("FooterT")

_pack_header: Final = pack_header


# ---------------------------------------------------------------------------------------------
# How one part (item, header or footer) becomes bytes and back.


def type_name(tp: Any) -> str:
    """``Token``, ``int``, ``list[int]``: a type as a person writes it."""
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__.rpartition("<locals>.")[2]
    return repr(tp).replace("typing.", "")


class PartCodec:
    """Serializes and parses one part of a stream; ``dump`` gives bytes, ``load`` takes bytes."""

    __slots__ = ("dump", "load", "name")

    def __init__(self, name: str, dump: Callable[[Any], bytes], load: Callable[[bytes], Any]) -> None:
        self.name = name
        self.dump = dump
        self.load = load


def _json_codec(tp: Any, role: str) -> PartCodec:
    """A codec through pydantic, with a direct path for model instances of exactly ``tp``."""
    name = type_name(tp)
    adapter = wire_adapter(tp)

    def refuse(value: Any, exc: Exception) -> ChainsUsageError:
        return ChainsUsageError(
            f"the stream {role} must be a {name}, got {type(value).__name__} {_short(value)}: {exc}"
        )

    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        # The model's own serializer and validator skip TypeAdapter's per-call overhead,
        # which is a large share of the cost for small items.
        to_json = tp.__pydantic_serializer__.to_json
        validate_python = tp.__pydantic_validator__.validate_python
        validate_json = tp.__pydantic_validator__.validate_json

        def dump_model(value: Any) -> bytes:
            if type(value) is tp:
                return to_json(value)
            try:
                return to_json(validate_python(value))
            except pydantic.ValidationError as exc:
                raise refuse(value, exc) from None

        return PartCodec(name, dump_model, validate_json)

    dump_json = adapter.dump_json
    validate_any = adapter.validate_python

    def dump(value: Any) -> bytes:
        try:
            return dump_json(validate_any(value))
        except (pydantic.ValidationError, pydantic_core.PydanticSerializationError) as exc:
            raise refuse(value, exc) from None

    return PartCodec(name, dump, adapter.validate_json)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_SCHEMA_NOISE: Final = frozenset({"description", "examples"})
_SCHEMA_MAPS: Final = frozenset(
    {"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"}
)
_SCHEMA_DATA: Final = frozenset({"default", "const", "enum", "example"})


def _normalize_schema(node: Any) -> Any:
    """Drop what does not change the wire (docstrings, examples), so editing a docstring on one
    side does not break a deployed peer. Titles stay: a model's name is part of its schema.
    Keys of ``properties`` are field names, and values under ``default``/``const``/``enum``
    are data: those are kept as they are."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _SCHEMA_NOISE:
                continue
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {name: _normalize_schema(sub) for name, sub in value.items()}
            elif key in _SCHEMA_DATA:
                out[key] = value
            else:
                out[key] = _normalize_schema(value)
        return out
    if isinstance(node, list):
        return [_normalize_schema(item) for item in node]
    return node


def _schema_of(tp: Any) -> Any:
    try:
        return _normalize_schema(wire_adapter(tp).json_schema(mode="validation"))
    except pydantic.PydanticUserError:
        # Serializable but without a JSON schema (a custom type): its name is the best we have.
        return {"python_type": type_name(tp)}


class WireSchema:
    """What a framed stream carries: its fingerprint, readable name and per-part codecs.

    :class:`StreamTypes` builds one for structured and item streams; text, bytes and SSE
    streams have built-in ones (see ``chains.stream_codecs``).
    """

    __slots__ = ("fingerprint", "footer", "header", "item", "name", "preamble")

    def __init__(
        self,
        fingerprint: str,
        name: str,
        item: PartCodec,
        header: PartCodec | None = None,
        footer: PartCodec | None = None,
    ) -> None:
        self.fingerprint = fingerprint
        self.name = name
        self.item = item
        self.header = header
        self.footer = footer
        self.preamble = encode_preamble(fingerprint, name)

    def __repr__(self) -> str:
        return f"WireSchema({self.name}, fingerprint={self.fingerprint!r})"


# ---------------------------------------------------------------------------------------------
# StreamTypes


@dataclass(frozen=True)
class StreamTypes(Generic[ItemT, HeaderT, FooterT]):
    """The types of a structured stream: its items, and optionally a header and a footer.

    Build it with :func:`stream_types`, once, in a module both producer and consumer import.
    It is frozen and hashable, and two StreamTypes of the same types are equal. Its
    ``fingerprint`` identifies the JSON schemas of the parts and travels ahead of the first
    item, so a consumer built for other types fails clearly instead of misreading the data::

        >>> import pydantic
        >>> class Token(pydantic.BaseModel):
        ...     text: str
        >>> TOKENS = stream_types(Token)
        >>> TOKENS == stream_types(Token), len(TOKENS.fingerprint)
        (True, 32)
    """

    item_type: Any
    header_type: Any = None
    footer_type: Any = None

    def __post_init__(self) -> None:
        # Build the codecs now, so an unserializable type fails where the stream is declared.
        _ = self.wire

    def __repr__(self) -> str:
        parts = [type_name(self.item_type)]
        if self.header_type is not None:
            parts.append(f"header_type={type_name(self.header_type)}")
        if self.footer_type is not None:
            parts.append(f"footer_type={type_name(self.footer_type)}")
        return f"stream_types({', '.join(parts)})"

    @cached_property
    def fingerprint(self) -> str:
        """A stable digest of the item, header and footer schemas (32 hex characters).

        It is the same in every process and on every machine for the same types; renaming a
        field or changing its type changes it, editing a docstring does not.
        """
        parts = {
            "item": _schema_of(self.item_type),
            "header": None if self.header_type is None else _schema_of(self.header_type),
            "footer": None if self.footer_type is None else _schema_of(self.footer_type),
        }
        canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    @cached_property
    def wire(self) -> WireSchema:
        """The codecs and preamble this stream uses on the wire (built once per types, then cached)."""
        try:
            cached = _WIRES.get(self)
        except TypeError:  # a type form with unhashable metadata
            return self._build_wire()
        if cached is None:
            cached = _WIRES[self] = self._build_wire()
        return cached

    def _build_wire(self) -> WireSchema:
        codecs: dict[str, PartCodec | None] = {}
        for role, tp in (
            ("item", self.item_type),
            ("header", self.header_type),
            ("footer", self.footer_type),
        ):
            if tp is None and role != "item":
                codecs[role] = None
                continue
            try:
                codecs[role] = _json_codec(tp, role)
            except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
                reason = str(exc).strip().split("\n", 1)[0]
                raise ChainsUsageError(
                    f"stream_types(): the {role} type {type_name(tp)} cannot be sent over the wire "
                    f"({reason}); use JSON-compatible types or pydantic models"
                ) from None
        item = codecs["item"]
        assert item is not None
        return WireSchema(self.fingerprint, repr(self), item, codecs["header"], codecs["footer"])


# Equal StreamTypes share their codecs: building pydantic adapters is the expensive part, and
# the server and run_local build a StreamTypes per call for item streams.
_WIRES: dict[StreamTypes[Any, Any, Any], WireSchema] = {}


@overload
def stream_types(
    item_type: type[ItemT], *, header_type: None = None, footer_type: None = None
) -> StreamTypes[ItemT, None, None]: ...
@overload
def stream_types(
    item_type: type[ItemT], *, header_type: type[HeaderT], footer_type: None = None
) -> StreamTypes[ItemT, HeaderT, None]: ...
@overload
def stream_types(
    item_type: type[ItemT], *, header_type: None = None, footer_type: type[FooterT]
) -> StreamTypes[ItemT, None, FooterT]: ...
@overload
def stream_types(
    item_type: type[ItemT], *, header_type: type[HeaderT], footer_type: type[FooterT]
) -> StreamTypes[ItemT, HeaderT, FooterT]: ...
# A type form that is not a class (`int | None`, `Literal[...]`): items are typed Any.
@overload
def stream_types(
    item_type: object, *, header_type: None = None, footer_type: None = None
) -> StreamTypes[Any, None, None]: ...
@overload
def stream_types(
    item_type: object, *, header_type: type[HeaderT], footer_type: None = None
) -> StreamTypes[Any, HeaderT, None]: ...
@overload
def stream_types(
    item_type: object, *, header_type: None = None, footer_type: type[FooterT]
) -> StreamTypes[Any, None, FooterT]: ...
@overload
def stream_types(
    item_type: object, *, header_type: type[HeaderT], footer_type: type[FooterT]
) -> StreamTypes[Any, HeaderT, FooterT]: ...
def stream_types(
    item_type: Any, *, header_type: Any = None, footer_type: Any = None
) -> StreamTypes[Any, Any, Any]:
    """Declare the types of a structured stream, shared by its producer and its consumers.

    ``item_type`` is any serializable type (a pydantic model, ``int``, ``list[str]``, ...);
    ``header_type`` and ``footer_type`` are optional, and a writer or reader of the result only
    has ``yield_header``/``read_header`` (``yield_footer``/``read_footer``) when they are given::

        TOKENS = chains.stream_types(Token, footer_type=Usage)

        async def run_remote(self, prompt: str) -> Annotated[AsyncIterator[bytes], TOKENS]:
            writer = chains.stream_writer(TOKENS)
            yield writer.yield_item(Token(text="hi"))
            yield writer.yield_footer(Usage(tokens=1))
    """
    for role, tp in (("item_type", item_type), ("header_type", header_type), ("footer_type", footer_type)):
        if isinstance(tp, StreamTypes):
            raise ChainsUsageError(
                f"stream_types(): {role} is already a StreamTypes ({tp!r}); pass the types"
            )
    if item_type is None:
        raise ChainsUsageError("stream_types(): item_type is required, e.g. stream_types(Token)")
    return StreamTypes(item_type, header_type, footer_type)


# ---------------------------------------------------------------------------------------------
# Writers


class WriterChunk(bytes):
    """Bytes made by a stream writer: one or more frames. Anywhere else they are plain bytes.

    The server accepts only these from a structured endpoint. The first chunk of a stream
    (the one carrying the preamble) also names its ``writer``, which the server uses to end
    the stream and to check that every chunk the writer made was yielded. Only that chunk
    gets an attribute: setting one on every chunk would cost more than the frame itself.
    """

    writer: StreamWriter[Any] | None = None


_FRESH: Final = 0  # nothing written yet: the next frame carries the preamble
_OPEN: Final = 1  # preamble (and header, if any) written
_ITEMS: Final = 2  # items flowing
_AFTER_FOOTER: Final = 3
_CLOSED: Final = 4  # end or error written


class StreamWriter(Generic[ItemT]):
    """Makes the frames of a structured stream; see :func:`stream_writer`.

    Every ``yield_*`` method returns the bytes to yield from the endpoint. The first of them
    also carries the stream's preamble, so a writer's output alone is a valid stream once
    :meth:`end` is appended (the server runtime appends it when the endpoint finishes).
    """

    __slots__ = ("_count", "_dump_item", "_header_written", "_state", "_types", "_wire")

    def __init__(self, types: StreamTypes[ItemT, Any, Any]) -> None:
        self._types = types
        self._wire = types.wire
        self._dump_item = self._wire.item.dump
        self._state = _FRESH
        self._count = 0  # chunks made, so the server can tell whether all were yielded
        self._header_written = False

    @property
    def types(self) -> StreamTypes[ItemT, Any, Any]:
        return self._types

    @property
    def closed(self) -> bool:
        """True once :meth:`end` or :meth:`error` was called: nothing more can be written."""
        return self._state == _CLOSED

    @property
    def chunks_made(self) -> int:
        """How many chunks the ``yield_*``, ``end`` and ``error`` methods returned so far."""
        return self._count

    def __repr__(self) -> str:
        return f"stream_writer({self._types!r})"

    def yield_item(self, item: ItemT) -> WriterChunk:
        """The frame of one item (a value of the stream's item type)."""
        if self._state != _ITEMS:
            self._before_item()
            chunk = self._chunk(encode_frame(KIND_ITEM, self._dump_item(item)))
            self._state = _ITEMS
            return chunk
        # The per-item path, inlined: for small items the frame's own cost is mostly calls.
        payload = self._dump_item(item)
        if len(payload) > MAX_ENCODABLE_SIZE:
            encode_frame(KIND_ITEM, payload)  # raises, saying why
        self._count += 1
        return WriterChunk(_pack_header(KIND_ITEM, len(payload)) + payload)

    def end(self) -> WriterChunk:
        """The end frame; after it the stream is complete and the writer is closed.

        Checks that the declared header and footer were written. The server runtime calls it
        when the endpoint's generator finishes; call it yourself only when you carry the
        frames over your own transport.
        """
        self._before_end()
        chunk = self._chunk(END_FRAME)
        self._state = _CLOSED
        return chunk

    def error(self, exc: BaseException, *, chainlet: str = "") -> WriterChunk:
        """An error frame describing ``exc``; the consumer raises it as a RemoteError.

        The writer is closed afterwards: no end frame follows an error.
        """
        if self._state == _CLOSED:
            raise self._refuse("error", "the stream was already ended")
        detail = ErrorDetail.from_exception(exc, chainlet)
        chunk = self._chunk(encode_frame(KIND_ERROR, detail.model_dump_json().encode()))
        self._state = _CLOSED
        return chunk

    # -- order checks -------------------------------------------------------------------------

    def _chunk(self, frame: bytes) -> WriterChunk:
        self._count += 1
        if self._state == _FRESH:
            self._state = _OPEN
            first = WriterChunk(self._wire.preamble + frame)
            first.writer = self
            return first
        return WriterChunk(frame)

    def _refuse(self, method: str, problem: str) -> ChainsUsageError:
        return ChainsUsageError(f"stream_writer({self._types!r}).{method}(): {problem}")

    def _before_item(self) -> None:
        if self._state == _AFTER_FOOTER:
            raise self._refuse(
                "yield_item", "no item may follow the footer; yield every item before yield_footer()"
            )
        if self._state == _CLOSED:
            raise self._refuse("yield_item", "the stream was already ended; yield every item before end()")
        if self._wire.header is not None and not self._header_written:
            raise self._refuse(
                "yield_item",
                f"this stream declares header_type={self._wire.header.name}: call yield_header() "
                "before the first yield_item()",
            )

    def _before_header(self) -> None:
        if self._header_written:
            raise self._refuse(
                "yield_header", "the header was already written; a stream has exactly one header"
            )
        if self._state in (_ITEMS, _AFTER_FOOTER):
            raise self._refuse(
                "yield_header", "the header must come first, before any yield_item() or yield_footer()"
            )
        if self._state == _CLOSED:
            raise self._refuse("yield_header", "the stream was already ended")

    def _before_footer(self) -> None:
        if self._state == _AFTER_FOOTER:
            raise self._refuse(
                "yield_footer", "the footer was already written; a stream has exactly one footer"
            )
        if self._state == _CLOSED:
            raise self._refuse("yield_footer", "the stream was already ended; yield the footer before end()")
        if self._wire.header is not None and not self._header_written:
            raise self._refuse(
                "yield_footer",
                f"this stream declares header_type={self._wire.header.name}: call yield_header() first",
            )

    def _before_end(self) -> None:
        if self._state == _CLOSED:
            raise self._refuse("end", "the stream was already ended (end() or error() was called before)")
        if self._wire.header is not None and not self._header_written:
            raise self._refuse(
                "end",
                f"the stream ended without its header: it declares header_type={self._wire.header.name}; "
                "yield writer.yield_header(...) first",
            )
        if self._wire.footer is not None and self._state != _AFTER_FOOTER:
            raise self._refuse(
                "end",
                f"the stream ended without its footer: it declares footer_type={self._wire.footer.name}; "
                "yield writer.yield_footer(...) after the last item",
            )


class HeaderStreamWriter(StreamWriter[ItemT], Generic[ItemT, HeaderT]):
    """A :class:`StreamWriter` for types with a header: call :meth:`yield_header` first."""

    __slots__ = ()

    def yield_header(self, header: HeaderT) -> WriterChunk:
        """The header frame; it comes first and once."""
        self._before_header()
        assert self._wire.header is not None
        chunk = self._chunk(encode_frame(KIND_HEADER, self._wire.header.dump(header)))
        self._header_written = True
        return chunk


class FooterStreamWriter(StreamWriter[ItemT], Generic[ItemT, FooterT]):
    """A :class:`StreamWriter` for types with a footer: :meth:`yield_footer` after the last item."""

    __slots__ = ()

    def yield_footer(self, footer: FooterT) -> WriterChunk:
        """The footer frame; it comes once, after the last item."""
        self._before_footer()
        assert self._wire.footer is not None
        chunk = self._chunk(encode_frame(KIND_FOOTER, self._wire.footer.dump(footer)))
        self._state = _AFTER_FOOTER
        return chunk


class HeaderFooterStreamWriter(
    HeaderStreamWriter[ItemT, HeaderT], FooterStreamWriter[ItemT, FooterT], Generic[ItemT, HeaderT, FooterT]
):
    """A writer for types with both a header and a footer."""

    __slots__ = ()


@overload
def stream_writer(types: StreamTypes[ItemT, None, None]) -> StreamWriter[ItemT]: ...
@overload
def stream_writer(types: StreamTypes[ItemT, HeaderT, None]) -> HeaderStreamWriter[ItemT, HeaderT]: ...
@overload
def stream_writer(types: StreamTypes[ItemT, None, FooterT]) -> FooterStreamWriter[ItemT, FooterT]: ...
@overload
def stream_writer(
    types: StreamTypes[ItemT, HeaderT, FooterT],
) -> HeaderFooterStreamWriter[ItemT, HeaderT, FooterT]: ...
def stream_writer(types: StreamTypes[Any, Any, Any]) -> StreamWriter[Any]:
    """A writer for one stream of ``types``: create one per call of the endpoint.

    Order is enforced: the header first and once, items, the footer once, and nothing after
    the end. Each method returns the bytes to yield::

        writer = chains.stream_writer(TOKENS)          # stream_types(Token, footer_type=Usage)
        for text in ("a", "b"):
            yield writer.yield_item(Token(text=text))
        yield writer.yield_footer(Usage(tokens=2))
    """
    if not isinstance(types, StreamTypes):
        raise ChainsUsageError(
            f"stream_writer() takes the StreamTypes from chains.stream_types(...), got {_short(types)}"
        )
    if types.header_type is not None and types.footer_type is not None:
        return HeaderFooterStreamWriter(types)
    if types.header_type is not None:
        return HeaderStreamWriter(types)
    if types.footer_type is not None:
        return FooterStreamWriter(types)
    return StreamWriter(types)


# ---------------------------------------------------------------------------------------------
# Readers

_START: Final = 0  # preamble not read yet
_NEED_HEADER: Final = 1  # preamble checked, header due
_BODY: Final = 2  # reading items
_FOOTER_READ: Final = 3  # footer read, end frame due
_DONE: Final = 4  # end frame read and nothing after it
_FAILED: Final = 5

_MISSING: Final[Any] = object()


class _SyncSource:
    """Lets a plain iterable of chunks feed an async reader."""

    __slots__ = ("_it",)

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it: Iterator[bytes] = iter(chunks)

    def __aiter__(self) -> _SyncSource:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._it)
        except StopIteration:
            raise StopAsyncIteration from None


class FrameReader:
    """Reads one framed stream of a :class:`WireSchema` and checks everything about it:
    the preamble and fingerprint, the order of frames, truncation, bytes after the end.

    The public readers and the stubs' decoders are thin layers over it.
    """

    __slots__ = (
        "_decoder",
        "_error",
        "_footer",
        "_frames",
        "_header",
        "_index",
        "_items",
        "_source",
        "_state",
        "wire",
    )

    def __init__(
        self,
        wire: WireSchema,
        source: AsyncIterable[bytes] | Iterable[bytes],
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.wire = wire
        if isinstance(source, AsyncIterable):
            self._source: AsyncIterator[bytes] = aiter(source)
        elif isinstance(source, Iterable) and not isinstance(source, bytes | bytearray | str):
            self._source = _SyncSource(source)
        else:
            raise ChainsUsageError(
                f"a stream reader reads an iterator of bytes chunks (what the stub call returns), "
                f"got {type(source).__name__}; pass e.g. the stub's run_remote(...) call itself"
            )
        self._decoder = FrameDecoder(max_frame_size)
        self._frames: list[Frame] = []
        self._index = 0
        self._state = _START
        self._header: Any = _MISSING
        self._footer: Any = _MISSING
        self._error: BaseException | None = None
        self._items = 0

    @property
    def items_read(self) -> int:
        """Items taken from the stream so far (including those ``footer()`` skipped)."""
        return self._items

    # -- frames -------------------------------------------------------------------------------

    async def _refill(self) -> None:
        """Read chunks until at least one more frame is complete."""
        while True:
            try:
                chunk = await anext(self._source)
            except StopAsyncIteration:
                raise self._interrupted() from None
            frames = self._decoder.feed(chunk)
            if frames:
                self._frames = frames
                self._index = 0
                return

    async def _next_frame(self) -> Frame:
        if self._index >= len(self._frames):
            await self._refill()
        frame = self._frames[self._index]
        self._index += 1
        return frame

    def _interrupted(self) -> StreamInterrupted:
        where = {
            _START: "before its preamble",
            _NEED_HEADER: "before its header",
            _BODY: f"after {self._items} item{'s' if self._items != 1 else ''}",
            _FOOTER_READ: "after its footer",
        }.get(self._state, "")
        partial = self._decoder.buffered
        inside = f", inside a frame ({partial} bytes of it received)" if partial else ""
        return StreamInterrupted(
            f"the {self.wire.name} stream stopped {where}{inside} without its end frame: the producer or "
            "the connection stopped early, so what arrived is incomplete"
        )

    # -- failure ------------------------------------------------------------------------------

    async def _fail(self, exc: BaseException) -> BaseException:
        self._state = _FAILED
        self._error = exc
        await self.aclose()
        return exc

    def _remote(self, payload: bytes) -> BaseException:
        try:
            detail = ErrorDetail.model_validate_json(payload)
        except pydantic.ValidationError as exc:
            return StreamProtocolError(f"malformed error frame in the {self.wire.name} stream: {exc}")
        return RemoteError.from_detail(detail)

    def _unexpected(self, kind: int, expected: str) -> StreamProtocolError:
        wire = self.wire
        if kind == KIND_HEADER and wire.header is None:
            problem = f"a header frame, but {wire.name} declares no header_type"
        elif kind == KIND_FOOTER and wire.footer is None:
            problem = f"a footer frame, but {wire.name} declares no footer_type"
        elif kind == KIND_PREAMBLE:
            problem = "a second preamble frame (two streams concatenated?)"
        else:
            problem = f"a {kind_name(kind)}"
        return StreamProtocolError(
            f"frames out of order in the {wire.name} stream: got {problem} where {expected} was due"
        )

    def _parse(self, part: str, payload: bytes) -> Any:
        codec = getattr(self.wire, part)
        try:
            return codec.load(payload)
        except (pydantic.ValidationError, ValueError) as exc:
            raise StreamProtocolError(
                f"the {part} frame of the {self.wire.name} stream is not a valid {codec.name}: {exc}"
            ) from None

    # -- states -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Read the preamble (checking the fingerprint) and the header, if one is declared."""
        if self._state >= _BODY:
            if self._error is not None:
                raise self._error
            return
        try:
            if self._state == _START:
                kind, payload = await self._next_frame()
                if kind == KIND_ERROR:
                    raise self._remote(payload)
                if kind != KIND_PREAMBLE:
                    raise StreamProtocolError(
                        f"the stream starts with a {kind_name(kind)} instead of a preamble; it was not "
                        "produced by a chains stream writer or encoder, or its start was lost"
                    )
                self._check_preamble(payload)
                self._state = _NEED_HEADER if self.wire.header is not None else _BODY
            if self._state == _NEED_HEADER:
                kind, payload = await self._next_frame()
                if kind == KIND_HEADER:
                    self._header = self._parse("header", payload)
                    self._state = _BODY
                elif kind == KIND_ERROR:
                    raise self._remote(payload)
                else:
                    raise self._unexpected(kind, "the header")
        except Exception as exc:
            raise await self._fail(exc) from None

    def _check_preamble(self, payload: bytes) -> None:
        preamble = parse_preamble(payload)
        if preamble.fingerprint == self.wire.fingerprint:
            return
        hint = (
            "the producer and this consumer have different versions of these types; deploy the "
            "same definitions on both sides"
            if preamble.schema == self.wire.name
            else "build the reader with the same StreamTypes the producer's endpoint declares"
        )
        raise StreamSchemaMismatch(
            f"stream schema mismatch: the producer sends {preamble.schema} (fingerprint "
            f"{preamble.fingerprint}), but this reader was built for {self.wire.name} (fingerprint "
            f"{self.wire.fingerprint}); {hint}"
        )

    async def items(self) -> AsyncGenerator[Any, None]:
        """Items until the footer or the end; raises on an error frame or a cut."""
        if self._state != _BODY:
            await self.start()
            if self._state != _BODY:
                return
        load = self.wire.item.load
        # Another call (read_footer) may consume frames while this generator is suspended at
        # its yield, so the state is re-checked on every turn.
        while self._state == _BODY:
            if self._index >= len(self._frames):
                try:
                    await self._refill()
                except Exception as exc:
                    raise await self._fail(exc) from None
            kind, payload = self._frames[self._index]
            self._index += 1
            if kind != KIND_ITEM:
                await self._after_items(kind, payload)
                return
            try:
                item = load(payload)
            except (pydantic.ValidationError, ValueError):
                try:
                    item = self._parse("item", payload)
                except Exception as exc:
                    raise await self._fail(exc) from None
            self._items += 1
            yield item
        if self._error is not None:
            raise self._error

    async def _after_items(self, kind: int, payload: bytes) -> None:
        try:
            if kind == KIND_FOOTER and self.wire.footer is not None:
                self._footer = self._parse("footer", payload)
                self._state = _FOOTER_READ
            elif kind == KIND_END:
                if self.wire.footer is not None:
                    raise StreamProtocolError(
                        f"the {self.wire.name} stream ended without its footer: the producer did not "
                        "write one"
                    )
                await self._finish()
            elif kind == KIND_ERROR:
                raise self._remote(payload)
            else:
                raise self._unexpected(
                    kind, "an item, the footer or the end" if self.wire.footer else "an item or the end"
                )
        except Exception as exc:
            raise await self._fail(exc) from None

    async def footer(self) -> Any:
        """The footer, after skipping any items not read yet, once the end frame confirms it."""
        if self._state == _DONE and self._footer is not _MISSING:
            return self._footer
        if self._error is not None:
            raise self._error
        if self._state < _FOOTER_READ:
            async for _ in self.items():
                pass
            if self._state < _FOOTER_READ:
                raise await self._fail(
                    StreamProtocolError(f"the {self.wire.name} stream ended without its footer")
                )
        if self._state == _FOOTER_READ:
            try:
                kind, payload = await self._next_frame()
                if kind == KIND_ERROR:
                    raise self._remote(payload)
                if kind != KIND_END:
                    raise self._unexpected(kind, "the end frame after the footer")
                await self._finish()
            except Exception as exc:
                raise await self._fail(exc) from None
        return self._footer

    async def header(self) -> Any:
        await self.start()
        return self._header

    async def _finish(self) -> None:
        """After the end frame: nothing may follow, in this chunk or later ones."""
        self._state = _DONE
        if self._index < len(self._frames):
            kind = self._frames[self._index][0]
            raise StreamProtocolError(
                f"a {kind_name(kind)} followed the end frame of the {self.wire.name} stream"
            )
        async for chunk in self._source:
            if chunk:
                raise StreamProtocolError(
                    f"{len(chunk)} bytes followed the end frame of the {self.wire.name} stream: "
                    f"{bytes(chunk[:32])!r}"
                )
        if not self._decoder.at_boundary:
            raise StreamProtocolError(f"bytes followed the end frame of the {self.wire.name} stream")

    async def aclose(self) -> None:
        """Stop reading and close the source (what the stub returned), releasing its connection."""
        close = getattr(self._source, "aclose", None)
        if close is not None:
            await close()


class StreamReader(Generic[ItemT]):
    """Reads a structured stream of items; see :func:`stream_reader`.

    Usable as an async context manager, which closes the source when the block exits early.
    """

    __slots__ = ("_reader",)

    def __init__(
        self,
        types: StreamTypes[ItemT, Any, Any],
        source: AsyncIterable[bytes] | Iterable[bytes],
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self._reader = FrameReader(types.wire, source, max_frame_size=max_frame_size)

    def read_items(self) -> AsyncIterator[ItemT]:
        """The items, parsed, until the footer or the end of the stream.

        Raises StreamInterrupted if the bytes stop before the stream's end, RemoteError if the
        producer failed, and StreamSchemaMismatch if the producer uses other types.
        """
        return self._reader.items()

    def __aiter__(self) -> AsyncIterator[ItemT]:
        return self._reader.items()

    @property
    def items_read(self) -> int:
        return self._reader.items_read

    async def aclose(self) -> None:
        """Close the source early (when not reading the stream to its end)."""
        await self._reader.aclose()

    async def __aenter__(self: _R) -> _R:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


_R = TypeVar("_R", bound=StreamReader[Any])


class HeaderStreamReader(StreamReader[ItemT], Generic[ItemT, HeaderT]):
    """A :class:`StreamReader` for types with a header."""

    __slots__ = ()

    async def read_header(self) -> HeaderT:
        """The header: it comes first, so this can be called before or after reading items."""
        header: HeaderT = await self._reader.header()
        return header


class FooterStreamReader(StreamReader[ItemT], Generic[ItemT, FooterT]):
    """A :class:`StreamReader` for types with a footer."""

    __slots__ = ()

    async def read_footer(self) -> FooterT:
        """The footer, once the end of the stream confirms it is complete.

        Items not read yet are skipped; call it after :meth:`read_items` to see them all.
        """
        footer: FooterT = await self._reader.footer()
        return footer


class HeaderFooterStreamReader(
    HeaderStreamReader[ItemT, HeaderT], FooterStreamReader[ItemT, FooterT], Generic[ItemT, HeaderT, FooterT]
):
    """A reader for types with both a header and a footer."""

    __slots__ = ()


@overload
def stream_reader(
    types: StreamTypes[ItemT, None, None],
    source: AsyncIterable[bytes] | Iterable[bytes],
    *,
    max_frame_size: int = ...,
) -> StreamReader[ItemT]: ...
@overload
def stream_reader(
    types: StreamTypes[ItemT, HeaderT, None],
    source: AsyncIterable[bytes] | Iterable[bytes],
    *,
    max_frame_size: int = ...,
) -> HeaderStreamReader[ItemT, HeaderT]: ...
@overload
def stream_reader(
    types: StreamTypes[ItemT, None, FooterT],
    source: AsyncIterable[bytes] | Iterable[bytes],
    *,
    max_frame_size: int = ...,
) -> FooterStreamReader[ItemT, FooterT]: ...
@overload
def stream_reader(
    types: StreamTypes[ItemT, HeaderT, FooterT],
    source: AsyncIterable[bytes] | Iterable[bytes],
    *,
    max_frame_size: int = ...,
) -> HeaderFooterStreamReader[ItemT, HeaderT, FooterT]: ...
def stream_reader(
    types: StreamTypes[Any, Any, Any],
    source: AsyncIterable[bytes] | Iterable[bytes],
    *,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
) -> StreamReader[Any]:
    """A typed reader over the framed bytes of a structured stream (what its stub yields).

    It checks the schema fingerprint before the first item, and never mistakes a cut stream
    for a complete one: the bytes stopping before the end frame raise StreamInterrupted.
    Frames over ``max_frame_size`` bytes (64 MiB by default) are refused unread::

        reader = chains.stream_reader(TOKENS, self._gen.run_remote(prompt))
        async for token in reader.read_items():
            print(token.text)
        usage = await reader.read_footer()
    """
    if not isinstance(types, StreamTypes):
        raise ChainsUsageError(
            f"stream_reader() takes the StreamTypes from chains.stream_types(...) first, got {_short(types)}"
        )
    if types.header_type is not None and types.footer_type is not None:
        return HeaderFooterStreamReader(types, source, max_frame_size=max_frame_size)
    if types.header_type is not None:
        return HeaderStreamReader(types, source, max_frame_size=max_frame_size)
    if types.footer_type is not None:
        return FooterStreamReader(types, source, max_frame_size=max_frame_size)
    return StreamReader(types, source, max_frame_size=max_frame_size)
