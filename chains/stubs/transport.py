"""The transport interface under the stubs: send one request, get its status, headers and body.

Everything a call decides (which replica, how long, whether to retry, what a failure means)
lives in :mod:`chains.stubs.policy`; a transport only moves bytes, so the async client
(aiohttp) and the sync one (httpx) share one policy, and a test or a tracer can stand in for
either. A transport raises :class:`TransportError` when the connection fails or breaks and
``TimeoutError`` when ``timeout`` runs out before the response (its body, for a unary call)::

    class Recording:
        async def send(self, url, body, headers, timeout, *, stream=False):
            ...
            return Response(200, {"content-type": "application/json"}, b'"ok"')

        async def aclose(self):
            pass
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

__all__ = ["AsyncTransport", "ByteStream", "Response", "SyncTransport", "TransportError"]


class TransportError(Exception):
    """The connection failed before a response (retryable) or broke during a stream."""


class ByteStream(Protocol):
    """A response body still arriving, read chunk by chunk."""

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; a broken connection raises :class:`TransportError`."""
        ...

    def close(self) -> None:
        """Drop the connection: a producer still sending sees the caller has gone."""
        ...


class Response:
    """One answer: ``body``, or for a streaming request answered 200, ``stream``.

    A streaming request answered otherwise has its (error) body read whole into ``body``.
    """

    __slots__ = ("body", "headers", "status", "stream")

    def __init__(
        self, status: int, headers: Mapping[str, str], body: bytes = b"", stream: ByteStream | None = None
    ) -> None:
        self.status = status
        self.headers = headers  # case-insensitive in both clients
        self.body = body
        self.stream = stream


class AsyncTransport(Protocol):
    async def send(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float, *, stream: bool = False
    ) -> Response:
        """POST ``body`` to ``url``; with ``stream`` the response's body is left to ``stream``."""
        ...

    async def aclose(self) -> None: ...


class SyncTransport(Protocol):
    def send(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> Response:
        """POST ``body`` to ``url`` and read the whole response."""
        ...

    def close(self) -> None: ...
