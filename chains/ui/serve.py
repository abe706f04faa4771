"""Serving the dashboard: a socket on the loopback only, and uvicorn on it."""

from __future__ import annotations

import socket
from collections.abc import Callable
from urllib.parse import quote

from chains.errors import ChainsUsageError
from chains.ui.app import DashboardApp, is_loopback
from chains.ui.sources import ChainView

__all__ = ["bind_loopback", "dashboard_url", "serve_dashboard"]


def bind_loopback(host: str, port: int) -> socket.socket:
    """A listening socket on ``host`` (a loopback address) and ``port`` (0: a free one).

    Any other address is refused: the dashboard shows the chain's logs and calls it with its
    key, which are for this machine's user only.
    """
    if not is_loopback(host):
        raise ChainsUsageError(
            f"--host {host} is not a loopback address: the dashboard serves this machine only "
            "(use 127.0.0.1, the default, or ::1; to look from elsewhere, forward a port over ssh)"
        )
    address = "127.0.0.1" if host == "localhost" else host.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        raise ChainsUsageError(
            f"cannot listen on {address} port {port}: {exc.strerror}; pick another --port (0: any free one)"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def dashboard_url(sock: socket.socket, api_key: str | None) -> str:
    """The address to open: with the key in it when the chain has one (the page turns it into
    a cookie and drops it from the address bar)."""
    address, port = sock.getsockname()[:2]
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}/" + (f"?key={quote(api_key, safe='')}" if api_key else "")


def serve_dashboard(
    name: str,
    host: str = "127.0.0.1",
    port: int = 0,
    announce: Callable[[str], None] = print,
    api_key: str | None = None,
) -> None:
    """Serve chain ``name``'s dashboard until interrupted; ``announce`` gets its URL once it
    listens. ``api_key`` is the entrypoint's key when the chain's target does not record it
    (docker, swarm)."""
    import uvicorn

    from chains.server.door import DoorLimits, guarded_http, raise_open_file_limit

    raise_open_file_limit()
    sock = bind_loopback(host, port)
    try:
        view = ChainView(name, api_key)
        app = DashboardApp(view, port=sock.getsockname()[1])
        # A try-it stream still open on Ctrl-C is cut after a moment rather than waited for.
        # The chainlets' limits at the door (header size, Host, connections) guard it too.
        config = uvicorn.Config(
            app,
            http=guarded_http(DoorLimits.from_env()),
            log_level="warning",
            lifespan="on",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        announce(dashboard_url(sock, view.deployment.api_key))
        server.run(sockets=[sock])
    finally:
        sock.close()
