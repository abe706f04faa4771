"""The pieces of Starlette's router the server's cold routes and the dashboard share.

:class:`JsonRoute` is Starlette's :class:`~starlette.routing.Route` with a 405 in JSON, as every
other error of chains' servers is; :func:`asgi_endpoint` puts a raw ASGI handler at a path;
:func:`listing` is what a 404 names. A chainlet server imports this module only once a cold
route is first asked for (:mod:`chains.server.cold_routes`), so serving ``/run_remote`` loads
no Starlette at all::

    router = Router([asgi_endpoint("/api/call", serve_call, ["POST"])], redirect_slashes=False)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from starlette.routing import BaseRoute, Route

from chains.server.asgi import Receive, Scope, Send, send_json

__all__ = ["AsgiHandler", "JsonRoute", "asgi_endpoint", "listing"]

AsgiHandler = Callable[[Scope, Receive, Send], Awaitable[None]]


class JsonRoute(Route):
    """A Starlette route whose 405 is JSON naming the methods it takes (Starlette's own
    answers plain text)."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.methods and scope["method"] not in self.methods:
            allowed = ", ".join(sorted(m for m in self.methods if m != "HEAD")) or "GET"
            detail = f"use {allowed} {scope['path']}"
            await send_json(send, 405, {"detail": detail}, [(b"allow", allowed.encode())])
            return
        await self.app(scope, receive, send)


class _Asgi:
    """A raw ASGI handler as a route's endpoint: Starlette hands an endpoint that is not a
    function the request's own ``scope`` (with its ``path_params``), ``receive`` and ``send``."""

    def __init__(self, handler: AsgiHandler) -> None:
        self._handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._handler(scope, receive, send)


def asgi_endpoint(path: str, handler: AsgiHandler, methods: Sequence[str] | None = None) -> JsonRoute:
    """A route at ``path`` answered by the raw ASGI ``handler``; every method when ``methods``
    is None (the handler answers those it does not take), else those and a JSON 405.

    >>> asgi_endpoint("/api/call", serve_call, ["POST"]).path
    '/api/call'
    """
    return JsonRoute(path, _Asgi(handler), methods=list(methods) if methods is not None else None)


def listing(routes: Sequence[BaseRoute]) -> str:
    """``GET /healthz, POST /stream_ticket, ...``: the routes a 404 names."""
    shown = []
    for route in routes:
        if isinstance(route, Route):
            methods = sorted(m for m in (route.methods or {"ANY"}) if m != "HEAD")
            shown.append(f"{'|'.join(methods)} {route.path}")
    return ", ".join(shown)
