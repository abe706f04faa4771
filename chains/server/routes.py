"""The server side of ``@chains.route``: a request at a route of the author's, or a stub's call by name.

The app hands :class:`RouteServer` every request that is not ``/run_remote`` (whose path
stays as fast as it was); the routes are matched, their arguments gathered from the path,
the query, the headers and the body, and the method's answer sent as JSON or as a stream,
with the admission, limits, capacity, metrics and cancellation of a ``run_remote`` call.
A route that declares ``errors=`` answers its refusals and failures in that shape.

A stub calls a route's method at ``POST /_chains/methods/<name>`` with every argument by
name, as ``/run_remote`` takes them, and reads its streams in the framed form.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl

import pydantic
import pydantic_core

from chains import codec
from chains.call_context import CallContext, serving_call
from chains.chainlet import ChainletBase
from chains.endpoint import EndpointSpec, field_name
from chains.errors import DeadlineExceeded, ErrorDetail
from chains.metrics import Metrics
from chains.model import ChainletSpec
from chains.routes import METHOD_CALLS, HTTPError, ParamSource, RouteSpec
from chains.server.asgi import (
    BodyTooLarge,
    ClientGone,
    Receive,
    Scope,
    Send,
    header_map,
    read_body,
    send_json,
)
from chains.server.capacity import Capacity
from chains.server.deadline import END, loop_time, passed, until_deadline
from chains.server.disconnect import DisconnectWatch
from chains.server.error_response import send_error
from chains.server.negotiation import Negotiated, negotiate
from chains.server.refusal import RETRY_SOON
from chains.server.request import Request, StreamCount
from chains.server.settings import ServerSettings
from chains.server.streaming_response import StreamAborted, send_stream
from chains.streaming import shape_of
from chains.streaming.forms import encode_raw
from chains.streaming.kinds import SSE_EVENTS
from chains.wire import FRAMED_MEDIA_TYPE, SSE_MEDIA_TYPE

if TYPE_CHECKING:
    from chains.tracing.spans import Tracing

__all__ = ["RouteHost", "RouteServer"]

logger = logging.getLogger("chains.server")


class RouteHost(Protocol):
    """What serving a route needs of the chainlet app."""

    spec: ChainletSpec
    settings: ServerSettings
    metrics: Metrics
    instance: ChainletBase | None

    def authorize(self, headers: dict[str, str]) -> str | None: ...

    @property
    def public_errors(self) -> bool: ...

    @property
    def capacity(self) -> Capacity: ...

    @property
    def tracing(self) -> Tracing | None: ...

    def log_request(self, request: Request, status: int) -> None: ...


class _Refused(Exception):
    def __init__(self, status: int, message: str, detail: Any = None, headers: tuple[Any, ...] = ()) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message
        self.detail = message if detail is None else detail
        self.headers = headers


class RouteServer:
    """Serves the routes of one chainlet; :meth:`serve` says whether a request was one of them.

    >>> server = RouteServer(app, routes_of(spec.cls))
    >>> if await server.serve(scope, receive, send): return
    """

    def __init__(self, host: RouteHost, routes: tuple[RouteSpec, ...]) -> None:
        self._host = host
        self._routes = routes
        self._by_name = {route.name: route for route in routes}

    @property
    def routes(self) -> tuple[RouteSpec, ...]:
        """The routes it serves, for the server's cold router to match their paths."""
        return self._routes

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> bool:
        path: str = scope["path"]
        method: str = scope["method"]
        if path.startswith(METHOD_CALLS):
            found = self._by_name.get(path[len(METHOD_CALLS) :])
            if found is None:
                return False
            if method != "POST":
                await send_json(send, 405, {"detail": f"use POST {path}"}, [(b"allow", b"POST")])
                return True
            await self._call(found, {}, scope, receive, send, by_name=True)
            return True
        allowed: list[str] = []
        matched: RouteSpec | None = None
        for route in self._routes:
            params = route.match(path)
            if params is None:
                continue
            if route.http_method == method or (method == "HEAD" and route.http_method == "GET"):
                await self._call(route, params, scope, receive, send, by_name=False)
                return True
            allowed.append(route.http_method)
            matched = route
        if not allowed:
            return False
        allow = ", ".join(allowed)
        status, body = _error(matched, 405, f"use {allow} {path}")
        await send_json(send, status, body, [(b"allow", allow.encode())])
        return True

    async def _call(
        self,
        route: RouteSpec,
        path_params: dict[str, str],
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        by_name: bool,
    ) -> None:
        host = self._host
        started = time.perf_counter()
        headers = header_map(scope)
        call = CallContext.from_headers(headers)
        streams = route.endpoint.is_stream or route.either
        request = Request(started, headers, call, receive, send, StreamCount() if streams else None)
        status = 500
        tracing = host.tracing
        try:
            if tracing is None:
                status = await self._serve(route, request, scope, path_params, by_name=by_name)
            else:

                def traced(receive: Receive, send: Send) -> Awaitable[int]:
                    # The span's counting receive and send take the place of the server's.
                    request.receive, request.send = receive, send
                    return self._serve(route, request, scope, path_params, by_name=by_name)

                status = await tracing.serve(
                    host.spec.name, call, headers, receive, send, traced, method=route.name
                )
        except StreamAborted:
            status = 200
            raise
        finally:
            host.metrics.call_finished(status, time.perf_counter() - started)
            host.log_request(request, status)

    async def _serve(
        self, route: RouteSpec, request: Request, scope: Scope, path_params: dict[str, str], *, by_name: bool
    ) -> int:
        host = self._host
        try:
            arguments = await self._admit(route, request, scope, path_params, by_name=by_name)
            await host.capacity.enter()
        except _Refused as refused:
            return await self._refuse(route, request, refused, by_name=by_name)
        except ClientGone:
            return 499
        host.metrics.in_flight += 1
        try:
            with serving_call(request.call), DisconnectWatch(request) as watch:
                return await self._answer(route, request, arguments, by_name=by_name)
            return watch.status
        finally:
            host.metrics.in_flight -= 1
            host.capacity.leave()

    async def _admit(
        self, route: RouteSpec, request: Request, scope: Scope, path_params: dict[str, str], *, by_name: bool
    ) -> dict[str, Any]:
        host = self._host
        headers = request.headers
        refusal = host.authorize(headers)
        if refusal is not None:
            raise _Refused(401, refusal)
        if host.instance is None:
            raise _Refused(503, "not ready yet", headers=RETRY_SOON)
        settings = host.settings
        try:
            async with asyncio.timeout(settings.body_timeout_sec):
                body = await read_body(
                    request.receive, settings.max_body_bytes, headers.get("content-length")
                )
        except TimeoutError:
            message = f"the request body did not arrive within {settings.body_timeout_sec:g}s"
            raise _Refused(408, message, headers=((b"connection", b"close"),)) from None
        except BodyTooLarge:
            raise _Refused(413, f"request body over the limit of {settings.max_body_bytes} bytes") from None
        try:
            if by_name:
                return codec.decode_args(route.endpoint, body or b"{}")
            return _arguments(route, body, path_params, scope, headers)
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            raise _Refused(422, _validation_message(errors), errors) from None

    async def _refuse(self, route: RouteSpec, request: Request, refused: _Refused, *, by_name: bool) -> int:
        shaper = None if by_name else route.errors
        if shaper is None:
            body: Any = {"detail": refused.detail}
            status = refused.status
        else:
            status, body = shaper(refused.status, refused.message)
        await send_json(request.send, status, body, [*refused.headers, *request.id_header])
        return status

    async def _answer(
        self, route: RouteSpec, request: Request, arguments: dict[str, Any], *, by_name: bool
    ) -> int:
        endpoint = route.endpoint
        method = getattr(self._host.instance, route.name)
        if endpoint.is_stream:
            return await self._stream(
                route, endpoint, request, endpoint.call(method, arguments), by_name=by_name
            )
        call = request.call
        scope = asyncio.timeout_at(loop_time(call.deadline))
        try:
            async with scope:
                if endpoint.is_async:
                    value = await endpoint.call(method, arguments)
                else:
                    context = contextvars.copy_context()
                    value = await asyncio.to_thread(context.run, endpoint.call, method, arguments)
        except HTTPError as exc:
            await send_json(request.send, exc.status, exc.body, request.id_header)
            return exc.status
        except TimeoutError as exc:
            if scope.expired() or passed(call.deadline):
                return await self._fail(route, request, 504, self._deadline_error(route), by_name=by_name)
            return await self._fail(route, request, 500, exc, by_name=by_name)
        except Exception as exc:  # a ValidationError too: one the body raised is its own failure
            logger.exception("%s raised %s (request id %s)", route.name, type(exc).__name__, call.request_id)
            return await self._fail(route, request, 500, exc, by_name=by_name)
        if route.stream is not None and isinstance(value, AsyncIterator):
            return await self._stream(route, route.stream, request, value, by_name=by_name)
        try:
            body = codec.encode_result(endpoint, value)
        except (pydantic.ValidationError, pydantic_core.PydanticSerializationError) as exc:
            logger.error("%s returned a value that does not match its annotation: %s", route.name, exc)
            return await self._fail(route, request, 500, exc, by_name=by_name)
        except Exception as exc:
            logger.exception("%s's value could not be sent (request id %s)", route.name, call.request_id)
            return await self._fail(route, request, 500, exc, by_name=by_name)
        await request.send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *request.id_header,
                ],
            }
        )
        await request.send({"type": "http.response.body", "body": body})
        return 200

    async def _stream(
        self,
        route: RouteSpec,
        endpoint: EndpointSpec,
        request: Request,
        generator: AsyncIterator[Any],
        *,
        by_name: bool,
    ) -> int:
        host = self._host
        call = request.call
        shape = shape_of(endpoint)
        media_type, encoder = negotiate(request.headers.get("accept"), shape)
        if shape.kind is SSE_EVENTS and media_type != FRAMED_MEDIA_TYPE:
            # Event clients (OpenAI's among them) read bare events: no closing `end` event.
            media_type, encoder = Negotiated(SSE_MEDIA_TYPE, encode_raw)
        async with aclosing(generator):  # type: ignore[type-var]
            scope = asyncio.timeout_at(loop_time(call.deadline))
            try:
                async with scope:
                    first = await anext(generator, END)
            except HTTPError as exc:
                await send_json(request.send, exc.status, exc.body, request.id_header)
                return exc.status
            except Exception as exc:
                if isinstance(exc, TimeoutError) and (scope.expired() or passed(call.deadline)):
                    return await self._fail(route, request, 504, self._deadline_error(route), by_name=by_name)
                logger.exception("%s raised %s before its first item", route.name, type(exc).__name__)
                return await self._fail(route, request, 500, exc, by_name=by_name)
            await send_stream(
                request,
                media_type,
                encoder,
                shape,
                until_deadline(first, generator, call.deadline, self._deadline_error(route)),
                chainlet=host.spec.name,
                public_errors=host.public_errors,
                tracing=host.tracing,
                metrics=host.metrics,
            )
        return 200

    def _deadline_error(self, route: RouteSpec) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"{self._host.spec.name}.{route.name} did not answer within the caller's deadline"
        )

    async def _fail(
        self, route: RouteSpec, request: Request, status: int, exc: BaseException, *, by_name: bool
    ) -> int:
        host = self._host
        if route.errors is None or by_name:
            return await send_error(
                request,
                status,
                exc,
                chainlet=host.spec.name,
                entrypoint=host.settings.is_entrypoint,
                public=host.public_errors,
                tracing=host.tracing,
            )
        detail = ErrorDetail.from_exception(exc, host.spec.name)
        if host.public_errors:
            detail = detail.public(request.call.request_id)
        status, body = route.errors(status, detail.message)
        await send_json(request.send, status, body, request.id_header)
        return status


def _arguments(
    route: RouteSpec, body: bytes, path_params: Mapping[str, str], scope: Scope, headers: Mapping[str, str]
) -> dict[str, Any]:
    query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
    raw: dict[str, Any] = {}
    for param in route.params:
        source = param.source
        if source is ParamSource.PATH:
            raw[param.name] = path_params[param.key]
        elif source is ParamSource.QUERY:
            if param.key in query:
                raw[param.name] = query[param.key]
        elif source is ParamSource.HEADER:
            if param.key in headers:
                raw[param.name] = headers[param.key]
        elif body.strip():
            try:
                raw[param.name] = json.loads(body)
            except ValueError as exc:
                raise _Refused(400, f"the request body is not valid JSON: {exc}") from None
    model = route.endpoint.input_model.model_validate(raw)
    return {p.name: getattr(model, field_name(p.name)) for p in route.endpoint.params}


def _validation_message(errors: list[Any]) -> str:
    return "; ".join(f"{'.'.join(map(str, e.get('loc', ()))) or 'body'}: {e.get('msg')}" for e in errors)


def _error(route: RouteSpec | None, status: int, message: str) -> tuple[int, Any]:
    if route is not None and route.errors is not None:
        return route.errors(status, message)
    return status, {"detail": message}
