"""One chainlet as a Ray Serve deployment: its generated server's ASGI app behind Serve's proxy.

Imported by the replicas on the cluster's nodes (and by the ray target when it deploys).
Each replica is a Ray actor, a process of its own, started in the chain's generated folder
(Ray ships it to every node as the replicas' ``working_dir``); it sets the chainlet's
``CHAINS_*`` settings in its environment, imports the chainlet's ``server.py`` and serves
the ``app`` it builds, exactly as the local and docker targets do.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from ray import serve

from chains.server.app import ChainletApp
from chains.server.asgi import Message, Receive, Scope, Send
from chains.server.serve import configure_logging
from chains.tls import CA_FILE_ENV

__all__ = ["ChainletDeployment", "MountedApp"]


class MountedApp:
    """A chainlet app served under a route prefix, answering the lifespan protocol in full.

    Serve's proxy hands the app a scope whose ``path`` still holds the prefix (as ``root_path``);
    the chainlet routes on the path below it. Startup completes only once the chainlet is
    built, so that Serve counts the replica as running only when it can answer calls; a
    chainlet whose ``__init__`` raised fails the startup, with the error, instead.
    """

    def __init__(self, app: ChainletApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._lifespan_send(send))
            return
        root = scope.get("root_path", "")
        path: str = scope.get("path", "")
        if root and path.startswith(root):
            scope = dict(scope)
            scope["path"] = path[len(root) :] or "/"
        await self.app(scope, receive, _plain_bytes(send))

    def _lifespan_send(self, send: Send) -> Send:
        async def forward(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                await self.app.started.wait()
                error = self.app.startup_error
                if error is not None:
                    text = f"chainlet {self.app.spec.name}: __init__ raised {type(error).__name__}: {error}"
                    await send({"type": "lifespan.startup.failed", "message": text})
                    return
            await send(message)

        return forward


def _plain_bytes(send: Send) -> Send:
    """Serve pickles every message a replica sends on to its proxy; a stream's first chunk is
    a ``bytes`` subclass naming its writer (``chains.streaming.writer.WriterChunk``), which must not
    travel, so bodies go as plain ``bytes``."""

    async def forward(message: Message) -> None:
        body = message.get("body")
        if body is not None and type(body) is not bytes:
            message = {**message, "body": bytes(body)}
        await send(message)

    return forward


async def _get(app: Any, path: str) -> tuple[int, bytes]:
    """One in-process ``GET path`` to an ASGI app: its status and body."""
    status = 0
    body = b""

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status, body
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body":
            body += message.get("body", b"")

    scope = {"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""}
    await app(scope, receive, send)
    return status, body


def _load_server(directory: Path) -> ChainletApp:
    spec = importlib.util.spec_from_file_location("chains_generated_server", directory / "server.py")
    if spec is None or spec.loader is None:
        raise RuntimeError(f"no generated server.py in {directory}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    app = module.app
    if not isinstance(app, ChainletApp):
        raise RuntimeError(f"{directory / 'server.py'} does not build a chainlet app")
    return app


@serve.ingress()
class ChainletDeployment:
    """A replica of one chainlet; ``env`` holds its ``CHAINS_*`` settings (token, secrets, URLs)."""

    def __init__(self, chainlet: str, env: dict[str, str]) -> None:
        self.chainlet = chainlet
        # This process is this replica's alone (a Ray actor): its environment is the
        # chainlet's, as it would be in a process or container of its own.
        os.environ.update(env)
        # The proxy's authority travels in the chain's folder, whose path differs per node.
        ca_file = env.get(CA_FILE_ENV)
        if ca_file and not os.path.isabs(ca_file):
            os.environ[CA_FILE_ENV] = str(Path.cwd() / ca_file)
        self.chainlet_app: ChainletApp | None = None

    def __serve_build_asgi_app__(self) -> MountedApp:
        configure_logging(self.chainlet)
        self.chainlet_app = _load_server(Path.cwd() / self.chainlet)
        return MountedApp(self.chainlet_app)

    async def check_health(self) -> None:
        """Serve's periodic health check: the chainlet's own readiness (``/readyz``)."""
        if self.chainlet_app is None:
            return
        status, body = await _get(self.chainlet_app, "/readyz")
        if status != 200:
            raise RuntimeError(f"chainlet {self.chainlet} is not ready: {body.decode(errors='replace')}")
