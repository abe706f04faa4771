"""The chainlet server: one ASGI app serving one chainlet instance.

Routes: ``POST /run_remote``, ``GET /healthz``, ``GET /readyz``, ``GET /metrics``,
``GET /openapi.json`` and, on the entrypoint, ``GET /docs``. ``/run_remote`` is written
directly against ASGI (no framework): every microsecond per request is overhead on every hop
of a chain (see docs/server-framework.md for the measurement). Every other route is matched
by one Starlette router, :mod:`chains.server.cold_routes`.

A call to ``/run_remote`` becomes a :class:`~chains.server.request.Request`; the checks that
may refuse it raise :class:`~chains.server.refusal.Refusal`, answered in one place; the slots
and queue are :mod:`chains.server.capacity`'s, the client leaving is watched by
:mod:`chains.server.disconnect`, a failure is answered by :mod:`chains.server.error_response`,
and a stream's answer is :mod:`chains.server.streaming_response`'s.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hmac
import inspect
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import pydantic
import pydantic_core

from chains import codec, tracing
from chains.call_context import CallContext, serving_call
from chains.chainlet import ChainletBase
from chains.errors import DeadlineExceeded
from chains.metrics import Metrics
from chains.model import ChainletSpec
from chains.routes import routes_of
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
from chains.server.capacity import Capacity
from chains.server.cold_routes import ColdRoutes, cold_router
from chains.server.credentials import Credentials
from chains.server.deadline import END, BodyReads, loop_time, passed, until_deadline
from chains.server.disconnect import DisconnectWatch
from chains.server.error_response import send_error
from chains.server.negotiation import negotiate
from chains.server.reconnect import Replays
from chains.server.refusal import RETRY_SOON, Refusal
from chains.server.request import Request, StreamCount
from chains.server.request_log import RequestLog
from chains.server.routes import RouteServer
from chains.server.settings import ServerSettings
from chains.server.streaming_response import StreamAborted, send_stream
from chains.server.websocket import Conversations, serve_websocket
from chains.streaming import shape_of
from chains.wire import (
    DEBUG_HEADER,
    JSON_MEDIA_TYPE,
    RECONNECT_HEADER,
    RESUMABLE_HEADER,
    RUN_REMOTE,
    STREAM_ID_HEADER,
    debug_proof,
)

if TYPE_CHECKING:
    from chains.server.jobs import JobRoutes
    from chains.tracing.spans import Tracing

# StreamAborted is raised out of the app to the ASGI server, which the runner (serve.py) knows.
__all__ = ["ChainletApp", "StreamAborted"]

logger = logging.getLogger("chains.server")

_JSON_TYPES = (JSON_MEDIA_TYPE, "application/*+json")
_JSON = JSON_MEDIA_TYPE.encode()


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
        self._capacity = Capacity(concurrency, settings.max_queue)
        self._body_reads = BodyReads(settings.body_timeout_sec)
        self._executor: ThreadPoolExecutor | None = None
        self._docs = settings.docs if settings.docs is not None else settings.is_entrypoint
        self._openapi = json.dumps(openapi.document(spec, entrypoint=settings.is_entrypoint)).encode()
        entrypoint = settings.is_entrypoint
        self._credentials = Credentials(
            entrypoint, settings.api_key if entrypoint else settings.internal_token
        )
        # What an outside caller sees of an error: see docs/concepts.md, "Errors".
        self._public_errors = settings.is_entrypoint and not settings.shows_tracebacks
        owner_may_debug = self._public_errors and settings.debug_errors is None and settings.internal_token
        self._debug_proof = debug_proof(settings.internal_token or "").encode() if owner_may_debug else None
        self._build_task: asyncio.Task[None] | None = None
        self._tracing: Tracing | None = None  # the process's, once started; None: no spans at all
        # One line per call, written by a thread of its own (CHAINS_REQUEST_LOG=0: none).
        self._request_log = RequestLog(spec.name) if settings.request_log else None
        # Web pages (CORS, EventSource, the JS client): entrypoints only, see chains/server/browser.py.
        self._browser: BrowserRoutes | None = None
        if settings.is_entrypoint:
            self._browser = BrowserRoutes(spec, settings.chain, settings.cors, settings.api_key, self.metrics)
        self.conversations = Conversations()
        # Streams that outlive a cut connection (chains/server/reconnect.py); None: turned off.
        self._replays = Replays(settings.reconnect) if settings.reconnect.enabled else None
        self._jobs = self._job_routes() if settings.jobs is not None and settings.is_entrypoint else None
        routes = routes_of(spec.cls)  # @chains.route endpoints, served by chains/server/routes.py
        self._routes = RouteServer(self, routes) if routes else None
        self._cold = ColdRoutes(  # every route but /run_remote, built when first asked for
            lambda: cold_router(
                self,
                is_entrypoint=settings.is_entrypoint,
                readiness=self._readiness,
                metrics_text=self.metrics.render,
                openapi_body=self._openapi,
                docs=self._docs,
                browser=self._browser,
                jobs=self._jobs,
                routes=self._routes,
            )
        )
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

    def _job_routes(self) -> JobRoutes:
        from chains.server.jobs import JobRoutes

        jobs = self.settings.jobs
        assert jobs is not None
        return JobRoutes(
            self.spec,
            self.settings.chain,
            jobs.open_store(self.settings.chain),
            self._credentials,
            self._invoke,
            self._open_stream,
            max_body_bytes=self.settings.max_body_bytes,
            run_timeout_sec=jobs.run_timeout_sec,
            webhook_secret=jobs.webhook_secret,
            workers=jobs.workers,
            public_errors=self._public_errors,
        )

    async def _build(self) -> None:
        try:
            self.instance = await asyncio.to_thread(self._factory, self.metrics)
            self._capacity.install_batcher(
                self.instance, self.spec.endpoint.batching, self.spec.name, self.metrics
            )
            if self._jobs is not None:
                self._jobs.start()  # jobs run once the chainlet can take them
            if self.settings.ready_file is not None:
                self.settings.ready_file.touch()
            logger.info("chainlet %s is ready", self.spec.name)
        except BaseException as exc:  # reported by the process, which then exits
            self.startup_error = exc
            logger.exception("chainlet %s failed to start", self.spec.name)
        finally:
            self.started.set()

    async def shutdown(self) -> None:
        if self._jobs is not None:
            await self._jobs.stop(self.settings.grace_sec)
        if self._request_log is not None:
            self._request_log.close()
        if self._on_shutdown is not None:
            await self._on_shutdown()
        if self._capacity.batcher is not None:
            await self._capacity.batcher.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def start_draining(self) -> None:
        """Report not ready while the server drains; calls that still reach the app (on
        connections opened before the drain) are answered, not refused: a client that sent a
        call on a connection it already had has nowhere else to send it."""
        self.draining = True
        if self._jobs is not None:
            self._jobs.runner.stop_claiming()  # a job claimed now would find its dependencies gone
        if self._replays is not None:
            self._replays.drain()  # a cut stream's wait for its reader would hold the drain up

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
        if path == RUN_REMOTE:
            if self.spec.endpoint.output_kind.is_socket:
                detail = f"{self.spec.name} is a WebSocket endpoint: open a WebSocket to /run_remote"
                await send_json(send, 426, {"detail": detail}, [(b"upgrade", b"websocket")])
                return
            if method != "POST":
                await send_json(send, 405, {"detail": "use POST /run_remote"}, [(b"allow", b"POST")])
                return
            await self._run_remote(scope, receive, send)
            return
        await self._cold(scope, receive, send)  # every other route: chains/server/cold_routes.py

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

    # What a WebSocket conversation's admission shares with calls (chains.server.websocket).

    def authorize(self, headers: dict[str, str]) -> str | None:
        return self._credentials.refusal(headers)

    @property
    def public_errors(self) -> bool:
        return self._public_errors

    def _public_for(self, headers: dict[str, str]) -> bool:
        """Whether this caller sees errors in their public form: all but the chain's owner."""
        if self._debug_proof is None:
            return self._public_errors
        proof = headers.get(DEBUG_HEADER)
        return proof is None or not hmac.compare_digest(proof.encode(), self._debug_proof)

    async def try_take_slot(self) -> bool:
        """Take a concurrency slot if one is free now (a socket holds it while open)."""
        return await self._capacity.try_take_slot()

    def release_slot(self) -> None:
        self._capacity.release_slot()

    @property
    def capacity(self) -> Capacity:
        return self._capacity

    @property
    def tracing(self) -> Tracing | None:
        """The process's tracing once the server started (None: calls make no spans)."""
        return self._tracing

    async def _run_remote(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        headers = header_map(scope)
        serve: Callable[[Request], Awaitable[int]] = self._serve_call
        stream = StreamCount() if self.spec.endpoint.is_stream else None
        if RESUMABLE_HEADER in headers:  # one look-up a call: plain streams pay nothing more
            # Logged, metered and traced as any call: its line, status and duration are its
            # answer's, from the POST to the end of its first connection (docs/jobs.md).
            serve, stream = self._serve_resumable, StreamCount()
        elif STREAM_ID_HEADER in headers:  # a reader back for the rest of a stream
            await self._serve_replay(headers, receive, send)
            return
        call = CallContext.from_headers(headers)
        request = Request(started, headers, call, receive, send, stream)
        try:
            if self._tracing is None:
                status = await serve(request)
            else:
                status = await self._tracing.serve(
                    self.spec.name,
                    call,
                    headers,
                    receive,
                    send,
                    functools.partial(self._traced, serve, request),
                )
        except StreamAborted:
            self.log_request(request, 200)
            raise
        elapsed = time.perf_counter() - started
        self.metrics.call_finished(status, elapsed)
        self.log_request(request, status)

    def _serve_resumable(self, request: Request) -> Awaitable[int]:
        from chains.server.resumable import serve_resumable

        return serve_resumable(
            request,
            self.spec,
            self._jobs,
            capacity=self._capacity,
            metrics=self.metrics,
            tracing=self._tracing,
            ready=self.instance is not None,
        )

    @staticmethod
    def _traced(
        serve: Callable[[Request], Awaitable[int]], request: Request, receive: Receive, send: Send
    ) -> Awaitable[int]:
        # The span's counting receive and send take the place of the server's.
        request.receive = receive
        request.send = send
        return serve(request)

    def log_request(self, request: Request, status: int) -> None:
        if self._request_log is not None:
            request.log(self._request_log, status)

    async def _serve_call(self, request: Request) -> int:
        try:
            arguments = await self._admit(request)
            await self._capacity.enter()
        except Refusal as refusal:
            return await refusal.answer(request.send, request.id_header)
        except ClientGone:
            return 499
        self.metrics.in_flight += 1
        try:
            with serving_call(request.call), DisconnectWatch(request) as watch:
                if self.spec.endpoint.is_stream:
                    return await self._stream(request, arguments, watch)
                return await self._unary(request, arguments)
            return watch.status
        finally:
            self.metrics.in_flight -= 1
            self._capacity.leave()

    async def _admit(self, request: Request) -> dict[str, Any]:
        """The call's arguments, read and decoded; raises :class:`Refusal` (or ``ClientGone``)
        for a call that is not let in: credentials, readiness, content type, body, arguments."""
        headers = request.headers
        refusal = self._credentials.refusal(headers)
        if refusal is not None:
            raise Refusal(401, refusal)
        if self.instance is None:
            raise Refusal(503, "not ready yet", RETRY_SOON)
        content_type = headers.get("content-type", JSON_MEDIA_TYPE).split(";")[0].strip().lower()
        binary = content_type == codec.BINARY_MEDIA_TYPE
        if not binary and content_type not in _JSON_TYPES and not content_type.endswith("+json"):
            raise Refusal(
                415,
                f"send the arguments as JSON with Content-Type: application/json "
                f"(or as {codec.BINARY_MEDIA_TYPE}), not {content_type!r}",
            )
        settings = self.settings
        reads = self._body_reads
        task = reads.start()
        try:
            body = await read_body(request.receive, settings.max_body_bytes, headers.get("content-length"))
        except asyncio.CancelledError:
            if not reads.cut(task):
                raise
            detail = f"the request body did not arrive within {settings.body_timeout_sec:g}s"
            raise Refusal(408, detail, [(b"connection", b"close")]) from None
        except BodyTooLarge:
            raise Refusal(413, f"request body over the limit of {settings.max_body_bytes} bytes") from None
        finally:
            reads.stop(task)
        try:
            return codec.decode_args(self.spec.endpoint, body, binary=binary)
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            raise Refusal(422, errors) from None

    def _open_stream(self, arguments: dict[str, Any]) -> AsyncIterator[Any]:
        return self.spec.endpoint.call(self.instance.run_remote, arguments)  # type: ignore[union-attr,no-any-return]

    async def _invoke(self, arguments: dict[str, Any]) -> Any:
        method = self.instance.run_remote  # type: ignore[union-attr]
        endpoint = self.spec.endpoint
        if endpoint.is_async:
            return await endpoint.call(method, arguments)
        if self._executor is None:
            # Sync endpoints run in threads of their own, as many as calls may run at once.
            self._executor = ThreadPoolExecutor(
                self._capacity.concurrency, thread_name_prefix=f"{self.spec.name}-call"
            )
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        call = functools.partial(context.run, endpoint.call, method, arguments)
        return await loop.run_in_executor(self._executor, call)

    async def _unary(self, request: Request, arguments: dict[str, Any]) -> int:
        call = request.call
        binary = codec.BINARY_MEDIA_TYPE in request.headers.get("accept", "")
        # Without a deadline there is no scope at all: asyncio.timeout(None) alone costs 2.5 µs.
        scope = asyncio.timeout(call.remaining()) if call.deadline is not None else None
        try:
            if scope is None:
                value = await self._invoke(arguments)
            else:
                async with scope:
                    value = await self._invoke(arguments)
        except TimeoutError as exc:
            if (scope is not None and scope.expired()) or passed(call.deadline):
                return await self._fail(request, 504, self._deadline_error())
            # run_remote's own TimeoutError (a dependency's DeadlineExceeded, its own timeout):
            # reported as what it is, not as the caller's deadline, which may not even be set.
            logger.exception("run_remote raised %s (request id %s)", type(exc).__name__, call.request_id)
            return await self._fail(request, 500, exc)
        except Exception as exc:  # a ValidationError too: one the body raised is its own failure
            logger.exception("run_remote raised %s (request id %s)", type(exc).__name__, call.request_id)
            return await self._fail(request, 500, exc)
        try:
            body = codec.encode_result(self.spec.endpoint, value, binary=binary)
        except (pydantic.ValidationError, pydantic_core.PydanticSerializationError) as exc:
            logger.error(
                "run_remote returned a value that does not match its annotation (request id %s): %s",
                call.request_id,
                exc,
            )
            return await self._fail(request, 500, exc)
        except Exception as exc:
            logger.exception("run_remote's value could not be sent (request id %s)", call.request_id)
            return await self._fail(request, 500, exc)
        media_type = codec.BINARY_MEDIA_TYPE.encode() if binary else _JSON
        await send_bytes(request.send, 200, body, media_type, request.id_header)
        return 200

    def _deadline_error(self) -> DeadlineExceeded:
        return DeadlineExceeded(f"{self.spec.name} did not answer within the caller's deadline")

    def _fail(self, request: Request, status: int, exc: BaseException) -> Awaitable[int]:
        return send_error(
            request,
            status,
            exc,
            chainlet=self.spec.name,
            entrypoint=self.settings.is_entrypoint,
            public=self._public_for(request.headers),
            tracing=self._tracing,
        )

    async def _serve_replay(self, headers: dict[str, str], receive: Receive, send: Send) -> None:
        refusal = self._credentials.refusal(headers)
        if refusal is not None:
            await send_json(send, 401, {"detail": refusal})
        elif self._replays is None:
            detail = "this chainlet keeps no streams to come back to (CHAINS_STREAM_RECONNECT_SEC=0)"
            await send_json(send, 404, {"detail": detail})
        else:
            await self._replays.serve(headers, receive, send)

    async def _stream(self, request: Request, arguments: dict[str, Any], watch: DisconnectWatch) -> int:
        call = request.call
        shape = shape_of(self.spec.endpoint)
        media_type, encoder = negotiate(request.headers.get("accept"), shape)
        generator = self.spec.endpoint.call(self.instance.run_remote, arguments)  # type: ignore[union-attr]
        deadline = call.deadline
        async with aclosing(generator):
            # Pull the first item before answering: a failure this early is a plain 500, which
            # the caller may retry, instead of a stream that breaks after its headers.
            scope = asyncio.timeout_at(loop_time(deadline))
            try:
                async with scope:
                    first = await anext(generator, END)
            except TimeoutError as exc:
                if scope.expired() or passed(deadline):
                    return await self._fail(request, 504, self._deadline_error())
                logger.exception(
                    "run_remote raised %s before its first item (request id %s)",
                    type(exc).__name__,
                    call.request_id,
                )
                return await self._fail(request, 500, exc)
            except Exception as exc:
                logger.exception(
                    "run_remote raised %s before its first item (request id %s)",
                    type(exc).__name__,
                    call.request_id,
                )
                return await self._fail(request, 500, exc)
            answer = functools.partial(
                send_stream,
                request,
                media_type,
                encoder,
                shape,
                until_deadline(first, generator, deadline, self._deadline_error()),
                chainlet=self.spec.name,
                public_errors=self._public_for(request.headers),
                tracing=self._tracing,
                metrics=self.metrics,
            )
            replays = self._replays
            if replays is not None and RECONNECT_HEADER in request.headers:
                await self._send_reconnectable(replays, request, watch, answer)
            else:
                await answer()
        return 200

    async def _send_reconnectable(
        self,
        replays: Replays,
        request: Request,
        watch: DisconnectWatch,
        answer: Callable[[], Awaitable[None]],
    ) -> None:
        """``answer`` as a stream its reader may come back to (chains/server/reconnect.py): the
        producer writes to the run, and the connection is sent what the run has."""
        run = replays.open(watch.leave)
        watch.on_leave = run.first_left
        request.send = run.opened_on(request.send)
        try:
            try:
                await answer()
            except StreamAborted:
                run.abort()
                await run.first_reader_done()  # what came before the failure goes out first
                raise
            if not await run.first_reader_done():
                # The first connection left or was replaced by a returning reader: cut it.
                raise StreamAborted("a reconnectable stream's first connection was let go")
        finally:
            run.abort()  # ends the first connection's reader if the producer stopped short
            replays.closed(run)
