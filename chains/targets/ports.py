"""Ports on 127.0.0.1: which one a URL names, whether one is free, a free one.

Shared by the targets that publish an entrypoint on this machine (local, docker), so that
"in use" means the same on both and says the same thing.

>>> port_of("http://127.0.0.1:8000/")
8000
"""

from __future__ import annotations

import socket
from contextlib import closing

from chains.errors import ChainsUsageError

__all__ = ["check_port_free", "free_port", "port_free", "port_of"]


def port_of(url: str) -> int:
    """The port of an ``http://HOST:PORT[/...]`` URL."""
    return int(url.rsplit(":", 1)[1].split("/")[0])


def port_free(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound now."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        # Connections of a deployment that is gone, still in TIME_WAIT, do not hold the port.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def check_port_free(port: int) -> None:
    """Refuse a ``--port`` that another process holds, saying how to pick another."""
    if not port_free(port):
        raise ChainsUsageError(f"port {port} on 127.0.0.1 is in use; pick another with --port")


def free_port() -> int:
    """A port on 127.0.0.1 that no process holds now (the system's choice)."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
