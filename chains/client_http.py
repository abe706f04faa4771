"""The HTTP under :class:`chains.client.AsyncClient`: aiohttp when it is installed, else httpx.

At 64 concurrent callers httpx's ``AsyncClient`` made 0.02 to 0.07x the calls per second of a
plain aiohttp session on the same chain (``benchmarks/defaults.py``, issue 26), so the
asynchronous client uses aiohttp when it can be imported, and httpx, the consumer's one
required HTTP client, when it cannot (``pip install aiohttp`` is the fast path: see
docs/clients.md). The synchronous client stays on httpx, which is at the floor there.

Both only move bytes: a timeout raises ``TimeoutError``, a connection that fails or breaks
before the answer :class:`Unreachable` (one that breaks during a streamed body raises the HTTP
client's own error, which the frame reader reports as an interrupted stream); what an answer
means is :mod:`chains.client`'s.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, Protocol

import httpx

__all__ = ["Answer", "AsyncHTTP", "Method", "Unreachable", "async_http"]

Method = Literal["GET", "POST", "DELETE"]

# Connections kept open per client: as many callers as a program plausibly runs at once, so
# that concurrent callers reuse connections instead of opening and closing them (httpx keeps
# 20 by default, which at 64 callers opened a connection for most calls).
POOL = 100


class Unreachable(Exception):
    """The connection failed, or broke before the answer was read."""


class Answer(Protocol):
    status: int
    headers: Mapping[str, str]  # case-insensitive

    async def read(self) -> bytes: ...

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class AsyncHTTP(Protocol):
    async def post(self, url: str, body: bytes, headers: Mapping[str, str], *, stream: bool) -> Answer:
        """POST ``body``; unless ``stream``, the answer's body is read before it returns."""
        ...

    async def send(
        self, method: Method, url: str, body: bytes | None, headers: Mapping[str, str], *, stream: bool
    ) -> Answer:
        """:meth:`post` with another method: the async job routes GET and DELETE too."""
        ...

    async def aclose(self) -> None: ...


def async_http(timeout: float | None) -> AsyncHTTP:
    """aiohttp's client if it is installed, else httpx's; ``timeout`` bounds each wait."""
    if importlib.util.find_spec("aiohttp") is not None:
        return _Aiohttp(timeout)
    return _Httpx(timeout)


def _connect_timeout(timeout: float | None) -> float:
    return min(timeout or 10.0, 10.0)


# ----------------------------------------------------------------------------------------- httpx


class _HttpxAnswer:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc)) from exc
        except httpx.TransportError as exc:
            raise Unreachable(f"{type(exc).__name__}: {exc}") from exc

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_bytes():
                yield chunk
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc)) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class _Httpx:
    def __init__(self, timeout: float | None) -> None:
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=_connect_timeout(timeout)),
            limits=httpx.Limits(max_connections=POOL, max_keepalive_connections=POOL),
        )

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], *, stream: bool) -> Answer:
        return await self.send("POST", url, body, headers, stream=stream)

    async def send(
        self, method: Method, url: str, body: bytes | None, headers: Mapping[str, str], *, stream: bool
    ) -> Answer:
        request = self._client.build_request(method, url, content=body, headers=headers)
        try:
            response = await self._client.send(request, stream=stream)
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc)) from exc
        except httpx.TransportError as exc:
            raise Unreachable(f"{type(exc).__name__}: {exc}") from exc
        return _HttpxAnswer(response)

    async def aclose(self) -> None:
        await self._client.aclose()


# --------------------------------------------------------------------------------------- aiohttp


class _AiohttpAnswer:
    def __init__(self, response: Any, body: bytes | None) -> None:
        self._response = response
        self._body = body
        self.status: int = response.status
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        if self._body is None:
            self._body = await _guarded(self._response.read())
        return self._body

    async def chunks(self) -> AsyncIterator[bytes]:
        import aiohttp

        # A connection cut mid-body stays aiohttp's own error: the frame reader knows it as a
        # stream that broke off (chains.streaming), as it knows httpx's.
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except aiohttp.ServerTimeoutError as exc:
            raise TimeoutError(str(exc)) from exc

    async def aclose(self) -> None:
        # Read to its end, the connection goes back to the pool; left early, it is closed, so
        # that the chain sees the caller leave and stops producing.
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class _Aiohttp:
    def __init__(self, timeout: float | None) -> None:
        self._timeout = timeout
        self._session: Any = None  # made on first use: an aiohttp session belongs to a running loop

    def _open(self) -> Any:
        import aiohttp

        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=_connect_timeout(self._timeout), sock_read=self._timeout
        )
        # No decompression: the client never asks for a compressed answer.
        connector = aiohttp.TCPConnector(limit=POOL, keepalive_timeout=30)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        return self._session

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], *, stream: bool) -> Answer:
        return await self.send("POST", url, body, headers, stream=stream)

    async def send(
        self, method: Method, url: str, body: bytes | None, headers: Mapping[str, str], *, stream: bool
    ) -> Answer:
        session = self._session if self._session is not None and not self._session.closed else self._open()
        response = await _guarded(session.request(method, url, data=body, headers=headers))
        if stream:
            return _AiohttpAnswer(response, None)
        try:
            return _AiohttpAnswer(response, await _guarded(response.read()))
        finally:
            response.release()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


async def _guarded(step: Any) -> Any:
    import aiohttp

    try:
        return await step
    except (aiohttp.ServerTimeoutError, TimeoutError) as exc:
        raise TimeoutError(str(exc)) from exc
    except (aiohttp.ClientError, ConnectionError) as exc:
        raise Unreachable(f"{type(exc).__name__}: {exc}") from exc
