"""``Front`` of ``benchmarks/chains/one_hop.py`` with its stub's HTTP client swapped for httpx's.

The stub's own code runs unchanged (headers, deadline, retries, decoding); only the session it posts
with is an httpx ``AsyncClient`` with httpx's default transport and pool, behind the three methods of
``aiohttp.ClientSession`` the unary path uses. The stub's deadline still bounds every attempt, so
httpx's own timeouts are off. This exists for the client comparison in ``benchmarks/one_hop.py``; the
product's stubs use aiohttp.

Run in the directory that ``codegen`` generated for ``Front``, as its ``server.py`` would be:
``python -m benchmarks.apps.httpx_front --port N`` (with the same ``CHAINS_*`` environment).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import httpx

from chains.server.serve import create_app, main


class _Response:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = response.headers

    async def read(self) -> bytes:
        return self._response.content


class _Post:
    def __init__(self, client: httpx.AsyncClient, url: str, data: bytes, headers: dict[str, str]) -> None:
        self._request = (client, url, data, headers)

    async def __aenter__(self) -> _Response:
        client, url, data, headers = self._request
        try:
            return _Response(await client.post(url, content=data, headers=headers))
        except httpx.TransportError as exc:
            # What the stub treats as a connection failure (and retries).
            raise aiohttp.ClientConnectionError(f"{type(exc).__name__}: {exc}") from exc

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


class HttpxSession:
    """Enough of ``aiohttp.ClientSession`` for ``StubBase.call_remote``, over ``httpx.AsyncClient()``."""

    def __init__(self) -> None:
        # BENCH_HTTPX_KEEPALIVE=N keeps N idle connections instead of httpx's default 20 (a
        # variant to see where the time goes; the comparison uses the default).
        keepalive = os.environ.get("BENCH_HTTPX_KEEPALIVE")
        if keepalive:
            limits = httpx.Limits(
                max_connections=max(100, int(keepalive)), max_keepalive_connections=int(keepalive)
            )
            self._client = httpx.AsyncClient(timeout=None, limits=limits)
        else:
            self._client = httpx.AsyncClient(timeout=None)

    @property
    def closed(self) -> bool:
        return self._client.is_closed

    def post(self, url: str, *, data: bytes, headers: dict[str, str]) -> _Post:
        return _Post(self._client, url, data, headers)

    async def close(self) -> None:
        await self._client.aclose()


def build() -> Any:
    here = Path.cwd()
    sys.path[:0] = [str(here / "src"), str(here)]
    import one_hop  # type: ignore[import-not-found]
    from chains_stubs.back import BackStub  # type: ignore[import-not-found]

    class HttpxBackStub(BackStub):  # type: ignore[misc]
        _httpx: HttpxSession | None = None

        def _client(self) -> Any:
            if self._httpx is None:
                self._httpx = HttpxSession()
            return self._httpx

        async def aclose(self) -> None:
            if self._httpx is not None:
                await self._httpx.close()

    return create_app(one_hop.Front, stubs={"back": HttpxBackStub})


if __name__ == "__main__":
    main(build())
