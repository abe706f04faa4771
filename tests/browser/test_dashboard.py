"""``chains ui``: the dashboard of a real pushed chain, served by the real command, in a real
headless Chromium.

One chain (tests/browser/chains/dashboard.py: three chainlets, a streaming entrypoint, an API
key) and one ``chains ui`` process serve every test of this module. Screenshots go to
``$CHAINS_TEST_ARTIFACTS`` (or pytest's temporary folder); with ``CHAINS_DOCS_SCREENSHOTS=1`` the
last test also writes docs/images/dashboard.png.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.browser_support import API_KEY, REPO, metric
from tests.helpers import dashboard as run_dashboard
from tests.helpers import origin_of, wait_until

CHAIN_FILE = Path(__file__).with_name("chains") / "dashboard.py"
CHAIN = "browser-dashboard"
CHAINLETS = ("Entry", "Generator", "Counter")


@pytest.fixture(scope="module")
def dashboard_chain(chains_home: Path) -> Iterator[Any]:
    import chains

    with chains.push(CHAIN_FILE, name=CHAIN, api_key=API_KEY) as chain:
        yield chain


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "chains", "ui", *args]


@pytest.fixture(scope="module")
def dashboard(dashboard_chain: Any, chains_home: Path) -> Iterator[str]:
    """The URL ``chains ui`` prints (with the key), while it runs."""
    with run_dashboard(CHAIN, {**os.environ, "CHAINS_HOME": str(chains_home)}) as url:
        yield url


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("CHAINS_TEST_ARTIFACTS")
    folder = Path(given) if given else tmp_path_factory.mktemp("dashboard-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _wait(page: Any, expression: str, timeout: float = 20.0) -> None:
    """Until ``expression`` is true in the page. Polled from here with ``evaluate``: the page's
    Content-Security-Policy forbids the string evaluation Playwright's wait_for_function uses."""
    wait_until(lambda: page.evaluate(f"() => Boolean({expression})"), timeout, expression, poll=0.1)


def _open(page: Any, url: str) -> list[str]:
    """Open the dashboard with every request off 127.0.0.1 refused; returns the refused URLs."""
    refused: list[str] = []

    def route(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", route)
    page.goto(url)
    page.wait_for_selector("#graph svg g.node")
    return refused


def test_the_page_shows_every_chainlet_and_loads_nothing_off_the_loopback(
    page: Any, dashboard: str, artifacts: Path
) -> None:
    refused = _open(page, dashboard)
    # The key went into a cookie and out of the address bar.
    assert page.evaluate("location.href") == origin_of(dashboard) + "/"
    names = page.evaluate("[...document.querySelectorAll('#graph g.node')].map(n => n.dataset.name)")
    assert sorted(names) == sorted(CHAINLETS)
    # The edges carry the dependencies' settings, the nodes their concurrency.
    graph_text = page.inner_text("#graph")
    assert "generator: retries 2, timeout 40s" in graph_text
    assert "counter: retries 1, timeout 5s" in graph_text
    assert "concurrency 8, 2 replicas" in graph_text
    # One row per replica, every one ready.
    _wait(
        page,
        "[...document.querySelectorAll('#chainlets tbody tr .state')].filter(c => c.textContent === 'ready')"
        f".length === {len(CHAINLETS) + 1}",
    )
    rows = page.evaluate(
        "[...document.querySelectorAll('#chainlets tbody tr')]"
        ".map(r => r.dataset.chainlet + r.dataset.replica)"
    )
    assert sorted(rows) == ["Counter0", "Entry0", "Generator0", "Generator1"]
    page.wait_for_selector("#try-fields [data-field=prompt]")
    # The entrypoint's log tail (the first chainlet of the list) with its start-up line.
    _wait(page, "document.querySelector('#log-lines').textContent.includes('chainlet Entry is ready')")
    page.screenshot(path=str(artifacts / "dashboard-loaded.png"), full_page=True)
    assert refused == []


def test_try_it_streams_tokens_into_the_page_before_the_stream_ends(
    page: Any, dashboard: str, artifacts: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "release"
    _open(page, dashboard)
    page.wait_for_selector("#try-fields [data-field=release] input")
    page.fill("#try-fields [data-field=prompt] input", "alpha beta gamma")
    page.fill("#try-fields [data-field=release] input", str(gate))
    page.click("#try-run")
    # The generator holds its second word until the gate exists: the first is in the page
    # while the stream is still open.
    _wait(page, "document.querySelector('#try-output').textContent.includes('<alpha>')")
    assert page.get_attribute("#try-status", "data-phase") == "streaming"
    assert "<beta>" not in page.inner_text("#try-output")
    page.screenshot(path=str(artifacts / "dashboard-streaming.png"), full_page=True)
    gate.touch()
    _wait(page, "document.querySelector('#try-status').dataset.phase === 'done'")
    assert page.inner_text("#try-output") == "<alpha><beta><gamma> [3 words]"
    assert "request " in page.inner_text("#try-status")


def test_a_chainlet_killed_by_pid_shows_its_restart(
    page: Any, dashboard: str, dashboard_chain: Any, artifacts: Path
) -> None:
    from chains.deploy import find_state
    from chains.targets.state import same_process

    _open(page, dashboard)
    (counter,) = find_state(CHAIN).replicas("Counter")
    assert counter.pid is not None and same_process(counter.pid, counter.identity)
    restarts = "document.querySelector('#chainlets tr[data-chainlet=Counter] .restarts')"
    _wait(page, f"{restarts} && {restarts}.textContent === '{counter.restarts}'")
    os.kill(counter.pid, signal.SIGKILL)  # a chainlet process of the chain this module pushed
    _wait(page, f"{restarts}.textContent === '{counter.restarts + 1}'", timeout=30)
    _wait(
        page,
        "document.querySelector('#chainlets tr[data-chainlet=Counter] .state').textContent === 'ready'",
        timeout=30,
    )
    new_pid = page.inner_text("#chainlets tr[data-chainlet=Counter] .pid")
    assert new_pid != str(counter.pid)
    # Why it went down, in the words `chains status` prints after "last went down:".
    (restarted,) = find_state(CHAIN).replicas("Counter")
    assert restarted.reason
    reason = "document.querySelector('#reasons li[data-chainlet=Counter] .reason')"
    _wait(page, f"{reason} && {reason}.textContent === {json.dumps(restarted.reason)}")
    page.screenshot(path=str(artifacts / "dashboard-restarted.png"), full_page=True)
    # The restarted chainlet answers again.
    assert dashboard_chain.call(prompt="one two") == ["<one>", "<two>", " [2 words]"]


def test_traces_charts_and_logs_show_the_calls(
    page: Any, dashboard: str, dashboard_chain: Any, artifacts: Path
) -> None:
    for _ in range(3):
        dashboard_chain.call(prompt="count these words")
    _open(page, dashboard)
    page.wait_for_selector("#traces li")
    # The newest trace is drawn as a waterfall with a span of every chainlet.
    _wait(
        page,
        "new Set([...document.querySelectorAll('#waterfall .wf-row')].map(r => r.dataset.service)).size"
        " === 3",
    )
    _wait(
        page,
        "[...document.querySelectorAll('#chart-rate polyline')].some(l => l.dataset.chainlet === 'Entry')",
    )
    page.fill("#try-fields [data-field=prompt] input", "a dashboard for every chain")
    page.click("#try-run")
    _wait(page, "document.querySelector('#try-status').dataset.phase === 'done'")
    assert page.inner_text("#try-output") == "<a><dashboard><for><every><chain> [5 words]"
    # The newest trace, drawn as it arrives, is that call's.
    request_id = page.inner_text("#try-status").rsplit("request ", 1)[1].strip()
    _wait(page, f"document.querySelector('#waterfall').textContent.includes('request {request_id}')")
    page.select_option("#log-chainlet", "Generator")
    # Generator's log tail (both replicas) holds the line of that call.
    _wait(page, f"document.querySelector('#log-lines').textContent.includes('rid={request_id}')")
    page.screenshot(path=str(artifacts / "dashboard.png"), full_page=True)
    if os.environ.get("CHAINS_DOCS_SCREENSHOTS") == "1":
        target = REPO / "docs" / "images" / "dashboard.png"
        target.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(target), full_page=True)


def test_an_async_job_is_listed_and_its_stream_shown(
    page: Any, dashboard: str, dashboard_chain: Any, artifacts: Path
) -> None:
    submitted = httpx.post(
        f"{dashboard_chain.entrypoint_url}/async_run_remote",
        json={"model_input": {"prompt": "async words here"}},
        headers={"authorization": f"Bearer {API_KEY}"},
    )
    assert submitted.status_code == 200, submitted.text
    job_id = submitted.json()["request_id"]
    _open(page, dashboard)
    row = f"document.querySelector('#jobs tr[data-job=\"{job_id}\"]')"
    _wait(page, f"{row} && {row}.dataset.status === 'SUCCEEDED'", timeout=30)
    cells = page.evaluate(f"[...{row}.cells].map(c => c.textContent)")
    assert cells[0] == job_id[:12] and cells[1] == "SUCCEEDED"
    assert cells[2] != "-" and cells[4] != "-"  # created, finished
    assert cells[6].startswith("stream · ")
    page.click(f"#jobs tr[data-job='{job_id}'] a.job-result")
    _wait(page, "document.querySelector('#job-detail').textContent.includes('<async>')")
    assert "<here>" in page.inner_text("#job-detail")
    page.screenshot(path=str(artifacts / "dashboard-jobs.png"), full_page=True)


def test_the_api_key_is_required(dashboard: str) -> None:
    origin = origin_of(dashboard)
    for path in ("/", "/api/overview", "/api/logs?chainlet=Entry", "/static/app.js", "/api/jobs"):
        assert httpx.get(origin + path).status_code == 401, path
        wrong = {"authorization": "Bearer not-the-key"}
        assert httpx.get(origin + path, headers=wrong).status_code == 401, path
    assert httpx.get(f"{origin}/?key=not-the-key").status_code == 401
    refused = httpx.post(f"{origin}/api/call", json={"prompt": "x"})
    assert refused.status_code == 401
    right = {"authorization": f"Bearer {API_KEY}"}
    assert httpx.get(f"{origin}/api/overview", headers=right).json()["chain"] == CHAIN
    login = httpx.get(dashboard)
    assert login.status_code == 303 and "HttpOnly" in login.headers["set-cookie"]
    with httpx.Client(follow_redirects=True) as client:
        assert "chains dashboard" in client.get(dashboard).text


def test_a_caller_leaving_a_try_it_stream_ends_it_in_the_chain(
    dashboard: str, dashboard_chain: Any, tmp_path: Path
) -> None:
    entry_metrics = f"{dashboard_chain.entrypoint_url}/metrics"
    key = {"authorization": f"Bearer {API_KEY}"}

    def cancelled() -> float:
        return metric(httpx.get(entry_metrics, headers=key).text, "chains_streams_cancelled_total")

    before = cancelled()
    never = str(tmp_path / "never-created")  # the generator holds its second word until this exists
    arguments = {"prompt": "first second", "release": never}
    headers = {**key, "accept": "text/event-stream"}
    with httpx.stream("POST", f"{origin_of(dashboard)}/api/call", json=arguments, headers=headers) as answer:
        assert answer.status_code == 200
        seen = ""
        for chunk in answer.iter_text():
            seen += chunk
            if "<first>" in seen:
                break
    # The page's connection is gone: the dashboard ends its call to the entrypoint, whose stream stops.
    wait_until(lambda: cancelled() == before + 1, 20, "the entrypoint counts the stream as cancelled")


def test_other_host_names_are_refused(dashboard: str) -> None:
    # A page whose own domain name was rebound to 127.0.0.1 sends that name as its host.
    port = urlsplit(dashboard).port
    headers = {"host": f"rebound.example:{port}", "authorization": f"Bearer {API_KEY}"}
    answer = httpx.get(f"{origin_of(dashboard)}/api/overview", headers=headers)
    assert answer.status_code == 403
    assert "127.0.0.1" in answer.json()["detail"]


async def test_requests_from_off_the_loopback_are_refused(dashboard_chain: Any) -> None:
    from chains.ui.app import DashboardApp
    from chains.ui.sources import ChainView

    app = DashboardApp(ChainView(CHAIN), port=8765)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    for client in (("192.0.2.7", 40000), ("10.0.0.2", 40000)):
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/api/overview",
            "query_string": b"",
            "client": client,
            "headers": [(b"host", b"127.0.0.1:8765"), (b"authorization", f"Bearer {API_KEY}".encode())],
        }
        sent.clear()
        await app(scope, receive, send)
        assert sent[0]["status"] == 403
    scope["client"] = ("127.0.0.1", 40000)
    sent.clear()
    await app(scope, receive, send)
    assert sent[0]["status"] == 200


def test_binding_off_the_loopback_is_refused(dashboard_chain: Any, chains_home: Path) -> None:
    result = subprocess.run(
        _command(CHAIN, "--host", "0.0.0.0"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CHAINS_HOME": str(chains_home)},
        cwd=REPO,
    )
    assert result.returncode == 1
    assert "--host 0.0.0.0 is not a loopback address" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("host", ["192.0.2.1", "::", "example.com", "127.0.0.1.example.com"])
def test_no_address_off_the_loopback_is_bound(host: str) -> None:
    from chains.errors import ChainsUsageError
    from chains.ui.serve import bind_loopback

    with pytest.raises(ChainsUsageError, match=f"--host {host} is not a loopback address"):
        bind_loopback(host, 0)


def test_an_unknown_chain_is_said(chains_home: Path) -> None:
    from click.testing import CliRunner

    from chains.cli import main

    result = CliRunner().invoke(main, ["ui", "no-such-chain"])
    assert result.exit_code == 1
    assert "no chain named 'no-such-chain'" in result.output
