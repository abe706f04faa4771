"""How a WebSocket conversation carries a failure, between chainlets and to outside clients.

A close frame's reason holds at most 123 bytes, too few for a traceback. So a stub asks for
the :data:`SUBPROTOCOL` when it opens a socket, and under it every message carries a one-
character tag: ``m`` before each of the peer's messages (text or binary as sent), and a
failure as one text message ``e`` + the :class:`~chains.errors.ErrorDetail` JSON, followed by
close code 1011. A client that does not ask for the subprotocol (a browser, ``websockets``)
gets the messages untouched and a short JSON close reason naming the chainlet and exception::

    >>> tag("hi"), untag("mhi")
    ('mhi', 'hi')
    >>> close_reason("Words", "ValueError", "rid-1")
    '{"chainlet":"Words","exception":"ValueError","request_id":"rid-1"}'
"""

from __future__ import annotations

import json
from typing import Final

from chains.errors import ErrorDetail, StreamProtocolError
from chains.websocket.protocol import Message

__all__ = [
    "CLOSE_GOING_AWAY",
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_NORMAL",
    "SUBPROTOCOL",
    "close_reason",
    "error_message",
    "tag",
    "untag",
]

SUBPROTOCOL: Final = "chains.ws.v1"
CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_INTERNAL_ERROR: Final = 1011
_MAX_REASON_BYTES: Final = 123

_DATA_TEXT: Final = "m"
_DATA_BYTES: Final = b"m"
_ERROR: Final = "e"


def tag(message: Message) -> Message:
    """``message`` as sent under the subprotocol."""
    if isinstance(message, str):
        return _DATA_TEXT + message
    return _DATA_BYTES + message


def untag(message: Message) -> Message | ErrorDetail:
    """A message received under the subprotocol: the peer's message, or the failure it reports."""
    if isinstance(message, bytes):
        if message[:1] != _DATA_BYTES:
            raise StreamProtocolError(f"a binary message without the chains tag: {message[:20]!r}")
        return message[1:]
    head = message[:1]
    if head == _DATA_TEXT:
        return message[1:]
    if head == _ERROR:
        return ErrorDetail.model_validate_json(message[1:])
    raise StreamProtocolError(f"a text message without the chains tag: {message[:40]!r}")


def error_message(detail: ErrorDetail) -> str:
    """The text message that reports ``detail`` under the subprotocol."""
    return _ERROR + detail.model_dump_json()


def close_reason(chainlet: str, exception: str, request_id: str) -> str:
    """The JSON close reason of a failure, cut to fit a close frame (the request id goes first)."""
    fields = {"chainlet": chainlet, "exception": exception, "request_id": request_id}
    reason = json.dumps(fields, separators=(",", ":"))
    if len(reason.encode()) <= _MAX_REASON_BYTES:
        return reason
    reason = json.dumps({"chainlet": chainlet[:40], "exception": exception[:40]}, separators=(",", ":"))
    return reason if len(reason.encode()) <= _MAX_REASON_BYTES else '{"exception":"error"}'
