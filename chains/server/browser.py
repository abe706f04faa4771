"""What an entrypoint adds for web pages: CORS, ``EventSource`` calls, stream tickets, the JS client.

:class:`BrowserRoutes` sees each request before the chainlet app does. It answers
``OPTIONS`` preflights and the reconnects of a finished ``EventSource``, turns
``GET /run_remote?ARGS`` of a streaming endpoint into the ``POST`` the app serves (same
validation, limits, metrics and cancellation), and adds CORS headers to the answers of
allowed origins. Requests without an ``Origin`` header (curl, stubs) pass through unchanged.
Its own routes (``GET /client.js``, ``GET /client.d.ts``, ``POST /stream_ticket``) are in the
server's cold router (:meth:`BrowserRoutes.routes`).
Only entrypoints have it: internal chainlets never answer CORS.
"""

from __future__ import annotations

import functools
import hmac
import time
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from chains.call_context import CallContext
from chains.metrics import Metrics
from chains.model import ChainletSpec
from chains.server import event_source
from chains.server.asgi import Message, Receive, Scope, Send, header_map, send_bytes, send_json
from chains.server.cors import CorsPolicy, request_origin, same_origin
from chains.server.tickets import TICKET_PARAM, TicketSigner
from chains.streaming import shape_of
from chains.wire import JSON_MEDIA_TYPE, REQUEST_ID_HEADER, RUN_REMOTE, SSE_MEDIA_TYPE, STREAM_KIND_HEADER

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

__all__ = ["BrowserRoutes"]

_STATIC = {
    "/client.js": ("client.js", b"text/javascript; charset=utf-8"),
    "/client.d.ts": ("client.d.ts", b"application/typescript; charset=utf-8"),
}

Routed = tuple[Scope, Receive, Send] | None


class BrowserRoutes:
    """The browser-facing part of an entrypoint serving ``spec``.

    ``route(scope, receive, send)`` returns ``None`` when it has answered the request, or
    the request for the app to serve (perhaps rewritten, with a ``send`` that adds headers).
    """

    def __init__(
        self, spec: ChainletSpec, chain: str, cors: CorsPolicy, api_key: str | None, metrics: Metrics
    ) -> None:
        self._spec = spec
        self._cors = cors
        self._api_key = api_key
        self._signer = TicketSigner(api_key.encode(), chain, spec.name) if api_key else None
        self._metrics = metrics
        self._kind = shape_of(spec.endpoint).kind.name.encode() if spec.endpoint.is_stream else None
        self._static: dict[str, bytes] = {}

    def routes(self) -> list[BaseRoute]:
        """Its own routes, for the server's cold router (chains/server/cold_routes.py): the JS
        client and ``POST /stream_ticket``. Their answers get CORS headers from :meth:`route`,
        which saw the request first."""
        from chains.server.router import asgi_endpoint  # with the router: Starlette's

        table: list[BaseRoute] = [
            asgi_endpoint(path, functools.partial(self._static_file, path), ["GET"]) for path in _STATIC
        ]
        table.append(asgi_endpoint("/stream_ticket", self._ticket, ["POST"]))
        return table

    async def route(self, scope: Scope, receive: Receive, send: Send) -> Routed:
        path: str = scope["path"]
        method: str = scope["method"]
        if path in _STATIC:
            return scope, receive, send  # public to every page: its own CORS header, none added
        origin = request_origin(scope)
        if origin is not None:
            if method == "OPTIONS" and self._cors:
                await self._cors.preflight(scope, send)
                return None
            send = self._cors.wrap(scope, send)
            if path == RUN_REMOTE and self._kind is not None:
                send = _with_header(send, STREAM_KIND_HEADER.encode(), self._kind)
        if path == RUN_REMOTE and method == "GET" and self._kind is not None:
            if origin is not None and not self._cors.allows(origin) and not same_origin(scope, origin):
                await send_json(send, 403, {"detail": _refused(origin)})
                return None
            return await self._event_source(scope, receive, send)
        return scope, receive, send

    async def _static_file(self, path: str, scope: Scope, receive: Receive, send: Send) -> None:
        name, media_type = _STATIC[path]
        body = self._static.get(name)
        if body is None:
            body = self._static[name] = (resources.files("chains.server") / "static" / name).read_bytes()
        # Public code with nothing secret in it: any page may import it as a module.
        headers = [(b"access-control-allow-origin", b"*"), (b"cache-control", b"no-cache")]
        await send_bytes(send, 200, body, media_type, headers)

    async def _ticket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._signer is None:
            detail = "this chain has no API key: open GET /run_remote?ARGS without a ticket"
            await send_json(send, 404, {"detail": detail})
            return
        refusal = _key_refusal(header_map(scope), self._api_key or "")
        if refusal is not None:
            await send_json(send, 401, {"detail": refusal})
            return
        answer = {"ticket": self._signer.issue(), "expires_in": self._signer.ttl_sec}
        await send_json(send, 200, answer, [(b"cache-control", b"no-store")])

    async def _event_source(self, scope: Scope, receive: Receive, send: Send) -> Routed:
        started = time.perf_counter()
        headers = header_map(scope)
        call = CallContext.from_headers(headers)
        rid = [(REQUEST_ID_HEADER.encode(), call.request_id.encode())]
        query = scope.get("query_string", b"").decode("latin-1")
        authorization = headers.get("authorization")
        if self._signer is not None and authorization is None and "x-api-key" not in headers:
            ticket = _query_value(query, TICKET_PARAM)
            refusal = (
                self._signer.refusal(ticket)
                if ticket
                else f"missing credentials: an EventSource sends ?{TICKET_PARAM}=TICKET, from POST "
                "/stream_ticket with `Authorization: Bearer <API key>` (never the key itself)"
            )
            if refusal is not None:
                await send_json(send, 401, {"detail": refusal}, rid)
                self._metrics.call_finished(401, time.perf_counter() - started)
                return None
            authorization = f"Bearer {self._api_key}"  # stays in this process: the app checks it
        last_event_id = headers.get("last-event-id", "")
        if last_event_id:
            if event_source.finished(last_event_id):
                await send_bytes(send, 204, b"", b"text/plain", rid)
                self._metrics.call_finished(204, time.perf_counter() - started)
                return None
            body = event_source.reconnect_after_cut(last_event_id, call.request_id)
            await send_bytes(send, 200, body, SSE_MEDIA_TYPE.encode(), [*_NO_CACHE, *rid])
            self._metrics.call_finished(200, time.perf_counter() - started)
            return None
        try:
            payload = event_source.json_body(
                self._spec.endpoint.input_model, query, skip=frozenset({TICKET_PARAM})
            )
        except event_source.QueryError as exc:
            await send_json(send, 422, {"detail": exc.errors}, rid)
            self._metrics.call_finished(422, time.perf_counter() - started)
            return None
        rewritten = [
            (name, value)
            for name, value in scope["headers"]
            if name not in (b"accept", b"content-type", b"content-length", b"authorization")
        ]
        rewritten += [
            (b"accept", SSE_MEDIA_TYPE.encode()),
            (b"content-type", JSON_MEDIA_TYPE.encode()),
            (b"content-length", str(len(payload)).encode()),
            (REQUEST_ID_HEADER.encode(), call.request_id.encode()),
        ]
        if authorization is not None:
            rewritten.append((b"authorization", authorization.encode("latin-1")))
        post = {**scope, "method": "POST", "headers": rewritten, "query_string": b""}
        return post, _body_then(payload, receive), event_source.with_event_ids(send, call.request_id)


_NO_CACHE = [(b"cache-control", b"no-cache")]


def _refused(origin: str) -> str:
    return (
        f"origin {origin!r} may not call this chain; allow it with `chains push --cors-origin ORIGIN` "
        "or RemoteConfig(cors_origins=[...]) on the entrypoint"
    )


def _key_refusal(headers: dict[str, str], key: str) -> str | None:
    scheme, _, credential = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        credential = headers.get("x-api-key", "")
    if not credential:
        return "missing credentials: send `Authorization: Bearer <API key>` to get a stream ticket"
    if not hmac.compare_digest(credential.strip().encode(), key.encode()):
        return "wrong credentials"
    return None


def _query_value(query: str, name: str) -> str:
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == name:
            return value
    return ""


def _with_header(send: Send, name: bytes, value: bytes) -> Send:
    async def with_header(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), (name, value)]}
        await send(message)

    return with_header


def _body_then(body: bytes, receive: Receive) -> Receive:
    """``receive`` that first hands the app ``body`` as the request's, then the client's own
    messages (the GET's empty body, then its disconnect, which cancels the call)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
