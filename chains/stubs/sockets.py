"""The TCP options of every connection a stub opens: a dead callee is found in seconds.

A replica whose machine stops (a swarm node's engine stopped, a host lost) sends no reset. A
request written to a pooled connection to it is never acknowledged, and a call waiting for it
would wait out its whole timeout, which is not retried (a callee that is only slow might be
running it). So every connection carries:

- ``TCP_USER_TIMEOUT``: the kernel drops a connection whose sent bytes stay unacknowledged for
  :data:`DEAD_PEER_SEC`. A live peer's kernel acknowledges within a round trip, however busy
  its process is, so only a peer that is gone trips it; the call then fails before any
  response, which the policy retries on another replica;
- keepalive probes on idle connections, so a pooled connection to a peer that died while it
  sat idle (or while a call waits for its answer) is dropped within seconds as well;
- a connect timeout (:data:`CONNECT_TIMEOUT_SEC`, which the transports apply): a SYN to a
  vanished address is never answered, and a connection never made sent nothing, so it is
  retried like a refused one.

Linux has all of them; elsewhere the options the system lacks are left out. For example::

    connector = aiohttp.TCPConnector(socket_factory=stub_socket)
    transport = httpx.HTTPTransport(socket_options=SOCKET_OPTIONS)
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["CONNECT_TIMEOUT_SEC", "DEAD_PEER_SEC", "SOCKET_OPTIONS", "stub_socket"]

DEAD_PEER_SEC = 4.0
# Two SYN retransmissions (after 1 s and 3 s) fit: a SYN dropped by a peer under load is sent
# again in time.
CONNECT_TIMEOUT_SEC = 4.0
_KEEPALIVE_IDLE_SEC = 5
_KEEPALIVE_INTERVAL_SEC = 2
_KEEPALIVE_PROBES = 2


def _options() -> list[tuple[int, int, int]]:
    tcp = socket.IPPROTO_TCP
    wanted = [
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (tcp, "TCP_KEEPIDLE", _KEEPALIVE_IDLE_SEC),
        (tcp, "TCP_KEEPINTVL", _KEEPALIVE_INTERVAL_SEC),
        (tcp, "TCP_KEEPCNT", _KEEPALIVE_PROBES),
        (tcp, "TCP_USER_TIMEOUT", int(DEAD_PEER_SEC * 1000)),
    ]
    return [(level, getattr(socket, name), value) for level, name, value in wanted if hasattr(socket, name)]


SOCKET_OPTIONS: list[tuple[int, int, int]] = _options()


def stub_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """A TCP socket for ``addr_info`` (as :func:`socket.getaddrinfo` gives it) with
    :data:`SOCKET_OPTIONS` set: aiohttp's ``socket_factory``."""
    family, kind, proto = addr_info[0], addr_info[1], addr_info[2]
    sock = socket.socket(family=family, type=kind, proto=proto)
    try:
        for level, option, value in SOCKET_OPTIONS:
            sock.setsockopt(level, option, value)
    except OSError:
        sock.close()
        raise
    return sock
