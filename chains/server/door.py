"""The door of every HTTP server chains runs (each chainlet and the dashboard): what a
connection may send before an app sees its request.

uvicorn's httptools protocol sets no limit on a request's headers, waits for them forever,
serves a request without ``Host``, and accepts connections until the process runs out of
file descriptors, after which every call fails for seconds at a time with nothing logged.
:func:`guarded_http` is that protocol with limits, each answered before any credential is
read:

- a request's line and headers over ``max_header_bytes`` in all, or more than
  ``max_headers`` headers: ``431``;
- an HTTP/1.1 request without one ``Host`` header (none, or several; RFC 9112 §3.2): ``400``;
- a request's line and headers not complete within ``header_timeout_sec`` (slowloris): the
  connection is closed;
- more than ``max_connections`` open connections: the request of one over the cap is
  answered ``503`` (logged), except on the health routes, which answer as always. Past
  three quarters of the cap, idle keep-alive connections and connections that have not
  sent a request are closed after ``busy_timeout_sec`` instead of the usual 30 s.

:func:`raise_open_file_limit` lifts the process's soft limit on open files to its hard limit
(as Go's runtime and nginx do), and the cap defaults to three quarters of it, so that the
process keeps descriptors for its own files and its calls to dependencies.

    limits = DoorLimits.from_env()
    config = uvicorn.Config(app, http=guarded_http(limits, exempt=("/healthz",)), ...)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from chains.environ import positive_number

__all__ = ["DoorLimits", "guarded_http", "raise_open_file_limit"]

logger = logging.getLogger("chains.server")

DEFAULT_MAX_HEADER_BYTES = 64 * 1024  # nginx's large_client_header_buffers (4 x 8k) and Envoy's 60 KiB
DEFAULT_MAX_HEADERS = 100  # Envoy's max_headers_count
DEFAULT_KEEP_ALIVE_SEC = 30.0
DEFAULT_BUSY_TIMEOUT_SEC = 2.0
_MAX_DEFAULT_CONNECTIONS = 10_000
_STATUS_LINES = {
    400: b"HTTP/1.1 400 Bad Request\r\n",
    431: b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
    503: b"HTTP/1.1 503 Service Unavailable\r\n",
}


@dataclass(frozen=True)
class DoorLimits:
    """What a connection may send and hold; ``CHAINS_*`` variables change each (see
    docs/security.md, "Limits at the door").

    >>> DoorLimits.from_env({"CHAINS_MAX_HEADERS": "50"}).max_headers
    50
    """

    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_headers: int = DEFAULT_MAX_HEADERS
    max_connections: int | None = None  # None: three quarters of the open-file limit
    header_timeout_sec: float = 30.0
    keep_alive_sec: float = DEFAULT_KEEP_ALIVE_SEC
    busy_timeout_sec: float = DEFAULT_BUSY_TIMEOUT_SEC

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DoorLimits:
        env = os.environ if env is None else env

        connections = positive_number(env, "CHAINS_MAX_CONNECTIONS", 0)
        return cls(
            max_header_bytes=int(positive_number(env, "CHAINS_MAX_HEADER_BYTES", DEFAULT_MAX_HEADER_BYTES)),
            max_headers=int(positive_number(env, "CHAINS_MAX_HEADERS", DEFAULT_MAX_HEADERS)),
            max_connections=int(connections) or None,
            header_timeout_sec=positive_number(env, "CHAINS_HEADER_TIMEOUT_SEC", 30.0),
            keep_alive_sec=positive_number(env, "CHAINS_KEEP_ALIVE_SEC", DEFAULT_KEEP_ALIVE_SEC),
            busy_timeout_sec=positive_number(env, "CHAINS_BUSY_TIMEOUT_SEC", DEFAULT_BUSY_TIMEOUT_SEC),
        )

    def connection_cap(self) -> int:
        """The most connections served at once: the setting, or three quarters of the
        process's open-file limit (at most 10,000)."""
        if self.max_connections is not None:
            return self.max_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return _MAX_DEFAULT_CONNECTIONS
        return max(16, min(soft * 3 // 4, _MAX_DEFAULT_CONNECTIONS))


def raise_open_file_limit() -> int:
    """Lift the soft limit on open files to the hard one; returns the soft limit now.

    The common soft limit of 1024 is a default for old programs that use ``select()``; a
    server under load needs a descriptor per connection, and the kernel lets a process raise
    its own soft limit up to the hard one.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # a hard limit the platform will not grant
            logger.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft


class _Throttled:
    """Logs a kind of refusal at most once a second, with how many there were since."""

    def __init__(self) -> None:
        self._last: dict[int, float] = {}
        self._since: dict[int, int] = {}

    def warn(self, status: int, message: str) -> None:
        now = time.monotonic()
        count = self._since.get(status, 0) + 1
        if now - self._last.get(status, float("-inf")) < 1.0:
            self._since[status] = count
            return
        self._last[status] = now
        self._since[status] = 0
        more = f" ({count - 1} more since the last report)" if count > 1 else ""
        logger.warning("refused with %d: %s%s", status, message, more)


def _answer(status: int, detail: str) -> bytes:
    body = json.dumps({"detail": detail}).encode()
    head = (
        b"content-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\nconnection: close\r\n\r\n"
    )
    return _STATUS_LINES[status] + head + body


class _OneWrite:
    """A response's transport that sends its head with the first piece of its body.

    uvicorn writes an answer's head and its body in two ``transport.write`` calls, and uvloop
    sends each at once: two system calls and two TCP segments for every answer, where one
    does. The first write of a response (its head) is held until the next one, or until the
    loop's current pass ends, whichever comes first, so that a stream's head never waits for
    its first item. Measured in benchmarks/README.md, "One write an answer".
    """

    __slots__ = ("_first", "_held", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None
        self._first = True

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        elif self._first:
            self._first = False
            self._held = data
            asyncio.get_running_loop().call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._held is not None:
            data, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def guarded_http(
    limits: DoorLimits,
    draining: Callable[[], bool] = lambda: False,
    exempt: Collection[str] = (),
) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with ``limits`` (see the module's docstring).

    ``exempt`` paths (health checks) are served even over the connection cap. While
    ``draining()``, every request is answered with ``Connection: close`` and its connection
    closed after the answer.

    A connection's head timer looks every ``busy_timeout_sec`` (or ``header_timeout_sec``,
    if shorter) at whether a request head arrived (uvicorn starts a new cycle for each) or one
    is being served, and closes the connection once it waited longer than it may for one.
    uvicorn's own keep-alive timer runs only between requests, and stops at the first byte of
    the next, so it cannot see a slow head.
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    base: Any = HttpToolsProtocol
    cap = limits.connection_cap()
    busy_at = cap * 3 // 4
    # How often a connection looks at whether it waited too long for a request's head.
    period = min(limits.header_timeout_sec, limits.busy_timeout_sec)
    exempt_paths = frozenset(exempt)
    throttled = _Throttled()
    over_headers = (
        f"request headers over the limit of {limits.max_headers} headers or {limits.max_header_bytes} "
        "bytes in all; send fewer or shorter ones (the server's CHAINS_MAX_HEADERS and "
        "CHAINS_MAX_HEADER_BYTES raise the limits)"
    )
    over_cap = (
        f"the server holds its most connections ({cap}); retry, or reuse a connection (the "
        "server's CHAINS_MAX_CONNECTIONS raises the cap)"
    )

    class GuardedHttpToolsProtocol(base):  # type: ignore[misc]
        _head_timer: asyncio.TimerHandle | None = None
        _head_seen: Any = None
        _refused = False
        _over_cap = False
        _in_head = True  # between a request's first byte (or the last one's end) and its headers' end
        _head_bytes = 0  # bytes received while in the head, framing included
        _waiting_since: float | None = None  # since when no request was served nor its head complete

        # uvicorn reads this each time it arms a connection's keep-alive timer; the door's
        # setting stands in for the one uvicorn's config would set.
        @property
        def timeout_keep_alive(self) -> float:
            return limits.busy_timeout_sec if self._busy() else limits.keep_alive_sec

        @timeout_keep_alive.setter
        def timeout_keep_alive(self, value: float) -> None:
            pass

        def _busy(self) -> bool:
            return len(self.server_state.connections) > busy_at

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._over_cap = len(self.server_state.connections) > cap
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            # Still in the head after all of it: the parser holds it whole, so it is cut here
            # rather than once it ends (a 100 MB header would be 100 MB of memory first).
            if self._in_head and self._head_bytes > limits.max_header_bytes and not self._refused:
                self._refuse(431, over_headers)

        # No on_message_begin, on_url nor on_header of the door's: the parser calls each once
        # per piece of the head, and a Python override of each (checking, then calling
        # uvicorn's) was what was left between a served chainlet and the floor
        # (benchmarks/README.md, "Second round"). The head is checked whole once complete, from
        # what uvicorn kept of it; one too large to arrive in one read is cut as it arrives.

        def on_headers_complete(self) -> None:
            if self._refused:
                return
            headers: list[tuple[bytes, bytes]] = self.headers  # uvicorn's, names lowercased
            if len(headers) > limits.max_headers:
                self._refuse(431, over_headers)
                return
            size = len(self.url)
            hosts = 0
            for name, value in headers:
                size += len(name) + len(value)
                if name == b"host":
                    hosts += 1
            if size > limits.max_header_bytes:
                self._refuse(431, over_headers)
                return
            if hosts > 1 or (hosts == 0 and self.parser.get_http_version() == "1.1"):
                found = "no Host header" if hosts == 0 else f"{hosts} Host headers"
                self._refuse(400, f"an HTTP/1.1 request carries exactly one Host header, not {found}")
                return
            self._in_head = False
            self._head_bytes = 0
            if self._over_cap:
                path = self.url.split(b"?", 1)[0].decode("latin-1")
                if path not in exempt_paths:
                    self._refuse(503, over_cap)
                    return
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and cycle.scope is self.scope:  # a cycle, not an upgrade
                cycle.transport = _OneWrite(self.transport)
                if draining() or self._over_cap:
                    cycle.keep_alive = False

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if self._refused:
                return
            self._in_head = True
            super().on_message_complete()

        def _refuse(self, status: int, detail: str) -> None:
            """Answer ``status`` and close: no app has seen the request (nor its credentials)."""
            self._refused = True
            throttled.warn(status, detail)
            if not self.transport.is_closing():
                self.transport.write(_answer(status, detail))
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            self._head_seen = self.cycle
            self._head_timer = self.loop.call_later(period, self._check_head)

        def _check_head(self) -> None:
            if self.transport.get_protocol() is not self:
                self._head_timer = None  # upgraded to a WebSocket: its own protocol times it
                return
            cycle: Any = self.cycle
            now = self.loop.time()
            if cycle is not self._head_seen or (cycle is not None and not cycle.response_complete):
                self._waiting_since = now  # a request arrived, or is being served: wait anew
                self._arm_head_timer()
                return
            if self._waiting_since is None:
                self._waiting_since = now - period
            if self._over_cap or self._busy():
                wait = limits.busy_timeout_sec
            elif cycle is None:  # no request yet
                wait = limits.header_timeout_sec
            else:  # between requests, as uvicorn's keep-alive timer is too
                wait = max(limits.header_timeout_sec, limits.keep_alive_sec)
            if now - self._waiting_since < wait:
                self._arm_head_timer()
                return
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedHttpToolsProtocol
