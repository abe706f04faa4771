"""Faults in the middle of a stream: a producer that dies, a consumer that leaves.

A stream that stops early must never look complete: every consumer of a producer killed
mid-stream sees the break (StreamInterrupted through a stub, an SSE `error` event, a raw
transfer cut short). And a consumer that goes away stops the work it asked for: the
producer's generator is cancelled within a second, however many hops away it is.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from chains.errors import RemoteError, StreamInterrupted
from chains.stubs import StubOptions
from chains.targets.state import read_state
from tests.helpers import wait_until
from tests.reliability.clients import (
    ItemStub,
    Outcome,
    TextStub,
    as_sse_text,
    close,
    error_detail,
    expected_text,
    payload,
    read_raw,
    read_sse,
    sse_items,
)
from tests.reliability.conftest import all_ready, metric, pushed, record, token_of

SIZE = 24
N_SLOW = 100_000
SLOW: dict[str, object] = {"n": N_SLOW, "size": SIZE, "delay": 0.02}  # longer than any test waits
PER_KIND = 4


def producer(chain: str) -> tuple[str, int, Path]:
    (p,) = read_state(chain).replicas("Producer")
    assert p.pid is not None
    return p.url, p.pid, Path(p.log)


async def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.01)


def test_killing_the_producer_mid_stream_breaks_every_consumers_stream(chains_home: Path) -> None:
    with pushed("TextEntry", "midstream") as chain:
        token = token_of("midstream")
        producer_url, producer_pid, _ = producer("midstream")
        entry = chain.entrypoint_url

        async def scenario() -> dict[str, list[tuple[int, BaseException | Outcome]]]:
            received: dict[str, list[int]] = {}
            results: dict[str, list[tuple[int, BaseException | Outcome]]] = {}

            async def framed(key: str, stub: ItemStub | TextStub) -> tuple[int, BaseException | Outcome]:
                count = 0
                try:
                    async for value in stub.run_remote(N_SLOW, SIZE, delay=0.02):
                        text = value.text if not isinstance(value, str) else value
                        assert text == payload(count, SIZE)
                        count += 1
                        received[key] = [count]
                except Exception as exc:
                    return count, exc
                finally:
                    await stub.aclose()
                raise AssertionError(f"{key}: the stream ended cleanly after {count} items")

            async def external(
                key: str, read: Callable[..., Awaitable[Outcome]], client: httpx.AsyncClient
            ) -> tuple[int, BaseException | Outcome]:
                outcome = await read(client, entry, SLOW)
                return -1, outcome

            async with httpx.AsyncClient(timeout=httpx.Timeout(30)) as client:
                options = StubOptions(retries=0)
                jobs: dict[str, list[Awaitable[tuple[int, BaseException | Outcome]]]] = {
                    "stub_at_producer": [
                        framed(f"p{i}", ItemStub(producer_url, options=options, token=token))
                        for i in range(PER_KIND)
                    ],
                    "stub_at_entry": [
                        framed(f"e{i}", TextStub(entry, options=options)) for i in range(PER_KIND)
                    ],
                    "sse_at_entry": [external(f"s{i}", read_sse, client) for i in range(PER_KIND)],
                    "raw_at_entry": [external(f"r{i}", read_raw, client) for i in range(PER_KIND)],
                }
                tasks = {kind: [asyncio.ensure_future(j) for j in group] for kind, group in jobs.items()}
                # Kill once every framed consumer has items and the external ones had time to.
                await until(lambda: len(received) == 2 * PER_KIND, 10, "every stub consumer has items")
                await asyncio.sleep(0.3)
                os.kill(producer_pid, signal.SIGKILL)
                killed = time.monotonic()
                for kind, group in tasks.items():
                    done = await asyncio.wait_for(asyncio.gather(*group), 10)
                    results[kind] = list(done)
                results["_seconds"] = [(int((time.monotonic() - killed) * 1000), Outcome())]
            return results

        results = asyncio.run(scenario())
        elapsed_ms = results.pop("_seconds")[0][0]

        for count, error in results["stub_at_producer"]:
            # The direct consumer: the connection broke, nothing in-band said so.
            assert isinstance(error, StreamInterrupted) and not isinstance(error, RemoteError), error
            assert count >= 1
        for count, error in results["stub_at_entry"]:
            # Through the entrypoint: TextEntry's read broke, which reaches us in-band as its error.
            assert isinstance(error, RemoteError) and isinstance(error, StreamInterrupted), error
            assert error.detail is not None and error.detail.chainlet == "TextEntry"
            assert count >= 1
        for _, outcome in results["sse_at_entry"]:
            assert isinstance(outcome, Outcome) and outcome.error is None
            assert outcome.event_names[-1] == "error" and "end" not in outcome.event_names, (
                outcome.event_names
            )
            assert error_detail(outcome)["exc_type"] == "StreamInterrupted"
            items = sse_items(outcome)
            assert items and items == [as_sse_text(payload(i, SIZE)) for i in range(len(items))]
        for _, outcome in results["raw_at_entry"]:
            assert isinstance(outcome, Outcome)
            # A raw body has no in-band end: the server cuts the transfer instead of ending it.
            assert isinstance(outcome.error, httpx.RemoteProtocolError), outcome.error
            text = outcome.body.decode()
            assert text and expected_text(N_SLOW, SIZE).startswith(text)

        # The supervisor brought the producer back, and streams are whole again.
        wait_until(lambda: all_ready("midstream"), 15, "the producer restarted")
        assert chain.call(n=50, size=SIZE) == [payload(i, SIZE) for i in range(50)]
        restarts = read_state("midstream").replicas("Producer")[0].restarts

    record(
        "midstream_producer_killed",
        consumers={kind: len(group) for kind, group in results.items()},
        clean_ends=0,
        all_ended_within_ms=elapsed_ms,
        producer_restarts=restarts,
    )
    assert restarts == 1


def cancelled_lines(log: Path) -> list[float]:
    """When the producer's generator was stopped, from the lines it logs then."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [float(m) for m in re.findall(r"producer stopped after \d+ items: \w+ at ([0-9.]+)", text)]


@pytest.mark.parametrize("where", ["producer", "entrypoint_stub", "entrypoint_raw"])
def test_a_consumer_leaving_mid_stream_cancels_the_producer_within_a_second(
    chains_home: Path, where: str
) -> None:
    name = f"leave-{where.replace('_', '-')}"
    with pushed("TextEntry", name) as chain:
        token = token_of(name)
        producer_url, _, log = producer(name)
        cancelled_metric = 'chains_streams_cancelled_total{chainlet="Producer"}'
        latencies: list[float] = []

        async def leave_once() -> None:
            before = len(cancelled_lines(log))
            if where == "entrypoint_raw":
                async with (
                    httpx.AsyncClient(timeout=10) as client,
                    client.stream("POST", chain.entrypoint_url + "/run_remote", json=SLOW) as response,
                ):
                    async for _ in response.aiter_raw():
                        left = time.time()
                        break  # one chunk, then the client goes away
            else:
                stub: ItemStub | TextStub = (
                    ItemStub(producer_url, token=token)
                    if where == "producer"
                    else TextStub(chain.entrypoint_url)
                )
                stream = stub.run_remote(N_SLOW, SIZE, delay=0.02)
                await anext(stream)
                left = time.time()
                await close(stream)
                await stub.aclose()
            await until(lambda: len(cancelled_lines(log)) > before, 3, "the producer logs its cancellation")
            latencies.append(cancelled_lines(log)[-1] - left)

        async def scenario() -> None:
            for _ in range(5):
                await leave_once()

        asyncio.run(scenario())
        cancelled = metric(producer_url, cancelled_metric)
        in_flight = metric(producer_url, 'chains_in_flight{chainlet="Producer"}')

    record(
        f"midstream_consumer_leaves_{where}",
        disconnects=len(latencies),
        producer_streams_cancelled_metric=cancelled,
        slowest_cancel_ms=round(max(latencies) * 1000, 1),
    )
    assert max(latencies) < 1.0, latencies
    assert cancelled == len(latencies)
    assert in_flight == 0
