"""Cross-origin calls from web pages: which origins an entrypoint answers, and how.

A page served from another origin than the chain can read the entrypoint's answers only when
the answers say its origin is allowed (CORS). The entrypoint's allowed origins come from
``RemoteConfig(cors_origins=[...])`` and ``chains push --cors-origin ORIGIN``, and reach the
server as ``CHAINS_CORS_ORIGINS``. Internal chainlets never answer CORS: no page calls them.

>>> policy = CorsPolicy.parse("https://app.example, http://127.0.0.1:8080")
>>> policy.allows("https://app.example")
True
>>> policy.allows("https://evil.example")
False
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from chains.errors import ChainsUsageError
from chains.origins import ANY_ORIGIN, check_origin
from chains.server.asgi import Message, Scope, Send, send_json
from chains.wire import DEADLINE_HEADER, REQUEST_ID_HEADER, STREAM_KIND_HEADER

__all__ = ["ALLOWED_HEADERS", "EXPOSED_HEADERS", "CorsPolicy", "request_origin", "same_origin"]

ALLOWED_METHODS = "GET, POST, OPTIONS"
ALLOWED_HEADERS = (
    "accept",
    "authorization",
    "content-type",
    "last-event-id",
    "x-api-key",
    REQUEST_ID_HEADER,
    DEADLINE_HEADER,
)
EXPOSED_HEADERS = (REQUEST_ID_HEADER, "retry-after", STREAM_KIND_HEADER)
# How long a browser may keep a preflight's answer before asking again.
_MAX_AGE_SEC = 600


@dataclass(frozen=True)
class CorsPolicy:
    """The origins an entrypoint answers cross-origin calls from (``*``: any).

    ``CorsPolicy(("https://app.example",))`` answers preflights from that origin with the
    methods and headers a chain call uses, adds ``Access-Control-Allow-Origin`` to its
    answers, and leaves every other origin's answers without CORS headers, which the browser
    then refuses to hand to the page.
    """

    origins: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> CorsPolicy:
        """From ``CHAINS_CORS_ORIGINS``: origins separated by commas or spaces."""
        return cls.of(part for part in re.split(r"[,\s]+", text) if part)

    @classmethod
    def of(cls, origins: Iterable[str]) -> CorsPolicy:
        return cls(tuple(dict.fromkeys(check_origin(origin) for origin in origins)))

    def __bool__(self) -> bool:
        return bool(self.origins)

    def allows(self, origin: str) -> bool:
        if ANY_ORIGIN in self.origins:
            return True
        try:
            return check_origin(origin) in self.origins
        except ChainsUsageError:
            return False  # "null" (a sandboxed page, a file) and anything malformed

    def response_headers(self, origin: str) -> list[tuple[bytes, bytes]]:
        """The headers that let ``origin``'s page read an answer."""
        return [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-expose-headers", ", ".join(EXPOSED_HEADERS).encode()),
            (b"vary", b"origin"),
        ]

    def wrap(self, scope: Scope, send: Send) -> Send:
        """``send`` adding the CORS headers to the answer when the request's origin is allowed."""
        origin = request_origin(scope)
        if origin is None or not self.allows(origin):
            return send
        extra = self.response_headers(origin)

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        return with_cors

    async def preflight(self, scope: Scope, send: Send) -> None:
        """Answer ``OPTIONS``: the methods and headers allowed, or 403 for another origin."""
        origin = request_origin(scope)
        if origin is None or not self.allows(origin):
            await send_json(
                send,
                403,
                {
                    "detail": f"origin {origin!r} may not call this chain; allow it with "
                    "`chains push --cors-origin ORIGIN` or RemoteConfig(cors_origins=[...]) on the entrypoint"
                },
            )
            return
        headers = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
            (b"access-control-allow-headers", ", ".join(ALLOWED_HEADERS).encode()),
            (b"access-control-max-age", str(_MAX_AGE_SEC).encode()),
            (b"vary", b"origin"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def request_origin(scope: Scope) -> str | None:
    """The request's ``Origin`` header, if it has one."""
    for name, value in scope["headers"]:
        if name == b"origin":
            text: str = value.decode("latin-1")
            return text
    return None


def same_origin(scope: Scope, origin: str) -> bool:
    """Whether ``origin`` names the host the request was sent to (a page the chain served)."""
    for name, value in scope["headers"]:
        if name == b"host":
            host: str = value.decode("latin-1").lower()
            return origin.lower().split("://", 1)[-1] == host
    return False
