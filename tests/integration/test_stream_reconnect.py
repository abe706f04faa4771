"""Streams read on after a cut: real chainlet processes, a real TCP proxy that closes the first
connections mid-answer (as a proxy's timeout or a lost network would), and the stubs reading
on from the byte they stopped at (chains/server/reconnect.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pydantic
import pytest

from chains.errors import StreamInterrupted
from chains.stubs import StubBase, StubOptions
from tests.helpers import TOKEN, ServerProcess, generate_chain, running, wait_until, write_chain
from tests.jobs.cutting_proxy import CuttingProxy

CHAIN = """
import asyncio
import os
from pathlib import Path
from typing import AsyncIterator

import pydantic

import chains


class Item(pydantic.BaseModel):
    i: int
    pad: str


def _ran(name: str) -> None:
    with open(os.environ["RUNS_FILE"], "a") as runs:
        runs.write(name + "\\n")


class Producer(chains.ChainletBase):
    async def run_remote(self, n: int, delay: float = 0.0) -> AsyncIterator[Item]:
        _ran("Producer")
        try:
            for i in range(n):
                yield Item(i=i, pad="x" * 100)
                await asyncio.sleep(delay)
        except BaseException as exc:
            Path(os.environ["PRODUCER_MARKER"]).write_text(type(exc).__name__)
            raise


class Text(chains.ChainletBase):
    async def run_remote(self, n: int, delay: float = 0.0) -> AsyncIterator[str]:
        _ran("Text")
        for i in range(n):
            yield f"line {i}\\n"
            await asyncio.sleep(delay)


@chains.mark_entrypoint
class Relay(chains.ChainletBase):
    def __init__(self, producer: Producer = chains.depends(Producer)) -> None:
        self._producer = producer

    async def run_remote(self, n: int, delay: float = 0.0) -> AsyncIterator[Item]:
        async for item in self._producer.run_remote(n, delay):
            yield item
"""


class Item(pydantic.BaseModel):
    i: int
    pad: str


class ItemStub(StubBase):
    def run_remote(self, n: int, delay: float = 0.0) -> AsyncIterator[Item]:
        return self.stream_remote(n=n, delay=delay)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("reconnect")
    file = write_chain(folder / "src", CHAIN)
    dirs = generate_chain(file, folder / "out" / "relay", entrypoint="Relay")
    dirs.update(generate_chain(file, folder / "out" / "text", entrypoint="Text"))
    return dirs


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    return {"RUNS_FILE": str(tmp_path / "runs"), "PRODUCER_MARKER": str(tmp_path / "stopped")}


def _runs(files: dict[str, str]) -> list[str]:
    path = Path(files["RUNS_FILE"])
    return path.read_text().split() if path.exists() else []


def _producer(generated: dict[str, Path], files: dict[str, str], **env: str) -> ServerProcess:
    return ServerProcess(generated["Producer"], env={**files, **env})


def test_a_stub_reads_a_cut_stream_on_and_every_item_comes_once(
    generated: dict[str, Path], files: dict[str, str]
) -> None:
    # The Relay's stub reaches the Producer through a proxy that cuts its first two
    # connections mid-stream; the caller outside reads Relay plainly and sees none of it.
    with (
        running(_producer(generated, files)) as (producer,),
        CuttingProxy(producer.url, cuts=[1500, 3000]) as proxy,
    ):
        relay = ServerProcess(
            generated["Relay"], entrypoint=True, dependencies={"Producer": [proxy.url]}, env=files
        )
        with (
            running(relay),
            httpx.stream(
                "POST", relay.url + "/run_remote", json={"n": 80, "delay": 0.005}, timeout=30
            ) as response,
        ):
            assert response.status_code == 200
            items = [json.loads(line)["i"] for line in response.iter_lines() if line]
        assert proxy.cut == 2
    assert items == list(range(80))
    assert _runs(files) == ["Producer"]  # read on, not run again


def test_a_raw_text_stream_is_read_on_from_its_byte_offset(
    generated: dict[str, Path], files: dict[str, str]
) -> None:
    class TextStub(StubBase):
        async def run_remote(self, n: int, delay: float = 0.0) -> AsyncIterator[str]:
            async for chunk in self.predict_async_stream({"n": n, "delay": delay}):
                yield chunk.decode()

    expected = "".join(f"line {i}\n" for i in range(300))
    # Cut inside lines, not between them: an offset in bytes resumes anywhere.
    with (
        running(ServerProcess(generated["Text"], env=files)) as (text,),
        CuttingProxy(text.url, cuts=[777, 1601]) as proxy,
    ):

        async def read() -> str:
            stub = TextStub(proxy.url, token=TOKEN)
            try:
                return "".join([chunk async for chunk in stub.run_remote(300, 0.001)])
            finally:
                await stub.aclose()

        assert asyncio.run(read()) == expected
        assert proxy.cut == 2
    assert _runs(files) == ["Text"]


def test_a_consumer_that_stops_early_stops_its_producer_at_once(
    generated: dict[str, Path], files: dict[str, str]
) -> None:
    with running(_producer(generated, files)) as (producer,):

        async def read_two() -> list[int]:
            stub = ItemStub(producer.url, token=TOKEN)
            seen: list[int] = []
            try:
                stream = stub.run_remote(1000, 0.05)
                async for item in stream:
                    seen.append(item.i)
                    if len(seen) == 2:
                        break
                await stream.aclose()  # type: ignore[attr-defined]
                # The producer hears of it from the stub, long before its 10 s wait would end.
                await asyncio.to_thread(
                    wait_until, Path(files["PRODUCER_MARKER"]).exists, 5, "the producer stopped"
                )
            finally:
                await stub.aclose()
            return seen

        assert asyncio.run(read_two()) == [0, 1]
    assert Path(files["PRODUCER_MARKER"]).read_text() in ("CancelledError", "GeneratorExit")


def _open(producer: ServerProcess, n: int, delay: float) -> Iterator[httpx.Response]:
    headers = {**producer.headers, "x-chains-reconnect": "1", "accept": "application/x-ndjson"}
    with httpx.stream(
        "POST", producer.url + "/run_remote", json={"n": n, "delay": delay}, headers=headers, timeout=30
    ) as response:
        yield response


def _read_on(producer: ServerProcess, stream_id: str, offset: int, **extra: str) -> httpx.Response:
    headers = {**producer.headers, "x-chains-stream-id": stream_id, "x-chains-stream-offset": str(offset)}
    return httpx.post(producer.url + "/run_remote", headers={**headers, **extra}, timeout=30)


def test_a_reader_back_within_the_window_gets_the_rest_and_one_that_is_not_is_given_up(
    generated: dict[str, Path], files: dict[str, str]
) -> None:
    with running(_producer(generated, files, CHAINS_STREAM_RECONNECT_SEC="3")) as (producer,):
        # Read part of the answer, go away, and come back for the rest from the byte reached.
        first = _open(producer, 40, 0.02)
        response = next(first)
        stream_id = response.headers["x-chains-stream-id"]
        raw = response.iter_raw()
        got = next(raw)
        first.close()
        rest = _read_on(producer, stream_id, len(got))
        assert rest.status_code == 200, rest.text
        assert rest.headers["x-chains-stream-offset"] == str(len(got))
        lines = (got + rest.content).decode().splitlines()
        assert [json.loads(line)["i"] for line in lines] == list(range(40))
        assert not Path(files["PRODUCER_MARKER"]).exists()  # it ran to its end

        # One that never comes back: its producer is cancelled once the window is over.
        second = _open(producer, 10_000, 0.02)
        next(next(second).iter_raw())
        second.close()
        left = time.monotonic()
        wait_until(Path(files["PRODUCER_MARKER"]).exists, 15, "the abandoned stream cancelled")
        assert time.monotonic() - left >= 2  # it waited for its reader first
        assert Path(files["PRODUCER_MARKER"]).read_text() == "CancelledError"
        assert _runs(files) == ["Producer", "Producer"]


def test_a_returning_reader_takes_over_from_a_connection_that_seems_alive(
    generated: dict[str, Path], files: dict[str, str]
) -> None:
    with running(_producer(generated, files)) as (producer,):
        first = _open(producer, 60, 0.01)
        response = next(first)
        raw = response.iter_raw()
        got = next(raw)
        # The first connection is still open (as a half-dead one would seem to the server).
        rest = _read_on(producer, response.headers["x-chains-stream-id"], len(got))
        assert rest.status_code == 200
        lines = (got + rest.content).decode().splitlines()
        assert [json.loads(line)["i"] for line in lines] == list(range(60))
        with pytest.raises(httpx.RemoteProtocolError):  # the replaced connection is cut
            for _ in raw:
                pass
        first.close()
    assert _runs(files) == ["Producer"]


def test_reading_on_is_refused_clearly(generated: dict[str, Path], files: dict[str, str]) -> None:
    with running(_producer(generated, files)) as (producer,):
        missing = _read_on(producer, "0" * 32, 0)
        assert missing.status_code == 404 and "no stream" in missing.json()["detail"]
        first = _open(producer, 30, 0.05)
        response = next(first)
        stream_id = response.headers["x-chains-stream-id"]
        past = _read_on(producer, stream_id, 10**9)
        assert past.status_code == 400 and "past the" in past.json()["detail"]
        bad = _read_on(producer, stream_id, -1)
        assert bad.status_code == 400 and "x-chains-stream-offset" in bad.json()["detail"]
        stranger = httpx.post(
            producer.url + "/run_remote",
            headers={"x-chains-stream-id": stream_id, "x-chains-stream-offset": "0"},
            timeout=10,
        )
        assert stranger.status_code == 401
        stop = _read_on(producer, stream_id, 0, **{"x-chains-stream-cancel": "1"})
        assert stop.status_code == 200 and stop.json() == {"canceled": True}
        wait_until(Path(files["PRODUCER_MARKER"]).exists, 5, "the stopped stream cancelled")
        first.close()


def test_a_stub_whose_producer_is_gone_raises_stream_interrupted(
    generated: dict[str, Path], files: dict[str, str]
) -> None:
    with running(_producer(generated, files)) as (producer,):

        async def read() -> StreamInterrupted:
            stub = ItemStub(producer.url, options=StubOptions(retries=0), token=TOKEN)
            try:
                with pytest.raises(StreamInterrupted) as info:
                    async for item in stub.run_remote(1000, 0.02):
                        if item.i == 3:
                            producer.kill()
                return info.value
            finally:
                await stub.aclose()

        error = asyncio.run(read())
    assert "could not be read on" in str(error)


def _relay(generated: dict[str, Path], files: dict[str, str], producer: ServerProcess) -> ServerProcess:
    return ServerProcess(
        generated["Relay"], entrypoint=True, dependencies={"Producer": [producer.url]}, env=files
    )


def test_the_clients_read_a_cut_stream_on_and_every_item_comes_once(
    generated: dict[str, Path], files: dict[str, str]
) -> None:
    from chains.client import AsyncClient, Client

    producer = _producer(generated, files)
    with running(producer, _relay(generated, files, producer)) as (_, relay):
        with CuttingProxy(relay.url, cuts=[1200, 2500]) as proxy, Client(proxy.url, timeout=30) as client:
            assert [item.i for item in client.stream(Item, n=50, delay=0.005)] == list(range(50))
            assert proxy.cut == 2

        async def read_async() -> list[int]:
            async with AsyncClient(proxy.url, timeout=30) as client:
                return [item.i async for item in await client.stream(Item, n=50, delay=0.005)]

        with CuttingProxy(relay.url, cuts=[900, 2000]) as proxy:
            assert asyncio.run(read_async()) == list(range(50))
            assert proxy.cut == 2
    assert _runs(files) == ["Producer", "Producer"]  # one run for each of the two streams


def test_a_client_that_leaves_early_stops_the_chain_at_once(
    generated: dict[str, Path], files: dict[str, str]
) -> None:
    from chains.client import Client

    producer = _producer(generated, files)
    with running(producer, _relay(generated, files, producer)) as (_, relay):
        with Client(relay.url, timeout=30) as client, client.stream(Item, n=1000, delay=0.05) as items:
            assert next(iter(items)).i == 0
        # Relay stops its stream, whose stub tells the Producer: well before a 10 s wait ends.
        wait_until(Path(files["PRODUCER_MARKER"]).exists, 5, "the producer stopped")


def test_a_draining_server_does_not_wait_for_a_reader_that_left(
    generated: dict[str, Path], files: dict[str, str]
) -> None:
    env = {"CHAINS_STREAM_RECONNECT_SEC": "600", "CHAINS_GRACE_SEC": "60"}
    with running(_producer(generated, files, **env)) as (producer,):
        first = _open(producer, 100_000, 0.02)
        next(next(first).iter_raw())
        first.close()
        # SIGTERM drains: the cut stream, whose reader would have 600 s to come back, ends now,
        # not when the 60 s of grace run out (terminate's bound is well below that).
        assert producer.terminate(timeout=20) == 0
    assert Path(files["PRODUCER_MARKER"]).read_text() == "CancelledError"
