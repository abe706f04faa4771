"""Connecting to a Ray cluster as a driver: refused at once, saying why, where Ray would hang.

Ray's driver blocks in its C++ core while it connects, where neither Ctrl-C nor a timeout of
ours reaches it; a driver without the cluster's TLS settings, say, waits for the GCS for ever.
So, before connecting, the address is asked whether it speaks TLS (a ClientHello answered or
not by a TLS record), and a mismatch with ``RAY_USE_TLS`` here fails in seconds, naming the
variables. Then ``ray.init`` runs in a thread of its own while this one waits, in bounded
steps where a signal is seen: Ctrl-C ends the command, and a connection that never comes
ends it after :data:`CONNECT_TIMEOUT_SEC`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from chains.errors import ChainsError, ChainsRuntimeError, ChainsUsageError

__all__ = ["CONNECT_TIMEOUT_SEC", "INSTALL_HINT", "TLS_VARIABLES", "connect", "speaks_tls"]

INSTALL_HINT = "the ray target needs Ray Serve: pip install 'chains-sdk[ray]'"
TLS_VARIABLES = ("RAY_USE_TLS", "RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")
CONNECT_TIMEOUT_SEC = 180.0  # ray.init uploads the chain's code too: generous, never endless
_PROBE_TIMEOUT_SEC = 3.0
_TLS_RECORD_TYPES = (0x15, 0x16)  # alert, handshake: what a TLS server answers a ClientHello with
_HINT = "pass --address ray://HEAD:10001 (Ray Client) or HEAD:PORT (the head's GCS), or set RAY_ADDRESS"


def _uses_tls() -> bool:
    # Read as Ray reads it.
    return os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")


def _host_port(address: str) -> tuple[str, int] | None:
    """The host and port of a Ray Client (``ray://H:P``) or GCS (``H:P``) address; None for
    ``auto`` and what else Ray resolves by itself."""
    parsed = urllib.parse.urlsplit(address if "://" in address else f"gcs://{address}")
    try:
        port = parsed.port
    except ValueError:
        return None
    if not parsed.hostname or port is None:
        return None
    return parsed.hostname, port


def speaks_tls(host: str, port: int, timeout: float = _PROBE_TIMEOUT_SEC) -> bool | None:
    """Whether the server at ``host:port`` answers a TLS ClientHello with a TLS record; None
    when it cannot be told (nothing listens, or it closed without a word)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only the answer's kind matters, no secret is sent
    outgoing = ssl.MemoryBIO()
    hello = context.wrap_bio(ssl.MemoryBIO(), outgoing)
    with contextlib.suppress(ssl.SSLWantReadError):  # the ClientHello is written: what is wanted
        hello.do_handshake()
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(outgoing.read())
            answer = conn.recv(3)
    except OSError:
        return None
    if not answer:
        return None
    return answer[0] in _TLS_RECORD_TYPES and answer[1:2] == b"\x03"


def _check_tls(target: str) -> None:
    """Refuse what would hang: a cluster and this process that disagree on Ray's TLS."""
    uses_tls = _uses_tls()
    if uses_tls:
        missing = [name for name in TLS_VARIABLES[1:] if not os.environ.get(name)]
        unreadable = [
            name
            for name in TLS_VARIABLES[1:]
            if os.environ.get(name) and not Path(os.environ[name]).is_file()
        ]
        if missing or unreadable:
            named = ", ".join(
                [
                    *(f"{n} (unset)" for n in missing),
                    *(f"{n}={os.environ[n]!r} (no such file)" for n in unreadable),
                ]
            )
            raise ChainsUsageError(
                f"RAY_USE_TLS=1 is set, but not every certificate it needs: {named}; set each to the "
                "files this machine's Ray uses (docs/deploy.md, Ray: Between nodes)"
            )
    where = _host_port(target)
    if where is None:
        return
    tls = speaks_tls(*where)
    if tls and not uses_tls:
        raise ChainsUsageError(
            f"the Ray cluster at {target!r} speaks TLS (its nodes run with RAY_USE_TLS=1), and this "
            f"command runs without Ray's TLS settings (Ray would wait for the cluster for ever): "
            f"set {', '.join(TLS_VARIABLES)} here as on the cluster's nodes, with a certificate of "
            "the cluster's authority (docs/deploy.md, Ray: Between nodes)"
        )
    if tls is False and uses_tls:
        raise ChainsUsageError(
            f"the Ray cluster at {target!r} does not speak TLS, and RAY_USE_TLS=1 is set here: "
            "unset RAY_USE_TLS (or start the cluster's nodes with it)"
        )


class _QuietSignalWarning(logging.Filter):
    """Drops Ray's warning that a driver connecting outside the main thread sets no SIGTERM
    handler: it is on purpose (the default handler, which ends the process, is what we want)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SIGTERM handler is not set")


def _init_in_thread(ray: Any, timeout: float, **kwargs: Any) -> Any:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["context"] = ray.init(**kwargs)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            outcome["error"] = exc

    quiet = _QuietSignalWarning()
    worker_log = logging.getLogger("ray._private.worker")
    worker_log.addFilter(quiet)
    thread = threading.Thread(target=run, name="ray-connect", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        # Short joins: between them this thread sees Ctrl-C (ray.init, blocked in Ray's core, never would).
        while thread.is_alive():
            if time.monotonic() > deadline:
                raise ChainsRuntimeError(
                    f"the Ray cluster at {kwargs.get('address')!r} did not answer within {timeout:.0f}s; "
                    f"is it running, and reachable from here? {_HINT}"
                )
            thread.join(0.2)
    finally:
        worker_log.removeFilter(quiet)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["context"]


def connect(
    address: str | None, working_dir: Path | None = None, timeout: float = CONNECT_TIMEOUT_SEC
) -> Any:
    """Connect this process to the cluster at ``address`` (else ``$RAY_ADDRESS``, else
    ``auto``) as a driver in the ``chains`` namespace; the connection's context.

    >>> context = connect("ray://head:10001")   # doctest: +SKIP
    """
    try:
        import ray
    except ImportError:
        raise ChainsUsageError(INSTALL_HINT) from None
    # Serve narrates every step at INFO on the pushing terminal; its warnings and errors stay.
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    target = address or os.environ.get("RAY_ADDRESS") or "auto"
    _check_tls(target)
    try:
        return _init_in_thread(
            ray,
            timeout,
            address=target,
            runtime_env={"working_dir": str(working_dir)} if working_dir is not None else None,
            namespace="chains",
            logging_level="ERROR",
            log_to_driver=False,
            configure_logging=False,
            ignore_reinit_error=True,
        )
    except ChainsError:
        raise
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ChainsRuntimeError(f"cannot connect to the Ray cluster at {target!r}: {exc}; {_HINT}") from None
