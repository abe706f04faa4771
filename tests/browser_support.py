"""A real headless Chromium for the tests that need one, shared by the whole session.

The browser is Debian's ``chromium`` driven by Playwright's Python package (no browser is
downloaded). Without either, the browser tests skip and say how to enable them;
``CHAINS_REQUIRE_BROWSER=1`` (set by CI) makes them fail instead. Pages are served from
origins of their own on 127.0.0.2 and 127.0.0.3, never the chain's (127.0.0.1).
"""

from __future__ import annotations

import concurrent.futures
import functools
import http.server
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

CHROMIUM = os.environ.get("CHAINS_CHROMIUM", "/usr/bin/chromium")
# What this machine needs (no sandbox for root in a container, no GPU, nothing fetched
# from the network on the browser's own initiative). Playwright gives every launch a fresh
# profile directory of its own.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ENABLE = (
    "install Debian's chromium (`apt-get install chromium`) and Playwright's Python package "
    "(`.venv/bin/pip install playwright`, no `playwright install` needed)"
)
PAGES = Path(__file__).with_name("browser") / "pages"


def _missing() -> str | None:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no chromium at {CHROMIUM}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright's Python package is not installed"
    return None


class _BrowserThread:
    """A thread of its own for Playwright: its sync API runs an event loop in the thread that
    starts it, for as long as it runs, and in the tests' own thread that loop would break
    every later test that calls ``asyncio.run`` (Python stubs, ``chain.call``)."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="chromium")

    def run(self, action: Callable[[], T]) -> T:
        return self._pool.submit(action).result(timeout=120)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


class InBrowserThread:
    """``target`` (a Playwright page), whose methods run in the browser's thread."""

    def __init__(self, thread: _BrowserThread, target: Any) -> None:
        self._thread = thread
        self._target = target

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._target, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._thread.run(lambda: method(*args, **kwargs))

        return call


class Chromium:
    """The session's browser: ``new_page()`` opens a page in a context of its own."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self._thread = _BrowserThread()
        self._playwright = self._thread.run(lambda: sync_playwright().start())
        self._browser = self._thread.run(
            lambda: self._playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True
            )
        )

    def new_context(self) -> tuple[InBrowserThread, Callable[[], None]]:
        """A page in a fresh context, and what closes the context."""
        context = self._thread.run(lambda: self._browser.new_context())
        page = self._thread.run(lambda: context.new_page())
        self._thread.run(lambda: page.set_default_timeout(20_000))
        return InBrowserThread(self._thread, page), lambda: self._thread.run(context.close)

    def close(self) -> None:
        try:
            self._thread.run(self._browser.close)
            self._thread.run(self._playwright.stop)
        finally:
            self._thread.shutdown()


@pytest.fixture(scope="session")
def browser() -> Iterator[Chromium]:
    """One headless Chromium for every browser test of the session."""
    missing = _missing()
    if missing is not None:
        message = f"{missing}: to run the browser tests, {ENABLE}"
        if os.environ.get("CHAINS_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CHAINS_REQUIRE_BROWSER=1 but {message}")
        pytest.skip(message)
    chromium = Chromium()
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture
def page(browser: Chromium) -> Iterator[InBrowserThread]:
    """A page in a context of its own (no cache or preflight answers shared between tests)."""
    page, close = browser.new_context()
    try:
        yield page
    finally:
        close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@functools.cache
def _host_works(host: str) -> bool:
    import socket

    with socket.socket() as probe:
        try:
            probe.bind((host, 0))
        except OSError:
            return False
    return True


def serve_directory(directory: Path, host: str) -> tuple[str, http.server.ThreadingHTTPServer]:
    """Serve ``directory`` on ``host`` (a free port) in a thread; returns its origin and server."""
    if not _host_works(host):
        pytest.skip(f"cannot listen on {host}: the browser tests need 127.0.0.0/8 on the loopback")
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://{host}:{server.server_address[1]}", server


@pytest.fixture(scope="session")
def page_origin() -> Iterator[str]:
    """The origin of the test pages, which the test chains allow."""
    origin, server = serve_directory(PAGES, "127.0.0.2")
    yield origin
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def other_origin() -> Iterator[str]:
    """An origin no test chain allows."""
    origin, server = serve_directory(PAGES, "127.0.0.3")
    yield origin
    server.shutdown()
    server.server_close()


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of a Prometheus text exposition (0 when absent)."""
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if match is None or match[1] != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match[2] or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(match[3])
    return 0.0


REPO = Path(__file__).resolve().parents[1]
API_KEY = "browser-test-key-5d1c"


@pytest.fixture(scope="session")
def chains_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where the session's chains are recorded (never the developer's own ./.chains)."""
    home = tmp_path_factory.mktemp("chains-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHAINS_HOME", str(home))
        yield home


@pytest.fixture(scope="session")
def example_origin() -> str:
    """The origin examples/web is served from in its test: a free port on 127.0.0.2."""
    import socket

    if not _host_works("127.0.0.2"):
        pytest.skip("cannot listen on 127.0.0.2: the browser tests need 127.0.0.0/8 on the loopback")
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        return f"http://127.0.0.2:{probe.getsockname()[1]}"


@pytest.fixture(scope="session")
def streaming_chain(chains_home: Path, page_origin: str, example_origin: str) -> Iterator[Any]:
    """examples/streaming, without an API key, callable from the test pages and examples/web."""
    import chains

    file = REPO / "examples" / "streaming" / "chain.py"
    with chains.push(file, name="browser-streaming", cors_origins=[page_origin, example_origin]) as chain:
        yield chain


@pytest.fixture(scope="session")
def typed_chain(chains_home: Path, page_origin: str) -> Iterator[Any]:
    """tests/browser/chains/typed.py with an API key, callable from the test pages."""
    import chains

    file = Path(__file__).with_name("browser") / "chains" / "typed.py"
    with chains.push(file, name="browser-typed", cors_origins=[page_origin], api_key=API_KEY) as chain:
        yield chain


@pytest.fixture(scope="session")
def hello_chain(chains_home: Path, page_origin: str) -> Iterator[Any]:
    """examples/hello (a unary entrypoint), callable from the test pages."""
    import chains

    file = REPO / "examples" / "hello" / "chain.py"
    with chains.push(file, name="browser-hello", cors_origins=[page_origin]) as chain:
        yield chain


@pytest.fixture(scope="session")
def realtime_chain(chains_home: Path, page_origin: str) -> Iterator[Any]:
    """examples/realtime (a WebSocket entrypoint) with an API key, callable from the test pages."""
    import chains

    file = REPO / "examples" / "realtime" / "chain.py"
    with chains.push(file, name="browser-realtime", cors_origins=[page_origin], api_key=API_KEY) as chain:
        yield chain
