"""A generated chainlet served inside another server's process, without a socket of its own.

Platforms that run a Python class per deployment (a Truss model on Baseten, say) call into the
chainlet's ASGI app directly: :meth:`EmbeddedChainlet.load` imports the generated ``server.py``
and builds the chainlet, :meth:`EmbeddedChainlet.call` hands it one HTTP request and returns
the response as it is produced, so streams stay streams. Everything the app does over HTTP
(validation, content negotiation, error frames, the concurrency bound, deadlines) works the
same, because it is the same app.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import sys
from collections.abc import AsyncIterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from chains.errors import ChainsRuntimeError, ChainsUsageError
from chains.server.app import ChainletApp
from chains.wire import READYZ, RUN_REMOTE

__all__ = ["EmbeddedChainlet", "EmbeddedResponse"]

Headers = list[tuple[bytes, bytes]]
_DONE: Any = object()
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"upgrade", b"host", b"content-length"}
)


class EmbeddedResponse:
    """A response being produced by the app: status and headers now, the body as it comes."""

    def __init__(
        self,
        status: int,
        headers: Headers,
        queue: asyncio.Queue[Any],
        task: asyncio.Task[None],
        gone: asyncio.Event,
    ) -> None:
        self.status = status
        self.headers = headers
        self._queue = queue
        self._task = task
        self._gone = gone

    def header(self, name: str) -> str | None:
        wanted = name.lower().encode()
        return next((v.decode("latin-1") for k, v in self.headers if k.lower() == wanted), None)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body. Closing this early (the caller left) cancels the chainlet's work."""
        complete = False
        try:
            while True:
                message = await self._queue.get()
                if message is _DONE:
                    break
                if message["type"] != "http.response.body":
                    continue
                if message.get("body"):
                    yield bytes(message["body"])
                if not message.get("more_body", False):
                    complete = True
                    break
        finally:
            if complete:
                await asyncio.shield(self._task)
            else:
                # Cut short, by the caller or by an error in the app: tell the app its client left.
                self._gone.set()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(asyncio.shield(self._task), timeout=5)
        if not complete:
            error = self._task.exception() if self._task.done() and not self._task.cancelled() else None
            # A broken stream must not look like a complete, shorter one.
            raise ChainsRuntimeError("the chainlet's response ended before it was complete") from error

    async def body(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])


class EmbeddedChainlet:
    """One generated chainlet, built in this process, answering requests handed to it."""

    def __init__(self, app: ChainletApp, *, token: str | None, trust_callers: bool) -> None:
        self.app = app
        self._token = token
        self._trust_callers = trust_callers

    @classmethod
    def load(
        cls, directory: Path, env: Mapping[str, str], *, token: str | None = None, trust_callers: bool = False
    ) -> EmbeddedChainlet:
        """Import ``directory/server.py`` with ``env`` set, and build the chainlet (its ``__init__``).

        ``token`` is the chain's internal token. With ``trust_callers``, every request is passed
        in with it, for platforms whose own gateway has authenticated the caller already.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise ChainsUsageError(
                "EmbeddedChainlet.load builds the chainlet on an event loop of its own: call it from a "
                "worker thread (as Truss calls load()), "
                "e.g. `await asyncio.to_thread(EmbeddedChainlet.load, ...)`"
            )
        server = Path(directory) / "server.py"
        if not server.is_file():
            raise ChainsUsageError(
                f"{directory} holds no server.py; it is not a generated chainlet directory"
            )
        os.environ.update(env)
        if token:
            os.environ["CHAINS_INTERNAL_TOKEN"] = token
        spec = importlib.util.spec_from_file_location("chains_embedded_server", server)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        app = getattr(module, "app", None)
        if not isinstance(app, ChainletApp):
            raise ChainsUsageError(f"{server} defines no chainlet app")
        asyncio.run(_build(app))
        if app.startup_error is not None:
            raise app.startup_error
        return cls(app, token=token, trust_callers=trust_callers)

    async def ready(self) -> bool:
        response = await self.call("GET", READYZ, [], b"")
        await response.body()
        return response.status == 200

    async def call(
        self, method: str, path: str, headers: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> EmbeddedResponse:
        """Hand the app one request; returns once it has started answering."""
        request_headers: Headers = [(k.lower(), v) for k, v in headers if k.lower() not in _HOP_BY_HOP]
        if self._trust_callers and self._token:
            request_headers = [(k, v) for k, v in request_headers if k != b"authorization"]
            request_headers.append((b"authorization", f"Bearer {self._token}".encode()))
        request_headers.append((b"content-length", str(len(body)).encode()))
        queue: asyncio.Queue[Any] = asyncio.Queue()
        gone = asyncio.Event()
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            await queue.put(message)

        raw_path, _, query = path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": raw_path,
            "raw_path": raw_path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": request_headers,
            "client": ("127.0.0.1", 0),
            "server": ("127.0.0.1", 0),
        }
        task = asyncio.create_task(self.app(scope, receive, send))
        task.add_done_callback(lambda _: queue.put_nowait(_DONE))
        first = await queue.get()
        if first is _DONE:
            task.result()  # raises what the app raised
            raise ChainsRuntimeError("the chainlet's app returned without answering")
        if first["type"] != "http.response.start":
            raise ChainsRuntimeError(f"the chainlet's app sent {first['type']} before its response started")
        return EmbeddedResponse(int(first["status"]), list(first.get("headers", [])), queue, task, gone)

    async def converse(self, websocket: Any) -> None:
        """Serve one conversation of a WebSocket endpoint on a platform's starlette ``websocket``
        (accepted or not): its messages go to the app as a socket's would, and the app's back."""
        headers: Headers = [(k.lower(), v) for k, v in websocket.headers.raw if k.lower() not in _HOP_BY_HOP]
        if self._trust_callers and self._token:
            headers = [(k, v) for k, v in headers if k != b"authorization"]
            headers.append((b"authorization", f"Bearer {self._token}".encode()))
        connected = False

        async def receive() -> MutableMapping[str, Any]:
            nonlocal connected
            if not connected:
                connected = True
                return {"type": "websocket.connect"}
            message: MutableMapping[str, Any] = await websocket.receive()
            return message

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "websocket.accept":
                if getattr(websocket.client_state, "name", "") != "CONNECTED":  # not accepted by the platform
                    await websocket.accept(
                        subprotocol=message.get("subprotocol"), headers=message.get("headers")
                    )
                return
            if message["type"].startswith("websocket.http.response"):
                await websocket.close(1008)  # refused before the upgrade: no HTTP answer on a socket
                return
            await websocket.send(message)

        scope = {
            "type": "websocket",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "path": RUN_REMOTE,
            "raw_path": RUN_REMOTE.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "subprotocols": [],
            "client": ("127.0.0.1", 0),
            "server": ("127.0.0.1", 0),
        }
        await self.app(scope, receive, send)


async def _build(app: ChainletApp) -> None:
    await app.startup()
    # Poll instead of awaiting the event: this loop ends after the build, and the app must
    # keep no tie to it for the loop that serves requests later.
    while not app.started.is_set():
        await asyncio.sleep(0.02)
