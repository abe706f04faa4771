"""One call to ``POST /run_remote`` as the server handles it, and its line in the request log
(:mod:`chains.server.request_log`)."""

from __future__ import annotations

import time

from chains.call_context import CallContext
from chains.server.asgi import Receive, Send
from chains.server.request_log import RequestLog
from chains.wire import REQUEST_ID_HEADER

__all__ = ["Request", "StreamCount"]

_REQUEST_ID_HEADER = REQUEST_ID_HEADER.encode()


class StreamCount:
    """What a streaming call sent, for its request log line."""

    __slots__ = ("ended", "failed", "items")

    def __init__(self) -> None:
        self.items = 0
        self.failed = False
        # The producer has ended (finished or raised): the call's outcome is settled, and a client
        # that leaves while the last chunks are flushed has not cut it short.
        self.ended = False


class Request:
    """One call: its headers and context, the ASGI channel it came on, what it streamed.

    Made once per call and handed down the request path instead of its parts. ``receive`` and
    ``send`` are the ones the answer goes through (tracing puts counting ones in their place).

    >>> request = Request(time.perf_counter(), {}, CallContext("abc"), receive, send, stream=None)
    >>> request.id_header
    [(b'x-chains-request-id', b'abc')]
    """

    __slots__ = ("call", "headers", "id_header", "receive", "send", "started", "stream")

    def __init__(
        self,
        started: float,
        headers: dict[str, str],
        call: CallContext,
        receive: Receive,
        send: Send,
        stream: StreamCount | None,
    ) -> None:
        self.started = started  # time.perf_counter() when the call came in
        self.headers = headers
        self.call = call
        self.receive = receive
        self.send = send
        # Every answer carries the call's request id, refusals and failures too.
        self.id_header = [(_REQUEST_ID_HEADER, call.request_id.encode())]
        # What a streaming endpoint's call sent (None for a unary endpoint).
        self.stream = stream

    def log(self, to: RequestLog, status: int) -> None:
        """Add the call's line to the request log ``to``."""
        ended = time.time()
        elapsed_ms = (time.perf_counter() - self.started) * 1e3
        stream = self.stream
        items, failed = (stream.items, stream.failed) if stream is not None else (-1, False)
        to.write(ended, status, elapsed_ms, self.call.request_id, items, failed)
