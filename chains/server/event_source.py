"""The ``EventSource`` form of a streaming call: ``GET /run_remote?ARGS`` with event ids.

A browser's ``EventSource`` can only ``GET`` a URL, without headers, and opens it again
whenever the response ends. So the arguments come from the query string, validated by the
endpoint's own input model; every event carries an ``id``; and a reconnect that says (in
``Last-Event-ID``) it has seen the stream's last event is answered 204 No Content, which
stops the browser from reconnecting, instead of running the call again.

The arguments: a parameter that accepts the text as it is (``str``, and ``int``, ``float``,
``bool`` and the like, which pydantic reads from text) is given plainly, ``?prompt=hi&n=3``;
a list, dict or model is given as one JSON-encoded parameter, ``?points=[{"x":1,"y":2}]``::

    >>> Args = pydantic.create_model("Args", prompt=(str, ...), counts=(list[int], []))
    >>> json_body(Args, "prompt=[1]&counts=[1,2]")
    b'{"prompt":"[1]","counts":[1,2]}'
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

import pydantic

from chains.server.asgi import Message, Send

__all__ = [
    "END_ID_SUFFIX",
    "QueryError",
    "event_id",
    "finished",
    "json_body",
    "reconnect_after_cut",
    "with_event_ids",
]

END_ID_SUFFIX = ":end"
_EVENT_STREAM = b"text/event-stream"


class QueryError(ValueError):
    """The query string cannot be arguments; ``errors`` are pydantic-style error dicts."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)
        self.errors = errors


def json_body(model: type[pydantic.BaseModel], query: str, *, skip: frozenset[str] = frozenset()) -> bytes:
    """The JSON body of the call that ``query`` asks for (parameters in ``skip`` left out).

    Each parameter is the text as it is when the model accepts it so, else the text read as
    JSON; what is still wrong is left for the model's validation of the body to report, so
    that a GET is refused with the same 422 as the POST of the same arguments.
    """
    raw: dict[str, Any] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in skip:
            continue
        if name in raw:
            raise QueryError(
                [
                    {
                        "type": "repeated_parameter",
                        "loc": ["query", name],
                        "msg": f"{name} is given more than once; give a list as one JSON-encoded "
                        f'parameter, {name}=["a","b"]',
                    }
                ]
            )
        raw[name] = value
    try:
        model.model_validate_json(json.dumps(raw))
    except pydantic.ValidationError as exc:
        for error in exc.errors(include_url=False):
            field = error["loc"][0] if error["loc"] else None
            if not isinstance(field, str) or not isinstance(raw.get(field), str):
                continue
            try:
                raw[field] = json.loads(raw[field])
            except ValueError:
                continue  # not JSON either: the plain text's error stands
    return json.dumps(raw, separators=(",", ":")).encode()


def event_id(request_id: str, number: int) -> str:
    return f"{request_id}:{number}"


def finished(last_event_id: str) -> bool:
    """Whether a reconnect's ``Last-Event-ID`` is that of a stream's last event."""
    return last_event_id.endswith(END_ID_SUFFIX)


def with_event_ids(send: Send, request_id: str) -> Send:
    """``send`` giving each event of an event-stream answer an ``id``: ``REQUEST_ID:N`` for the
    N-th event, ``REQUEST_ID:end`` for the ``end`` or ``error`` event that closes the stream.

    An event's own ``id`` line (an ``sse`` stream's) follows ours and wins, as the last one
    does in a browser; the closing event is always ours.
    """
    state = {"stamping": False, "count": 0}
    pending = bytearray()

    async def stamped(message: Message) -> None:
        if message["type"] == "http.response.start":
            content_type = dict(message.get("headers", ())).get(b"content-type", b"")
            state["stamping"] = message["status"] == 200 and content_type.startswith(_EVENT_STREAM)
        elif message["type"] == "http.response.body" and state["stamping"]:
            pending.extend(message.get("body", b""))
            out = bytearray()
            while (cut := pending.find(b"\n\n")) >= 0:
                event = bytes(pending[: cut + 2])
                del pending[: cut + 2]
                closing = event.startswith((b"event: end\n", b"event: error\n"))
                state["count"] += 1
                number = END_ID_SUFFIX[1:] if closing else str(state["count"])
                out += b"id: " + f"{request_id}:{number}".encode() + b"\n" + event
            if not message.get("more_body", False) and pending:
                out += pending  # an unterminated tail: a browser drops it either way
                pending.clear()
            message = {**message, "body": bytes(out)}
        await send(message)

    return stamped


def reconnect_after_cut(last_event_id: str, request_id: str) -> bytes:
    """What a reconnect after a cut stream gets: the call is not run again (its effects, and
    the events already shown, would happen twice), and resuming is not possible, so one
    ``error`` event says so and closes the stream (the next reconnect then gets 204)."""
    detail = {
        "exc_type": "StreamInterrupted",
        "exc_module": "chains.errors",
        "message": f"the stream was cut after event {last_event_id!r}; it is not resumed or run "
        "again: start a new call",
        "request_id": request_id,
    }
    data = json.dumps(detail, separators=(",", ":"))
    return f"id: {request_id}{END_ID_SUFFIX}\nevent: error\ndata: {data}\n\n".encode()
