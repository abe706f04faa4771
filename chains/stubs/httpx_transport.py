"""The sync transport: httpx, for stubs of sync endpoints called from threads.

A module of its own so that an async chainlet server, which never makes a sync call, does not
load httpx: :class:`~chains.stubs.policy.CallPolicy` imports it on the first sync call.
"""

from __future__ import annotations

import errno
import ssl
from collections.abc import Mapping

import httpx

from chains.stubs.sockets import CONNECT_TIMEOUT_SEC, SOCKET_OPTIONS
from chains.stubs.transport import Response, TransportError

__all__ = ["HttpxTransport"]


class HttpxTransport:
    """:class:`~chains.stubs.transport.SyncTransport` over a keep-alive ``httpx.Client``;
    ``ssl_context`` verifies ``https://`` peers (by default the system's authorities do)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        verify: ssl.SSLContext | bool = True if ssl_context is None else ssl_context
        # The TCP options that find a dead callee in seconds (see chains.stubs.sockets).
        transport = httpx.HTTPTransport(verify=verify, socket_options=SOCKET_OPTIONS)
        self._client = httpx.Client(timeout=None, transport=transport)

    def send(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> Response:
        limits = httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_SEC))
        try:
            response = self._client.post(url, content=body, headers=headers, timeout=limits)
        except httpx.ConnectTimeout as exc:
            if timeout <= CONNECT_TIMEOUT_SEC:
                raise TimeoutError(f"no answer within {timeout:.3g}s") from None
            # Nothing was sent: retried like a refusal.
            raise TransportError(f"no connection within {CONNECT_TIMEOUT_SEC:g}s: {exc}") from exc
        except httpx.TimeoutException as exc:
            if _dead_peer(exc):
                raise TransportError(f"the connection died (no acknowledgement): {exc}") from exc
            raise TimeoutError(f"no answer within {timeout:.3g}s") from None
        except httpx.TransportError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        return Response(response.status_code, response.headers, response.content)

    def close(self) -> None:
        self._client.close()


def _dead_peer(exc: BaseException) -> bool:
    """Whether the kernel dropped the connection (``ETIMEDOUT``: sent bytes unacknowledged for
    the stubs' ``TCP_USER_TIMEOUT``), which httpx reports as a timeout like its own."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno == errno.ETIMEDOUT:
            return True
        cause = cause.__cause__ or cause.__context__  # httpx and httpcore re-raise in except blocks
    return False
