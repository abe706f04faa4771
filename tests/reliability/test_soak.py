"""Soak: 64 streaming clients at once for 30 s through a 2-hop chain (ItemEntry -> Relay ->
Producer). Every stream must end complete, every item must be the one asked for, and no
process of the chain may grow: RSS (VmRSS) in the last 10 s within 10 % of the first 10 s.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from chains.stubs import StubOptions
from chains.targets.state import read_state
from tests.reliability.clients import ItemStub, payload
from tests.reliability.conftest import pushed, record, rss_kib

CLIENTS = 64
SSE_CLIENTS = 8  # of the 64: these read server-sent events instead of frames
DURATION_SEC = 30.0
WINDOW_SEC = 10.0
WARMUP_SEC = 3.0  # the same load before the 30 s: imports, pools and allocator arenas settle
SAMPLE_EVERY_SEC = 0.5


@dataclass
class Tally:
    streams: int = 0
    items: int = 0
    errors: list[str] = field(default_factory=list)


def shape(rng: random.Random) -> tuple[int, int, float]:
    """A stream's length, item size and pace, different for every stream."""
    return rng.randint(20, 120), rng.choice([1, 16, 200, 2000]), rng.choice([0.0, 0.002, 0.01])


async def framed_client(url: str, tally: Tally, until: float, seed: int, counting: list[bool]) -> None:
    rng = random.Random(seed)
    stub = ItemStub(url, options=StubOptions(retries=0))
    try:
        while time.monotonic() < until:
            n, size, delay = shape(rng)
            i = 0
            try:
                async for item in stub.run_remote(n, size, delay):
                    if item.i != i or item.text != payload(i, size):
                        tally.errors.append(f"item {i} of ({n}, {size}) is {item!r}")
                        break
                    i += 1
                if i != n:
                    tally.errors.append(f"stream ({n}, {size}) ended cleanly after {i} items")
            except Exception as exc:
                tally.errors.append(f"{type(exc).__name__}: {exc}")
            if counting[0]:
                tally.streams += 1
                tally.items += i
    finally:
        await stub.aclose()


async def sse_client(url: str, tally: Tally, until: float, seed: int, counting: list[bool]) -> None:
    from chains.streaming.sse import SSE

    rng = random.Random(seed)
    async with httpx.AsyncClient(timeout=30) as client:
        while time.monotonic() < until:
            n, size, delay = shape(rng)
            i, ended = 0, False
            try:
                async with client.stream(
                    "POST",
                    url + "/run_remote",
                    json={"n": n, "size": size, "delay": delay},
                    headers={"accept": "text/event-stream"},
                ) as response:
                    async for event in SSE.from_chunks(response.aiter_bytes()):
                        if event.event == "end":
                            ended = True
                        elif event.event is None and json.loads(event.data) == {
                            "i": i,
                            "text": payload(i, size),
                        }:
                            i += 1
                        else:
                            tally.errors.append(f"unexpected event {event!r} at item {i}")
                            break
                if not ended or i != n:
                    tally.errors.append(f"SSE stream ({n}, {size}): {i} items, end event: {ended}")
            except Exception as exc:
                tally.errors.append(f"{type(exc).__name__}: {exc}")
            if counting[0]:
                tally.streams += 1
                tally.items += i


def test_64_streaming_clients_for_30_s_through_two_hops(chains_home: Path) -> None:
    with pushed("ItemEntry", "soak") as chain:
        state = read_state("soak")
        pids = {p.chainlet: p.pid for p in state.processes if p.pid}
        pids["supervisor"] = state.local.supervisor_pid
        samples: dict[str, list[tuple[float, int]]] = {name: [] for name in pids}
        tally = Tally()

        async def scenario() -> float:
            start = time.monotonic()
            measure_from = start + WARMUP_SEC
            until = measure_from + DURATION_SEC
            counting = [False]

            async def sampler() -> None:
                while time.monotonic() < until:
                    now = time.monotonic()
                    if now >= measure_from:
                        counting[0] = True
                        for name, pid in pids.items():
                            samples[name].append((now - measure_from, rss_kib(pid)))
                    await asyncio.sleep(SAMPLE_EVERY_SEC)

            url = chain.entrypoint_url
            clients = [
                sse_client(url, tally, until, seed, counting)
                if seed < SSE_CLIENTS
                else framed_client(url, tally, until, seed, counting)
                for seed in range(CLIENTS)
            ]
            await asyncio.gather(sampler(), *clients)
            return time.monotonic() - measure_from

        elapsed = asyncio.run(scenario())
        restarts = {p.chainlet: p.restarts for p in read_state("soak").processes}

    growth: dict[str, dict[str, float]] = {}
    for name, series in samples.items():
        first = statistics.mean(kib for t, kib in series if t < WINDOW_SEC)
        last = statistics.mean(kib for t, kib in series if t >= DURATION_SEC - WINDOW_SEC)
        growth[name] = {
            "first_10s_mean_kib": round(first),
            "last_10s_mean_kib": round(last),
            "growth_pct": round(100 * (last - first) / first, 2),
        }
    record(
        "soak_64_streams_30s",
        clients=CLIENTS,
        sse_clients=SSE_CLIENTS,
        seconds=round(elapsed, 1),
        streams_completed=tally.streams,
        items_verified=tally.items,
        errors=len(tally.errors),
        restarts=restarts,
        rss=growth,
    )
    assert tally.errors == [], f"{len(tally.errors)} errors: {tally.errors[:5]}"
    assert tally.streams > 500, tally.streams
    assert all(n == 0 for n in restarts.values()), restarts
    for name, figures in growth.items():
        assert figures["growth_pct"] < 10, (name, figures)
