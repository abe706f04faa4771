"""Streaming through one hop: items per second end to end, and how soon the first item arrives (issue 5).

``benchmarks/chains/streaming.py`` is generated with ``codegen`` and both chainlets run as generated
``server.py`` processes: ``Producer`` yields ``count`` small typed items (``{"index": i, "text":
"token"}``), and the entrypoint ``Restream`` reads them through its stub (framed) and yields each one on
to its own caller. The caller is this process, reading the entrypoint three ways:

- ``framed``: a ``chains.StubBase`` subclass by URL, the same framed stream and decoder as a chainlet;
- ``ndjson-httpx``: raw NDJSON (``Accept: application/x-ndjson``), lines read with httpx's
  ``aiter_lines`` and validated with pydantic;
- ``ndjson-aiohttp``: the same with aiohttp's line iterator.

Each round runs every client once on a 100,000-item stream (items/s, and when its first item came)
and several times on a 10-item stream (first item), interleaved; medians over rounds. Connections are
kept alive between streams, as a chainlet's stub does; the client runs on uvloop, like the servers.

Run from the repository root: ``.venv/bin/python -m benchmarks.streaming_hop`` (under a minute).
Targets: at least 100,000 items/s end to end; the first item at the client within 20 ms, for the short
and for the long stream alike.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvloop

import chains
from benchmarks import harness, report
from benchmarks.chainlets import CHAINS_DIR, generate_chain, new_token, serve_chainlet
from benchmarks.chains.streaming import Item

CHAIN_FILE = CHAINS_DIR / "streaming.py"
LONG = 100_000
SHORT = 10
NDJSON = "application/x-ndjson"
CLIENTS = ("framed", "ndjson-httpx", "ndjson-aiohttp")


class RestreamClient(chains.StubBase):
    """Calls the entrypoint by URL, as any Python program can (no generated code)."""

    async def run_remote(self, count: int) -> AsyncIterator[Item]:
        async for item in self.stream_remote(count=count):
            yield item


@dataclass(frozen=True, slots=True)
class StreamRun:
    client: str
    items: int
    first_item_s: float
    total_s: float
    cpu: harness.CpuUsage | None = None

    @property
    def items_per_s(self) -> float:
        return self.items / self.total_s


class Clients:
    """The three ways of reading the entrypoint's stream, each with a connection kept alive."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stub = RestreamClient(url, name="Restream")
        self.httpx = httpx.AsyncClient(timeout=60.0)
        self.aiohttp = aiohttp.ClientSession()

    async def aclose(self) -> None:
        await self.stub.aclose()
        await self.httpx.aclose()
        await self.aiohttp.close()

    def reader(self, client: str) -> Callable[[int], AsyncIterator[Item]]:
        return {
            "framed": self.framed,
            "ndjson-httpx": self.ndjson_httpx,
            "ndjson-aiohttp": self.ndjson_aiohttp,
        }[client]

    async def framed(self, count: int) -> AsyncIterator[Item]:
        async for item in self.stub.run_remote(count):
            yield item

    async def ndjson_httpx(self, count: int) -> AsyncIterator[Item]:
        body = b'{"count": %d}' % count
        headers = {"content-type": "application/json", "accept": NDJSON}
        async with self.httpx.stream(
            "POST", self.url + "/run_remote", content=body, headers=headers
        ) as reply:
            reply.raise_for_status()
            async for line in reply.aiter_lines():
                if line:
                    yield Item.model_validate_json(line)

    async def ndjson_aiohttp(self, count: int) -> AsyncIterator[Item]:
        body = b'{"count": %d}' % count
        headers = {"content-type": "application/json", "accept": NDJSON}
        async with self.aiohttp.post(self.url + "/run_remote", data=body, headers=headers) as reply:
            reply.raise_for_status()
            async for line in reply.content:
                if line.strip():
                    yield Item.model_validate_json(line)


async def read_stream(client: str, reader: Callable[[int], AsyncIterator[Item]], count: int) -> StreamRun:
    """Read one whole stream; the clock starts before the request is sent."""
    started = time.perf_counter()
    first: float | None = None
    received = 0
    async for item in reader(count):
        if first is None:
            first = time.perf_counter() - started
        if item.index != received:
            raise RuntimeError(f"{client}: item {received} arrived as {item.index}")
        received += 1
    total = time.perf_counter() - started
    if received != count or first is None:
        raise RuntimeError(f"{client}: {received} items of {count}")
    return StreamRun(client, received, first, total)


async def measure(
    url: str, pids: tuple[int, ...], rounds: int, short_repeats: int, log: harness.Log
) -> dict[str, dict[str, list[StreamRun]]]:
    clients = Clients(url)
    meter = harness.CpuMeter(pids, client_is_self=True)
    runs: dict[str, dict[str, list[StreamRun]]] = {c: {"long": [], "short": []} for c in CLIENTS}
    try:
        for client in CLIENTS:  # warm-up: connections, imports, first validations
            await read_stream(client, clients.reader(client), 2_000)
        for round_no in range(1, rounds + 1):
            for client in CLIENTS:
                reader = clients.reader(client)
                with meter.measure() as usage:
                    long_run = await read_stream(client, reader, LONG)
                runs[client]["long"].append(StreamRun(**{**_fields(long_run), "cpu": usage[0]}))
                shorts = [await read_stream(client, reader, SHORT) for _ in range(short_repeats)]
                runs[client]["short"] += shorts
                cpu = usage[0]
                log(
                    f"round {round_no}/{rounds} {client:<15} {long_run.items_per_s:9.0f} items/s  "
                    f"first item {long_run.first_item_s * 1e3:6.2f} ms (long), "
                    f"{statistics.median(r.first_item_s for r in shorts) * 1e3:6.2f} ms (short)  "
                    f"cpu restream {cpu.server_parts_s[0]:5.2f}s producer {cpu.server_parts_s[1]:5.2f}s "
                    f"client {cpu.wrk_s:5.2f}s other {cpu.other_s:5.2f}s"
                )
    finally:
        await clients.aclose()
    return runs


def _fields(run: StreamRun) -> dict[str, Any]:
    return {
        "client": run.client,
        "items": run.items,
        "first_item_s": run.first_item_s,
        "total_s": run.total_s,
    }


def summarize(runs: dict[str, dict[str, list[StreamRun]]]) -> dict[str, dict[str, float]]:
    out = {}
    for client, kinds in runs.items():
        long_runs, short_runs = kinds["long"], kinds["short"]
        cpus = [r.cpu for r in long_runs if r.cpu is not None]
        out[client] = {
            "items_per_s": statistics.median(r.items_per_s for r in long_runs),
            "items_per_s_min": min(r.items_per_s for r in long_runs),
            "first_item_ms_long": statistics.median(r.first_item_s for r in long_runs) * 1e3,
            "first_item_ms_long_max": max(r.first_item_s for r in long_runs) * 1e3,
            "first_item_ms_short": statistics.median(r.first_item_s for r in short_runs) * 1e3,
            "first_item_ms_short_max": max(r.first_item_s for r in short_runs) * 1e3,
            "restream_cpu_us_per_item": statistics.median(c.server_parts_s[0] / LONG * 1e6 for c in cpus),
            "producer_cpu_us_per_item": statistics.median(c.server_parts_s[1] / LONG * 1e6 for c in cpus),
            "client_cpu_us_per_item": statistics.median(c.wrk_s / LONG * 1e6 for c in cpus),
            "other_cores": statistics.median(c.other_s / c.wall_s for c in cpus),
        }
    return out


def table(summary: dict[str, dict[str, float]]) -> str:
    header = (
        f"{'client':<15} {'items/s':>9} {'min':>9} {'1st ms long':>11} {'max':>6} {'1st ms short':>12} "
        f"{'max':>6} {'us/item restream':>16} {'producer':>8} {'client':>6} {'other':>6}"
    )
    lines = [header, "-" * len(header)]
    for client, s in summary.items():
        lines.append(
            f"{client:<15} {s['items_per_s']:>9.0f} {s['items_per_s_min']:>9.0f} "
            f"{s['first_item_ms_long']:>11.2f} {s['first_item_ms_long_max']:>6.2f} "
            f"{s['first_item_ms_short']:>12.2f} {s['first_item_ms_short_max']:>6.2f} "
            f"{s['restream_cpu_us_per_item']:>16.2f} {s['producer_cpu_us_per_item']:>8.2f} "
            f"{s['client_cpu_us_per_item']:>6.2f} {s['other_cores']:>6.2f}"
        )
    return "\n".join(lines)


def checks(summary: dict[str, dict[str, float]]) -> list[report.Check]:
    out = []
    for client, s in summary.items():
        out.append(report.Check(f"{client} items/s", s["items_per_s"], 100_000, at_least=True))
        first = max(s["first_item_ms_long"], s["first_item_ms_short"])
        out.append(report.Check(f"{client} first item, either length", first, 20, at_least=False, unit=" ms"))
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are over these")
    parser.add_argument("--short-repeats", type=int, default=5, help="10-item streams per client per round")
    parser.add_argument("--output", type=Path, help="where to write the JSON results")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.datetime.now(datetime.UTC)
    env = harness.environment(("uvicorn", "pydantic", "aiohttp", "httpx"))
    token = new_token()
    busy = harness.machine_busy()
    if busy > 0.2:
        harness.log_stderr(f"warning: other processes are using {busy:.2f} cores; expect noisier runs")
    with tempfile.TemporaryDirectory(prefix="chains-bench-") as tmp, contextlib.ExitStack() as stack:
        chain = generate_chain(CHAIN_FILE, Path(tmp))
        producer = stack.enter_context(
            serve_chainlet(chain.chainlets["Producer"].directory, entrypoint=False, token=token)
        )
        restream = stack.enter_context(
            serve_chainlet(
                chain.chainlets["Restream"].directory,
                entrypoint=True,
                token=token,
                dependency_urls={"Producer": [producer.base_url]},
            )
        )
        pids = (restream.process.pid, producer.process.pid)
        runs = uvloop.run(
            measure(restream.base_url, pids, args.rounds, args.short_repeats, harness.log_stderr)
        )
    summary = summarize(runs)
    print(table(summary))
    results = checks(summary)
    print(report.check_lines(results))
    output: dict[str, Any] = {
        "settings": {
            "rounds": args.rounds,
            "short_repeats": args.short_repeats,
            "long_items": LONG,
            "short_items": SHORT,
            "cpu_parts": "server_parts_s is (Restream, Producer); wrk_s is this process, the client",
        },
        "checks": [c.to_json() for c in results],
        "summary": summary,
        "runs": {
            client: {kind: [_run_json(r) for r in rs] for kind, rs in kinds.items()}
            for client, kinds in runs.items()
        },
    }
    report.write_results("streaming_hop", output, args.output, started=started, environment=env)
    return 0


def _run_json(run: StreamRun) -> dict[str, Any]:
    out = _fields(run)
    out["items_per_s"] = run.items_per_s
    if run.cpu is not None:
        out["cpu"] = asdict(run.cpu)
    return out


if __name__ == "__main__":
    sys.exit(main())
