"""The client socket a stub opens to a WebSocket dependency.

A stub's ``run_remote()`` for a WebSocket endpoint returns an async context manager; inside
it the caller has a :class:`~chains.websocket.protocol.WebSocketProtocol`, and leaving it
(normally, by an exception, or cancelled) closes the socket, which stops the dependency's
``run_remote``. Relaying the caller's own client to the dependency is a few lines::

    async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
        async with self._upper.run_remote() as upstream:
            async for message in websocket:
                await upstream.send(message)
                await websocket.send(await upstream.receive())

Opening is retried like a call (``retries``, on another replica first, on connection errors
and 429/502/503/504) until the upgrade; after it nothing is retried, since the conversation
has state. ``timeout_sec`` bounds the opening, not the conversation. The dependency failing
raises :class:`RemoteError` (with its traceback) from the next ``receive``; a connection that
breaks without a close frame raises :class:`StreamInterrupted`; the dependency closing
normally raises :class:`WebSocketDisconnect`, and ends ``async for``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

import aiohttp

from chains import tracing
from chains.call_context import CallContext, current_call, new_request_id
from chains.call_policy import RETRY_STATUSES, check_wait, retry_after_seconds, wait_before_retry
from chains.errors import (
    ChainsRuntimeError,
    DeadlineExceeded,
    DependencyUnavailable,
    ErrorDetail,
    RemoteError,
    StreamInterrupted,
)
from chains.metrics import DependencyCall, Metrics
from chains.websocket.disconnect import WebSocketDisconnect
from chains.websocket.protocol import Message, SocketBase, WebSocketProtocol
from chains.websocket.wire import CLOSE_INTERNAL_ERROR, CLOSE_NORMAL, SUBPROTOCOL, untag

__all__ = ["ClientSocket", "connect"]

_HEARTBEAT_SEC = 20.0
_CLOSE_TIMEOUT_SEC = 1.0
_CLEAN_CODES = frozenset({1000, 1001})


class ClientSocket(SocketBase):
    """One end of a conversation with a dependency's WebSocket endpoint."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, name: str, headers: Mapping[str, str]) -> None:
        self._ws = ws
        self._name = name
        self._headers = headers
        self._ended: BaseException | None = None
        self.messages_in = 0
        self.messages_out = 0
        self.url = ""

    @property
    def is_connected(self) -> bool:
        return self._ended is None and not self._ws.closed

    async def receive(self) -> Message:
        if self._ended is not None:
            raise self._ended
        msg = await self._ws.receive()
        if msg.type is aiohttp.WSMsgType.TEXT or msg.type is aiohttp.WSMsgType.BINARY:
            value = untag(msg.data)
            if isinstance(value, ErrorDetail):
                self._ended = RemoteError.from_detail(value)
                await self._ws.close()
                raise self._ended
            self.messages_in += 1
            return value
        self._ended = self._closed(msg)
        raise self._ended

    def _closed(self, msg: aiohttp.WSMessage) -> BaseException:
        code = self._ws.close_code
        reason = msg.extra if msg.type is aiohttp.WSMsgType.CLOSE and isinstance(msg.extra, str) else ""
        if msg.type is aiohttp.WSMsgType.ERROR or code is None or code == 1006:
            cause = f": {msg.data}" if msg.type is aiohttp.WSMsgType.ERROR else ""
            return StreamInterrupted(f"the WebSocket to {self._name} broke off without a close frame{cause}")
        if code == CLOSE_INTERNAL_ERROR:
            # Without the failure's detail first (a server that does not speak the subprotocol).
            return RemoteError.from_detail(_detail_from_reason(self._name, reason))
        return WebSocketDisconnect(code, reason)

    async def send(self, message: Message) -> None:
        if self._ended is not None or self._ws.closed:
            raise self._ended or WebSocketDisconnect(
                self._ws.close_code or CLOSE_NORMAL, "the socket is closed"
            )
        try:
            if isinstance(message, str):
                await self._ws.send_str(message)
            else:
                await self._ws.send_bytes(message)
        except (ConnectionError, aiohttp.ClientError) as exc:
            raise StreamInterrupted(f"the WebSocket to {self._name} broke off: {exc}") from exc
        self.messages_out += 1

    async def close(self, code: int = CLOSE_NORMAL, reason: str | None = None) -> None:
        await self._ws.close(code=code, message=(reason or "").encode())

    @property
    def close_code(self) -> int | None:
        """How the socket closed (by either end), None while open or if it broke off."""
        return self._ws.close_code


def _detail_from_reason(name: str, reason: str) -> ErrorDetail:
    try:
        fields = json.loads(reason)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        fields = {}
    return ErrorDetail(
        exc_type=str(fields.get("exception", "Exception")),
        exc_module="builtins",
        message=f"{name} closed the WebSocket with 1011 ({reason or 'no reason'})",
        chainlet=str(fields.get("chainlet", name)),
    )


@asynccontextmanager
async def connect(
    session: aiohttp.ClientSession,
    urls: Sequence[str],
    path: str,
    *,
    name: str,
    retries: int,
    timeout_sec: float,
    authorization: str | None,
    metrics: Metrics | None,
    max_message_bytes: int,
) -> AsyncIterator[WebSocketProtocol]:
    """Open a conversation with the WebSocket endpoint at one of ``urls`` (see the module docstring)."""
    call = current_call() or CallContext(new_request_id())
    headers = dict(call.headers())
    if authorization:
        headers["authorization"] = authorization
    dial = _Dial(session, tuple(urls), path, headers, name, retries, timeout_sec, metrics, max_message_bytes)
    traced = tracing.active()
    if traced is None:
        async with _conversation(dial, call) as plain:
            yield plain
        return
    span = traced.socket(name, call)
    with span:
        traced.inject(headers)  # the socket's span is the parent of the dependency's conversation
    error: BaseException | None = None
    socket: ClientSocket | None = None
    try:
        async with _conversation(dial, call) as socket:
            span.target(socket.url)
            yield socket
    except Exception as exc:
        error = exc
        raise
    finally:
        if socket is None:
            span.finish(0, 0, None, error)
        else:
            span.finish(socket.messages_in, socket.messages_out, socket.close_code, error)


@dataclass(frozen=True)
class _Dial:
    """Where and how to open one conversation: what :func:`connect` was given, fixed for all
    of the opening's attempts."""

    session: aiohttp.ClientSession
    urls: tuple[str, ...]
    path: str
    headers: dict[str, str]
    name: str
    retries: int
    timeout_sec: float
    metrics: Metrics | None
    max_message_bytes: int


@asynccontextmanager
async def _conversation(dial: _Dial, call: CallContext) -> AsyncIterator[ClientSocket]:
    with DependencyCall(dial.metrics, dial.name) as record:
        ws = await _open(dial, call)
        try:
            response = getattr(ws, "_response", None)  # the upgrade's answer (aiohttp keeps it private)
            answer = {k.lower(): v for k, v in response.headers.items()} if response is not None else {}
            socket = ClientSocket(ws, dial.name, answer)
            if response is not None:
                socket.url = str(response.url)
            yield socket
            record.ok = True
        finally:
            # Shielded: a cancelled caller still closes the socket, so the dependency stops now.
            await asyncio.shield(_close(ws))


async def _close(ws: aiohttp.ClientWebSocketResponse) -> None:
    if not ws.closed:
        with suppress(ConnectionError, aiohttp.ClientError):
            await ws.close()


async def _open(dial: _Dial, call: CallContext) -> aiohttp.ClientWebSocketResponse:
    urls, name, metrics = dial.urls, dial.name, dial.metrics
    start = random.randrange(len(urls))
    failure = ""
    retry_after: float | None = None
    for attempt in range(dial.retries + 1):
        url = urls[(start + attempt) % len(urls)]
        budget = dial.timeout_sec
        remaining = call.remaining()
        if remaining is not None:
            budget = min(budget, remaining)
        if budget <= 0:
            raise DeadlineExceeded(
                f"no time left to open a WebSocket to {name}: the caller's deadline has passed"
            )
        if attempt:
            # The stubs' rule (chains.call_policy): another replica at once, else back off; never
            # a wait that would end past the caller's deadline.
            seconds = wait_before_retry(attempt, retry_after=retry_after, other_replica=attempt < len(urls))
            check_wait(name, seconds, call.remaining())
            if metrics is not None:
                metrics.dependency_retried(name)
            if seconds > 0:
                await asyncio.sleep(seconds)
        started = time.monotonic()
        try:
            async with asyncio.timeout(budget):
                return await dial.session.ws_connect(
                    url + dial.path,
                    headers=dial.headers,
                    protocols=(SUBPROTOCOL,),
                    heartbeat=_HEARTBEAT_SEC,
                    max_msg_size=dial.max_message_bytes,
                    timeout=aiohttp.ClientWSTimeout(ws_close=_CLOSE_TIMEOUT_SEC),
                    autoping=True,
                )
        except TimeoutError:
            raise DeadlineExceeded(
                f"{name} did not open the WebSocket within {time.monotonic() - started:.3g}s ({url})"
            ) from None
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status not in RETRY_STATUSES:
                raise ChainsRuntimeError(_refusal(name, url, exc)) from None
            failure = f"{name} at {url} answered {exc.status}"
            retry_after = retry_after_seconds(exc.headers.get("retry-after") if exc.headers else None)
        except (aiohttp.ClientError, ConnectionError) as exc:
            failure = f"{name} at {url}: {type(exc).__name__}: {exc}"
            retry_after = None
    error = DependencyUnavailable(f"{failure} (after {dial.retries + 1} attempt(s))")
    error.retry_after = retry_after
    raise error


def _refusal(name: str, url: str, exc: aiohttp.WSServerHandshakeError) -> str:
    if exc.status == 401:
        return f"{name} at {url} refused the WebSocket (401): check the chain's token or API key"
    if exc.status in (404, 405):
        return f"{name} at {url} has no WebSocket endpoint ({exc.status}): is its run_remote one?"
    return f"{name} at {url} refused the WebSocket ({exc.status} {exc.message})"
