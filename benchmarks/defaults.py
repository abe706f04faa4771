"""Fast at the defaults (issue 26): every figure against its floor, measured in one run.

What a new user gets from ``chains push`` is a chainlet that writes one request-log line per call
and traces every call into the chain's local SQLite store. This benchmark serves the generated
chainlets with exactly that environment, and with each part off, next to the bare floors, and
measures them interleaved (wrk, one thread, keep-alive connections):

- ``floor``: ``benchmarks/apps/bare_starlette.py``, one uvicorn + Starlette app;
- ``echo-defaults`` / ``echo-off``: ``benchmarks/chains/unary.py``'s ``Echo`` with the request
  log (written to a file, as the local target's supervisor does) and the trace store on, and
  with ``CHAINS_REQUEST_LOG=0 CHAINS_TRACE_STORE=off``;
- ``floor-1hop``: ``benchmarks/apps/bare_hop.py`` calling the floor with one aiohttp session;
- ``hop-defaults`` / ``hop-off``: ``benchmarks/chains/one_hop.py``'s ``Front`` calling ``Back``.

Then, from this process (uvloop), the consumer clients against ``echo-off`` (the fastest server,
so that the client's own cost shows): ``chains.client.AsyncClient`` against a plain aiohttp
session and a plain ``httpx.AsyncClient`` with 64 concurrent callers, and ``chains.client.Client``
against a plain ``httpx.Client`` sequentially; for each, the TCP connections it opened (counted in
``/proc/net/tcp``: a client that churns leaves one ``TIME_WAIT`` entry per closed connection).
Last, 100,000 small typed items streamed through one hop (``benchmarks/chains/streaming.py``),
read with ``chains.client.AsyncClient``, then the same stream as server-sent events read by a
plain aiohttp reader.

Run from the repository root: ``.venv/bin/python -m benchmarks.defaults`` (about 3 minutes);
``--smoke`` runs everything once, briefly, and fails only on errors (what CI runs), never on a time;
``--servers-only`` measures the six servers alone (about a minute), to compare two trees quickly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvloop

from benchmarks import harness, report
from benchmarks.asgi_frameworks import BODY
from benchmarks.chainlets import CHAINS_DIR, generate_chain, new_token, serve_chainlet
from benchmarks.chains.streaming import Item
from chains.client import AsyncClient, Client

FLOOR = "floor"
ECHO_DEFAULTS = "echo-defaults"
ECHO_OFF = "echo-off"
FLOOR_HOP = "floor-1hop"
HOP_DEFAULTS = "hop-defaults"
HOP_OFF = "hop-off"
BASELINE = {
    FLOOR: FLOOR,
    ECHO_DEFAULTS: FLOOR,
    ECHO_OFF: FLOOR,
    FLOOR_HOP: FLOOR_HOP,
    HOP_DEFAULTS: FLOOR_HOP,
    HOP_OFF: FLOOR_HOP,
}
OFF = {"CHAINS_REQUEST_LOG": "0", "CHAINS_TRACE_STORE": "off"}
CALLERS = 64
STREAM_ITEMS = 100_000


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    report.add_load_arguments(parser, duration=3.0, rounds=3)
    parser.set_defaults(connections="64")
    parser.add_argument("--client-seconds", type=float, default=3.0, help="seconds per client run")
    parser.add_argument(
        "--smoke", action="store_true", help="one short round of everything; fail on errors only"
    )
    parser.add_argument(
        "--servers-only",
        action="store_true",
        help="measure the servers against their floors only (no clients, no streams); nothing is written",
    )
    return parser.parse_args(argv)


def defaults_env(home: Path) -> dict[str, str]:
    """What the local target sets that the defaults depend on: the chain's trace store."""
    return {"CHAINS_TRACE_STORE": str(home / "traces.sqlite"), "CHAINS_REQUEST_LOG": "1"}


# ------------------------------------------------------------------------------------ connections


def _peer_ports(port: int) -> set[tuple[str, str]]:
    """The (local address, state) of every TCP socket of this machine whose peer is ``port``."""
    found: set[tuple[str, str]] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines, None)
            for line in lines:
                fields = line.split()
                local, remote = fields[1], fields[2]
                if int(remote.rsplit(":", 1)[1], 16) == port:
                    found.add((local, fields[3]))
    return found


@contextlib.contextmanager
def counting_connections(port: int, out: list[int]) -> Any:
    """Count the connections to ``port`` that appear while the block runs (open or closed since)."""
    before = {local for local, _ in _peer_ports(port)}
    yield
    out.append(len({local for local, _ in _peer_ports(port)} - before))


# ---------------------------------------------------------------------------------------- clients


@dataclass(frozen=True, slots=True)
class ClientRun:
    client: str
    calls: int
    seconds: float
    errors: int
    connections: int

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.seconds


Call = Callable[[], Awaitable[None]]


async def _closed_loop(call: Call, callers: int, seconds: float) -> tuple[int, int, float]:
    """``callers`` tasks each calling in a loop until ``seconds`` have passed: calls, errors, time."""
    stop = time.perf_counter() + seconds
    counts = [0, 0]

    async def caller() -> None:
        while time.perf_counter() < stop:
            try:
                await call()
                counts[0] += 1
            except Exception as exc:
                if not counts[1]:
                    harness.log_stderr(f"first failed call: {type(exc).__name__}: {exc}")
                counts[1] += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return counts[0], counts[1], time.perf_counter() - started


async def measure_async_clients(
    url: str, port: int, seconds: float, rounds: int
) -> dict[str, list[ClientRun]]:
    """chains' AsyncClient, plain aiohttp and plain httpx, 64 concurrent callers each, interleaved."""
    arguments = json.loads(BODY)
    expected = json.dumps(
        {"text": arguments["prompt"], "tokens": arguments["max_tokens"]}, separators=(",", ":")
    )
    target = url + "/run_remote"
    headers = {"content-type": "application/json"}
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CALLERS))
    plain_httpx = httpx.AsyncClient(
        limits=httpx.Limits(max_connections=CALLERS, max_keepalive_connections=CALLERS)
    )
    chains_client = AsyncClient(url)

    async def with_aiohttp() -> None:
        async with session.post(target, data=BODY, headers=headers) as reply:
            if reply.status != 200 or await reply.read() != expected.encode():
                raise RuntimeError(f"aiohttp: {reply.status}")

    async def with_httpx() -> None:
        reply = await plain_httpx.post(target, content=BODY, headers=headers)
        if reply.status_code != 200 or reply.content != expected.encode():
            raise RuntimeError(f"httpx: {reply.status_code}")

    async def with_chains() -> None:
        result = await chains_client.call(None, **arguments)
        if result != json.loads(expected):
            raise RuntimeError(f"chains client: {result!r}")

    calls = {"aiohttp": with_aiohttp, "httpx": with_httpx, "chains.AsyncClient": with_chains}
    runs: dict[str, list[ClientRun]] = {name: [] for name in calls}
    try:
        for call in calls.values():  # warm-up: connections, first validations
            await _closed_loop(call, CALLERS, 0.5)
        for _ in range(rounds):
            for name, call in calls.items():
                opened: list[int] = []
                with counting_connections(port, opened):
                    done, errors, elapsed = await _closed_loop(call, CALLERS, seconds)
                runs[name].append(ClientRun(name, done, elapsed, errors, opened[0]))
                harness.log_stderr(
                    f"{name:<20} {done / elapsed:8.0f} calls/s  errors {errors}  new connections {opened[0]}"
                )
    finally:
        await session.close()
        await plain_httpx.aclose()
        await chains_client.aclose()
    return runs


def measure_sync_clients(url: str, port: int, seconds: float, rounds: int) -> dict[str, list[ClientRun]]:
    """chains' Client against a plain httpx.Client, one caller, interleaved."""
    target = url + "/run_remote"
    headers = {"content-type": "application/json"}
    plain = httpx.Client()
    chains_client = Client(url)
    arguments = json.loads(BODY)

    def with_httpx() -> None:
        reply = plain.post(target, content=BODY, headers=headers)
        if reply.status_code != 200:
            raise RuntimeError(f"httpx: {reply.status_code}")

    def with_chains() -> None:
        chains_client.call(None, **arguments)

    calls = {"httpx.Client": with_httpx, "chains.Client": with_chains}
    runs: dict[str, list[ClientRun]] = {name: [] for name in calls}
    try:
        for call in calls.values():
            for _ in range(200):
                call()
        for _ in range(rounds):
            for name, call in calls.items():
                opened: list[int] = []
                done = errors = 0
                with counting_connections(port, opened):
                    started = time.perf_counter()
                    stop = started + seconds
                    while time.perf_counter() < stop:
                        try:
                            call()
                            done += 1
                        except Exception:
                            errors += 1
                    elapsed = time.perf_counter() - started
                runs[name].append(ClientRun(name, done, elapsed, errors, opened[0]))
                harness.log_stderr(
                    f"{name:<20} {done / elapsed:8.0f} calls/s  errors {errors}  new connections {opened[0]}"
                )
    finally:
        plain.close()
        chains_client.close()
    return runs


def client_summary(runs: dict[str, list[ClientRun]]) -> dict[str, dict[str, float]]:
    return {
        name: {
            "calls_per_s": statistics.median(r.calls_per_s for r in rs),
            "errors": sum(r.errors for r in rs),
            "new_connections": max(r.connections for r in rs),
        }
        for name, rs in runs.items()
    }


# -------------------------------------------------------------------------------------- streaming


async def measure_stream(url: str, rounds: int, items: int) -> list[dict[str, float]]:
    """Items/s and first item of ``items`` items through one hop, read with chains' AsyncClient."""
    out = []
    async with AsyncClient(url) as client:
        for round_no in range(rounds + 1):
            started = time.perf_counter()
            first = 0.0
            received = 0
            async for item in await client.stream(Item, count=items):
                if received == 0:
                    first = time.perf_counter() - started
                if item.index != received:
                    raise RuntimeError(f"item {received} arrived as {item.index}")
                received += 1
            total = time.perf_counter() - started
            if received != items:
                raise RuntimeError(f"{received} items of {items}")
            if round_no:  # the first is a warm-up
                out.append({"items_per_s": items / total, "first_item_ms": first * 1e3})
                harness.log_stderr(f"stream {items / total:9.0f} items/s  first item {first * 1e3:6.2f} ms")
    return out


async def measure_sse(url: str, rounds: int, items: int) -> list[dict[str, float]]:
    """Events/s of the same stream read as server-sent events by a plain aiohttp reader, as an
    outside client reads it: its ``data:`` lines counted, each item checked once in order."""
    out = []
    body = json.dumps({"count": items}).encode()
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    async with aiohttp.ClientSession() as session:
        for round_no in range(rounds + 1):
            started = time.perf_counter()
            received = 0
            async with session.post(f"{url}/run_remote", data=body, headers=headers) as answer:
                if answer.status != 200:
                    raise RuntimeError(f"SSE stream answered {answer.status}")
                async for line in answer.content:
                    if line.startswith(b"data: {"):
                        if json.loads(line[6:])["index"] != received:
                            raise RuntimeError(f"event {received} arrived out of order")
                        received += 1
            total = time.perf_counter() - started
            if received != items:
                raise RuntimeError(f"{received} events of {items}")
            if round_no:
                out.append({"events_per_s": items / total})
                harness.log_stderr(f"SSE {items / total:9.0f} events/s")
    return out


# ------------------------------------------------------------------------------------------- main


def checks(
    summaries: Sequence[harness.Summary],
    clients: dict[str, dict[str, float]],
    stream: list[dict[str, float]],
    sse: list[dict[str, float]],
) -> list[report.Check]:
    at = {s.target: s for s in summaries}
    out = []

    def ratio(name: str, base: str, target: float) -> None:
        out.append(
            report.Check(f"{name} rps / {base}", at[name].rps / at[base].rps, target, at_least=True, unit="x")
        )

    ratio(ECHO_DEFAULTS, FLOOR, 0.8)
    ratio(ECHO_OFF, FLOOR, 1.0)
    ratio(HOP_DEFAULTS, FLOOR_HOP, 0.75)
    ratio(HOP_OFF, FLOOR_HOP, 0.9)
    async_ratio = clients["chains.AsyncClient"]["calls_per_s"] / clients["aiohttp"]["calls_per_s"]
    out.append(report.Check("AsyncClient / aiohttp, 64 callers", async_ratio, 0.8, at_least=True, unit="x"))
    sync_ratio = clients["chains.Client"]["calls_per_s"] / clients["httpx.Client"]["calls_per_s"]
    out.append(report.Check("Client / httpx.Client, sequential", sync_ratio, 0.8, at_least=True, unit="x"))
    # Keep-alive: at most one connection per concurrent caller, over every round.
    # Keep-alive: the warm-up opened the connections, every measured round reuses them.
    churn = clients["chains.AsyncClient"]["new_connections"] + clients["chains.Client"]["new_connections"]
    out.append(
        report.Check("connections opened by chains' clients after the warm-up", churn, 0, at_least=False)
    )
    items = statistics.median(r["items_per_s"] for r in stream)
    out.append(report.Check("stream items/s through one hop", items, 250_000, at_least=True))
    first = statistics.median(r["first_item_ms"] for r in stream)
    out.append(report.Check("stream first item ms", first, 10, at_least=False))
    events = statistics.median(r["events_per_s"] for r in sse)
    out.append(report.Check("SSE events/s to an outside reader", events, 100_000, at_least=True))
    errors = sum(s.errors for s in summaries) + sum(int(c["errors"]) for c in clients.values())
    out.append(report.Check("failed requests and calls", errors, 0, at_least=False))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.smoke:
        args.rounds, args.duration, args.client_seconds = 1, 1.0, 0.5
    loads = report.loads_from(args)
    started = datetime.datetime.now(datetime.UTC)
    env = harness.environment(("uvicorn", "starlette", "pydantic", "aiohttp", "httpx", "opentelemetry-sdk"))
    token = new_token()
    with tempfile.TemporaryDirectory(prefix="chains-bench-") as tmp, contextlib.ExitStack() as stack:
        home = Path(tmp)
        unary = generate_chain(CHAINS_DIR / "unary.py", home / "unary")
        hop = generate_chain(CHAINS_DIR / "one_hop.py", home / "one_hop")
        streaming = generate_chain(CHAINS_DIR / "streaming.py", home / "streaming")
        on = defaults_env(home)
        floor = stack.enter_context(
            harness.serve("benchmarks.apps.bare_starlette:app", ready_path="/generate", ready_body=BODY)
        )
        floor_hop = stack.enter_context(
            harness.serve(
                "benchmarks.apps.bare_hop:app",
                ready_path="/generate",
                ready_body=BODY,
                env={"BENCH_HOP_URL": floor.url("/generate")},
            )
        )
        echo_dir = unary.chainlets["Echo"].directory
        echo_on = stack.enter_context(serve_chainlet(echo_dir, entrypoint=True, token=token, env=on))
        echo_off = stack.enter_context(serve_chainlet(echo_dir, entrypoint=True, token=token, env=OFF))
        endpoints = [
            harness.Endpoint(FLOOR, floor.url("/generate"), BODY, pids=(floor.process.pid,)),
            harness.Endpoint(ECHO_DEFAULTS, echo_on.url("/run_remote"), BODY, pids=(echo_on.process.pid,)),
            harness.Endpoint(ECHO_OFF, echo_off.url("/run_remote"), BODY, pids=(echo_off.process.pid,)),
            harness.Endpoint(
                FLOOR_HOP, floor_hop.url("/generate"), BODY, pids=(floor_hop.process.pid, floor.process.pid)
            ),
        ]
        back_dir, front_dir = hop.chainlets["Back"].directory, hop.chainlets["Front"].directory
        for name, variant in ((HOP_DEFAULTS, on), (HOP_OFF, OFF)):
            back = stack.enter_context(serve_chainlet(back_dir, entrypoint=False, token=token, env=variant))
            front = stack.enter_context(
                serve_chainlet(
                    front_dir,
                    entrypoint=True,
                    token=token,
                    env=variant,
                    dependency_urls={"Back": [back.base_url]},
                )
            )
            endpoints.append(
                harness.Endpoint(
                    name, front.url("/run_remote"), BODY, pids=(front.process.pid, back.process.pid)
                )
            )
        answers = {e.name: e.probe()[1] for e in endpoints}
        if len(set(answers.values())) != 1:
            raise RuntimeError(f"the targets answer differently: {answers}")
        summaries = harness.measure_interleaved(endpoints, loads, rounds=args.rounds, warmup_s=1.0)
        print(report.summary_table(summaries, BASELINE))
        # The request log really was written, and the traces really stored: else the comparison is void.
        if "Echo 200" not in echo_on.log_text():
            raise RuntimeError("echo-defaults wrote no request log line")
        if not (home / "traces.sqlite").exists():
            raise RuntimeError("echo-defaults stored no trace")
        if args.servers_only:
            for s in summaries:
                print(f"{s.target:<14} {s.rps:8.0f} req/s  {s.server_cpu_per_request_us:6.1f} us CPU/request")
            return 0 if not any(s.errors for s in summaries) else 1

        clients = uvloop.run(
            measure_async_clients(echo_off.base_url, echo_off.port, args.client_seconds, args.rounds)
        )
        clients.update(
            measure_sync_clients(echo_off.base_url, echo_off.port, args.client_seconds, args.rounds)
        )
        client_figures = client_summary(clients)
        for name, figures in client_figures.items():
            print(
                f"{name:<20} {figures['calls_per_s']:8.0f} calls/s  errors {figures['errors']:.0f}  "
                f"new connections {figures['new_connections']:.0f}"
            )

        producer = stack.enter_context(
            serve_chainlet(streaming.chainlets["Producer"].directory, entrypoint=False, token=token, env=on)
        )
        restream = stack.enter_context(
            serve_chainlet(
                streaming.chainlets["Restream"].directory,
                entrypoint=True,
                token=token,
                env=on,
                dependency_urls={"Producer": [producer.base_url]},
            )
        )
        items = 5_000 if args.smoke else STREAM_ITEMS
        stream = uvloop.run(measure_stream(restream.base_url, args.rounds, items))
        sse = uvloop.run(measure_sse(restream.base_url, args.rounds, items))
    results = checks(summaries, client_figures, stream, sse)
    print(report.check_lines(results))
    output: dict[str, Any] = {
        "settings": {
            "rounds": args.rounds,
            "duration_s": args.duration,
            "client_seconds": args.client_seconds,
            "connections": [ld.connections for ld in loads],
            "baseline": BASELINE,
            "smoke": args.smoke,
        },
        "checks": [c.to_json() for c in results],
        "clients": client_figures,
        "client_runs": {name: [vars_of(r) for r in rs] for name, rs in clients.items()},
        "stream": stream,
        "sse": sse,
        "results": [s.to_json() for s in summaries],
    }
    if not args.smoke:
        report.write_results("defaults", output, args.output, started=started, environment=env)
    return 0 if all(c.met for c in results if c.name.startswith(("failed", "connections"))) else 1


def vars_of(run: ClientRun) -> dict[str, Any]:
    return {"calls": run.calls, "seconds": run.seconds, "errors": run.errors, "connections": run.connections}


if __name__ == "__main__":
    sys.exit(main())
