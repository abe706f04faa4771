"""The dashboard's ASGI app: one page, its static assets, and the JSON it polls.

Only this machine may look: a request from an address off the loopback, or naming another
host (a DNS-rebinding page), is refused with 403; when the chain has an API key, every request
needs it, as a bearer token or the cookie set by opening ``/?key=<key>`` once (the URL
``chains ui`` prints). The try-it form's calls go through ``POST /api/call``, which the app
forwards to the entrypoint with the key and streams back as it arrives, so the page stays
same-origin and never holds the key itself. An ``https://`` entrypoint is verified with the
authority the chain's state records (:meth:`ChainState.entrypoint_context`), else the
system's::

    app = DashboardApp(ChainView("streaming"), port=8765)
    uvicorn.run(app, host="127.0.0.1", port=8765)
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import time
from http.cookies import SimpleCookie
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import httpx
from starlette.routing import BaseRoute, Router

from chains.errors import ChainsError, ChainsUsageError
from chains.graph import to_svg
from chains.server.asgi import (
    BodyTooLarge,
    ClientGone,
    Receive,
    Scope,
    Send,
    header_map,
    read_body,
    send_bytes,
    send_json,
)
from chains.server.router import asgi_endpoint, listing
from chains.targets import running_target
from chains.targets.state import ChainState, chain_dir
from chains.tracing import store
from chains.ui.history import MetricsHistory, parse_metrics
from chains.ui.jobs import ChainJobs
from chains.ui.sources import ChainView
from chains.wire import JSON_MEDIA_TYPE, METRICS, REQUEST_ID_HEADER, RUN_REMOTE

__all__ = ["DashboardApp", "is_loopback"]

STATIC_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
}
# The page's own rules: its scripts and styles come from here only, and it connects nowhere else.
_CSP = (
    b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_SECURITY_HEADERS = [
    (b"content-security-policy", _CSP),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]
_MAX_CALL_BODY = 1024 * 1024
_LOG_LINES_MAX = 1000


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, or ``localhost``) is this machine's loopback.

    >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _static_files() -> dict[str, tuple[bytes, bytes]]:
    folder = resources.files("chains.ui") / "static"
    files = {}
    for entry in folder.iterdir():
        suffix = Path(entry.name).suffix
        if entry.is_file() and suffix in STATIC_TYPES:
            files[entry.name] = (entry.read_bytes(), STATIC_TYPES[suffix])
    return files


class DashboardApp:
    """The dashboard of one chain, served on ``port`` of the loopback."""

    def __init__(self, view: ChainView, port: int, poll_sec: float = 1.0, keep: int = 300) -> None:
        self.view = view
        self.port = port
        self.poll_sec = poll_sec
        self.history = MetricsHistory(keep)
        self.cookie = f"chains-ui-{port}"
        self._static = _static_files()
        self._poller: asyncio.Task[None] | None = None
        # One client per authority the chain's entrypoint is verified with (a push may change it).
        self._clients: dict[str | None, httpx.AsyncClient] = {}
        self._started = False
        self._lock = asyncio.Lock()
        self._jobs = ChainJobs()
        self._router = Router(self._routes(), redirect_slashes=False, default=self._not_found)

    # -- access ----------------------------------------------------------------------------

    def _own_host(self, host: str) -> bool:
        """Whether a Host (or an Origin without its scheme) names this server: a loopback
        address or ``localhost`` and its port. A page that rebinds its own domain name to
        127.0.0.1 sends that name, and is refused."""
        name, _, port = host.lower().rpartition(":")
        return port == str(self.port) and is_loopback(name)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str] | None:
        client = scope.get("client")
        if client is None or not is_loopback(str(client[0])):
            return 403, "the dashboard answers this machine only (a request from the loopback)"
        if not self._own_host(headers.get("host", "")):
            return 403, f"open the dashboard as http://127.0.0.1:{self.port}/ (another host name was given)"
        key = self.view.deployment.api_key
        if key is None:
            return None
        given = ""
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            given = credential.strip()
        else:
            cookie = SimpleCookie()
            with contextlib.suppress(Exception):
                cookie.load(headers.get("cookie", ""))
            if self.cookie in cookie:
                given = cookie[self.cookie].value
        if not given:
            return 401, "this chain has an API key: open the URL `chains ui` printed (it holds the key)"
        if not hmac.compare_digest(given.encode(), key.encode()):
            return 401, "wrong API key: open the URL `chains ui` printed"
        return None

    async def _login(self, scope: Scope, send: Send) -> bool:
        """``/?key=...``: a right key becomes a cookie, and the key leaves the address bar."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = query.get("key", [""])[0]
        key = self.view.deployment.api_key
        if scope["path"] != "/" or not given or key is None:
            return False
        if not hmac.compare_digest(given.encode(), key.encode()):
            await self._text(send, 401, "wrong API key: open the URL `chains ui` printed")
            return True
        cookie = f"{self.cookie}={quote(key)}; Path=/; HttpOnly; SameSite=Strict"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [(b"location", b"/"), (b"set-cookie", cookie.encode()), (b"content-length", b"0")],
            }
        )
        await send({"type": "http.response.body", "body": b""})
        return True

    # -- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = header_map(scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None and refusal[0] == 401 and await self._login(scope, send):
            return
        if refusal is not None:
            if scope["path"] == "/":
                await self._text(send, *refusal)
            else:
                await send_json(send, refusal[0], {"detail": refusal[1]})
            return
        await self._router(scope, receive, send)

    def _routes(self) -> list[BaseRoute]:
        """Every route of the dashboard, in one Starlette router (the page's access is checked
        before it: :meth:`_refusal`)."""
        return [
            asgi_endpoint("/", self._index, ["GET"]),
            asgi_endpoint("/static/{name}", self._static_file, ["GET"]),
            asgi_endpoint("/api/overview", self._overview, ["GET"]),
            asgi_endpoint("/api/metrics", self._metrics, ["GET"]),
            asgi_endpoint("/api/traces", self._traces, ["GET"]),
            asgi_endpoint("/api/traces/{wanted}", self._trace, ["GET"]),
            asgi_endpoint("/api/jobs", self._jobs_list, ["GET"]),
            asgi_endpoint("/api/jobs/{job_id}", self._job, ["GET"]),
            asgi_endpoint("/api/logs", self._logs, ["GET"]),
            asgi_endpoint("/api/openapi", self._openapi, ["GET"]),
            asgi_endpoint("/api/call", self._call, ["POST"]),
        ]

    async def _not_found(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"no route {scope['method']} {scope['path']}; routes: {listing(self._router.routes)}"
        await send_json(send, 404, {"detail": detail})

    async def _index(self, scope: Scope, receive: Receive, send: Send) -> None:
        body, kind = self._static["index.html"]
        await send_bytes(send, 200, body, kind, _SECURITY_HEADERS)

    async def _static_file(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._static.get(scope["path_params"]["name"])
        if found is None:
            await self._not_found(scope, receive, send)
            return
        await send_bytes(send, 200, found[0], found[1], _SECURITY_HEADERS)

    async def _text(self, send: Send, status: int, text: str) -> None:
        await send_bytes(send, status, text.encode() + b"\n", b"text/plain; charset=utf-8", _SECURITY_HEADERS)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._started = True
                self._poller = asyncio.create_task(self._poll_forever())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._poller is not None:
                    self._poller.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._poller
                for client in self._clients.values():
                    await client.aclose()
                self._clients.clear()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _client(self, state: ChainState) -> httpx.AsyncClient:
        """The client for the chain's replicas and its entrypoint, which verifies an https://
        entrypoint with the authority recorded in ``state`` (the ray target's replicas answer at
        the same proxy), else the system's; a clear error when that authority cannot be read."""
        assert self._started, "called before the app started"
        client = self._clients.get(state.entrypoint_ca)
        if client is None:
            verify = state.entrypoint_context() or True
            client = httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=None), trust_env=False, verify=verify)
            self._clients[state.entrypoint_ca] = client
        return client

    # -- polling ---------------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a chain being re-pushed or stopped: poll again
                await self.poll_once()
            await asyncio.sleep(self.poll_sec)

    async def poll_once(self) -> None:
        """Read the state, then every replica's ``/metrics``, into the history."""
        async with self._lock:
            state = await asyncio.to_thread(self.view.refresh)
        client = self._client(state)
        entry_headers = self._entry_headers()

        async def read(chainlet: str, url: str) -> tuple[str, str, Any]:
            headers = entry_headers if chainlet == state.entrypoint else {}
            try:
                response = await client.get(url.rstrip("/") + METRICS, headers=headers, timeout=2.0)
            except httpx.HTTPError:
                return chainlet, url, None
            return chainlet, url, parse_metrics(response.text) if response.status_code == 200 else None

        reads = await asyncio.gather(*(read(p.chainlet, p.url) for p in state.processes))
        self.history.record_poll(time.time(), reads)

    def _entry_headers(self) -> dict[str, str]:
        key = self.view.deployment.api_key
        return {"authorization": f"Bearer {key}"} if key else {}

    # -- routes ----------------------------------------------------------------------------

    async def _overview(self, scope: Scope, receive: Receive, send: Send) -> None:
        overview = self.view.overview()
        graph = self.view.deployment.graph
        overview["graph_svg"] = to_svg(graph)
        overview["chainlets"] = [
            {"name": n.name, "entrypoint": n.entrypoint, "replicas": n.replicas, "concurrency": n.concurrency}
            for n in graph.nodes
        ]
        overview["api_key"] = self.view.deployment.api_key is not None
        await send_json(send, 200, overview)

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, {"poll_sec": self.poll_sec, "series": self.history.to_json()})

    def _store(self) -> Path:
        return store.store_path(chain_dir(self.view.name))

    async def _traces(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        limit = _bounded_int(query.get("limit", ["20"])[0], 20, 1, 200)
        # Requests only: each batch of a batched chainlet is a trace of its own, drawn from the
        # waterfall of a request it served (its span names the batch's request id).
        traces = await asyncio.to_thread(store.recent_traces, self._store(), limit, batches=False)
        await send_json(send, 200, [t.to_json() for t in traces])

    async def _trace(self, scope: Scope, receive: Receive, send: Send) -> None:
        wanted = scope["path_params"]["wanted"]
        spans = await asyncio.to_thread(store.trace_spans, self._store(), wanted)
        if not spans:
            await send_json(send, 404, {"detail": f"no trace {wanted!r} in the chain's store"})
            return
        await send_json(send, 200, [s.to_json() for s in spans])

    async def _jobs_list(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        limit = _bounded_int(query.get("limit", ["20"])[0], 20, 1, 200)
        state = self.view.state
        try:
            jobs = await asyncio.to_thread(self._jobs.recent, state, limit)
        except Exception as exc:  # a shared store down, a file unreadable: said, not a 500
            await send_json(send, 502, {"detail": f"the chain's job store cannot be read: {exc}"})
            return
        await send_json(send, 200, {"keeps_jobs": jobs is not None, "jobs": jobs or []})

    async def _job(self, scope: Scope, receive: Receive, send: Send) -> None:
        job_id = scope["path_params"]["job_id"]
        try:
            found = await asyncio.to_thread(self._jobs.detail, self.view.state, job_id)
        except Exception as exc:
            await send_json(send, 502, {"detail": f"the chain's job store cannot be read: {exc}"})
            return
        if found is None:
            await send_json(send, 404, {"detail": f"no async request {job_id!r} in the chain's job store"})
            return
        await send_json(send, 200, found)

    async def _logs(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        chainlet = query.get("chainlet", [""])[0]
        lines = _bounded_int(query.get("lines", ["100"])[0], 100, 1, _LOG_LINES_MAX)
        names = self.view.state.chainlet_names()
        if chainlet not in names:
            await send_json(
                send, 404, {"detail": f"no chainlet {chainlet!r}; the chain has: {', '.join(names)}"}
            )
            return

        state = self.view.state

        def read() -> list[str]:
            # Through the chain's target, so a chain on docker, swarm or ray shows its logs too.
            return list(running_target(state.target).logs(state, chainlet, False, lines))[-lines:]

        try:
            found = await asyncio.to_thread(read)
        except ChainsError as exc:
            await send_json(send, 502, {"detail": f"the logs of {chainlet} cannot be read: {exc}"})
            return
        await send_json(send, 200, {"chainlet": chainlet, "lines": found})

    async def _openapi(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.view.state
        url = f"{state.entrypoint_url.rstrip('/')}/openapi.json"
        try:
            response = await self._client(state).get(url, timeout=5.0)
        except ChainsUsageError as exc:  # the recorded authority cannot be read
            await send_json(send, 502, {"detail": str(exc)})
            return
        except httpx.HTTPError as exc:
            await send_json(send, 502, {"detail": f"the entrypoint at {url} does not answer: {exc}"})
            return
        await send_bytes(send, response.status_code, response.content, JSON_MEDIA_TYPE.encode())

    async def _call(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The try-it form's call, forwarded to the entrypoint and streamed back as it comes."""
        headers = header_map(scope)
        origin = headers.get("origin")
        if origin is not None and not (origin.startswith("http://") and self._own_host(origin[7:])):
            await send_json(send, 403, {"detail": "calls are taken from the dashboard's own page only"})
            return
        try:
            body = await read_body(receive, _MAX_CALL_BODY, headers.get("content-length"))
        except BodyTooLarge:
            await send_json(send, 413, {"detail": f"the arguments are over {_MAX_CALL_BODY} bytes"})
            return
        except ClientGone:
            return
        state = self.view.state
        url = state.entrypoint_url.rstrip("/") + RUN_REMOTE
        forwarded = {
            "content-type": JSON_MEDIA_TYPE,
            "accept": headers.get("accept", "*/*"),
            **self._entry_headers(),
        }
        try:
            client = self._client(state)
            request = client.build_request("POST", url, content=body, headers=forwarded)
            response = await client.send(request, stream=True)
        except ChainsUsageError as exc:
            await send_json(send, 502, {"detail": str(exc)})
            return
        except httpx.HTTPError as exc:
            await send_json(send, 502, {"detail": f"the entrypoint at {url} does not answer: {exc}"})
            return
        kept = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in response.headers.items()
            if name.lower() in ("content-type", REQUEST_ID_HEADER)
        ]

        async def forward() -> None:
            await send({"type": "http.response.start", "status": response.status_code, "headers": kept})
            try:
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except httpx.HTTPError:
                pass  # the entrypoint went away mid-stream: the answer ends where it was cut
            await send({"type": "http.response.body", "body": b""})

        async def page_left() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        # A page that leaves (closed, reloaded) ends the call upstream too, so the chain stops
        # streaming to nobody.
        forwarding, leaving = asyncio.create_task(forward()), asyncio.create_task(page_left())
        try:
            await asyncio.wait({forwarding, leaving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (forwarding, leaving):
                task.cancel()
            await asyncio.gather(forwarding, leaving, return_exceptions=True)
            await response.aclose()


def _bounded_int(text: str, default: int, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        return default
    return max(low, min(high, value))
