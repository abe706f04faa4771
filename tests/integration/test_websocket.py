"""WebSocket endpoints between real chainlet processes on 127.0.0.1, talked to with the
``websockets`` client: echo through two hops, frames of both kinds and 1 MiB, 64 sockets at
once, cancellation, a dependency's failure and crash, admission, metrics and the drain."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from chains import WebSocketProtocol
from chains.errors import RemoteError, StreamInterrupted
from chains.stubs import StubBase, StubOptions
from tests.helpers import TOKEN, Cli, ServerProcess, generate_chain, running, wait_until, write_chain

CHAIN = """
import asyncio
import os
import time
from pathlib import Path

import chains

WIDE = chains.RemoteConfig(compute=chains.Compute(concurrency=64))


class Worker(chains.ChainletBase):
    remote_config = WIDE

    async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
        async for message in websocket:
            if message == "crash":
                raise ValueError("the worker fails on purpose")
            if message == "die":
                os._exit(1)  # the process dies mid-conversation
            if message == "slow":
                marker = Path(os.environ["WORKER_MARKER"])
                marker.write_text("started")
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    marker.write_text(f"cancelled {time.time()}")
                    raise
            await websocket.send(message)


@chains.mark_entrypoint
class Head(chains.ChainletBase):
    remote_config = WIDE

    def __init__(self, worker: Worker = chains.depends(Worker, retries=3)) -> None:
        self._worker = worker

    async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
        async with self._worker.run_remote() as upstream:
            async for message in websocket:
                await upstream.send(message)
                await websocket.send(await upstream.receive())
"""

API_KEY = "ws-test-key-0123456789"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("websocket")
    return generate_chain(write_chain(folder / "src", CHAIN), folder / "out")


def _pair(generated: dict[str, Path], marker: Path, **head_env: str) -> tuple[ServerProcess, ServerProcess]:
    worker = ServerProcess(generated["Worker"], env={"WORKER_MARKER": str(marker), "CHAINS_GRACE_SEC": "1"})
    head = ServerProcess(
        generated["Head"], entrypoint=True, dependencies={"Worker": [worker.url]}, env=head_env
    )
    return worker, head


@pytest.fixture(scope="module")
def chain(
    generated: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    marker = tmp_path_factory.mktemp("marker") / "worker"
    with running(*_pair(generated, marker, CHAINS_API_KEY=API_KEY)) as servers:
        yield servers  # type: ignore[misc]


def ws_url(server: ServerProcess) -> str:
    return server.url.replace("http://", "ws://") + "/run_remote"


KEY = {"authorization": f"Bearer {API_KEY}"}


async def test_echo_through_two_hops_with_text_binary_and_a_mebibyte(
    chain: tuple[ServerProcess, ServerProcess],
) -> None:
    _, head = chain
    big_bytes = bytes(range(256)) * 4096
    big_text = "ü" * (2**19)  # 1 MiB of UTF-8
    async with connect(ws_url(head), additional_headers=KEY, max_size=4 * 2**20) as ws:
        for message in ("hello", b"\x00\xffbinary", "", big_bytes, big_text):
            await ws.send(message)
            answer = await ws.recv()
            assert type(answer) is type(message) and answer == message
    assert ws.close_code == 1000


async def test_sixty_four_sockets_at_once(chain: tuple[ServerProcess, ServerProcess]) -> None:
    _, head = chain

    async def talk(i: int) -> list[str]:
        async with connect(ws_url(head), additional_headers=KEY) as ws:
            answers = []
            for j in range(5):
                await ws.send(f"{i}:{j}")
                answers.append(str(await ws.recv()))
            return answers

    results = await asyncio.wait_for(asyncio.gather(*(talk(i) for i in range(64))), 60)
    assert results == [[f"{i}:{j}" for j in range(5)] for i in range(64)]
    metrics = httpx.get(head.url + "/metrics", headers=KEY).text
    assert "chains_websockets_open" in metrics
    counted = [
        line
        for line in metrics.splitlines()
        if "chains_websocket_messages_total" in line and 'direction="in"' in line
    ]
    assert counted and int(counted[0].rsplit(" ", 1)[1]) >= 64 * 5


async def test_client_disconnect_cancels_the_dependency_within_a_second(
    chain: tuple[ServerProcess, ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> None:
    worker, head = chain
    marker = Path(worker.env["WORKER_MARKER"])
    marker.unlink(missing_ok=True)
    ws = await connect(ws_url(head), additional_headers=KEY)
    await ws.send("slow")
    await asyncio.to_thread(wait_until, lambda: marker.exists(), 10, "the worker to start its slow work")
    closed_at = time.time()
    ws.transport.abort()  # the client vanishes, without a close frame
    await asyncio.to_thread(
        wait_until, lambda: marker.read_text().startswith("cancelled"), 5, "the worker's work to be cancelled"
    )
    cancelled_at = float(marker.read_text().split()[1])
    print(f"the worker's work was cancelled {cancelled_at - closed_at:.3f}s after the client vanished")
    assert cancelled_at - closed_at < 1.0


async def test_a_dependency_failure_reaches_the_client_as_1011_naming_it(
    chain: tuple[ServerProcess, ServerProcess],
) -> None:
    _, head = chain
    async with connect(ws_url(head), additional_headers=KEY) as ws:
        await ws.send("before")
        assert await ws.recv() == "before"
        await ws.send("crash")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    reason = json.loads(closed.value.rcvd.reason)
    assert reason["chainlet"] == "Worker" and reason["exception"] == "ValueError"
    assert reason["request_id"]


async def test_credentials_are_checked_before_the_upgrade(chain: tuple[ServerProcess, ServerProcess]) -> None:
    worker, head = chain
    for url, headers in ((ws_url(head), {}), (ws_url(worker), {}), (ws_url(worker), KEY)):
        with pytest.raises(InvalidStatus) as refused:
            await connect(url, additional_headers=headers)
        assert refused.value.response.status_code == 401
    async with connect(ws_url(worker), additional_headers={"authorization": f"Bearer {TOKEN}"}) as ws:
        await ws.send("direct")
        assert await ws.recv() == "direct"


async def test_a_stream_ticket_opens_the_entrypoints_socket_in_place_of_the_key(
    chain: tuple[ServerProcess, ServerProcess],
) -> None:
    worker, head = chain
    ticket = httpx.post(head.url + "/stream_ticket", headers=KEY).json()["ticket"]
    async with connect(f"{ws_url(head)}?chains_ticket={ticket}") as ws:
        await ws.send("with a ticket")
        assert await ws.recv() == "with a ticket"
    expired = ticket.split(".")
    expired[1] = "1000"  # long past, and the signature no longer matches either
    refused = {
        "no ticket": (ws_url(head), "from POST /stream_ticket"),
        "the key as a ticket": (f"{ws_url(head)}?chains_ticket={API_KEY}", "not a stream ticket"),
        "a forged ticket": (f"{ws_url(head)}?chains_ticket={'.'.join(expired)}", "signature is wrong"),
        # Internal chainlets take the chain's token only.
        "a ticket at an internal chainlet": (f"{ws_url(worker)}?chains_ticket={ticket}", "internal token"),
    }
    for case, (url, detail) in refused.items():
        with pytest.raises(InvalidStatus) as refusal:
            await connect(url)
        response = refusal.value.response
        assert response.status_code == 401, case
        assert detail in json.loads(response.body)["detail"], case


async def test_a_web_page_of_an_origin_not_allowed_is_refused_before_the_upgrade(
    chain: tuple[ServerProcess, ServerProcess],
) -> None:
    _, head = chain
    with pytest.raises(InvalidStatus) as refusal:
        await connect(ws_url(head), additional_headers=KEY, origin="http://elsewhere.example")  # type: ignore[arg-type]
    assert refusal.value.response.status_code == 403
    assert "--cors-origin" in json.loads(refusal.value.response.body)["detail"]
    # A page the entrypoint served itself (its /docs) is of its own origin.
    async with connect(ws_url(head), additional_headers=KEY, origin=head.url) as ws:  # type: ignore[arg-type]
        await ws.send("same origin")
        assert await ws.recv() == "same origin"


async def test_a_plain_post_to_a_websocket_endpoint_is_refused_clearly(
    chain: tuple[ServerProcess, ServerProcess],
) -> None:
    _, head = chain
    response = httpx.post(head.url + "/run_remote", json={}, headers=KEY)
    assert response.status_code == 426
    assert "WebSocket" in response.json()["detail"]


async def test_a_full_chainlet_answers_503_before_the_upgrade(
    generated: dict[str, Path], tmp_path: Path
) -> None:
    worker = ServerProcess(
        generated["Worker"], env={"WORKER_MARKER": str(tmp_path / "m"), "CHAINS_CONCURRENCY": "2"}
    )
    auth = {"authorization": f"Bearer {TOKEN}"}
    with running(worker):
        async with (
            connect(ws_url(worker), additional_headers=auth),
            connect(ws_url(worker), additional_headers=auth),
        ):
            with pytest.raises(InvalidStatus) as refused:
                await connect(ws_url(worker), additional_headers=auth)
            assert refused.value.response.status_code == 503
        # The slots come back when the sockets close.
        await asyncio.sleep(0.2)
        async with connect(ws_url(worker), additional_headers=auth) as ws:
            await ws.send("again")
            assert await ws.recv() == "again"


async def test_a_dependency_that_dies_mid_conversation_is_never_a_clean_close(
    generated: dict[str, Path], tmp_path: Path
) -> None:
    worker, head = _pair(generated, tmp_path / "m")
    with running(worker, head):
        async with connect(ws_url(head)) as ws:
            await ws.send("alive")
            assert await ws.recv() == "alive"
            await ws.send("die")
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        assert json.loads(closed.value.rcvd.reason)["exception"] == "StreamInterrupted"


async def test_sigterm_closes_open_sockets_with_1001_after_the_grace_period(
    generated: dict[str, Path], tmp_path: Path
) -> None:
    worker = ServerProcess(
        generated["Worker"], env={"WORKER_MARKER": str(tmp_path / "m"), "CHAINS_GRACE_SEC": "1"}
    )
    with running(worker):
        auth = {"authorization": f"Bearer {TOKEN}"}
        async with connect(ws_url(worker), additional_headers=auth) as ws:
            await ws.send("x")
            assert await ws.recv() == "x"
            assert worker.process is not None
            worker.process.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        assert await asyncio.to_thread(worker.process.wait, 10) == 0


def test_chains_call_sends_stdin_lines_and_prints_the_replies(tmp_path: Path) -> None:
    """The realtime example pushed as local processes, talked to with `chains call`."""
    cli = Cli(tmp_path / "home")
    example = Path(__file__).parents[2] / "examples" / "realtime" / "chain.py"
    try:
        cli.push(str(example))
        result = subprocess.run(
            [sys.executable, "-m", "chains", "call", "realtime"],
            input="hello\nworld, again\n",
            capture_output=True,
            text=True,
            env=cli.env,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["HELLO", "WORLD, AGAIN"]
    finally:
        cli.run("stop", "realtime", check=False)


# The block docs/deploy.md documents for a WebSocket entrypoint behind nginx, used as written.
NGINX_HTTP = ["map $http_upgrade $connection_upgrade { default upgrade; '' close; }"]
NGINX_LOCATION = [
    "proxy_http_version 1.1;",
    "proxy_set_header Upgrade $http_upgrade;",
    "proxy_set_header Connection $connection_upgrade;",
    "proxy_read_timeout 3600s;",
    "proxy_send_timeout 3600s;",
]


def test_the_documented_nginx_block_is_the_one_tested() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "deploy.md").read_text()
    for line in [*NGINX_HTTP, *NGINX_LOCATION]:
        assert line in doc, line


async def test_a_conversation_survives_a_real_nginx(
    chain: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    from tests.nginx import Nginx, Site, nginx_binary

    _, head = chain
    site = Site("ws", head.url, NGINX_LOCATION, shared=False)
    proxy = Nginx(nginx_binary(), tmp_path / "nginx", [site], http=NGINX_HTTP).start()
    try:
        url = site.url.replace("http://", "ws://") + "/run_remote"
        big = bytes(range(256)) * 4096
        async with connect(url, additional_headers=KEY, max_size=4 * 2**20) as ws:
            for message in ("through nginx", big):
                await ws.send(message)
                assert await ws.recv() == message
            await ws.send("crash")
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        assert json.loads(closed.value.rcvd.reason)["chainlet"] == "Worker"
        # Plain calls still pass the same location (a refusal here: the endpoint is a socket).
        assert httpx.post(site.url + "/run_remote", json={}, headers=KEY).status_code == 426
    finally:
        proxy.stop()


class WorkerStub(StubBase):
    def run_remote(self) -> AbstractAsyncContextManager[WebSocketProtocol]:
        return self.connect_remote()


async def test_a_stub_gets_the_far_sides_failure_as_remote_error_with_its_traceback(
    chain: tuple[ServerProcess, ServerProcess],
) -> None:
    worker, _ = chain
    stub = WorkerStub(worker.url, name="Worker", token=TOKEN)
    try:
        async with stub.run_remote() as ws:
            await ws.send_bytes(b"\x01\x02")
            assert await ws.receive_bytes() == b"\x01\x02"
            await ws.send_text("crash")
            with pytest.raises(RemoteError) as failure:
                await ws.receive()
        assert isinstance(failure.value, ValueError)
        assert "the worker fails on purpose" in str(failure.value)
        assert 'raise ValueError("the worker fails on purpose")' in str(failure.value)
    finally:
        await stub.aclose()


async def test_a_stub_cancelled_mid_conversation_cancels_the_far_side(
    chain: tuple[ServerProcess, ServerProcess],
) -> None:
    worker, _ = chain
    marker = Path(worker.env["WORKER_MARKER"])
    marker.unlink(missing_ok=True)
    stub = WorkerStub(worker.url, name="Worker", token=TOKEN)

    async def converse() -> None:
        async with stub.run_remote() as ws:
            await ws.send_text("slow")
            await ws.receive()

    task = asyncio.ensure_future(converse())
    try:
        await asyncio.to_thread(wait_until, lambda: marker.exists(), 10, "the worker to start")
        task.cancel()
        cancelled_at = time.time()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(
            wait_until, lambda: marker.read_text().startswith("cancelled"), 5, "the worker's work to stop"
        )
        assert float(marker.read_text().split()[1]) - cancelled_at < 1.0
    finally:
        await stub.aclose()


async def test_opening_is_retried_until_the_upgrade_and_a_dead_peer_is_an_interruption(
    generated: dict[str, Path], tmp_path: Path
) -> None:
    worker = ServerProcess(generated["Worker"], env={"WORKER_MARKER": str(tmp_path / "m")})
    stub = WorkerStub(worker.url, name="Worker", token=TOKEN, options=StubOptions(retries=30))
    try:
        async with asyncio.timeout(60):
            conversation = stub.run_remote()  # held: the socket lives as long as its context
            opening = asyncio.ensure_future(conversation.__aenter__())
            await asyncio.sleep(0.3)  # refused meanwhile: nothing listens yet
            assert not opening.done()
            worker.start()
            ws = await opening
            await ws.send_text("alive")
            assert await ws.receive_text() == "alive"
            await ws.send_text("die")
            with pytest.raises(StreamInterrupted):
                await ws.receive()
            assert not ws.is_connected
            await conversation.__aexit__(None, None, None)
    finally:
        worker.kill()
        await stub.aclose()
