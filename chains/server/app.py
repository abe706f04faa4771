"""The chainlet server: one ASGI app serving one chainlet instance.

Routes: ``POST /run_remote``, ``GET /healthz``, ``GET /readyz``, ``GET /metrics``,
``GET /openapi.json`` and, on the entrypoint, ``GET /docs``. Written directly against ASGI
(no framework): the routes are few, and every microsecond per request is overhead on every
hop of a chain (see docs/server-framework.md for the measurement).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import hmac
import inspect
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import pydantic
import pydantic_core

from chains import codec, tracing
from chains.batcher import Batcher
from chains.batching import install_batcher
from chains.call_context import REQUEST_ID_HEADER, CallContext, serving_call
from chains.chainlet import ChainletBase
from chains.checks import ChainletSpec
from chains.errors import DeadlineExceeded, DependencyUnavailable, ErrorDetail, RemoteError
from chains.server import openapi
from chains.server.asgi import (
    BodyTooLarge,
    ClientGone,
    Receive,
    Scope,
    Send,
    header_map,
    read_body,
    send_bytes,
    send_json,
)
from chains.server.browser import BrowserRoutes
from chains.server.metrics import Metrics
from chains.server.negotiation import negotiate
from chains.server.settings import ServerSettings
from chains.server.websocket import Conversations, serve_websocket
from chains.streaming import shape_of

if TYPE_CHECKING:
    from chains.tracing.spans import Tracing

__all__ = ["ChainletApp"]

logger = logging.getLogger("chains.server")

_JSON_TYPES = ("application/json", "application/*+json")
_NO_BUFFERING = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class _Disconnected(Exception):
    """The client went away while its call was being served."""


class ChainletApp:
    """Serves ``spec``'s chainlet, built by ``factory`` once the server has started.

    ``factory`` runs in a worker thread, since a chainlet's ``__init__`` may load a model
    for minutes; ``/healthz`` answers meanwhile and ``/readyz`` says when it is done.
    """

    def __init__(
        self,
        spec: ChainletSpec,
        settings: ServerSettings,
        factory: Callable[[Metrics], ChainletBase],
        on_shutdown: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.metrics = Metrics(spec.name)
        self._factory = factory
        self._on_shutdown = on_shutdown
        self.instance: ChainletBase | None = None
        self.startup_error: BaseException | None = None
        self.started = asyncio.Event()
        self.draining = False
        concurrency = settings.concurrency or spec.remote_config.compute.concurrency
        self._concurrency = concurrency
        self._max_queue = settings.max_queue if settings.max_queue is not None else 4 * concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self._waiting = 0
        self._executor: ThreadPoolExecutor | None = None
        self._docs = settings.docs if settings.docs is not None else settings.is_entrypoint
        self._openapi = json.dumps(openapi.document(spec, entrypoint=settings.is_entrypoint)).encode()
        self._token = (settings.internal_token or "").encode()
        self._api_key = (settings.api_key or "").encode()
        # What an outside caller sees of an error: see docs/concepts.md, "Errors".
        self._public_errors = settings.is_entrypoint and not settings.shows_tracebacks
        self._build_task: asyncio.Task[None] | None = None
        self._tracing: Tracing | None = None  # the process's, once started; None: no spans at all
        # Web pages (CORS, EventSource, the JS client): entrypoints only, see chains/server/browser.py.
        self._browser: BrowserRoutes | None = None
        if settings.is_entrypoint:
            self._browser = BrowserRoutes(spec, settings.cors, settings.api_key, self.metrics)
        self._batcher: Batcher | None = None
        self.conversations = Conversations()
        if not settings.is_entrypoint and not settings.internal_token:
            raise ValueError(
                f"chainlet {spec.name} is internal (not the entrypoint) and needs the chain's token: "
                "set CHAINS_INTERNAL_TOKEN"
            )

    # -- lifecycle ---------------------------------------------------------------------------

    async def startup(self) -> None:
        """Start building the chainlet in the background; the server answers meanwhile."""
        self._tracing = tracing.active()
        self._build_task = asyncio.create_task(self._build())

    async def _build(self) -> None:
        try:
            self.instance = await asyncio.to_thread(self._factory, self.metrics)
            self._batcher = self._install_batcher(self.instance)
            if self.settings.ready_file is not None:
                self.settings.ready_file.touch()
            logger.info("chainlet %s is ready", self.spec.name)
        except BaseException as exc:  # reported by the process, which then exits
            self.startup_error = exc
            logger.exception("chainlet %s failed to start", self.spec.name)
        finally:
            self.started.set()

    def _install_batcher(self, instance: ChainletBase) -> Batcher | None:
        batching = self.spec.endpoint.batching
        if batching is None:
            return None
        # The concurrency limit counts batches; the queue bound counts calls, so that by
        # default a few full batches may wait.
        max_queue = self.settings.max_queue
        if max_queue is None:
            max_queue = 4 * self._concurrency * batching.max_batch_size
        batcher = install_batcher(
            instance,
            chainlet=self.spec.name,
            concurrency=self._concurrency,
            max_queue=max_queue,
            observer=self.metrics,
        )
        if batcher is not None:
            self.metrics.batch_queue = lambda: batcher.queued
        return batcher

    async def shutdown(self) -> None:
        if self._on_shutdown is not None:
            await self._on_shutdown()
        if self._batcher is not None:
            await self._batcher.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def start_draining(self) -> None:
        """Report not ready while the server drains; calls that still reach the app (on
        connections opened before the drain) are answered, not refused: a client that sent a
        call on a connection it already had has nowhere else to send it."""
        self.draining = True

    @property
    def in_flight(self) -> int:
        return self.metrics.in_flight

    # -- ASGI --------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await serve_websocket(self, scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._browser is not None:
            routed = await self._browser.route(scope, receive, send)
            if routed is None:
                return
            scope, receive, send = routed
        path: str = scope["path"]
        method: str = scope["method"]
        if path == "/run_remote":
            if self.spec.endpoint.output_kind.is_socket:
                detail = f"{self.spec.name} is a WebSocket endpoint: open a WebSocket to /run_remote"
                await send_json(send, 426, {"detail": detail}, [(b"upgrade", b"websocket")])
                return
            if method != "POST":
                await send_json(send, 405, {"detail": "use POST /run_remote"}, [(b"allow", b"POST")])
                return
            await self._run_remote(scope, receive, send)
            return
        if method not in ("GET", "HEAD"):
            await send_json(send, 405, {"detail": f"use GET {path}"}, [(b"allow", b"GET")])
            return
        if path == "/healthz":
            await send_json(send, 200, {"status": "alive"})
        elif path == "/readyz":
            ready, reason = await self._readiness()
            await send_json(send, 200 if ready else 503, {"ready": ready, "detail": reason})
        elif path == "/metrics":
            # The entrypoint's metrics name the chain's internal chainlets: its callers' key guards them.
            refusal = self._authorized(header_map(scope)) if self.settings.is_entrypoint else None
            if refusal is not None:
                await send_json(send, 401, {"detail": refusal})
                return
            body = self.metrics.render().encode()
            await send_bytes(send, 200, body, b"text/plain; version=0.0.4; charset=utf-8")
        elif path == "/openapi.json":
            await send_bytes(send, 200, self._openapi, b"application/json")
        elif path == "/docs" and self._docs:
            page = openapi.docs_page(self.spec).encode()
            await send_bytes(send, 200, page, b"text/html; charset=utf-8")
        else:
            routes = "POST /run_remote, GET /healthz, GET /readyz, GET /metrics, GET /openapi.json"
            await send_json(send, 404, {"detail": f"no route {method} {path}; routes: {routes}"})

    async def _readiness(self) -> tuple[bool, str]:
        if self.draining:
            return False, "shutting down"
        if self.startup_error is not None:
            return False, f"__init__ failed: {type(self.startup_error).__name__}: {self.startup_error}"
        if self.instance is None:
            return False, "starting: __init__ has not finished"
        if not self.spec.has_is_healthy:
            return True, "ready"
        try:
            check = self.instance.is_healthy  # type: ignore[attr-defined]
            healthy = await check() if inspect.iscoroutinefunction(check) else await asyncio.to_thread(check)
        except Exception as exc:
            return False, f"is_healthy() raised {type(exc).__name__}: {exc}"
        return (True, "ready") if healthy is True else (False, "is_healthy() returned False")

    # -- POST /run_remote --------------------------------------------------------------------

    def _authorized(self, headers: dict[str, str]) -> str | None:
        """Why the call is refused, or None when its credentials are right."""
        expected = self._api_key if self.settings.is_entrypoint else self._token
        if not expected:
            return None
        given = headers.get("authorization", "")
        scheme, _, credential = given.partition(" ")
        if scheme.lower() != "bearer":
            credential = headers.get("x-api-key", "") if self.settings.is_entrypoint else ""
        if not credential:
            what = "an API key" if self.settings.is_entrypoint else "the chain's internal token"
            return f"missing credentials: send `Authorization: Bearer <{what}>`"
        if not hmac.compare_digest(credential.strip().encode(), expected):
            return "wrong credentials"
        return None

    # What a WebSocket conversation's admission shares with calls (chains.server.websocket).

    def authorize(self, headers: dict[str, str]) -> str | None:
        return self._authorized(headers)

    @property
    def public_errors(self) -> bool:
        return self._public_errors

    async def try_take_slot(self) -> bool:
        """Take a concurrency slot if one is free now (a socket holds it while open)."""
        if self._slots.locked():
            return False
        await self._slots.acquire()  # free, so this does not wait
        return True

    def release_slot(self) -> None:
        self._slots.release()

    async def _run_remote(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        headers = header_map(scope)
        call = CallContext.from_headers(headers)
        rid = [(REQUEST_ID_HEADER.encode(), call.request_id.encode())]
        stream = _StreamCount() if self.spec.endpoint.is_stream else None
        counting = _STREAM_COUNT.set(stream)
        try:
            if self._tracing is None:
                status = await self._serve_call(call, headers, receive, send, rid)
            else:
                status = await self._tracing.serve(
                    self.spec.name,
                    call,
                    headers,
                    receive,
                    send,
                    lambda receive, send: self._serve_call(call, headers, receive, send, rid),
                )
        except StreamAborted:
            self._log_request(call, 200, started, stream)
            raise
        finally:
            _STREAM_COUNT.reset(counting)
        elapsed = time.perf_counter() - started
        self.metrics.call_finished(status, elapsed)
        self._log_request(call, status, started, stream)

    def _log_request(
        self, call: CallContext, status: int, started: float, stream: _StreamCount | None
    ) -> None:
        if not self.settings.request_log:
            return
        elapsed_ms = (time.perf_counter() - started) * 1e3
        streamed = ""
        if stream is not None and status == 200:
            streamed = f" {stream.items} items" + (", then failed" if stream.failed else "")
        extra = {"request_id": call.request_id}
        request_log.info("%s %d %.1fms%s", self.spec.name, status, elapsed_ms, streamed, extra=extra)

    async def _serve_call(
        self,
        call: CallContext,
        headers: dict[str, str],
        receive: Receive,
        send: Send,
        rid: list[tuple[bytes, bytes]],
    ) -> int:
        refusal = self._authorized(headers)
        if refusal is not None:
            await send_json(send, 401, {"detail": refusal}, rid)
            return 401
        if self.instance is None:
            await send_json(send, 503, {"detail": "not ready yet"}, [(b"retry-after", b"1"), *rid])
            return 503
        content_type = headers.get("content-type", "application/json").split(";")[0].strip().lower()
        binary = content_type == codec.BINARY_MEDIA_TYPE
        if not binary and content_type not in _JSON_TYPES and not content_type.endswith("+json"):
            await send_json(
                send,
                415,
                {
                    "detail": f"send the arguments as JSON with Content-Type: application/json "
                    f"(or as {codec.BINARY_MEDIA_TYPE}), not {content_type!r}"
                },
                rid,
            )
            return 415
        try:
            async with asyncio.timeout(self.settings.body_timeout_sec):
                body = await read_body(receive, self.settings.max_body_bytes, headers.get("content-length"))
        except TimeoutError:
            await send_json(
                send,
                408,
                {"detail": f"the request body did not arrive within {self.settings.body_timeout_sec:g}s"},
                [(b"connection", b"close"), *rid],
            )
            return 408
        except BodyTooLarge:
            limit = self.settings.max_body_bytes
            await send_json(send, 413, {"detail": f"request body over the limit of {limit} bytes"}, rid)
            return 413
        except ClientGone:
            return 499
        try:
            arguments = codec.decode_args(self.spec.endpoint, body, binary=binary)
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            await send_json(send, 422, {"detail": errors}, rid)
            return 422
        # A batched endpoint's calls take no slot: its batcher bounds the batches that run
        # at once, and the calls that wait for one.
        batcher = self._batcher
        if batcher is not None and batcher.full:
            busy = f"{batcher.queued} calls waiting for a batch"
            await send_json(send, 503, {"detail": f"over capacity: {busy}"}, [(b"retry-after", b"1"), *rid])
            return 503
        if batcher is None and self._slots.locked() and self._waiting >= self._max_queue:
            await send_json(
                send,
                503,
                {"detail": f"over capacity: {self._concurrency} calls running, {self._waiting} waiting"},
                [(b"retry-after", b"1"), *rid],
            )
            return 503
        if batcher is None:
            self._waiting += 1
            try:
                await self._slots.acquire()
            finally:
                self._waiting -= 1
        self.metrics.in_flight += 1
        try:
            with serving_call(call):
                return await self._with_disconnect_watch(call, headers, arguments, receive, send, rid)
        finally:
            self.metrics.in_flight -= 1
            if batcher is None:
                self._slots.release()

    async def _with_disconnect_watch(
        self,
        call: CallContext,
        headers: dict[str, str],
        arguments: dict[str, Any],
        receive: Receive,
        send: Send,
        rid: list[tuple[bytes, bytes]],
    ) -> int:
        # The body has been read, so the next message is the client going away: watch for it
        # and cancel the work, so that a chain never computes for a caller that has left.
        task = asyncio.current_task()
        assert task is not None
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            task.cancel()

        # The watcher starts when the call first waits, not now: until then nothing could be
        # cancelled anyway, and a call that never waits (no I/O) is spared the task (about
        # 8 µs of CPU per call under uvicorn).
        loop = asyncio.get_running_loop()
        watcher: list[asyncio.Task[None]] = []
        starting = loop.call_soon(lambda: watcher.append(loop.create_task(watch())))
        try:
            if self.spec.endpoint.is_stream:
                return await self._stream(call, headers.get("accept"), arguments, send, rid)
            binary_result = codec.BINARY_MEDIA_TYPE in headers.get("accept", "")
            return await self._unary(call, arguments, send, rid, binary_result)
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()
            stream = _STREAM_COUNT.get(None)
            return 200 if stream is not None and stream.ended else 499
        finally:
            starting.cancel()
            if watcher:
                watcher[0].cancel()

    async def _invoke(self, arguments: dict[str, Any]) -> Any:
        method = self.instance.run_remote  # type: ignore[union-attr]
        endpoint = self.spec.endpoint
        if endpoint.is_async:
            return await endpoint.call(method, arguments)
        if self._executor is None:
            # Sync endpoints run in threads of their own, as many as calls may run at once.
            self._executor = ThreadPoolExecutor(
                self._concurrency, thread_name_prefix=f"{self.spec.name}-call"
            )
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        call = functools.partial(context.run, endpoint.call, method, arguments)
        return await loop.run_in_executor(self._executor, call)

    async def _unary(
        self,
        call: CallContext,
        arguments: dict[str, Any],
        send: Send,
        rid: list[tuple[bytes, bytes]],
        binary: bool,
    ) -> int:
        # Without a deadline there is no scope at all: asyncio.timeout(None) alone costs 2.5 µs.
        scope = asyncio.timeout(call.remaining()) if call.deadline is not None else None
        try:
            if scope is None:
                value = await self._invoke(arguments)
            else:
                async with scope:
                    value = await self._invoke(arguments)
            body = codec.encode_result(self.spec.endpoint, value, binary=binary)
        except TimeoutError as exc:
            if (scope is not None and scope.expired()) or _passed(call.deadline):
                return await self._fail(send, 504, self._deadline_error(call), rid)
            # run_remote's own TimeoutError (a dependency's DeadlineExceeded, its own timeout):
            # reported as what it is, not as the caller's deadline, which may not even be set.
            logger.exception("run_remote raised %s (request id %s)", type(exc).__name__, call.request_id)
            return await self._fail(send, 500, exc, rid)
        except (pydantic.ValidationError, pydantic_core.PydanticSerializationError) as exc:
            logger.error(
                "run_remote returned a value that does not match its annotation (request id %s): %s",
                call.request_id,
                exc,
            )
            return await self._fail(send, 500, exc, rid)
        except Exception as exc:
            logger.exception("run_remote raised %s (request id %s)", type(exc).__name__, call.request_id)
            return await self._fail(send, 500, exc, rid)
        media_type = codec.BINARY_MEDIA_TYPE.encode() if binary else b"application/json"
        await send_bytes(send, 200, body, media_type, rid)
        return 200

    def _deadline_error(self, call: CallContext) -> DeadlineExceeded:
        return DeadlineExceeded(f"{self.spec.name} did not answer within the caller's deadline")

    async def _fail(self, send: Send, status: int, exc: BaseException, rid: list[tuple[bytes, bytes]]) -> int:
        if self._tracing is not None:
            self._tracing.record_error(exc)
        detail = ErrorDetail.from_exception(exc, self.spec.name)
        headers = rid
        if self.settings.is_entrypoint:
            if self._public_errors:
                detail = detail.public(dict(rid)[REQUEST_ID_HEADER.encode()].decode())
            if status == 500 and isinstance(exc, DependencyUnavailable):
                # A dependency was busy or unreachable through every retry of this call: a
                # later call may well succeed, so the outside caller is told to retry. Only
                # here: between chainlets a 503 would be retried at every hop, multiplying the
                # load on the dependency that is already overloaded.
                status = 503
                headers = [(b"retry-after", _retry_after(exc)), *rid]
        body: dict[str, Any] = {"error": {**detail.model_dump(mode="json"), **detail.truss_fields()}}
        if detail.status is not None and status == 500:
            # An HTTPException's status and detail, as FastAPI would answer them.
            status = detail.status
            body["detail"] = detail.message
        await send_json(send, status, body, headers)
        return status

    async def _stream(
        self,
        call: CallContext,
        accept: str | None,
        arguments: dict[str, Any],
        send: Send,
        rid: list[tuple[bytes, bytes]],
    ) -> int:
        shape = shape_of(self.spec.endpoint)
        media_type, encoder = negotiate(accept, shape)
        generator = self.spec.endpoint.call(self.instance.run_remote, arguments)  # type: ignore[union-attr]
        deadline = call.deadline
        async with aclosing(generator):
            # Pull the first item before answering: a failure this early is a plain 500, which
            # the caller may retry, instead of a stream that breaks after its headers.
            scope = asyncio.timeout_at(_loop_time(deadline))
            try:
                async with scope:
                    first = await anext(generator, _END)
            except TimeoutError as exc:
                if scope.expired() or _passed(deadline):
                    return await self._fail(send, 504, self._deadline_error(call), rid)
                logger.exception(
                    "run_remote raised %s before its first item (request id %s)",
                    type(exc).__name__,
                    call.request_id,
                )
                return await self._fail(send, 500, exc, rid)
            except Exception as exc:
                logger.exception(
                    "run_remote raised %s before its first item (request id %s)",
                    type(exc).__name__,
                    call.request_id,
                )
                return await self._fail(send, 500, exc, rid)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", media_type.encode()), *_NO_BUFFERING, *rid],
                }
            )
            source = _counted(_items(first, generator, deadline, self._deadline_error(call)))
            if self._public_errors:
                source = _public_failure(source, self.spec.name, call.request_id)
            on_error: Callable[[BaseException], None] = _log_stream_error
            if self._tracing is not None:
                source = self._tracing.count_items(source)
                on_error = self._tracing.recording(_log_stream_error)
            chunks = encoder(shape, source, chainlet=self.spec.name, on_error=on_error)
            sender = _BodySender(send)
            try:
                async with aclosing(chunks):
                    async for chunk in chunks:
                        await sender.write(chunk)
                await sender.close()
            except asyncio.CancelledError:
                sender.cancel()
                self.metrics.streams_cancelled += 1
                raise
            except Exception as exc:
                # Raw streams have no in-band error: the connection is cut so that the client
                # sees a broken response, never a complete-looking shorter one. What the stream
                # yielded before it failed goes out first, as it always has.
                with contextlib.suppress(Exception):
                    await sender.close()
                on_error(exc)
                # Raised to cut the connection; logged once, above (serve.py keeps uvicorn
                # from logging it again as an "Exception in ASGI application").
                raise StreamAborted(f"run_remote raised {type(exc).__name__} while streaming") from None
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return 200


_END: Any = object()

# One line per call, at INFO: ``Entry 200 12.3ms 8 items`` (CHAINS_REQUEST_LOG=0: none).
request_log = logging.getLogger("chains.requests")


@dataclasses.dataclass
class _StreamCount:
    """What a streaming call sent, for its request log line."""

    items: int = 0
    failed: bool = False
    # The producer has ended (finished or raised): the call's outcome is settled, and a client
    # that leaves while the last chunks are flushed has not cut it short.
    ended: bool = False


_STREAM_COUNT: contextvars.ContextVar[_StreamCount | None] = contextvars.ContextVar("chains_stream_count")


class StreamAborted(Exception):
    """A stream that failed after its headers went out, logged already; raised to the ASGI
    server only so that it cuts the connection."""


async def _counted(source: AsyncIterator[Any]) -> AsyncIterator[Any]:
    count = _STREAM_COUNT.get(None) or _StreamCount()
    try:
        while True:
            try:
                item = await anext(source)
            except StopAsyncIteration:
                count.ended = True
                return
            except Exception:
                count.failed = count.ended = True
                raise
            count.items += 1
            # The yield stays outside the try: what the consumer throws in is not the producer's.
            yield item
    finally:
        await source.aclose()  # type: ignore[attr-defined]


def _log_stream_error(exc: BaseException) -> None:
    if isinstance(exc, RemoteError) and exc.sent_as_is:
        return  # the public form of an error _public_failure has logged in full
    # The user's frames only: those of chains, the ASGI server and asyncio say nothing of the cause.
    detail = ErrorDetail.from_exception(exc)
    logger.error(
        "run_remote raised %s while streaming: %s\n%s",
        type(exc).__name__,
        exc,
        detail.traceback.rstrip() or "  (no user frames)",
    )


async def _public_failure(source: AsyncIterator[Any], chainlet: str, request_id: str) -> AsyncIterator[Any]:
    """``source``'s items; its failure is logged in full and goes on as its public form, which
    is what the stream's error frame or event then carries."""
    try:
        while True:
            try:
                item = await anext(source)
            except StopAsyncIteration:
                return
            except Exception as exc:
                logger.error(
                    "run_remote raised %s while streaming (request id %s)",
                    type(exc).__name__,
                    request_id,
                    exc_info=exc,
                )
                raise ErrorDetail.from_exception(exc, chainlet).public(request_id).as_exception() from None
            # The yield stays outside the try: what the consumer throws in is not the producer's.
            yield item
    finally:
        await source.aclose()  # type: ignore[attr-defined]


def _retry_after(exc: DependencyUnavailable) -> bytes:
    """Seconds the dependency asked its callers to wait (1 when it did not say), rounded up."""
    seconds = exc.retry_after if exc.retry_after is not None else 1.0
    return str(max(1, math.ceil(seconds))).encode()


def _passed(deadline: float | None) -> bool:
    """Whether the caller's deadline is over, give or take the event loop's clock granularity
    (uvloop's is a millisecond): a stub capped by it may time out a moment before our scope."""
    return deadline is not None and deadline - time.monotonic() < 0.01


def _loop_time(deadline: float | None) -> float | None:
    """``deadline`` (time.monotonic) on the event loop's clock, which asyncio.timeout_at takes."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


async def _items(
    first: Any, rest: AsyncIterator[Any], deadline: float | None, expired: DeadlineExceeded
) -> AsyncIterator[Any]:
    if first is _END:
        return
    yield first
    if deadline is None:
        async for item in rest:
            yield item
        return
    watch = _PullDeadline(deadline)
    try:
        while not watch.fired:
            task, cancelling = watch.task, watch.task.cancelling()
            watch.pulling = True
            try:
                item = await anext(rest, _END)
            except asyncio.CancelledError:
                if watch.cancelled and task.uncancel() <= cancelling:
                    raise expired from None
                raise
            # A TimeoutError here is run_remote's own (the watch cancels, it raises nothing):
            # it goes out as what it is, like any other exception.
            finally:
                watch.pulling = False
            if watch.cancelled:
                task.uncancel()  # the item came in the same turn as the deadline, as with asyncio.timeout
            if item is _END:
                return
            yield item
    finally:
        watch.handle.cancel()
    # The deadline passed while the consumer had an item: from here on each wait for an item
    # is wrapped on its own, so what is ready at once still goes out and the first wait fails.
    while True:
        # The timeout wraps only the wait for the next item, never a `yield`: a cancel scope
        # must not stay open while the consumer runs.
        scope = asyncio.timeout_at(_loop_time(deadline))
        try:
            async with scope:
                item = await anext(rest, _END)
        except TimeoutError:
            if scope.expired():
                raise expired from None
            raise  # run_remote's own
        if item is _END:
            return
        yield item


class _PullDeadline:
    """The caller's deadline over a stream's waits for its next item, with one timer per stream.

    It does what ``asyncio.timeout_at(deadline)`` around each wait does (the first item's wait
    is still wrapped so), without a timer per item, which cost about a third of the CPU time of
    streaming small items: the timer cancels the task only while it waits for an item, and marks
    the deadline as passed otherwise, after which :func:`_items` wraps each wait as before.
    """

    __slots__ = ("cancelled", "fired", "handle", "pulling", "task")

    def __init__(self, deadline: float) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.pulling = False
        self.fired = False
        self.cancelled = False
        loop = asyncio.get_running_loop()
        self.handle = loop.call_at(loop.time() + (deadline - time.monotonic()), self._expire)

    def _expire(self) -> None:
        self.fired = True
        if self.pulling:
            self.cancelled = True
            self.task.cancel()


# A stream's chunks that come in a burst are sent together, but none waits longer than this,
# and no more than this many bytes wait, before the producer lets them be sent.
_FLUSH_AFTER_SEC = 0.001
_MAX_PENDING_BYTES = 64 * 1024


class _BodySender:
    """Sends a stream's chunks as ``http.response.body`` messages, joining those of a burst.

    A message per chunk costs a system call and uvicorn's own work, about 5 µs, which is most
    of what a small item costs to stream. Here the chunks go to a task of their own that sends,
    in one message, whatever is waiting each time it runs, that is whenever the stream's
    producer waits for something (its next token, the network). A producer that does not wait
    (a loop that computes its items) is made to let the sender run once 1 ms has passed since
    the last send or 64 KiB are waiting, so a chunk is never held back longer than that; after
    a pause, a chunk goes out at once.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._pending: list[bytes] = []
        self._size = 0
        self._last_sent = 0.0
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None  # the sender waits for chunks
        self._taken: asyncio.Future[None] | None = None  # the producer waits for the sender

    async def write(self, chunk: bytes) -> None:
        self._pending.append(chunk)
        self._size += len(chunk)
        task = self._task
        if task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        elif task.done():
            task.result()  # the sender failed: raise its error here
        elif self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)
        if self._size >= _MAX_PENDING_BYTES or time.perf_counter() - self._last_sent >= _FLUSH_AFTER_SEC:
            if self._taken is None:
                self._taken = asyncio.get_running_loop().create_future()
            await self._taken

    async def close(self) -> None:
        """Send what is waiting and return once it has been sent (raising what sending raised)."""
        task = self._task
        if task is None:
            return
        self._closing = True
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)
        await task

    def cancel(self) -> None:
        task = self._task
        if task is None:
            return
        if task.done() and not task.cancelled():
            task.exception()  # retrieved, so that asyncio does not report it as lost
        task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self._pending:
                    if self._closing:
                        return
                    self._wakeup = loop.create_future()
                    await self._wakeup
                    self._wakeup = None
                    continue
                pending, self._pending, self._size = self._pending, [], 0
                self._last_sent = time.perf_counter()
                taken, self._taken = self._taken, None
                if taken is not None and not taken.done():  # done: the producer was cancelled
                    taken.set_result(None)
                body = pending[0] if len(pending) == 1 else b"".join(pending)
                await self._send({"type": "http.response.body", "body": body, "more_body": True})
        except BaseException as exc:
            taken, self._taken = self._taken, None
            if taken is not None and not taken.done():
                if isinstance(exc, asyncio.CancelledError):
                    taken.cancel()
                else:
                    taken.set_exception(exc)
            raise
