"""A WebSocket conversation through one hop of a chain against a bare uvicorn floor (issue 16).

In the same run, with the same ``websockets`` client in this process:

- ``chain-1hop``: client -> ``Relay`` -> ``Echo`` (``benchmarks/chains/websocket_hop.py``, both
  generated ``server.py`` processes, the relay through the generated stub);
- ``floor-1hop``: client -> ``benchmarks/apps/bare_websocket.py`` relaying with a ``websockets``
  client -> the same app echoing, both plain ASGI under uvicorn with the chainlets' settings
  (uvloop, httptools, ``websockets-sansio``);
- ``chain-direct`` / ``floor-direct``: client -> ``Echo`` / the bare echo.

Each round trip sends one 64-byte text message and waits for its echo. The p50 round trip is
taken on one socket (sequential), messages per second on 16 sockets at once; each chain
target runs right after its floor, seven rounds, and the ratio reported is the median of the
rounds' ratios (on a shared, loaded machine a whole-run ratio swings with the neighbours).

Run from the repository root: ``.venv/bin/python -m benchmarks.websocket_hop`` (about a minute).
Target: chain-1hop at least 0.6x the floor's messages per second.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from websockets.asyncio.client import connect

from benchmarks import harness
from benchmarks.chainlets import CHAINS_DIR, generate_chain, new_token, serve_chainlet

MESSAGE = "x" * 64
LATENCY_TRIPS = 2000
SOCKETS = 16
TRIPS_PER_SOCKET = 200
ROUNDS = 7


async def _round_trips(url: str, headers: dict[str, str], trips: int, rtts: list[float] | None) -> None:
    async with connect(url, additional_headers=headers) as ws:
        for _ in range(trips):
            started = time.perf_counter()
            await ws.send(MESSAGE)
            if await ws.recv() != MESSAGE:
                raise AssertionError(f"{url} answered something else")
            if rtts is not None:
                rtts.append(time.perf_counter() - started)


async def measure(url: str, headers: dict[str, str]) -> tuple[float, float]:
    """(p50 round trip in ms on one socket, messages per second on SOCKETS sockets)."""
    await _round_trips(url, headers, 200, None)  # warm up
    rtts: list[float] = []
    await _round_trips(url, headers, LATENCY_TRIPS, rtts)
    started = time.perf_counter()
    await asyncio.gather(*(_round_trips(url, headers, TRIPS_PER_SOCKET, None) for _ in range(SOCKETS)))
    rate = SOCKETS * TRIPS_PER_SOCKET / (time.perf_counter() - started)
    return statistics.median(rtts) * 1e3, rate


def _uvicorn(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "benchmarks.apps.bare_websocket:app",
        f"--port={port}",
        "--loop=uvloop",
        "--http=httptools",
        "--ws=websockets-sansio",
        "--log-level=warning",
        "--no-access-log",
    ]


@contextlib.contextmanager
def bare(upstream: str | None = None) -> Iterator[harness.RunningServer]:
    port = harness.free_port()
    env = {"BARE_WS_UPSTREAM": upstream} if upstream else {}
    with harness.serve_command(
        _uvicorn(port), port, ready_path="/readyz", ready_body=None, env=env
    ) as server:
        yield server


def ws(server: harness.RunningServer) -> str:
    return f"ws://127.0.0.1:{server.port}/run_remote"


def main() -> None:
    token = new_token()
    auth = {"authorization": f"Bearer {token}"}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        chain = generate_chain(CHAINS_DIR / "websocket_hop.py", Path(tmp))
        dirs = {name: Path(c.directory) for name, c in chain.chainlets.items()}
        echo = stack.enter_context(serve_chainlet(dirs["Echo"], entrypoint=False, token=token))
        relay = stack.enter_context(
            serve_chainlet(
                dirs["Relay"],
                entrypoint=True,
                token=token,
                dependency_urls={"Echo": [f"http://127.0.0.1:{echo.port}"]},
            )
        )
        bare_echo = stack.enter_context(bare())
        bare_relay = stack.enter_context(bare(ws(bare_echo)))
        targets = {  # each chain target right after its floor
            "floor-1hop": (ws(bare_relay), {}),
            "chain-1hop": (ws(relay), {}),
            "floor-direct": (ws(bare_echo), {}),
            "chain-direct": (ws(echo), auth),
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
        for _ in range(ROUNDS):
            for name, (url, headers) in targets.items():
                results[name].append(asyncio.run(measure(url, headers)))
    print(f"| target | p50 round trip (ms) | messages/s ({SOCKETS} sockets) | vs floor (msg/s, p50) |")
    print("| --- | ---: | ---: | ---: |")
    for name, runs in results.items():
        floor = results["floor-1hop" if name.endswith("1hop") else "floor-direct"]
        rate_ratio = statistics.median(r[1] / f[1] for r, f in zip(runs, floor, strict=True))
        p50_ratio = statistics.median(r[0] / f[0] for r, f in zip(runs, floor, strict=True))
        p50 = statistics.median(r[0] for r in runs)
        rate = statistics.median(r[1] for r in runs)
        print(f"| {name} | {p50:.3f} | {rate:,.0f} | {rate_ratio:.2f}x, {p50_ratio:.2f}x |")


if __name__ == "__main__":
    main()
