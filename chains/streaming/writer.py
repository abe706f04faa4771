"""The producer's side of a structured stream: :func:`stream_writer` and the frames it makes.

Every ``yield_*`` method returns the bytes the endpoint yields; the order of the parts (header
once and first, items, footer once, nothing after the end) is enforced as they are written.
A declared header or footer may be left out, as in Truss Chains: its reader then says so.
"""

from __future__ import annotations

from typing import Any, Final, Generic, TypeVar, overload

from chains.errors import ChainsUsageError, ErrorDetail
from chains.streaming.framing import (
    END_FRAME,
    KIND_ERROR,
    KIND_FOOTER,
    KIND_HEADER,
    KIND_ITEM,
    MAX_ENCODABLE_SIZE,
    encode_frame,
    pack_header,
)
from chains.streaming.schema import short_repr
from chains.streaming.types import StreamTypes

__all__ = [
    "FooterStreamWriter",
    "HeaderFooterStreamWriter",
    "HeaderStreamWriter",
    "StreamWriter",
    "WriterChunk",
    "stream_writer",
]

ItemT = TypeVar("ItemT")
HeaderT = TypeVar("HeaderT")
FooterT = TypeVar("FooterT")

_pack_header: Final = pack_header


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

        The server runtime calls it
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

    def _before_header(self) -> None:
        if self._header_written:
            raise self._refuse(
                "yield_header", "the header was already written; a stream has exactly one header"
            )
        if self._state in (_ITEMS, _AFTER_FOOTER):
            raise self._refuse(
                "yield_header",
                "Cannot yield header after other data has been sent. The header comes first, before "
                "any yield_item() or yield_footer()",
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

    def _before_end(self) -> None:
        if self._state == _CLOSED:
            raise self._refuse("end", "the stream was already ended (end() or error() was called before)")


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
    the end; a declared header or footer may be left out. Each method returns the bytes to yield::

        writer = chains.stream_writer(TOKENS)          # stream_types(Token, footer_type=Usage)
        for text in ("a", "b"):
            yield writer.yield_item(Token(text=text))
        yield writer.yield_footer(Usage(tokens=2))
    """
    if not isinstance(types, StreamTypes):
        raise ChainsUsageError(
            f"stream_writer() takes the StreamTypes from chains.stream_types(...), got {short_repr(types)}"
        )
    if types.header_type is not None and types.footer_type is not None:
        return HeaderFooterStreamWriter(types)
    if types.header_type is not None:
        return HeaderStreamWriter(types)
    if types.footer_type is not None:
        return FooterStreamWriter(types)
    return StreamWriter(types)
