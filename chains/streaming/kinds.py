"""The kinds of stream an endpoint can have, and the built-in wire schemas of those that no
:class:`StreamTypes` describes (text, bytes, SSE)."""

from __future__ import annotations

import json
from typing import Any, Final, Literal, get_args

from chains.errors import ChainsUsageError
from chains.streaming.schema import PartCodec, WireSchema
from chains.streaming.sse import SSE

__all__ = [
    "BUILTIN_ITEMS",
    "BUILTIN_WIRES",
    "STREAM_KINDS",
    "StreamKind",
    "as_event",
    "as_text",
    "dump_bytes",
    "dump_text",
]

StreamKind = Literal["text", "bytes", "sse", "items", "structured"]
STREAM_KINDS: Final[tuple[str, ...]] = get_args(StreamKind)


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
BUILTIN_WIRES: Final[dict[StreamKind, WireSchema]] = {
    "text": _TEXT_WIRE,
    "bytes": _BYTES_WIRE,
    "sse": _SSE_WIRE,
}
BUILTIN_ITEMS: Final[dict[StreamKind, Any]] = {"text": str, "bytes": bytes, "sse": SSE}
