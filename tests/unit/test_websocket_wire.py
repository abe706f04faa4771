"""The chains.ws.v1 tags and the close reason of a failure."""

from __future__ import annotations

import json

import pytest

import chains
from chains.errors import ErrorDetail, StreamProtocolError
from chains.websocket.wire import close_reason, error_message, tag, untag


@pytest.mark.parametrize("message", ["", "text", "e-looks-like-an-error", b"", b"\x00bytes", b"e"])
def test_a_message_survives_its_tag(message: str | bytes) -> None:
    assert untag(tag(message)) == message
    assert type(untag(tag(message))) is type(message)


def test_a_failure_is_told_apart_from_any_message() -> None:
    detail = ErrorDetail(exc_type="ValueError", exc_module="builtins", message="no", chainlet="Upper")
    assert untag(error_message(detail)) == detail


@pytest.mark.parametrize("untagged", ["plain", b"plain"])
def test_an_untagged_message_is_a_protocol_error(untagged: str | bytes) -> None:
    with pytest.raises(StreamProtocolError, match="without the chains tag"):
        untag(untagged)


def test_the_close_reason_always_fits_a_close_frame() -> None:
    short = json.loads(close_reason("Upper", "ValueError", "rid"))
    assert short == {"chainlet": "Upper", "exception": "ValueError", "request_id": "rid"}
    long = close_reason("C" * 100, "E" * 100, "r" * 128)
    assert len(long.encode()) <= 123
    assert json.loads(long)["chainlet"].startswith("C")


def test_websocket_disconnect_is_starlettes_when_starlette_is_installed() -> None:
    from starlette.websockets import WebSocketDisconnect as Starlettes

    error = chains.WebSocketDisconnect(1001, "away")
    assert isinstance(error, Starlettes)
    assert (error.code, error.reason) == (1001, "away")
