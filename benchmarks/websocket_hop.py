"""A WebSocket conversation through one hop of a chain against a bare uvicorn floor (issue 16).

In the same run, with the same ``websockets`` client in this process:

- ``chain-1hop``: client -> ``Relay`` -> ``Echo`` (``benchmarks/chains/websocket_hop.py``, both
  generated ``server.py`` processes, the relay through the generated stub);
- ``floor-1hop``: client -> ``benchmarks/apps/bare_websocket.py`` relaying with a ``websockets``
  client -> the same app echoing, both plain ASGI under uvicorn with the chainlets' settings
  (uvloop, httptools, ``websockets-sansio``);
- ``chain-direct`` / ``floor-direct``: client -> ``Echo`` / the bare echo.

Each round trip sends one 64-byte text message and waits for its echo. The p50 round trip is
taken on one socket (sequential), messages per second on 16 sockets at once for a fixed time;
each chain target runs right after its floor, in many short rounds, and the ratios reported are
the medians of the rounds' ratios: on a shared machine whose load moves by several times
within a minute, only a chain target and its floor measured seconds apart compare. The
servers' CPU per message (from ``/proc``, every process of the target) is reported too: it
is what throughput would follow on a machine the servers had to themselves. The client is
this process (the same for every target); its CPU per message is in the JSON.

Run from the repository root: ``.venv/bin/python -m benchmarks.websocket_hop`` (about three
minutes; ``--rounds``). Target: chain-1hop at least 0.6x the floor's messages per second and
round trip. The JSON is ``benchmarks/results/websocket_hop.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from websockets.asyncio.client import connect

from benchmarks import harness, report
from benchmarks.chainlets import CHAINS_DIR, generate_chain, new_token, serve_chainlet

MESSAGE = "x" * 64
LATENCY_TRIPS = 1000
SOCKETS = 16
RATE_SECONDS = 2.0
ROUNDS = 15
TARGET = 0.6


@dataclass(frozen=True)
class Sample:
    p50_ms: float
    rate: float  # messages per second on SOCKETS sockets
    server_us: float  # the target's servers' CPU per message, all its processes
    client_us: float  # this process's CPU per message


async def _round_trips(
    url: str, headers: dict[str, str], until: float | None, trips: int, rtts: list[float] | None
) -> int:
    done = 0
    async with connect(url, additional_headers=headers) as ws:
        while done < trips and (until is None or time.perf_counter() < until):
            started = time.perf_counter()
            await ws.send(MESSAGE)
            if await ws.recv() != MESSAGE:
                raise AssertionError(f"{url} answered something else")
            if rtts is not None:
                rtts.append(time.perf_counter() - started)
            done += 1
    return done


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(url: str, headers: dict[str, str], pids: Sequence[int]) -> Sample:
    """One sample of ``url``: the p50 round trip on one socket, then messages per second on
    SOCKETS sockets for RATE_SECONDS, with the CPU its servers and this client spent on them."""
    await _round_trips(url, headers, None, 100, None)  # warm up
    rtts: list[float] = []
    await _round_trips(url, headers, None, LATENCY_TRIPS, rtts)
    servers0, client0 = sum(harness.process_cpu_s(p) for p in pids), _cpu_s()
    started = time.perf_counter()
    until = started + RATE_SECONDS
    counts = await asyncio.gather(*(_round_trips(url, headers, until, 10**9, None) for _ in range(SOCKETS)))
    elapsed = time.perf_counter() - started
    servers1, client1 = sum(harness.process_cpu_s(p) for p in pids), _cpu_s()
    messages = sum(counts)
    return Sample(
        statistics.median(rtts) * 1e3,
        messages / elapsed,
        (servers1 - servers0) / messages * 1e6,
        (client1 - client0) / messages * 1e6,
    )


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--output", type=Path, help="where to write the JSON results")
    args = parser.parse_args(argv)
    started_at = datetime.datetime.now(datetime.UTC)
    env = harness.environment(("uvicorn", "websockets", "aiohttp"))
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
        pids = [s.process.pid for s in (echo, relay, bare_echo, bare_relay)]
        targets = {  # each chain target right after its floor
            "floor-1hop": (ws(bare_relay), {}, (pids[3], pids[2])),
            "chain-1hop": (ws(relay), {}, (pids[1], pids[0])),
            "floor-direct": (ws(bare_echo), {}, (pids[2],)),
            "chain-direct": (ws(echo), auth, (pids[0],)),
        }
        results: dict[str, list[Sample]] = {name: [] for name in targets}
        for round_no in range(1, args.rounds + 1):
            for name, (url, headers, of_target) in targets.items():
                sample = asyncio.run(measure(url, headers, of_target))
                results[name].append(sample)
                harness.log_stderr(
                    f"round {round_no}/{args.rounds} {name:<12} p50 {sample.p50_ms:6.3f} ms  "
                    f"{sample.rate:7.0f} msg/s  server {sample.server_us:6.1f} us/msg  "
                    f"client {sample.client_us:6.1f} us/msg"
                )
    summary = summarize(results)
    print(table(summary))
    checks = [
        report.Check(
            "chain-1hop msg/s / floor-1hop", summary["chain-1hop"]["rate_ratio"], TARGET, at_least=True
        ),
        report.Check(
            "floor-1hop p50 / chain-1hop p50", summary["chain-1hop"]["p50_speed_ratio"], TARGET, at_least=True
        ),
    ]
    print(report.check_lines(checks))
    output = {
        "settings": {"rounds": args.rounds, "sockets": SOCKETS, "rate_seconds": RATE_SECONDS, "message": 64},
        "summary": summary,
        "checks": [c.to_json() for c in checks],
        "samples": {name: [asdict(s) for s in samples] for name, samples in results.items()},
    }
    report.write_results("websocket_hop", output, args.output, started=started_at, environment=env)
    return 0 if all(c.met for c in checks) else 1


def summarize(results: dict[str, list[Sample]]) -> dict[str, dict[str, float]]:
    """Medians per target, and the medians of each round's ratio to the round's floor."""
    out = {}
    for name, runs in results.items():
        floor = results["floor-1hop" if name.endswith("1hop") else "floor-direct"]
        pairs = list(zip(runs, floor, strict=True))
        out[name] = {
            "p50_ms": statistics.median(r.p50_ms for r in runs),
            "rate": statistics.median(r.rate for r in runs),
            "server_us": statistics.median(r.server_us for r in runs),
            "client_us": statistics.median(r.client_us for r in runs),
            "rate_ratio": statistics.median(r.rate / f.rate for r, f in pairs),
            "p50_speed_ratio": statistics.median(f.p50_ms / r.p50_ms for r, f in pairs),
            "cpu_ratio": statistics.median(f.server_us / r.server_us for r, f in pairs),
        }
    return out


def table(summary: dict[str, dict[str, float]]) -> str:
    lines = [
        f"| target | p50 round trip (ms) | messages/s ({SOCKETS} sockets) | server CPU µs/message "
        "| vs floor: msg/s, round-trip speed, CPU |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, m in summary.items():
        lines.append(
            f"| {name} | {m['p50_ms']:.3f} | {m['rate']:,.0f} | {m['server_us']:.1f} "
            f"| {m['rate_ratio']:.2f}x, {m['p50_speed_ratio']:.2f}x, {m['cpu_ratio']:.2f}x |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
