"""The chains stream frame format, and an incremental decoder for it.

A stream between chainlets is a sequence of frames. Each frame is a 5-byte header followed by
its payload::

    +------+----------------------+------------------+
    | kind | length (u32, big-end.)| payload (length) |
    +------+----------------------+------------------+

``kind`` is one ASCII letter (see :class:`FrameKind`), so a hex dump of a stream stays
readable. The full protocol (which frames come in which order, and what each payload holds)
is described in ``docs/wire-protocol.md``.

Encoding one frame::

    >>> encode_frame(FrameKind.ITEM, b'{"text":"hi"}')
    b'I\\x00\\x00\\x00\\r{"text":"hi"}'

Decoding arbitrarily chunked bytes::

    >>> decoder = FrameDecoder()
    >>> decoder.feed(b"I\\x00\\x00")
    []
    >>> decoder.feed(b'\\x00\\x02okE\\x00\\x00\\x00\\x00')
    [(73, b'ok'), (69, b'')]
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from enum import IntEnum
from typing import Any, Final

from chains.errors import FrameTooLarge, StreamInterrupted, StreamProtocolError, UnknownFrameKind
from chains.wire import DEFAULT_MAX_FRAME_BYTES

__all__ = [
    "END_FRAME",
    "HEADER_SIZE",
    "KIND_END",
    "KIND_ERROR",
    "KIND_FOOTER",
    "KIND_HEADER",
    "KIND_ITEM",
    "KIND_PREAMBLE",
    "MAX_ENCODABLE_SIZE",
    "PROTOCOL_VERSION",
    "Frame",
    "FrameDecoder",
    "FrameKind",
    "FrameTooLarge",
    "Preamble",
    "StreamProtocolError",
    "UnknownFrameKind",
    "encode_frame",
    "encode_preamble",
    "iter_frames",
    "kind_name",
    "pack_header",
    "parse_preamble",
]

PROTOCOL_VERSION: Final = 1
HEADER_SIZE: Final = 5
MAX_ENCODABLE_SIZE: Final = 2**32 - 1

_HEADER = struct.Struct(">BI")
_pack_header = _HEADER.pack
_unpack_header = _HEADER.unpack_from

pack_header: Final = _pack_header
"""``pack_header(kind, length)``: the 5 header bytes of a frame (no size check; see encode_frame)."""


class FrameKind(IntEnum):
    """What a frame carries. The value is the byte on the wire (an ASCII letter)."""

    PREAMBLE = ord("P")  # JSON: protocol version, schema fingerprint and a readable schema name
    HEADER = ord("H")  # JSON of the stream's header value
    ITEM = ord("I")  # one item: JSON, or raw UTF-8 / bytes for text and bytes streams
    FOOTER = ord("F")  # JSON of the stream's footer value
    ERROR = ord("X")  # JSON of a chains.errors.ErrorDetail; the stream stops after it
    END = ord("E")  # empty; the stream is complete


# The kind bytes as plain ints, for the per-frame loops of the readers and writers: comparing
# with an IntEnum member costs an attribute lookup per frame.
KIND_PREAMBLE: Final = FrameKind.PREAMBLE.value
KIND_HEADER: Final = FrameKind.HEADER.value
KIND_ITEM: Final = FrameKind.ITEM.value
KIND_FOOTER: Final = FrameKind.FOOTER.value
KIND_ERROR: Final = FrameKind.ERROR.value
KIND_END: Final = FrameKind.END.value

Frame = tuple[int, bytes]
"""A decoded frame: its kind byte (compare with :class:`FrameKind`) and its payload."""

_KIND_NAMES: Final[dict[int, str]] = {kind.value: kind.name.lower() for kind in FrameKind}


def kind_name(kind: int) -> str:
    """A readable name for a kind byte, for error messages."""
    name = _KIND_NAMES.get(kind)
    return f"{name} frame" if name else f"unknown frame kind 0x{kind:02x}"


def _size(n: int) -> str:
    if n >= 1024 * 1024 and n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MiB"
    return f"{n} bytes"


def encode_frame(kind: int, payload: bytes) -> bytes:
    """The wire bytes of one frame: ``kind``, the payload length, then ``payload``.

    >>> encode_frame(FrameKind.END, b"")
    b'E\\x00\\x00\\x00\\x00'
    """
    size = len(payload)
    if size > MAX_ENCODABLE_SIZE:
        raise StreamProtocolError(
            f"cannot encode a {kind_name(kind)} of {_size(size)}: a frame holds at most "
            f"{MAX_ENCODABLE_SIZE} bytes; split the value into several items"
        )
    return _pack_header(kind, size) + payload


END_FRAME: Final = encode_frame(KIND_END, b"")  # every complete stream's last frame


class Preamble:
    """The content of a preamble frame: which protocol and which schema the stream speaks."""

    __slots__ = ("fingerprint", "protocol", "schema")

    def __init__(self, fingerprint: str, schema: str, protocol: int = PROTOCOL_VERSION) -> None:
        self.fingerprint = fingerprint
        self.schema = schema
        self.protocol = protocol

    def __repr__(self) -> str:
        return f"Preamble(fingerprint={self.fingerprint!r}, schema={self.schema!r}, protocol={self.protocol})"


def encode_preamble(fingerprint: str, schema: str) -> bytes:
    """The preamble frame announcing ``fingerprint``; ``schema`` is its readable name."""
    body = {"chains_stream": PROTOCOL_VERSION, "fingerprint": fingerprint, "schema": schema}
    return encode_frame(FrameKind.PREAMBLE, json.dumps(body, separators=(",", ":")).encode())


def parse_preamble(payload: bytes) -> Preamble:
    """Read a preamble payload; a newer protocol version is refused with a clear error."""
    try:
        body: Any = json.loads(payload)
    except ValueError:
        body = None
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("chains_stream"), int)
        or not isinstance(body.get("fingerprint"), str)
    ):
        raise StreamProtocolError(
            f"malformed preamble frame {payload[:80]!r}: expected a JSON object with "
            "'chains_stream' (protocol version) and 'fingerprint'"
        )
    protocol: int = body["chains_stream"]
    if protocol != PROTOCOL_VERSION:
        raise StreamProtocolError(
            f"the producer speaks chains stream protocol {protocol}, this reader understands only "
            f"protocol {PROTOCOL_VERSION}; install the same chains version on both chainlets"
        )
    schema = body.get("schema")
    return Preamble(body["fingerprint"], schema if isinstance(schema, str) else "?", protocol)


class FrameDecoder:
    """Turns bytes chunks of any size into complete frames.

    A frame's length is checked against ``max_frame_size`` as soon as its 5-byte header is
    complete, before any of its payload is kept, so a peer cannot make the decoder hold more
    than ``max_frame_size`` bytes of payload (plus at most 4 bytes of a pending header). Bytes
    of a partial frame are kept as the received pieces and joined once when the frame
    completes, so a large frame arriving in small chunks costs linear time.

    >>> decoder = FrameDecoder(max_frame_size=1024)
    >>> [decoder.feed(bytes([b])) for b in encode_frame(FrameKind.ITEM, b"ab")][-1]
    [(73, b'ab')]
    """

    __slots__ = ("_head", "_kind", "_max", "_missing", "_offset", "_pieces")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self._max = max_frame_size
        self._head = b""  # an incomplete frame header (at most 4 bytes)
        self._kind = -1  # kind of the frame whose payload is pending, -1 when none is
        self._missing = 0  # payload bytes still to come for the pending frame
        self._pieces: list[bytes] = []
        self._offset = 0  # bytes fed so far, for error messages

    @property
    def max_frame_size(self) -> int:
        return self._max

    @property
    def buffered(self) -> int:
        """Bytes held for the frame in progress (header and payload so far)."""
        if self._kind < 0:
            return len(self._head)
        return HEADER_SIZE + sum(len(piece) for piece in self._pieces)

    @property
    def at_boundary(self) -> bool:
        """True when no partial frame is pending: the bytes so far ended exactly after a frame."""
        return self._kind < 0 and not self._head

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add ``data`` and return the frames it completed, in order (possibly none)."""
        frames: list[Frame] = []
        size = len(data)
        pos = 0
        if self._kind >= 0 or self._head:
            pos = self._continue(data, frames)
            if pos == size:
                self._offset += size
                return frames
        if not isinstance(data, bytes):
            # Slicing a bytearray or memoryview does not give bytes; copy frame by frame
            # rather than the whole chunk at once.
            return self._feed_view(memoryview(data).cast("B"), pos, frames)
        limit = self._max
        append = frames.append
        unpack = _unpack_header
        kinds = _KIND_NAMES
        # The hot loop: whole frames inside this chunk are sliced out directly. (5 is
        # HEADER_SIZE, written out because this loop runs once per frame.)
        while size - pos >= 5:
            kind, length = unpack(data, pos)
            if length > limit or kind not in kinds:
                if kind not in kinds:
                    self._refuse_kind(kind, data, pos)
                self._refuse_size(kind, length, pos)
            end = pos + 5 + length
            if end > size:
                self._kind = kind
                self._missing = end - size
                self._pieces = [data[pos + 5 :]]
                self._offset += size
                return frames
            append((kind, data[pos + 5 : end]))
            pos = end
        if pos < size:
            self._head = data[pos:]
        self._offset += size
        return frames

    def _feed_view(self, view: memoryview, pos: int, frames: list[Frame]) -> list[Frame]:
        size = len(view)
        while size - pos >= HEADER_SIZE:
            kind, length = _unpack_header(view, pos)
            if kind not in _KIND_NAMES:
                self._refuse_kind(kind, bytes(view[pos : pos + 16]), 0, self._offset + pos)
            if length > self._max:
                self._refuse_size(kind, length, pos)
            end = pos + HEADER_SIZE + length
            if end > size:
                self._kind = kind
                self._missing = end - size
                self._pieces = [bytes(view[pos + HEADER_SIZE :])]
                self._offset += size
                return frames
            frames.append((kind, bytes(view[pos + HEADER_SIZE : end])))
            pos = end
        if pos < size:
            self._head = bytes(view[pos:])
        self._offset += size
        return frames

    def _continue(self, data: bytes | bytearray | memoryview, frames: list[Frame]) -> int:
        """Complete the pending header and/or payload from the start of ``data``; return bytes used."""
        pos = 0
        size = len(data)
        if self._kind < 0:
            need = HEADER_SIZE - len(self._head)
            head = self._head + bytes(data[:need])
            if len(head) < HEADER_SIZE:
                self._head = head
                return size
            self._head = b""
            pos = need
            kind, length = _unpack_header(head)
            start = self._offset - (HEADER_SIZE - need)
            if kind not in _KIND_NAMES:
                self._refuse_kind(kind, head + bytes(data[pos : pos + 16]), 0, start)
            if length > self._max:
                self._refuse_size(kind, length, 0, start)
            self._kind = kind
            self._missing = length
            self._pieces = []
        take = min(self._missing, size - pos)
        if take:
            self._pieces.append(bytes(data[pos : pos + take]))
            self._missing -= take
            pos += take
        if self._missing == 0:
            pieces = self._pieces
            payload = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            frames.append((self._kind, payload))
            self._kind = -1
            self._pieces = []
        return pos

    def _refuse_kind(self, kind: int, data: bytes, pos: int, start: int | None = None) -> None:
        where = self._offset + pos if start is None else start
        sample = data[pos : pos + 16]
        hint = ""
        if where == 0:
            hint = (
                " at the very start: this does not look like a chains stream (is the producer "
                "sending raw text or JSON instead of application/x-chains-stream?)"
            )
        raise UnknownFrameKind(
            f"unknown frame kind 0x{kind:02x} ({chr(kind)!r}) at byte {where} of the stream, "
            f"bytes there: {sample!r}{hint}; known kinds are "
            + ", ".join(f"{chr(k.value)}={k.name.lower()}" for k in FrameKind)
        )

    def _refuse_size(self, kind: int, length: int, pos: int, start: int | None = None) -> None:
        where = self._offset + pos if start is None else start
        raise FrameTooLarge(
            f"{kind_name(kind)} at byte {where} declares {_size(length)}, over this reader's limit of "
            f"{_size(self._max)}; it was refused before reading it. If such large values are "
            "intended, pass a larger max_frame_size to the reader, or have the producer yield "
            "smaller items"
        )


async def iter_frames(
    chunks: AsyncIterable[bytes] | Iterable[bytes], *, max_frame_size: int = DEFAULT_MAX_FRAME_BYTES
) -> AsyncIterator[Frame]:
    """Frames of a chunked byte source, async or not, raising StreamInterrupted on a cut.

    Only the framing is checked here (kinds, sizes, and that the bytes do not stop in the
    middle of a frame); the order of frames is the reader's business. The source running dry
    on a frame boundary ends the iteration normally: only the reader knows whether an end
    frame was due.
    """
    decoder = FrameDecoder(max_frame_size)
    if isinstance(chunks, AsyncIterable):
        async for chunk in chunks:
            for frame in decoder.feed(chunk):
                yield frame
    else:
        for chunk in chunks:
            for frame in decoder.feed(chunk):
                yield frame
    if not decoder.at_boundary:
        raise StreamInterrupted(
            f"the stream stopped in the middle of a frame ({decoder.buffered} bytes of it received): "
            "the producer or the connection stopped early, so what arrived is incomplete"
        )
