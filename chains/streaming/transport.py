"""Which exceptions of a byte source mean that its connection broke.

A reader may be fed by any HTTP client (``response.aiter_bytes()`` of httpx, ``response.content``
of aiohttp, a socket): when the connection is cut mid-stream (a proxy timing out, a peer
reset), each raises its own exception type. The reader reports all of them as one
``StreamInterrupted``. The client libraries are looked up only among the modules already
imported: an exception of a library that was never imported cannot occur, and reading
streams must not import either.
"""

from __future__ import annotations

import sys

__all__ = ["connection_broke"]


def connection_broke(exc: BaseException) -> bool:
    """Whether ``exc``, raised while reading a byte source, says its connection broke.

    A reset or refused socket (``ConnectionError``), httpx's network and protocol errors
    (``RemoteProtocolError`` for a body cut short, ``ReadError``), and aiohttp's payload and
    connection errors (``ClientPayloadError``, ``ServerDisconnectedError``). Timeouts are
    not: they keep their own meaning.
    """
    if isinstance(exc, ConnectionError):
        return True
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError):
        return True
    aiohttp = sys.modules.get("aiohttp")
    return aiohttp is not None and isinstance(
        exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError
    )
