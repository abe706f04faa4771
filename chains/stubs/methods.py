"""A stub's calls to the other methods of a chainlet: its ``@chains.route`` endpoints, by name.

The code generator writes, for each route of a dependency, a stub method with the route's
signature that delegates here; the call goes to ``POST /_chains/methods/<name>`` with every
argument by name, with the stub's retries, deadline, credentials and metrics::

    class Front(chains.StubBase):
        async def chat(self, body: ChatCompletionRequest) -> ChatCompletion | AsyncIterator[SSE]:
            result: ChatCompletion | AsyncIterator[SSE] = await call_method(self, "chat", body=body)
            return result
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator
from typing import Any

from chains import codec
from chains.endpoint import EndpointSpec
from chains.errors import ChainsUsageError
from chains.locations import Locator
from chains.routes import METHOD_CALLS, method_endpoints
from chains.streaming import decode_framed, shape_of
from chains.streaming.framing import KIND_PREAMBLE
from chains.stubs.base import StubBase
from chains.wire import FRAMED_MEDIA_TYPE, JSON_MEDIA_TYPE

__all__ = ["call_method", "stream_method"]

_ENDPOINTS = "__chains_method_endpoints__"


def _endpoints(stub: StubBase, name: str) -> tuple[EndpointSpec, EndpointSpec | None]:
    cls = type(stub)
    cache: dict[str, tuple[EndpointSpec, EndpointSpec | None]] = cls.__dict__.get(_ENDPOINTS) or {}
    if name not in cache:
        hints = typing.get_type_hints(getattr(cls, name), include_extras=True)
        endpoint, stream, problems, _ = method_endpoints(
            cls, cls.__name__, Locator(cls), name, hints, stub=True
        )
        if endpoint is None:
            raise ChainsUsageError(violations=problems)
        cache[name] = (endpoint, stream)
        setattr(cls, _ENDPOINTS, cache)
    return cache[name]


async def call_method(stub: StubBase, name: str, /, **arguments: Any) -> Any:
    """Call method ``name`` of the stub's chainlet and return its result: a value, or for a
    method annotated ``Model | AsyncIterator[T]`` that answered with a stream, the stream."""
    endpoint, stream = _endpoints(stub, name)
    body = codec.encode_args(endpoint, (), arguments)
    policy = stub._policy
    path = METHOD_CALLS + name
    if stream is None:
        return await policy.unary(path, body, _Result(endpoint), JSON_MEDIA_TYPE)
    items = policy.stream(path, body, f"{FRAMED_MEDIA_TYPE}, {JSON_MEDIA_TYPE}", _Either(endpoint, stream))
    first = await anext(items)
    if isinstance(first, _Value):
        await items.aclose()  # type: ignore[attr-defined]
        return first.value
    return _prepend(first, items)


async def stream_method(stub: StubBase, name: str, /, **arguments: Any) -> AsyncIterator[Any]:
    """Call streaming method ``name`` of the stub's chainlet and yield its items as they arrive."""
    endpoint, _ = _endpoints(stub, name)
    body = codec.encode_args(endpoint, (), arguments)
    shape = shape_of(endpoint)

    def decode(chunks: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        return decode_framed(shape, chunks)

    async for item in stub._policy.stream(METHOD_CALLS + name, body, FRAMED_MEDIA_TYPE, decode):
        yield item


class _Result:
    __slots__ = ("_endpoint",)

    def __init__(self, endpoint: EndpointSpec) -> None:
        self._endpoint = endpoint

    def __call__(self, payload: bytes) -> Any:
        return codec.decode_result(self._endpoint, payload)


class _Value:
    """A unary answer where a stream might have come."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Either:
    """Decodes the answer of a value-or-stream method: a framed stream begins with its preamble
    frame (``P``), a value is JSON (which never does)."""

    __slots__ = ("_endpoint", "_stream")

    def __init__(self, endpoint: EndpointSpec, stream: EndpointSpec) -> None:
        self._endpoint = endpoint
        self._stream = stream

    async def __call__(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        first = b""
        async for chunk in chunks:
            first += chunk
            if first:
                break
        if first[:1] == bytes([KIND_PREAMBLE]):
            async for item in decode_framed(shape_of(self._stream), _prepend(first, chunks)):
                yield item
            return
        rest = [first]
        async for chunk in chunks:
            rest.append(chunk)
        yield _Value(codec.decode_result(self._endpoint, b"".join(rest)))


async def _prepend(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    try:
        yield first
        async for item in rest:
            yield item
    finally:
        await rest.aclose()  # type: ignore[attr-defined]
