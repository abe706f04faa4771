"""The sync transport: httpx, for stubs of sync endpoints called from threads.

A module of its own so that an async chainlet server, which never makes a sync call, does not
load httpx: :class:`~chains.stubs.policy.CallPolicy` imports it on the first sync call.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

import httpx

from chains.stubs.transport import Response, TransportError

__all__ = ["HttpxTransport"]


class HttpxTransport:
    """:class:`~chains.stubs.transport.SyncTransport` over a keep-alive ``httpx.Client``;
    ``ssl_context`` verifies ``https://`` peers (by default the system's authorities do)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._client = httpx.Client(timeout=None, verify=True if ssl_context is None else ssl_context)

    def send(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> Response:
        try:
            response = self._client.post(url, content=body, headers=headers, timeout=timeout)
        except httpx.TimeoutException:
            raise TimeoutError(f"no answer within {timeout:.3g}s") from None
        except httpx.TransportError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        return Response(response.status_code, response.headers, response.content)

    def close(self) -> None:
        self._client.close()
