"""Streams between chainlets and to their callers.

Typed structured streams share one :class:`StreamTypes` between producer and consumer; the
producer's endpoint yields the bytes its writer returns, and the consumer wraps what its stub
yields in a reader::

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

The modules, one concept each:

- ``framing``: the frame format and its incremental decoder;
- ``schema``: how one part becomes bytes, and the fingerprint of a stream's schema;
- ``types``: :class:`StreamTypes`; ``writer`` and ``reader``: the typed writers and readers;
  ``frame_reader``: the checks every framed read goes through;
- ``transport``: which errors of a byte source mean that its connection broke;
- ``sse``: :class:`SSE` events and their parser;
- ``kinds``: one object per kind of output (unary, text, bytes, sse, items, structured),
  carrying what differs between them; ``shape``: what one endpoint streams;
- ``forms``: the framed, server-sent events and raw forms of a stream on HTTP (their media
  types are named in :mod:`chains.wire`, and re-exported here).

Frames and their order are described in ``docs/wire-protocol.md``.
"""

from chains.streaming.forms import (
    ErrorHook,
    StreamEncoder,
    decode_framed,
    decode_raw,
    encode_framed,
    encode_raw,
    encode_sse,
    raw_media_type,
)
from chains.streaming.frame_reader import FrameReader, StreamSchemaMismatch
from chains.streaming.framing import StreamProtocolError
from chains.streaming.kinds import (
    BYTES,
    ITEMS,
    SSE_EVENTS,
    STRUCTURED,
    TEXT,
    UNARY,
    WEBSOCKET,
    OutputKind,
    StreamKind,
    kind_named,
    stream_kind_named,
)
from chains.streaming.reader import (
    FooterStreamReader,
    HeaderFooterStreamReader,
    HeaderStreamReader,
    StreamReader,
    stream_reader,
)
from chains.streaming.schema import PartCodec, WireSchema
from chains.streaming.shape import StreamShape, shape_of
from chains.streaming.sse import SSE
from chains.streaming.types import StreamTypes, stream_types
from chains.streaming.writer import (
    FooterStreamWriter,
    HeaderFooterStreamWriter,
    HeaderStreamWriter,
    StreamWriter,
    WriterChunk,
    stream_writer,
)
from chains.wire import (
    BYTES_MEDIA_TYPE,
    FRAMED_MEDIA_TYPE,
    NDJSON_MEDIA_TYPE,
    SSE_MEDIA_TYPE,
    TEXT_MEDIA_TYPE,
)

__all__ = [
    "BYTES",
    "BYTES_MEDIA_TYPE",
    "FRAMED_MEDIA_TYPE",
    "ITEMS",
    "NDJSON_MEDIA_TYPE",
    "SSE",
    "SSE_EVENTS",
    "SSE_MEDIA_TYPE",
    "STRUCTURED",
    "TEXT",
    "TEXT_MEDIA_TYPE",
    "UNARY",
    "WEBSOCKET",
    "ErrorHook",
    "FooterStreamReader",
    "FooterStreamWriter",
    "FrameReader",
    "HeaderFooterStreamReader",
    "HeaderFooterStreamWriter",
    "HeaderStreamReader",
    "HeaderStreamWriter",
    "OutputKind",
    "PartCodec",
    "StreamEncoder",
    "StreamKind",
    "StreamProtocolError",
    "StreamReader",
    "StreamSchemaMismatch",
    "StreamShape",
    "StreamTypes",
    "StreamWriter",
    "WireSchema",
    "WriterChunk",
    "decode_framed",
    "decode_raw",
    "encode_framed",
    "encode_raw",
    "encode_sse",
    "kind_named",
    "raw_media_type",
    "shape_of",
    "stream_kind_named",
    "stream_reader",
    "stream_types",
    "stream_writer",
]
