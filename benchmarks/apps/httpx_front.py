"""``Front`` of ``benchmarks/chains/one_hop.py`` with its stub's async transport swapped for httpx's.

The stub's own code runs unchanged (headers, deadline, retries, decoding: the call policy); only
the transport under it is an httpx ``AsyncClient`` with httpx's default transport and pool, behind
the one-method transport interface of ``chains.stubs.transport``. The stub's deadline still bounds
every attempt. This exists for the client comparison in ``benchmarks/one_hop.py``; the product's
stubs use aiohttp.

Run in the directory that ``codegen`` generated for ``Front``, as its ``server.py`` would be:
``python -m benchmarks.apps.httpx_front --port N`` (with the same ``CHAINS_*`` environment).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from chains.server.serve import create_app, main
from chains.stubs.transport import Response, TransportError


class HttpxAsyncTransport:
    """An ``AsyncTransport`` over ``httpx.AsyncClient()`` (unary calls only: enough for ``Front``)."""

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

    async def send(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float, *, stream: bool = False
    ) -> Response:
        if stream:
            raise NotImplementedError("the httpx variant of Front makes unary calls only")
        try:
            async with asyncio.timeout(timeout):
                response = await self._client.post(url, content=body, headers=headers)
        except httpx.TransportError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        return Response(response.status_code, response.headers, response.content)

    async def aclose(self) -> None:
        await self._client.aclose()


def build() -> Any:
    here = Path.cwd()
    sys.path[:0] = [str(here / "src"), str(here)]
    import one_hop  # type: ignore[import-not-found]
    from chains_stubs.back import BackStub  # type: ignore[import-not-found]

    class HttpxBackStub(BackStub):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, transport=HttpxAsyncTransport(), **kwargs)

    return create_app(one_hop.Front, stubs={"back": HttpxBackStub})


if __name__ == "__main__":
    main(build())
