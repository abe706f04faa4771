"""Stubs between real chainlet processes: retries, deadlines, errors and cancellation across hops."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest

from chains.call_context import CallContext, serving_call
from chains.errors import RemoteError, StreamInterrupted
from chains.metrics import Metrics
from chains.stubs import StubBase, StubOptions
from tests.helpers import (
    TOKEN,
    ServerProcess,
    asgi_in_thread,
    generate_chain,
    running,
    unique_port,
    wait_until,
    write_chain,
)

CHAIN = """
import asyncio
import os
from pathlib import Path
from typing import AsyncIterator

import pydantic

import chains


class Item(pydantic.BaseModel):
    i: int


class Leaf(chains.ChainletBase):
    async def run_remote(self, text: str, mode: str = "ok", delay: float = 0.0) -> str:
        if mode == "fail":
            raise ValueError(f"leaf refuses {text!r}")
        await asyncio.sleep(delay)
        return text[::-1]


class Mid(chains.ChainletBase):
    def __init__(self, leaf: Leaf = chains.depends(Leaf, retries=6, timeout_sec=5)) -> None:
        self._leaf = leaf

    async def run_remote(self, text: str, mode: str = "ok", delay: float = 0.0) -> str:
        return await self._leaf.run_remote(text, mode, delay)


@chains.mark_entrypoint
class Top(chains.ChainletBase):
    def __init__(self, mid: Mid = chains.depends(Mid, retries=6, timeout_sec=20)) -> None:
        self._mid = mid

    async def run_remote(self, text: str, mode: str = "ok", delay: float = 0.0) -> str:
        return await self._mid.run_remote(text, mode, delay)


class Producer(chains.ChainletBase):
    async def run_remote(self, n: int, die_after: int = -1, delay: float = 0.0) -> AsyncIterator[Item]:
        try:
            for i in range(n):
                if i == die_after:
                    os._exit(1)  # the process dies mid-stream
                yield Item(i=i)
                await asyncio.sleep(delay)
        except BaseException as exc:
            marker = os.environ.get("PRODUCER_MARKER")
            if marker:
                Path(marker).write_text(type(exc).__name__)
            raise


class Relay(chains.ChainletBase):
    def __init__(self, producer: Producer = chains.depends(Producer)) -> None:
        self._producer = producer

    async def run_remote(self, n: int, die_after: int = -1, delay: float = 0.0) -> AsyncIterator[Item]:
        async for item in self._producer.run_remote(n, die_after, delay):
            yield item


class SyncLeaf(chains.ChainletBase):
    def run_remote(self, text: str) -> str:
        return text.upper()


class SyncCaller(chains.ChainletBase):
    def __init__(self, leaf: SyncLeaf = chains.depends(SyncLeaf)) -> None:
        self._leaf = leaf

    def run_remote(self, text: str) -> str:
        return self._leaf.run_remote(text) + "!"


class AsyncCaller(chains.ChainletBase):
    def __init__(self, leaf: SyncLeaf = chains.depends(SyncLeaf)) -> None:
        self._leaf = leaf

    async def run_remote(self, text: str, offload: bool = False) -> str:
        if offload:
            return await asyncio.to_thread(self._leaf.run_remote, text)
        return self._leaf.run_remote(text)


class Front(chains.ChainletBase):
    def __init__(self, relay: Relay = chains.depends(Relay)) -> None:
        self._relay = relay

    async def run_remote(self, n: int, die_after: int = -1, delay: float = 0.0) -> AsyncIterator[Item]:
        async for item in self._relay.run_remote(n, die_after, delay):
            yield item
"""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("stubs")
    file = write_chain(folder / "src", CHAIN)
    dirs = generate_chain(file, folder / "out" / "top", entrypoint="Top")
    dirs.update(generate_chain(file, folder / "out" / "front", entrypoint="Front"))
    for name in ("SyncCaller", "AsyncCaller"):
        dirs.update(generate_chain(file, folder / "out" / name, entrypoint=name))
    return dirs


def wired(generated: dict[str, Path], *names: str, env: dict[str, str] | None = None) -> list[ServerProcess]:
    """Servers for ``names`` (callee first), each pointed at the next one's port."""
    servers: list[ServerProcess] = []
    for index, name in enumerate(names):
        deps = {names[index - 1]: [servers[-1].url]} if index else {}
        servers.append(
            ServerProcess(generated[name], entrypoint=index == len(names) - 1, dependencies=deps, env=env)
        )
    return servers


def call(server: ServerProcess, body: dict[str, object], timeout: float = 30) -> httpx.Response:
    return httpx.post(server.url + "/run_remote", json=body, headers=server.headers, timeout=timeout)


def test_value_error_three_hops_deep_keeps_its_type_and_every_hop(generated: dict[str, Path]) -> None:
    # Every hop's traceback reaches a caller outside the chain only in debug mode (see
    # tests/reliability/test_errors_across_hops.py for the default, public, form).
    debug = {"CHAINS_DEBUG_ERRORS": "1"}
    with running(*wired(generated, "Leaf", "Mid", "Top", env=debug)) as (_, _, top):
        response = call(top, {"text": "abc", "mode": "fail"})
        assert response.status_code == 500
        detail = response.json()["error"]
        assert detail["exc_type"] == "ValueError" and detail["exc_module"] == "builtins"
        assert [hop["chainlet"] for hop in _hops(detail)] == ["Top", "Mid", "Leaf"]

        class TopStub(StubBase):
            async def run_remote(self, text: str, mode: str = "ok", delay: float = 0.0) -> str:
                return await self.call_remote(text=text, mode=mode, delay=delay)  # type: ignore[no-any-return]

        async def through_a_stub() -> None:
            stub = TopStub(top.url)
            with pytest.raises(ValueError, match="leaf refuses 'abc'") as info:
                await stub.run_remote("abc", mode="fail")
            message = str(info.value)
            assert (
                message.index("in chainlet Top")
                < message.index("in chainlet Mid")
                < message.index("in chainlet Leaf")
            )
            assert message.count("run_remote") >= 3
            await stub.aclose()

        asyncio.run(through_a_stub())
        assert call(top, {"text": "abc"}).json() == "cba"


def _hops(detail: dict[str, object]) -> list[dict[str, object]]:
    hops = []
    current: object = detail
    while isinstance(current, dict):
        hops.append(current)
        current = current.get("cause")
    return hops


def test_dependency_down_at_first_comes_up_during_the_retries(generated: dict[str, Path]) -> None:
    port = unique_port()
    result: list[httpx.Response] = []
    mid = ServerProcess(
        generated["Mid"], entrypoint=True, dependencies={"Leaf": [f"http://127.0.0.1:{port}"]}
    )
    with running(mid):
        caller = threading.Thread(target=lambda: result.append(call(mid, {"text": "late"})))
        caller.start()
        retries = 'chains_dependency_retries_total{chainlet="Mid",dependency="Leaf"}'
        # The leaf comes up only once an attempt has found nothing listening and was retried;
        # it starts in a thread, well within the retries' backoff (a process would take longer).
        wait_until(lambda: _metric(mid, retries) >= 1, 10, "a retry of the call to the absent leaf")
        leaf = _ReversingLeaf()
        with asgi_in_thread(leaf, port):
            caller.join(20)
        assert result and result[0].status_code == 200 and result[0].json() == "etal"
        assert leaf.requests == 1  # nothing reached it before it came up


class _ReversingLeaf:
    """A real HTTP service that answers like the chain's Leaf: the text reversed."""

    def __init__(self) -> None:
        self.requests = 0

    async def __call__(self, scope: dict[str, object], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.requests += 1
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        answer = json.dumps(json.loads(body)["text"][::-1]).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": answer})


def _metric(server: ServerProcess, name: str) -> float:
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


class _FlakyService:
    """A real HTTP service that answers 503 twice, then like a chainlet would."""

    def __init__(self) -> None:
        self.requests = 0

    async def __call__(self, scope: dict[str, object], receive: object, send: object) -> None:
        if scope["type"] != "http":
            return
        self.requests += 1
        status, body = (503, b'{"detail":"busy"}') if self.requests <= 2 else (200, b'"from flaky"')
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"0")]
        await send({"type": "http.response.start", "status": status, "headers": headers})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": body})  # type: ignore[operator]


@pytest.fixture
def flaky() -> Iterator[tuple[_FlakyService, str]]:
    service = _FlakyService()
    with asgi_in_thread(service) as url:
        yield service, url


def test_503_twice_then_success_after_two_retries(
    generated: dict[str, Path], flaky: tuple[_FlakyService, str]
) -> None:
    service, url = flaky
    with running(ServerProcess(generated["Mid"], entrypoint=True, dependencies={"Leaf": [url]})) as (mid,):
        response = call(mid, {"text": "x"})
        assert response.status_code == 200 and response.json() == "from flaky"
        assert service.requests == 3
        assert _metric(mid, 'chains_dependency_retries_total{chainlet="Mid",dependency="Leaf"}') == 2
        assert (
            _metric(mid, 'chains_dependency_calls_total{chainlet="Mid",dependency="Leaf",outcome="ok"}') == 1
        )


def test_slow_dependency_against_the_callers_deadline(generated: dict[str, Path]) -> None:
    with running(*wired(generated, "Leaf", "Mid", "Top")) as (leaf, _, top):
        started = time.monotonic()
        response = httpx.post(
            top.url + "/run_remote",
            json={"text": "slow", "delay": 10},
            headers={**top.headers, "x-chains-timeout": "1.0"},
            timeout=30,
        )
        elapsed = time.monotonic() - started
        # Each hop's deadline is the one it was sent plus the time in transit, so the
        # entrypoint's runs out first: it answers 504 itself, before the leaf's 10 s are over.
        assert response.status_code == 504 and elapsed < 10
        error = response.json()["error"]
        assert error["exc_type"] == "DeadlineExceeded"
        assert error["message"] == "Top did not answer within the caller's deadline"
        # The leaf stopped working too: nothing is left in flight there.
        in_flight = 'chains_in_flight{chainlet="Leaf"}'
        wait_until(lambda: _metric(leaf, in_flight) == 0, 5, "the leaf's call cancelled")


def test_client_disconnect_cancels_the_producer_three_hops_away(
    generated: dict[str, Path], tmp_path: Path
) -> None:
    marker = tmp_path / "cancelled"
    servers = wired(generated, "Producer", "Relay", "Front", env={"PRODUCER_MARKER": str(marker)})
    with running(*servers) as (producer, _, front):
        with httpx.stream(
            "POST",
            front.url + "/run_remote",
            json={"n": 1000, "delay": 0.05},
            headers=front.headers,
            timeout=10,
        ) as response:
            lines = response.iter_lines()
            assert json.loads(next(lines)) == {"i": 0}
        # The client is gone: the cancellation travels Front -> Relay -> Producer.
        deadline = time.monotonic() + 3
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), producer.logs()[-2000:]
        assert marker.read_text() in ("CancelledError", "GeneratorExit")
        assert _metric(producer, 'chains_in_flight{chainlet="Producer"}') == 0


def test_producer_dying_after_three_items_interrupts_the_stream(generated: dict[str, Path]) -> None:
    servers = wired(generated, "Producer", "Relay")
    with running(*servers) as (_, relay):

        async def consume(url: str) -> tuple[list[int], StreamInterrupted]:
            stub = ItemStream(url, options=StubOptions(retries=0), token=TOKEN)
            seen: list[int] = []
            with pytest.raises(StreamInterrupted) as info:
                # The pause lets each item leave the process before the next: the one that
                # dies loses only what it had not sent yet.
                async for item in stub.run_remote(n=10, die_after=3, delay=0.05):
                    seen.append(item.i)
            await stub.aclose()
            return seen, info.value

        # Relay read the broken stream: it fails with StreamInterrupted, which reaches us as
        # a RemoteError that is still a StreamInterrupted.
        seen, error = asyncio.run(consume(relay.url))
        assert seen == [0, 1, 2]
        assert (
            isinstance(error, RemoteError) and error.detail is not None and error.detail.chainlet == "Relay"
        )


def test_a_direct_consumer_of_a_dying_producer_gets_stream_interrupted(generated: dict[str, Path]) -> None:
    with running(ServerProcess(generated["Producer"])) as (producer,):

        async def consume() -> list[int]:
            stub = ItemStream(producer.url, options=StubOptions(retries=0), token=TOKEN)
            seen: list[int] = []
            with pytest.raises(StreamInterrupted) as info:
                async for item in stub.run_remote(n=10, die_after=3, delay=0.05):
                    seen.append(item.i)
            assert not isinstance(info.value, RemoteError)
            # It was read on from the byte it stopped at, and the dead replica could not say more.
            assert "could not be read on" in str(info.value)
            await stub.aclose()
            return seen

        assert asyncio.run(consume()) == [0, 1, 2]


class Item(pydantic.BaseModel):
    """The same schema as the chain's Item, so the stream's fingerprint matches."""

    i: int


class ItemStream(StubBase):
    """A hand-written stub for Producer/Relay/Front, which share a signature."""

    def run_remote(self, n: int, die_after: int = -1, delay: float = 0.0) -> AsyncIterator[Item]:
        return self.stream_remote(n=n, die_after=die_after, delay=delay)


class LeafStub(StubBase):
    async def run_remote(self, text: str, mode: str = "ok", delay: float = 0.0) -> str:
        return await self.call_remote(text=text, mode=mode, delay=delay)  # type: ignore[no-any-return]


def test_calls_spread_over_replicas_and_skip_a_dead_one_at_once(generated: dict[str, Path]) -> None:
    with running(ServerProcess(generated["Leaf"]), ServerProcess(generated["Leaf"])) as (one, two):

        async def calls(count: int, urls: list[str], deadline_sec: float | None = None) -> int:
            """``count`` calls; how many of them were retried."""
            metrics = Metrics("Test")
            stub = LeafStub(urls, options=StubOptions(retries=2), token=TOKEN, metrics=metrics)
            deadline = None if deadline_sec is None else time.monotonic() + deadline_sec
            with serving_call(CallContext("replicas", deadline)):
                for _ in range(count):
                    assert await stub.run_remote("ab") == "ba"
            await stub.aclose()
            return int(
                _rendered(metrics, 'chains_dependency_retries_total{chainlet="Test",dependency="LeafStub"}')
            )

        assert asyncio.run(calls(10, [one.url, two.url])) == 0
        served = [
            _metric(server, 'chains_calls_total{chainlet="Leaf",status="200"}') for server in (one, two)
        ]
        assert served == [5, 5]  # taken in turn
        one.kill()
        # Every call whose turn fell on the dead replica (all but perhaps the first) was retried
        # once, on the other one.
        assert asyncio.run(calls(10, [one.url, two.url])) in (9, 10)
        assert _metric(two, 'chains_calls_total{chainlet="Leaf",status="200"}') == 15

    # A failure moves to the other replica without a pause, even one the failed replica asks
    # for: a pause of Retry-After's 30 s would not fit the caller's 20 s, and the stub would
    # give up at once instead of sleeping.
    with running(ServerProcess(generated["Leaf"])) as (leaf,), asgi_in_thread(_Busy()) as busy:
        assert asyncio.run(calls(6, [busy, leaf.url], deadline_sec=20)) in (5, 6)


class _Busy:
    """A real HTTP service that is always busy for the next 30 s."""

    async def __call__(self, scope: dict[str, object], receive: object, send: object) -> None:
        if scope["type"] != "http":
            return
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"30")]
        await send({"type": "http.response.start", "status": 503, "headers": headers})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b'{"detail":"busy"}'})  # type: ignore[operator]


def _rendered(metrics: Metrics, name: str) -> float:
    for line in metrics.render().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def test_use_binary_calls_with_messagepack(generated: dict[str, Path]) -> None:
    with running(ServerProcess(generated["Leaf"])) as (leaf,):

        async def call_binary() -> str:
            stub = LeafStub(leaf.url, options=StubOptions(use_binary=True), token=TOKEN)
            try:
                return await stub.run_remote("binary")
            finally:
                await stub.aclose()

        assert asyncio.run(call_binary()) == "yranib"
        # The server answered in MessagePack because the stub asked for it (no JSON parse error).
        assert _metric(leaf, 'chains_calls_total{chainlet="Leaf",status="200"}') == 1


class _Gateway:
    """A real HTTP service standing in for a platform's gateway: one predict route, one API key."""

    KEY = "gw-key-1"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, scope: dict[str, object], receive: object, send: object) -> None:
        if scope["type"] != "http":
            return
        headers = dict(scope["headers"])  # type: ignore[call-overload]
        authorization = headers.get(b"authorization", b"").decode()
        self.seen.append((str(scope["path"]), authorization))
        if scope["path"] != "/environments/production/predict":
            status, body = 404, b'{"detail":"no such route"}'
        elif authorization != f"Api-Key {self.KEY}":
            status, body = 401, b'{"detail":"invalid API key"}'
        else:
            status, body = 200, b'"through the gateway"'
        await send(  # type: ignore[operator]
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})  # type: ignore[operator]


@pytest.fixture
def gateway() -> Iterator[tuple[_Gateway, dict[str, object]]]:
    service = _Gateway()
    with asgi_in_thread(service) as url:
        address = {
            "urls": [url],
            "path": "/environments/production/predict",
            "auth": {"scheme": "Api-Key", "secret": "gateway_key"},
        }
        yield service, address


def _calling_through(generated: dict[str, Path], address: dict[str, object], key: str) -> ServerProcess:
    """Mid, its Leaf at ``address``, with ``key`` in the secret the address names."""
    env = {"CHAINS_SECRET_gateway_key": key}
    return ServerProcess(generated["Mid"], entrypoint=True, dependencies={"Leaf": address}, env=env)


def test_an_address_sends_calls_to_its_path_with_the_credential_from_its_secret(
    generated: dict[str, Path], gateway: tuple[_Gateway, dict[str, object]]
) -> None:
    service, address = gateway
    with running(_calling_through(generated, address, _Gateway.KEY)) as (mid,):
        response = call(mid, {"text": "x"})
        assert response.status_code == 200 and response.json() == "through the gateway"
    # The chain's own token stays inside the chain: the gateway got its key, and only that.
    assert service.seen == [("/environments/production/predict", f"Api-Key {_Gateway.KEY}")]


def test_a_refused_credential_is_named_and_not_retried(
    generated: dict[str, Path], gateway: tuple[_Gateway, dict[str, object]]
) -> None:
    service, address = gateway
    with running(_calling_through(generated, address, "no")) as (mid,):
        response = call(mid, {"text": "x"})
    assert response.status_code == 500
    message = response.json()["error"]["message"]
    assert "refused the call (401 invalid API key): the credential it was sent is wrong" in message
    assert len(service.seen) == 1


def test_a_missing_credential_secret_stops_the_server_at_startup_naming_it(
    generated: dict[str, Path], gateway: tuple[_Gateway, dict[str, object]]
) -> None:
    _, address = gateway
    mid = ServerProcess(generated["Mid"], entrypoint=True, dependencies={"Leaf": address}).start()
    assert mid.process is not None
    assert mid.process.wait(20) != 0
    assert "secret 'gateway_key', which is not set; set CHAINS_SECRET_gateway_key" in mid.logs()


BLOCKING = "SyncLeaf.run_remote is sync and was called on a running event loop"


def test_sync_stubs_call_sync_endpoints_and_warn_once_when_they_block_a_loop(
    generated: dict[str, Path],
) -> None:
    leaf = ServerProcess(generated["SyncLeaf"])
    sync_caller = ServerProcess(
        generated["SyncCaller"], entrypoint=True, dependencies={"SyncLeaf": [leaf.url]}
    )
    blocking = ServerProcess(generated["AsyncCaller"], entrypoint=True, dependencies={"SyncLeaf": [leaf.url]})
    offloading = ServerProcess(
        generated["AsyncCaller"], entrypoint=True, dependencies={"SyncLeaf": [leaf.url]}
    )
    with running(leaf, sync_caller, blocking, offloading):
        # A sync endpoint runs in a thread: its sync stub blocks nothing.
        assert call(sync_caller, {"text": "abc"}).json() == "ABC!"
        for _ in range(2):
            assert call(blocking, {"text": "abc"}).json() == "ABC"
            assert call(offloading, {"text": "abc", "offload": True}).json() == "ABC"
    assert BLOCKING not in sync_caller.logs() and BLOCKING not in offloading.logs()
    assert blocking.logs().count(BLOCKING) == 1
    assert "await asyncio.to_thread(stub.run_remote, ...)" in blocking.logs()


def test_a_wrong_chain_token_is_named_as_such(generated: dict[str, Path]) -> None:
    leaf = ServerProcess(generated["Leaf"])
    mid = ServerProcess(
        generated["Mid"],
        entrypoint=True,
        dependencies={"Leaf": [leaf.url]},
        env={"CHAINS_INTERNAL_TOKEN": "not-the-chains-token"},
    )
    with running(leaf, mid):
        response = call(mid, {"text": "x"})
    assert response.status_code == 500
    assert "refused the call (401" in response.json()["error"]["message"]
    assert "the chain's token is wrong" in response.json()["error"]["message"]
