"""The server side of a WebSocket endpoint: one conversation on ``GET /run_remote`` + Upgrade.

Admission is the HTTP calls' own, decided before the upgrade so that a refusal is a plain
HTTP answer a client and its retries understand: 401 without the right credentials (a web
page, which cannot set headers on a WebSocket, sends ``?chains_ticket=TICKET`` from
``POST /stream_ticket`` instead of the API key, see :mod:`chains.server.tickets`), 403 to a
page from an origin the entrypoint does not allow (browsers do not apply CORS to sockets), 503
while the chainlet is not ready, draining, or has ``Compute(concurrency=N)`` conversations and
calls open already (an open socket holds a slot for its whole life; sockets do not queue).

Then ``run_remote(websocket)`` runs as its own task, taking the client's messages as it
receives them (a client faster than the chainlet is held back by the transport). The client
closing the socket raises :class:`WebSocketDisconnect` in a ``receive_*`` that waits, and
otherwise cancels ``run_remote`` within two ticks of :data:`_WATCH_AFTER_SEC`: a chainlet relaying to
a dependency stops, and closes that socket too. ``run_remote`` raising closes the socket with
1011 and the failure (see :mod:`chains.websocket.wire`); the caller's deadline, when it sent
one, bounds the conversation. On SIGTERM, open sockets get the grace period and are then
closed with 1001 (:meth:`Conversations.close_all`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl

from chains import tracing
from chains.call_context import CallContext, serving_call
from chains.errors import DeadlineExceeded, ErrorDetail
from chains.metrics import Metrics
from chains.model import ChainletSpec
from chains.server.asgi import Receive, Scope, Send, header_map
from chains.server.cors import request_origin, same_origin
from chains.server.settings import ServerSettings
from chains.server.tickets import TICKET_PARAM, TicketSigner
from chains.websocket.protocol import Message, SocketBase
from chains.websocket.wire import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    SUBPROTOCOL,
    close_reason,
    error_message,
    tag,
)
from chains.wire import JSON_MEDIA_TYPE, REQUEST_ID_HEADER, RUN_REMOTE

if TYPE_CHECKING:
    from chains.websocket.disconnect import WebSocketDisconnect

__all__ = ["Conversations", "ServerApp", "ServerSocket", "serve_websocket"]

logger = logging.getLogger("chains.server")

# How long run_remote may be busy elsewhere between two receives before the client's next
# message (or its leaving) is watched for: a client that leaves meanwhile is noticed after this.
_WATCH_AFTER_SEC = 0.05


class ServerApp(Protocol):
    """What a conversation needs of the server app (``ChainletApp``): the chainlet, its
    admission (credentials, a concurrency slot) and its bookkeeping. Named here so that the
    app imports this module and not the other way round."""

    @property
    def spec(self) -> ChainletSpec: ...
    @property
    def instance(self) -> object | None: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def settings(self) -> ServerSettings: ...
    @property
    def conversations(self) -> Conversations: ...
    @property
    def draining(self) -> bool: ...
    @property
    def public_errors(self) -> bool: ...
    def authorize(self, headers: dict[str, str]) -> str | None: ...
    async def try_take_slot(self) -> bool: ...
    def release_slot(self) -> None: ...


class ServerSocket(SocketBase):
    """The socket ``run_remote`` is given on a deployed chainlet.

    ``receive`` takes the client's next message from the server directly. When ``run_remote``
    has not come back to ``receive`` for a tick of :data:`_WATCH_AFTER_SEC` (it waits for a
    dependency, say), a watch takes that next message instead: a message is kept for
    ``receive``, a disconnect cancels ``run_remote``. A reader task per message cost a third
    of an echo's time.
    """

    def __init__(
        self, receive: Receive, send: Send, headers: Mapping[str, str], metrics: Metrics, tagged: bool
    ) -> None:
        self._receive = receive
        self._send = send
        self._headers = headers
        self._metrics = metrics
        self._tagged = tagged
        self._loop = asyncio.get_running_loop()
        self._pending: asyncio.Future[Any] | None = None  # the watch's receive
        self._timer: asyncio.TimerHandle | None = None
        self._received = 0
        self._received_at_tick = -1
        self.handler: asyncio.Future[Any] | None = None
        self.receiving = False
        self.closed = False  # by either end
        self.peer_code = CLOSE_NORMAL
        self.close_code: int | None = None  # how the conversation ended, by either end
        self.messages_in = 0
        self.messages_out = 0

    @property
    def is_connected(self) -> bool:
        return not self.closed

    async def receive(self) -> Message:
        self._received += 1
        if self.closed and self._pending is None:
            raise _disconnect()(self.peer_code)
        self.receiving = True
        try:
            if self._pending is not None:
                message = await self._pending
                self._pending = None
            else:
                message = await self._receive()
        finally:
            self.receiving = False
        if message["type"] != "websocket.receive":
            self._peer_closed(message)
            raise _disconnect()(self.peer_code)
        self._metrics.socket_messages_in += 1
        self.messages_in += 1
        text = message.get("text")
        return text if text is not None else (message.get("bytes") or b"")

    def start_watching(self) -> None:
        self._timer = self._loop.call_later(_WATCH_AFTER_SEC, self._tick)

    def _tick(self) -> None:
        # One timer per socket rather than one per message: a handler that has not come back to
        # receive since the last tick is busy elsewhere, and its client is watched for.
        self._timer = self._loop.call_later(_WATCH_AFTER_SEC, self._tick)
        busy = self._received == self._received_at_tick
        self._received_at_tick = self._received
        if not busy or self.receiving or self._pending is not None or self.closed:
            return
        self._pending = asyncio.ensure_future(self._receive())
        self._pending.add_done_callback(self._watched)

    def _watched(self, pending: asyncio.Future[Any]) -> None:
        if pending.cancelled() or pending.exception() is not None:
            return
        message = pending.result()
        if message["type"] == "websocket.receive":
            return  # kept for the next receive
        self._peer_closed(message)
        if not self.receiving and self.handler is not None:
            self.handler.cancel()  # busy elsewhere (a dependency): the client is gone, so stop

    def _peer_closed(self, message: Mapping[str, Any]) -> None:
        self.closed = True
        self.peer_code = int(message.get("code", 1005))
        if self.close_code is None:
            self.close_code = self.peer_code

    def stop_watching(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()

    async def send(self, message: Message) -> None:
        if self.closed:
            raise _disconnect()(self.peer_code, "the socket is closed")
        if self._tagged:
            message = tag(message)
        event = (
            {"type": "websocket.send", "text": message}
            if isinstance(message, str)
            else {"type": "websocket.send", "bytes": message}
        )
        try:
            await self._send(event)
        except OSError:  # uvicorn's ClientDisconnected: the client left meanwhile
            self.closed = True
            raise _disconnect()(1006, "the client went away") from None
        self._metrics.socket_messages_out += 1
        self.messages_out += 1

    async def close(self, code: int = CLOSE_NORMAL, reason: str | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_code = code
        with contextlib.suppress(OSError):
            await self._send({"type": "websocket.close", "code": code, "reason": reason or ""})

    async def report(self, detail: ErrorDetail, reason: str) -> None:
        """End the conversation with a failure: its detail (under the subprotocol), then 1011."""
        if self.closed:
            return
        if self._tagged:
            with contextlib.suppress(OSError):
                await self._send({"type": "websocket.send", "text": error_message(detail)})
        await self.close(CLOSE_INTERNAL_ERROR, reason)


class Conversations:
    """The open conversations of one chainlet process, so that a drain can close them."""

    def __init__(self) -> None:
        self._open: dict[ServerSocket, asyncio.Task[Any]] = {}

    def __len__(self) -> int:
        return len(self._open)

    def add(self, socket: ServerSocket, task: asyncio.Task[Any]) -> None:
        self._open[socket] = task

    def remove(self, socket: ServerSocket) -> None:
        self._open.pop(socket, None)

    async def close_all(self, code: int = CLOSE_GOING_AWAY) -> None:
        """Close every open socket (1001: the server is going away) and stop its ``run_remote``."""
        for socket, task in list(self._open.items()):
            await socket.close(code, "the chainlet is shutting down")
            task.cancel()


def _disconnect() -> type[WebSocketDisconnect]:
    # Imported once a socket closes, not with the server: it loads starlette (about 15 ms of
    # a chainlet's start-up) for its Truss-compatible base class, and most chainlets serve no
    # sockets.
    from chains.websocket.disconnect import WebSocketDisconnect

    return WebSocketDisconnect


async def serve_websocket(app: ServerApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve one WebSocket conversation on ``app``'s chainlet (see the module docstring)."""
    if (await receive())["type"] != "websocket.connect":
        return
    headers = header_map(scope)
    call = CallContext.from_headers(headers)
    rid = [(REQUEST_ID_HEADER.encode(), call.request_id.encode())]
    if scope.get("path") != RUN_REMOTE:
        await _deny(scope, send, 404, f"no WebSocket at {scope.get('path')}; use /run_remote", rid)
        return
    if not app.spec.endpoint.output_kind.is_socket:
        await _deny(
            scope, send, 405, f"{app.spec.name} is not a WebSocket endpoint; use POST /run_remote", rid
        )
        return
    origin = request_origin(scope)
    settings = app.settings
    foreign = origin is not None and not settings.cors.allows(origin) and not same_origin(scope, origin)
    if foreign and settings.is_entrypoint:
        detail = (
            f"origin {origin!r} may not open a WebSocket to this chain; allow it with "
            "`chains push --cors-origin ORIGIN` or RemoteConfig(cors_origins=[...]) on the entrypoint"
        )
        await _deny(scope, send, 403, detail, rid)
        return
    refusal = app.authorize(headers)
    if refusal is not None and settings.is_entrypoint:
        refusal = _ticket_refusal(scope, headers, settings, app.spec.name, refusal)
    if refusal is not None:
        await _deny(scope, send, 401, refusal, rid)
        return
    if app.instance is None or app.draining:
        await _deny(scope, send, 503, "not ready yet" if app.instance is None else "shutting down", rid)
        return
    if not await app.try_take_slot():
        await _deny(scope, send, 503, "over capacity: every conversation slot is taken", rid)
        return
    metrics = app.metrics
    metrics.in_flight += 1
    metrics.sockets_open += 1
    try:
        tagged = SUBPROTOCOL in scope.get("subprotocols", ())
        accept: dict[str, Any] = {"type": "websocket.accept", "headers": rid}
        if tagged:
            accept["subprotocol"] = SUBPROTOCOL
        await send(accept)
        socket = ServerSocket(receive, send, headers, metrics, tagged)
        with serving_call(call):
            await _converse(app, socket, call)
    finally:
        metrics.sockets_open -= 1
        metrics.in_flight -= 1
        app.release_slot()


def _ticket_refusal(
    scope: Scope, headers: dict[str, str], settings: ServerSettings, chainlet: str, refusal: str
) -> str | None:
    """Why an entrypoint refuses a caller whose headers did not pass (``refusal``): a good stream
    ticket in the query stands for the API key (a web page cannot set a socket's headers)."""
    api_key = settings.api_key
    if not api_key or "authorization" in headers or "x-api-key" in headers:
        return refusal
    query = scope.get("query_string", b"").decode("latin-1")
    tickets = [value for name, value in parse_qsl(query, keep_blank_values=True) if name == TICKET_PARAM]
    if not tickets:
        return (
            "missing credentials: send `Authorization: Bearer <API key>`, or from a web page "
            f"?{TICKET_PARAM}=TICKET from POST /stream_ticket (never the key itself)"
        )
    return TicketSigner(api_key.encode(), settings.chain, chainlet).refusal(tickets[0])


async def _converse(app: ServerApp, socket: ServerSocket, call: CallContext) -> None:
    traced = tracing.active()
    if traced is None:
        await _converse_in(app, socket, call, None)
        return
    span = traced.conversation(app.spec.name, call, socket.headers)
    error: BaseException | None = None
    try:
        with span:  # current as the handler starts, so the sockets and calls it opens are its children
            await _converse_in(app, socket, call, span)
    except Exception as exc:
        error = exc
        raise
    finally:
        span.finish(socket.messages_in, socket.messages_out, socket.close_code, error)


async def _converse_in(app: ServerApp, socket: ServerSocket, call: CallContext, span: Any) -> None:
    instance: Any = app.instance
    handler = socket.handler = asyncio.ensure_future(_bounded(instance.run_remote(socket), call))
    socket.start_watching()
    app.conversations.add(socket, handler)
    try:
        await handler
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # this task's own cancellation, not the handler's (stopped as the client left)
    except _disconnect():
        pass  # run_remote did not catch the client's leaving: nothing to report to anyone
    except Exception as exc:
        logger.error(
            "run_remote raised %s in a WebSocket conversation (request id %s)",
            type(exc).__name__,
            call.request_id,
            exc_info=exc,
        )
        detail = ErrorDetail.from_exception(exc, app.spec.name)
        origin = detail
        while origin.cause is not None:  # the reason names where the failure began
            origin = origin.cause
        reason = close_reason(origin.chainlet or app.spec.name, origin.exc_type, call.request_id)
        if app.public_errors:
            detail = detail.public(call.request_id)
        if span is not None:
            span.record(exc)
        await socket.report(detail, reason)
    else:
        await socket.close(CLOSE_NORMAL)
    finally:
        app.conversations.remove(socket)
        handler.cancel()
        socket.stop_watching()


async def _bounded(conversation: Any, call: CallContext) -> None:
    remaining = call.remaining()
    if remaining is None:
        await conversation
        return
    try:
        async with asyncio.timeout(remaining):
            await conversation
    except TimeoutError:
        raise DeadlineExceeded("the conversation went on past the caller's deadline") from None


async def _deny(scope: Scope, send: Send, status: int, detail: str, rid: list[tuple[bytes, bytes]]) -> None:
    """Refuse the upgrade with an HTTP answer (a bare 403 where the server cannot send one)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
        return
    body = json.dumps({"detail": detail}).encode()
    extra = [(b"retry-after", b"1")] if status == 503 else []
    await send(
        {
            "type": "websocket.http.response.start",
            "status": status,
            "headers": [
                (b"content-type", JSON_MEDIA_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
                *extra,
                *rid,
            ],
        }
    )
    await send({"type": "websocket.http.response.body", "body": body})
