"""The chainlet server's cold routes, in one Starlette router: every route but ``/run_remote``.

``POST /run_remote`` (and a WebSocket's upgrade there) stays the app's own bare ASGI code, since
every microsecond of it is paid on every hop of a chain (docs/server-framework.md). Everything
else is answered here, matched by Starlette's :class:`~starlette.routing.Router`: the health
routes, ``/metrics``, ``/openapi.json`` and ``/docs``, the browser's own routes (the JS client,
``/stream_ticket``), the async routes and the ``@chains.route`` endpoints. A path no route
takes gets a 404 naming the routes there are; a method a route does not take, a 405 naming the
ones it does (both JSON, as the rest of the server's errors). The router is built, and
Starlette imported, when a cold route is first asked for::

    cold = ColdRoutes(lambda: cold_router(app, is_entrypoint=True, ...))
    await cold(scope, receive, send)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from chains.model import ChainletSpec
from chains.routes import METHOD_CALLS
from chains.server import openapi
from chains.server.asgi import Receive, Scope, Send, header_map, send_json
from chains.wire import ASYNC_REQUEST, ASYNC_RUN_REMOTE, HEALTHZ, METRICS, READYZ, RUN_REMOTE

if TYPE_CHECKING:
    from starlette.routing import BaseRoute, Router

    from chains.server.browser import BrowserRoutes
    from chains.server.jobs import JobRoutes
    from chains.server.router import AsgiHandler
    from chains.server.routes import RouteServer

__all__ = ["ColdHost", "ColdRoutes", "cold_router"]


class ColdHost(Protocol):
    """What the cold routes need of the chainlet app."""

    spec: ChainletSpec

    def authorize(self, headers: dict[str, str]) -> str | None: ...


class ColdRoutes:
    """The cold routes as an ASGI app that builds its router when first asked: a chainlet
    server that serves only ``/run_remote`` never loads Starlette (and a fresh one starts
    without paying for it)::

        cold = ColdRoutes(lambda: cold_router(host, ...))
        await cold(scope, receive, send)
    """

    def __init__(self, build: Callable[[], Router]) -> None:
        self._build: Callable[[], Router] | None = build
        self._router: Router | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        router = self._router
        if router is None:
            assert self._build is not None
            router = self._router = self._build()
            self._build = None
        await router(scope, receive, send)


def cold_router(
    host: ColdHost,
    *,
    is_entrypoint: bool,
    readiness: Callable[[], Awaitable[tuple[bool, str]]],
    metrics_text: Callable[[], str],
    openapi_body: bytes,
    docs: bool,
    browser: BrowserRoutes | None,
    jobs: JobRoutes | None,
    routes: RouteServer | None,
) -> Router:
    """The router of every route of the chainlet ``host`` serves but ``/run_remote``."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Router

    from chains.server.router import JsonRoute, asgi_endpoint, listing

    spec = host.spec

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def readyz(request: Request) -> Response:
        ready, reason = await readiness()
        return JSONResponse({"ready": ready, "detail": reason}, 200 if ready else 503)

    async def metrics(request: Request) -> Response:
        # The entrypoint's metrics name the chain's internal chainlets: its callers' key guards them.
        refusal = host.authorize(header_map(request.scope)) if is_entrypoint else None
        if refusal is not None:
            return JSONResponse({"detail": refusal}, 401)
        return Response(metrics_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def openapi_json(request: Request) -> Response:
        return Response(openapi_body, media_type="application/json")

    table: list[BaseRoute] = [
        JsonRoute(HEALTHZ, healthz),
        JsonRoute(READYZ, readyz),
        JsonRoute(METRICS, metrics),
        JsonRoute("/openapi.json", openapi_json),
    ]
    if docs:
        # The async routes are not in the OpenAPI document (their bodies are Baseten's): named here.
        served = _async_routes() if jobs is not None else []

        async def docs_page(request: Request) -> Response:
            return Response(openapi.docs_page(spec, served), media_type="text/html; charset=utf-8")

        table.append(JsonRoute("/docs", docs_page))
    if browser is not None:
        table += browser.routes()
    if jobs is not None:
        table += [
            asgi_endpoint(ASYNC_RUN_REMOTE, jobs.serve),
            asgi_endpoint(ASYNC_REQUEST, jobs.serve),
            asgi_endpoint(ASYNC_REQUEST + "/{rest:path}", jobs.serve),
        ]
    if routes is not None:
        table += _user_routes(routes)
    shown = f"POST {RUN_REMOTE}, {listing(table)}"
    if jobs is None and is_entrypoint:
        table += _jobs_off_routes()  # after the listing: they answer, but serve nothing

    async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"no route {scope.get('method', 'GET')} {scope['path']}; routes: {shown}"
        await send_json(send, 404, {"detail": detail})

    return Router(table, redirect_slashes=False, default=not_found)


JOBS_OFF = (
    "async calls are off on this chain: its entrypoint was started with no job store "
    "(CHAINS_JOBS_STORE). On swarm, ray and Kubernetes set CHAINS_JOBS_STORE=postgresql://"
    "USER:PASSWORD@HOST:5432/DB (a server every node reaches) where you push, then push again; "
    "locally and on docker they are on unless CHAINS_JOBS_STORE=off (docs/jobs.md)"
)


def _jobs_off_routes() -> list[BaseRoute]:
    """The async routes of an entrypoint with no job store: each says why, and how to turn them
    on, rather than a bare 404 listing the routes that are there."""
    from chains.server.router import asgi_endpoint

    async def off(scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 404, {"detail": JOBS_OFF})

    return [
        asgi_endpoint(ASYNC_RUN_REMOTE, off),
        asgi_endpoint(ASYNC_REQUEST, off),
        asgi_endpoint(ASYNC_REQUEST + "/{rest:path}", off),
    ]


def _user_routes(server: RouteServer) -> list[BaseRoute]:
    """One route per path of the author's ``@chains.route`` endpoints, and the stubs' calls by
    name; the route server answers the methods of a path itself (a 405 names every one)."""
    from chains.server.router import asgi_endpoint

    async def by_name(scope: Scope, receive: Receive, send: Send) -> None:
        if not await server.serve(scope, receive, send):
            name = scope["path"][len(METHOD_CALLS) :]
            await send_json(send, 404, {"detail": f"no method {name!r} to call"})

    paths = dict.fromkeys(route.path for route in server.routes)
    table: list[BaseRoute] = [asgi_endpoint(METHOD_CALLS + "{name}", by_name)]
    for path in paths:
        table.append(asgi_endpoint(path, _served_by(server)))
    return table


def _served_by(server: RouteServer) -> AsgiHandler:
    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        await server.serve(scope, receive, send)  # the router matched its path: it is answered

    return serve


def _async_routes() -> list[tuple[str, str, str]]:
    return [
        ("POST", ASYNC_RUN_REMOTE, "submit an async call: {model_input, ...} → {request_id}"),
        ("GET", ASYNC_REQUEST, "the latest async calls (?status=QUEUED&limit=20)"),
        ("GET", ASYNC_REQUEST + "/{request_id}", "an async call's status"),
        ("GET", ASYNC_REQUEST + "/{request_id}/output", "its result"),
        ("GET", ASYNC_REQUEST + "/{request_id}/events", "a streaming call's events (server-sent events)"),
        ("DELETE", ASYNC_REQUEST + "/{request_id}", "cancel it, queued or running"),
    ]
