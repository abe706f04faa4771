"""The async transport: aiohttp, one pooled session per event loop.

aiohttp rather than httpx's ``AsyncClient`` because it costs about half as much a call (see
docs/server-framework.md and the ``chain-1hop-httpx`` row of benchmarks/README.md).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping

import aiohttp

from chains.stubs.sockets import CONNECT_TIMEOUT_SEC, stub_socket
from chains.stubs.transport import Response, TransportError

__all__ = ["AiohttpTransport"]


class AiohttpTransport:
    """:class:`~chains.stubs.transport.AsyncTransport` over a keep-alive aiohttp session.

    ``ssl_context`` verifies ``https://`` peers (e.g. against a chain's own CA only); by
    default the system's authorities do.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl: ssl.SSLContext | bool = True if ssl_context is None else ssl_context
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None

    def session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            # One pooled session per event loop: keep-alive to every replica. It does not
            # decompress, so the policy's headers never invite a compressed answer.
            connector = aiohttp.TCPConnector(
                limit=0,
                keepalive_timeout=30,
                enable_cleanup_closed=True,
                ssl=self._ssl,
                socket_factory=stub_socket,  # finds a dead callee in seconds (see chains.stubs.sockets)
            )
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_SEC)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False, timeout=timeout)
            self._session_loop = loop
        return self._session

    async def send(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float, *, stream: bool = False
    ) -> Response:
        try:
            async with asyncio.timeout(timeout):
                if not stream:
                    async with self.session().post(url, data=body, headers=headers) as response:
                        return Response(response.status, response.headers, await response.read())
                response = await self.session().post(url, data=body, headers=headers)
                if response.status == 200:
                    return Response(200, response.headers, stream=_Body(response))
                try:
                    return Response(response.status, response.headers, await response.read())
                finally:
                    response.release()
        except aiohttp.ConnectionTimeoutError as exc:  # nothing was sent: retried like a refusal
            raise TransportError(f"no connection within {CONNECT_TIMEOUT_SEC:g}s: {exc}") from exc
        except TimeoutError:
            raise  # aiohttp's own timeouts are ClientErrors too; a timeout is not retried
        except aiohttp.ClientError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class _Body:
    """A streamed response body; see :class:`~chains.stubs.transport.ByteStream`."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        # Closing, not releasing: if the consumer stopped early the producer must see the
        # disconnect and cancel its generator.
        self._response.close()
