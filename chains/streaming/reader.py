"""The consumer's side of a structured stream: :func:`stream_reader` and its typed readers.

A reader of a stream without a header has no ``read_header`` for a type checker, a reader
without a footer type no ``read_footer``; the checks themselves are :class:`FrameReader`'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from types import TracebackType
from typing import Any, Generic, TypeVar, overload

from chains.errors import ChainsUsageError
from chains.streaming.frame_reader import FrameReader
from chains.streaming.schema import short_repr
from chains.streaming.types import StreamTypes
from chains.wire import DEFAULT_MAX_FRAME_BYTES

__all__ = [
    "FooterStreamReader",
    "HeaderFooterStreamReader",
    "HeaderStreamReader",
    "StreamReader",
    "stream_reader",
]

ItemT = TypeVar("ItemT")
HeaderT = TypeVar("HeaderT")
FooterT = TypeVar("FooterT")


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
        max_frame_size: int = DEFAULT_MAX_FRAME_BYTES,
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
        """The header, read before the items; raises StreamProtocolError if none was sent."""
        header: HeaderT = await self._reader.header()
        return header

    def read_items(self) -> AsyncIterator[ItemT]:
        """The items, after :meth:`read_header`: an unread header is refused, not skipped."""
        return self._reader.items(header_first=True)

    def __aiter__(self) -> AsyncIterator[ItemT]:
        return self._reader.items(header_first=True)


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
    max_frame_size: int = DEFAULT_MAX_FRAME_BYTES,
) -> StreamReader[Any]:
    """A typed reader over the framed bytes of a structured stream (what its stub yields).

    It checks the schema fingerprint before the first item, and never mistakes a cut stream
    for a complete one: the bytes stopping before the end frame raise StreamInterrupted, and so
    does the HTTP client's own error for a cut connection (httpx, aiohttp, a reset socket).
    Frames over ``max_frame_size`` bytes (64 MiB by default) are refused unread::

        reader = chains.stream_reader(TOKENS, self._gen.run_remote(prompt))
        async for token in reader.read_items():
            print(token.text)
        usage = await reader.read_footer()
    """
    if not isinstance(types, StreamTypes):
        raise ChainsUsageError(
            "stream_reader() takes the StreamTypes from chains.stream_types(...) first, "
            f"got {short_repr(types)}"
        )
    if types.header_type is not None and types.footer_type is not None:
        return HeaderFooterStreamReader(types, source, max_frame_size=max_frame_size)
    if types.header_type is not None:
        return HeaderStreamReader(types, source, max_frame_size=max_frame_size)
    if types.footer_type is not None:
        return FooterStreamReader(types, source, max_frame_size=max_frame_size)
    return StreamReader(types, source, max_frame_size=max_frame_size)
