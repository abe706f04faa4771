"""run_local's side of ``@chains.route``: a dependency's routes called by name, in this process.

A chainlet's local stub (:class:`chains.local.LocalStub`) gets one more method per route of
its chainlet, each called as a deployed stub calls it: errors arrive as ``RemoteError``,
``timeout_sec`` and the concurrency limit hold, and with ``serialize`` the arguments and the
result cross the wire codecs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from chains import codec
from chains.model import Chainlet, ChainletSpec, DependencyMarker
from chains.routes import RouteSpec, routes_of

# run_local's LocalStub, which imports this module (its class is taken from the stub given).
StubT = TypeVar("StubT")

__all__ = ["with_routes"]


class _Bound:
    """Stands in for the instance so that a LocalStub calls a route's method as ``run_remote``."""

    def __init__(self, method: Any) -> None:
        self.run_remote = method


def with_routes(
    stub: StubT, spec: ChainletSpec, instance: Chainlet, marker: DependencyMarker, serialize: bool
) -> StubT:
    """``stub`` with a method for each route of ``spec``'s chainlet."""
    for route in routes_of(spec.cls):
        method = getattr(instance, route.name)
        # The stub's own class calls the method as it calls run_remote: same limits, same errors.
        make: Any = type(stub)
        local = make(
            dataclasses.replace(spec, endpoint=route.endpoint),
            _Bound(method),
            marker,
            serialize and not route.either,
        )
        call = _either(local.run_remote, route, serialize) if route.either else local.run_remote
        setattr(stub, route.name, call)
    return stub


def _either(call: Any, route: RouteSpec, serialize: bool) -> Any:
    """A value-or-stream method: a stream goes on as it comes, a value through the codecs."""

    async def method(*args: Any, **kwargs: Any) -> Any:
        value = await call(*args, **kwargs)
        if isinstance(value, AsyncIterator) or not serialize:
            return value
        return codec.decode_result(route.endpoint, codec.encode_result(route.endpoint, value))

    method.__name__ = route.name
    return method
