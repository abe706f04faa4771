"""Building a chainlet's app and serving it with uvicorn, with a graceful drain on SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from chains import tracing
from chains.call_context import current_call
from chains.chainlet import ChainletBase, construct
from chains.checks import chainlet_spec
from chains.context import DeployedServiceDescriptor, DeploymentContext, Secrets
from chains.errors import ChainsUsageError
from chains.metrics import Metrics
from chains.model import building_with
from chains.server.app import ChainletApp, StreamAborted
from chains.server.door import guarded_http, raise_open_file_limit
from chains.server.loop_watch import watch_loop
from chains.server.settings import SECRET_PREFIX, ServerSettings
from chains.stubs import StubBase, StubOptions
from chains.wire import HEALTHZ, READYZ

__all__ = ["create_app", "main", "serve"]

logger = logging.getLogger("chains.server")

EXIT_STARTUP_FAILED = 3


def create_app(
    chainlet: type[ChainletBase],
    stubs: Mapping[str, type[StubBase]] | None = None,
    settings: ServerSettings | None = None,
    data_dir: Path | None = None,
) -> ChainletApp:
    """The ASGI app serving ``chainlet``; ``stubs`` maps each dependency parameter to its stub class.

    Generated servers call this; by hand it looks like::

        app = create_app(Entry, stubs={"words": WordsStub}, settings=ServerSettings(is_entrypoint=True))
    """
    spec = chainlet_spec(chainlet)
    settings = settings or ServerSettings.from_env()
    stubs = dict(stubs or {})
    for dep in spec.dependencies:
        if dep.param not in stubs:
            raise ChainsUsageError(f"{spec.name}: no stub class given for dependency parameter {dep.param!r}")
        if dep.name not in settings.dependencies:
            raise ChainsUsageError(
                f"{spec.name}: no URL for dependency {dep.name}; set CHAINS_DEPENDENCY_URLS "
                f'(e.g. {{"{dep.name}": ["http://127.0.0.1:8001"]}})'
            )
    credentials = {dep.name: _credential(spec.name, dep.name, settings) for dep in spec.dependencies}
    # One context for every stub: the chain's CA alone, when the target gave one.
    ssl_context = settings.tls.client_context() if spec.dependencies else None

    made: list[StubBase] = []

    def factory(metrics: Metrics) -> ChainletBase:
        kwargs: dict[str, Any] = {}
        services: dict[str, DeployedServiceDescriptor] = {}
        for dep in spec.dependencies:
            options = StubOptions.from_marker(dep.marker, retry_user_errors=settings.retry_user_errors)
            address = settings.dependencies[dep.name]
            kwargs[dep.param] = stub = stubs[dep.param](
                address.urls,
                name=dep.name,
                options=options,
                path=address.path,
                token=None if credentials[dep.name] else settings.internal_token,
                authorization=credentials[dep.name],
                metrics=metrics,
                max_frame_bytes=settings.max_frame_bytes,
                ssl_context=ssl_context,
            )
            made.append(stub)
            services[dep.name] = DeployedServiceDescriptor(dep.name, options=options, urls=address.urls)
        if spec.context_param is not None:
            kwargs[spec.context_param] = DeploymentContext(
                secrets=Secrets(settings.secrets, spec.remote_config.assets.secret_keys, spec.name),
                chainlet_to_service=services,
                # CHAINS_DATA_DIR wins; else the DockerImage(data_dir=...) copy beside the server.
                data_dir=settings.data_dir or data_dir,
                environment=settings.environment,
                metrics=metrics,
            )
        with building_with(construct):
            return chainlet(**kwargs)

    async def close_stubs() -> None:
        for stub in made:
            await stub.aclose()

    return ChainletApp(spec, settings, factory, on_shutdown=close_stubs)


def _credential(chainlet: str, dependency: str, settings: ServerSettings) -> str | None:
    """The ``Authorization`` header of calls to ``dependency`` when its address names a secret
    for it; None when they carry the chain's token."""
    address = settings.dependencies[dependency]
    if address.auth_secret is None:
        return None
    value = settings.secrets.get(address.auth_secret)
    if not value:
        raise ChainsUsageError(
            f"{chainlet}: calls to {dependency} are sent with the secret {address.auth_secret!r}, "
            f"which is not set; set {SECRET_PREFIX}{address.auth_secret} (on Truss: create the "
            "secret in the workspace)"
        )
    return f"{address.auth_scheme} {value}"


class _RequestIdFilter(logging.Filter):
    """Puts the current call's request id on every log record, the user's own included."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):  # given by the caller (the request log line)
            call = current_call()
            record.request_id = call.request_id if call is not None else "-"
        return True


class _AbortedStreamFilter(logging.Filter):
    """Drops the ASGI server's report of a stream the app cut on purpose: the app logged
    its cause once already, with the user's frames only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StreamAborted))


def configure_logging(chainlet: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RequestIdFilter())
    handler.addFilter(_AbortedStreamFilter())
    # httpx logs every request at INFO: a sync stub's calls would drown the chainlet's own log
    # (the request log of the callee has them, one line each).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s {chainlet} rid=%(request_id)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class _DrainingServer(uvicorn.Server):
    """On SIGTERM: report not ready, stop accepting connections, answer the calls in flight
    and those that still arrive on open connections (closing each after its answer), then
    exit 0.

    The drain refuses nothing that reached the process: a process that replaces it shares its
    listening socket (see ``chains.targets.supervisor``) and takes the new connections, while
    a client that sent a call on a connection it already had gets its answer. An idle
    connection is closed once a call on it was answered or the client closes it; only those
    still idle when the grace period ends are closed under the client, as the keep-alive
    timeout would.

    A SIGTERM repeated during the drain is logged and changes nothing; a second SIGINT
    (Ctrl+C) stops at once, cancelling the calls in flight.

    On an inherited socket (``fd``, shared with the process being replaced), it starts
    accepting only once the chainlet is built, so that no call meets it "not ready yet".
    """

    def __init__(self, config: uvicorn.Config, app: ChainletApp, hold_until_built: bool = False) -> None:
        super().__init__(config)
        self.chainlet_app = app
        self.hold_until_built = hold_until_built
        self.exit_code = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._draining_since: float | None = None  # set by the first SIGTERM or SIGINT

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        watch_loop(self._loop, self.chainlet_app.spec.name)
        watcher = asyncio.create_task(self._watch_startup())
        try:
            await super().serve(sockets)
        finally:
            watcher.cancel()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if sockets is None or not self.hold_until_built:
            await super().startup(sockets)
            return
        await super().startup([])  # the lifespan starts the build; nothing listens yet
        while not self.chainlet_app.started.is_set() and not self.should_exit:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.chainlet_app.started.wait(), 0.05)
        if self.should_exit or self.chainlet_app.startup_error is not None:
            return
        config = self.config

        def protocol() -> asyncio.Protocol:
            made: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )
            return made

        loop = asyncio.get_running_loop()
        for sock in sockets:
            self.servers.append(
                await loop.create_server(protocol, sock=sock, backlog=config.backlog, ssl=config.ssl)
            )

    async def _watch_startup(self) -> None:
        await self.chainlet_app.started.wait()
        if self.chainlet_app.startup_error is not None:
            self.exit_code = EXIT_STARTUP_FAILED
            self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's handler: it would re-raise the signal after shutdown (exit 143).
        if self._loop is None:
            self.force_exit = True
            self.should_exit = True
            return
        if self._draining_since is not None:
            if sig == signal.SIGTERM:
                # Platforms repeat it (dockerd stopping a swarm node signals a task for the
                # swarm and again for itself): the drain goes on, and only the platform's
                # SIGKILL at the end of its grace period cuts it short.
                self._loop.call_soon_threadsafe(self._log_repeated_sigterm)
                return
            self.force_exit = True  # a second Ctrl+C at a terminal: stop now
            self.should_exit = True
            return
        self._draining_since = time.monotonic()
        self._loop.call_soon_threadsafe(self._start_drain)

    def _log_repeated_sigterm(self) -> None:
        since = time.monotonic() - (self._draining_since or 0.0)
        logger.info("SIGTERM again %.1fs into the drain: still draining", since)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        app = self.chainlet_app
        app.start_draining()
        # Closing this process's listening socket leaves the connections waiting to be
        # accepted to a process sharing it; only after the grace period would they be reset.
        for server in getattr(self, "servers", []):
            server.close()
        for connection in list(self.server_state.connections):
            cycle: Any = getattr(connection, "cycle", None)
            # A call whose answer has not started is the connection's last: its headers say
            # so. One whose headers went out already keeps the connection open: closing it
            # after the answer would race the client's next request on it, which it still
            # takes for reusable; that request is answered with Connection: close instead.
            if cycle is not None and not cycle.response_started:
                cycle.keep_alive = False
        grace = app.settings.grace_sec
        logger.info("draining: %d call(s) in flight, grace period %.0fs", app.in_flight, grace)
        deadline = time.monotonic() + grace
        while (app.in_flight or self.server_state.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if app.conversations:
            # A conversation has no natural end a drain could wait for: at the grace period's
            # end its client is told the server is going away (1001), so it reconnects elsewhere.
            logger.info("grace period over: closing %d WebSocket(s) with 1001", len(app.conversations))
            await app.conversations.close_all()
            closing = time.monotonic() + 1.0
            while app.in_flight and time.monotonic() < closing:
                await asyncio.sleep(0.01)
        if app.in_flight:
            logger.warning("grace period over with %d call(s) in flight; stopping them", app.in_flight)
        self.should_exit = True


def serve(
    app: ChainletApp,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "INFO",
    fd: int | None = None,
) -> int:
    """Serve ``app`` until SIGTERM or SIGINT; returns the process exit code.

    With ``fd``, serve on that already-listening socket instead of binding ``host:port``:
    a supervisor that owns the socket can restart the process without closing the port,
    so connections made meanwhile wait in the backlog instead of being refused. The process
    accepts from it only once the chainlet is built: until then the process it replaces, or
    the backlog, holds the calls.
    """
    if app.spec.remote_config.options.enable_debug_logs:
        log_level = "DEBUG"
    configure_logging(app.spec.name, log_level)
    raise_open_file_limit()
    try:
        tracing.install(tracing.configure(app.spec.name, app.settings.chain), set_global=True)
    except ChainsUsageError as exc:
        logger.error("cannot start: %s", exc)
        return EXIT_STARTUP_FAILED
    tls = app.settings.tls
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        http=guarded_http(app.settings.door, lambda: app.draining, exempt=(HEALTHZ, READYZ)),
        loop="auto",  # uvloop when installed (a dependency except on Windows)
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=1,
        # WebSocket endpoints: a ping every 20 s and a socket closed when its pong is 20 s
        # late; a message longer than the body limit closes the socket with 1009.
        ws="websockets-sansio",
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        ws_max_size=app.settings.max_body_bytes,
        # HTTPS only, when the target issued the chainlet a certificate (chains/tls.py).
        ssl_certfile=tls.cert_file,
        ssl_keyfile=tls.key_file,
    )
    server = _DrainingServer(config, app, hold_until_built=fd is not None)
    sockets = [socket.socket(fileno=fd)] if fd is not None else None
    server.run(sockets=sockets)
    return server.exit_code


def main(app: ChainletApp, argv: list[str] | None = None) -> None:
    """The command line of a generated server: ``python server.py --host H --port P``."""
    parser = argparse.ArgumentParser(description=f"Serve chainlet {app.spec.name}.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--fd", type=int, default=None, help="serve on this inherited listening socket")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    sys.exit(serve(app, args.host, args.port, args.log_level.upper(), args.fd))
