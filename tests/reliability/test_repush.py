"""Re-pushing a running chain, and replacing its processes as `chains push --watch` does,
under 16 streaming clients: not one new call refused or reset, not one stream cut.

The clients are of the three kinds a chain has: raw HTTP bodies and server-sent events
(each over its own kept-alive connection, no retries) and typed stubs. Every stream is
checked item by item. Meanwhile the chain is pushed again (a new deployment with a new
supervisor takes the entrypoint's listening socket from the old one) and then every
chainlet is replaced in place (the supervisor's `replace` command).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from chains.deploy import push_chain
from chains.loader import load_chain
from chains.streaming import SSE
from chains.targets import PushOptions, is_alive
from chains.targets.local import control
from chains.targets.state import chain_dir, read_state
from tests.helpers import await_until, wait_until
from tests.reliability.clients import TextStub, as_sse_text, expected_text
from tests.reliability.conftest import SAMPLE, all_ready, pushed, record

CLIENTS = 16
N, SIZE, DELAY = 20, 24, 0.01  # a stream of about a quarter of a second
ARGUMENTS = {"n": N, "size": SIZE, "delay": DELAY}
# Load before, between and after the changes: this many calls of every client kind, each time.
ROUND_CALLS = 20
ROUND_LIMIT_SEC = 60.0
LOAD_LIMIT_SEC = 120.0  # no client runs longer than this, whatever happens


@dataclass
class Seen:
    """Every call the clients made, by kind, and each one that did not come back whole."""

    calls: Counter[str] = field(default_factory=Counter)
    refused: list[str] = field(default_factory=list)  # an HTTP status other than 200
    reset: list[str] = field(default_factory=list)  # a connection error before any answer
    cut: list[str] = field(default_factory=list)  # a stream that broke off or came back wrong
    phase: str = "before"  # which change was last started; every failure names it

    def figures(self) -> dict[str, object]:
        failures = self.refused + self.reset + self.cut
        return {
            "calls": dict(self.calls),
            "refused": len(self.refused),
            "reset": len(self.reset),
            "cut": len(self.cut),
            "failures_by_phase": dict(Counter(f.split(" ", 1)[0] for f in failures)),
            "examples": failures[:5],
        }


async def raw_client(url: str, sse: bool, seen: Seen, stop: asyncio.Event) -> None:
    kind = "sse" if sse else "raw"
    headers = {"accept": "text/event-stream"} if sse else {}
    want = as_sse_text(expected_text(N, SIZE)) if sse else expected_text(N, SIZE)
    deadline = time.monotonic() + LOAD_LIMIT_SEC
    # One kept-alive connection, no retries: what a plain HTTP client does.
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=1)) as client:
        while not stop.is_set() and time.monotonic() < deadline:
            seen.calls[kind] += 1
            received = False
            try:
                async with client.stream(
                    "POST", url + "/run_remote", json=ARGUMENTS, headers=headers
                ) as response:
                    received = True
                    if response.status_code != 200:
                        body = await response.aread()
                        seen.refused.append(f"{seen.phase} {kind}: {response.status_code} {body[:200]!r}")
                        continue
                    if sse:
                        events = [e async for e in SSE.from_chunks(response.aiter_bytes())]
                        items = [e.data for e in events if e.event is None]
                        last = [e.event for e in events][-1:]
                        if last != ["end"] or "".join(items) != want:
                            seen.cut.append(f"{seen.phase} sse: {len(items)} items, then {last}")
                    else:
                        body = await response.aread()
                        if body.decode(errors="replace") != want:
                            seen.cut.append(f"{seen.phase} raw: {len(body)} bytes")
            except httpx.HTTPError as exc:
                failure = f"{seen.phase} {kind}: {type(exc).__name__}: {exc}"
                (seen.cut if received else seen.reset).append(failure)


async def stub_client(url: str, seen: Seen, stop: asyncio.Event) -> None:
    stub = TextStub(url)
    want = expected_text(N, SIZE)
    deadline = time.monotonic() + LOAD_LIMIT_SEC
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            seen.calls["stub"] += 1
            got: list[str] = []
            try:
                async for text in stub.run_remote(N, SIZE, DELAY):
                    got.append(text)
            except Exception as exc:
                seen.cut.append(f"{seen.phase} stub after {len(got)} items: {type(exc).__name__}: {exc}")
                continue
            if "".join(got) != want:
                seen.cut.append(f"{seen.phase} stub: {len(got)} items, not the ones sent")
    finally:
        await stub.aclose()


async def under_load(
    url: str, changes: list[tuple[str, Callable[[], None]]]
) -> tuple[Seen, dict[str, float]]:
    """Run the clients; once each kind made ROUND_CALLS calls, make each change in turn (in a
    thread, as the command line would), each followed by as many calls, then stop the clients.
    Returns what they saw and how long each change took."""
    seen, stop = Seen(), asyncio.Event()
    kinds = ["raw", "sse", "stub"]
    clients = [
        raw_client(url, kind == "sse", seen, stop) if kind != "stub" else stub_client(url, seen, stop)
        for kind in (kinds[i % len(kinds)] for i in range(CLIENTS))
    ]
    took: dict[str, float] = {}

    async def a_round(after: str) -> None:
        floor = {kind: seen.calls[kind] + ROUND_CALLS for kind in kinds}
        await await_until(
            lambda: all(seen.calls[kind] >= floor[kind] for kind in kinds),
            ROUND_LIMIT_SEC,
            f"{ROUND_CALLS} calls of every client kind {after}",
        )

    async def change() -> None:
        try:
            await a_round("before the changes")
            for what, action in changes:
                started = time.monotonic()
                seen.phase = what
                await asyncio.to_thread(action)
                took[what] = round(time.monotonic() - started, 2)
                await a_round(f"after {what}")
        finally:
            stop.set()

    await asyncio.gather(change(), *clients)
    return seen, took


def repush(name: str, entrypoint: str) -> None:
    push_chain(load_chain(SAMPLE, entrypoint, name), SAMPLE, "local", PushOptions(timeout=60))


def replace_all(name: str) -> None:
    """What `chains push --watch` does when every chainlet's code changed: dependencies first."""
    state = read_state(name)
    deploy_dir = chain_dir(name) / "deployments" / state.deployment
    for chainlet in ["Producer", "TextEntry"]:
        (process,) = state.replicas(chainlet)
        answer = control(deploy_dir, {"cmd": "replace", "chainlet": chainlet, "directory": process.directory})
        assert answer.get("ok"), answer


def test_repush_and_replace_under_streaming_load_refuse_reset_and_cut_nothing(chains_home: Path) -> None:
    with pushed("TextEntry", "repush") as chain:
        before = read_state("repush")
        changes = [
            ("repush", lambda: repush("repush", "TextEntry")),
            ("replace", lambda: replace_all("repush")),
        ]
        seen, took = asyncio.run(under_load(chain.entrypoint_url, changes))
        after = read_state("repush")
        wait_until(lambda: all_ready("repush"), 10, "the chain ready after the changes")
        # The new deployment took the socket over, rather than binding the port a second time.
        log = (chain_dir("repush") / "deployments" / after.deployment / "supervisor.log").read_text()
    record("repush_under_load", **seen.figures(), took_sec=took)
    assert after.deployment != before.deployment
    assert after.entrypoint_url == before.entrypoint_url
    assert "not handed over" not in log, log
    assert sum(seen.calls.values()) > 3 * CLIENTS and all(seen.calls[k] for k in ("raw", "sse", "stub"))
    assert (seen.refused, seen.reset, seen.cut) == ([], [], []), seen.figures()


def test_repush_after_a_supervisor_death_keeps_the_entrypoints_port(chains_home: Path) -> None:
    with pushed("UnaryEntry", "orphaned") as chain:
        before = read_state("orphaned")
        # The supervisor dies, and its chainlets with it.
        os.kill(before.local.supervisor_pid, signal.SIGKILL)
        for process in before.processes:
            if process.pid:
                os.kill(process.pid, signal.SIGKILL)
        wait_until(lambda: not is_alive(read_state("orphaned")), 10, "the deployment seen as dead")
        repush("orphaned", "UnaryEntry")
        after = read_state("orphaned")
        assert is_alive(after) and after.deployment != before.deployment
        assert after.entrypoint_url == chain.entrypoint_url
        answer = httpx.post(chain.entrypoint_url + "/run_remote", json={"x": 21}, timeout=10)
        assert answer.status_code == 200 and answer.json() == 42
    record("repush_after_supervisor_death", entrypoint_url=after.entrypoint_url, kept_port=True)
