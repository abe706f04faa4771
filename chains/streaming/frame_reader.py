"""Reading one framed stream and checking everything about it: :class:`FrameReader`.

The preamble and its fingerprint, the order of frames, a cut before the end frame, and bytes
after it. The typed readers (``chains.streaming.reader``) and the stubs' decoder are thin
layers over it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, Final

import pydantic

from chains.errors import ChainsUsageError, ErrorDetail, RemoteError, StreamInterrupted, StreamSchemaMismatch
from chains.streaming.framing import (
    KIND_END,
    KIND_ERROR,
    KIND_FOOTER,
    KIND_HEADER,
    KIND_ITEM,
    KIND_PREAMBLE,
    Frame,
    FrameDecoder,
    StreamProtocolError,
    kind_name,
    parse_preamble,
)
from chains.streaming.schema import WireSchema, schema_mismatch
from chains.streaming.transport import connection_broke
from chains.streaming.writer import WriterChunk
from chains.wire import DEFAULT_MAX_FRAME_BYTES

__all__ = ["FrameReader", "StreamSchemaMismatch"]


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
        "_header_taken",
        "_in_process",
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
        max_frame_size: int = DEFAULT_MAX_FRAME_BYTES,
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
        self._header_taken = False
        # Set when the chunks come straight from a stream writer in this process (no
        # transport between): the generator ending is then the stream's end (see _refill).
        self._in_process = False

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
                if self._in_process and self._decoder.at_boundary:
                    # Nothing can cut a stream between a writer and a reader in one process (a
                    # failing producer raises here instead): its end frame is the server's to
                    # add, and a test reading a writer's chunks has no server.
                    self._frames = [(KIND_END, b"")]
                    self._index = 0
                    return
                raise self._interrupted() from None
            except Exception as exc:
                # An HTTP client's own error for a cut connection (httpx, aiohttp) is the
                # same event as the bytes stopping: the stream is incomplete.
                if connection_broke(exc):
                    raise self._interrupted(exc) from exc
                raise
            if self._state == _START and isinstance(chunk, WriterChunk) and chunk.writer is not None:
                self._in_process = True
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

    def _interrupted(self, cause: BaseException | None = None) -> StreamInterrupted:
        where = {
            _START: "before its preamble",
            _NEED_HEADER: "before its header",
            _BODY: f"after {self._items} item{'s' if self._items != 1 else ''}",
            _FOOTER_READ: "after its footer",
        }.get(self._state, "")
        partial = self._decoder.buffered
        inside = f", inside a frame ({partial} bytes of it received)" if partial else ""
        if cause is not None:
            return StreamInterrupted(
                f"the {self.wire.name} stream broke off {where}{inside}, before its end frame: "
                f"{type(cause).__name__}: {cause}; what arrived is incomplete"
            )
        return StreamInterrupted(
            f"the {self.wire.name} stream stopped {where}{inside} without its end frame: the producer or "
            "the connection stopped early, so what arrived is incomplete"
        )

    # -- failure ------------------------------------------------------------------------------

    async def _fail(self, exc: BaseException) -> BaseException:
        # Raised again "from exc.__cause__": the traceback stays short, and a cut connection
        # keeps the HTTP client's own error as its cause.
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
                elif kind == KIND_ERROR:
                    raise self._remote(payload)
                elif kind == KIND_PREAMBLE:
                    raise self._unexpected(kind, "the header")
                else:
                    self._index -= 1  # a declared header may be left out: this frame is the body's
                self._state = _BODY
        except Exception as exc:
            raise await self._fail(exc) from exc.__cause__

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
        raise schema_mismatch(
            f"stream schema mismatch: the producer sends {preamble.schema} (fingerprint "
            f"{preamble.fingerprint}), but this reader was built for {self.wire.name} (fingerprint "
            f"{self.wire.fingerprint}); {hint}",
            reader=self.wire.name,
            producer=preamble.schema,
            fingerprint=preamble.fingerprint,
        )

    async def items(self, *, header_first: bool = False) -> AsyncGenerator[Any, None]:
        """Items until the footer or the end; raises on an error frame or a cut.

        With ``header_first``, a header that arrived but was not taken with :meth:`header` is
        refused, as Truss Chains' readers do, rather than skipped unseen.
        """
        if self._state != _BODY:
            await self.start()
        if header_first:
            self.refuse_unread_header()
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
                    raise await self._fail(exc) from exc.__cause__
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
                    raise await self._fail(exc) from exc.__cause__
            self._items += 1
            yield item
        if self._error is not None:
            raise self._error

    def refuse_unread_header(self) -> None:
        """Raise if a header arrived (see :meth:`start`) but was not taken with :meth:`header`.

        The one decision behind every reader's "read the header first", the asynchronous
        readers' and ``chains.client``'s blocking one: an unseen header is refused, as Truss
        Chains' readers do, not skipped. The reader stays usable: read the header, then the items.
        """
        if self._header is not _MISSING and not self._header_taken:
            raise ChainsUsageError(
                "Called `read_items`, but there the stream contains header data, which is not "
                f"consumed: call `reader.read_header()` first (the {self.wire.name} stream sends "
                "its header before the items)"
            )

    async def _after_items(self, kind: int, payload: bytes) -> None:
        try:
            if kind == KIND_FOOTER and self.wire.footer is not None:
                self._footer = self._parse("footer", payload)
                self._state = _FOOTER_READ
            elif kind == KIND_END:
                await self._finish()  # a declared footer may be left out; footer() says so
            elif kind == KIND_ERROR:
                raise self._remote(payload)
            else:
                raise self._unexpected(
                    kind, "an item, the footer or the end" if self.wire.footer else "an item or the end"
                )
        except Exception as exc:
            raise await self._fail(exc) from exc.__cause__

    async def footer(self) -> Any:
        """The footer, after skipping any items not read yet, once the end frame confirms it."""
        if self._state == _DONE and self._footer is not _MISSING:
            return self._footer
        if self._error is not None:
            raise self._error
        if self._state < _FOOTER_READ:
            async for _ in self.items():
                pass
        if self._footer is _MISSING:
            raise await self._fail(
                StreamProtocolError(
                    f"Stream does not contain footer. The {self.wire.name} stream ended without "
                    "one: its producer did not call yield_footer()"
                )
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
                raise await self._fail(exc) from exc.__cause__
        return self._footer

    async def header(self) -> Any:
        await self.start()
        if self._header is _MISSING:
            raise StreamProtocolError(
                f"Stream does not contain header. The {self.wire.name} stream began with its body: "
                "its producer did not call yield_header()"
            )
        self._header_taken = True
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
