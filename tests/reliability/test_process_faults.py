"""Process faults under load: `kill -9` of a dependency costs the entrypoint's callers nothing.

A steady load of unary calls (16 at a time, 20 s) runs against a pushed chain while a
dependency's process is killed; every call is counted and checked. The supervisor restarts
the process, the stubs' retries cover the calls it took down with it, and with two replicas
the calls move to the live one instead of waiting for the restart.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx

from chains.targets.state import read_state
from tests.reliability.conftest import pushed, record, status_restarts

CONCURRENCY = 16
DURATION_SEC = 20.0


@dataclass
class Load:
    """What a steady load saw: every call, every failure, and when each call ran."""

    calls: int = 0
    failures: list[str] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)  # (start, seconds), monotonic

    def slowest_within(self, start: float, end: float) -> float:
        """The longest call that was running at some point of [start, end]."""
        return max((d for s, d in self.spans if s <= end and s + d >= start), default=0.0)

    def finished_within(self, start: float, end: float) -> int:
        return sum(1 for s, d in self.spans if start <= s + d <= end)


async def steady_load(url: str, load: Load, until: float) -> None:
    """CONCURRENCY callers, each calling the entrypoint back to back until ``until``."""
    timeout = aiohttp.ClientTimeout(total=30)  # a call this slow counts as failed, not as a hang
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def caller(worker: int) -> None:
            n = 0
            while time.monotonic() < until:
                x = worker * 1_000_000 + n
                n += 1
                started = time.monotonic()
                try:
                    async with session.post(url + "/run_remote", json={"x": x}) as response:
                        body = await response.read()
                        if response.status != 200 or body != str(2 * x).encode():
                            load.failures.append(f"{response.status}: {body[:300]!r}")
                except (aiohttp.ClientError, TimeoutError) as exc:
                    load.failures.append(f"{type(exc).__name__}: {exc}")
                load.calls += 1
                load.spans.append((started, time.monotonic() - started))

        await asyncio.gather(*(caller(w) for w in range(CONCURRENCY)))


@dataclass
class Kill:
    chainlet: str
    replica: int
    old_pid: int
    killed_at: float
    ready_at: float = 0.0
    new_pid: int = 0

    @property
    def restart_sec(self) -> float:
        return self.ready_at - self.killed_at


async def kill_and_wait(chain: str, chainlet: str, replica: int = 0, timeout: float = 15) -> Kill:
    """`kill -9` one replica, then wait until the supervisor has it ready again."""
    record_ = next(p for p in read_state(chain).replicas(chainlet) if p.replica == replica)
    assert record_.pid is not None and record_.state == "ready"
    kill = Kill(chainlet, replica, record_.pid, time.monotonic())
    os.kill(record_.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = next(p for p in read_state(chain).replicas(chainlet) if p.replica == replica)
        if now.state == "ready" and now.pid not in (None, kill.old_pid):
            kill.ready_at, kill.new_pid = time.monotonic(), now.pid
            return kill
        await asyncio.sleep(0.02)
    raise AssertionError(f"{chainlet}[{replica}] was not restarted within {timeout}s")


async def run_with_kills(
    url: str, chain: str, chainlet: str, kill_at: list[float], replica: int = 0
) -> tuple[Load, list[Kill]]:
    load = Load()
    start = time.monotonic()
    kills: list[Kill] = []

    async def chaos() -> None:
        for offset in kill_at:
            await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
            kills.append(await kill_and_wait(chain, chainlet, replica))

    await asyncio.gather(steady_load(url, load, start + DURATION_SEC), chaos())
    return load, kills


def test_kill_9_of_a_dependency_under_load_fails_no_call(chains_home: Path) -> None:
    with pushed("UnaryEntry", "faults") as chain:
        # Three kills, so that the second and third restart come after the supervisor's backoff.
        load, kills = asyncio.run(run_with_kills(chain.entrypoint_url, "faults", "Doubler", [3.0, 9.0, 15.0]))
        restarts = status_restarts("faults")
    figures = {
        "calls": load.calls,
        "failed": len(load.failures),
        "kills": len(kills),
        "restarts_in_status": restarts["Doubler"],
        "restart_sec": [round(k.restart_sec, 2) for k in kills],
        "slowest_call_sec": round(max(d for _, d in load.spans), 3),
    }
    record("process_kill_single_replica", **figures)
    assert load.failures == [], f"{len(load.failures)} of {load.calls} calls failed: {load.failures[:5]}"
    assert load.calls > 1000, figures
    assert restarts == {"UnaryEntry": 0, "Doubler": 3}, restarts
    for kill in kills:
        # Calls went on through each restart: they waited in the socket's backlog, then finished.
        assert load.finished_within(kill.killed_at, kill.ready_at + 0.5) > 0, figures


def test_kill_9_of_one_of_two_replicas_costs_no_call_and_no_wait(chains_home: Path) -> None:
    restart_init = float(os.environ.get("RESTART_INIT_SEC", "3"))
    with pushed("PairEntry", "pair") as chain:
        load, kills = asyncio.run(
            run_with_kills(chain.entrypoint_url, "pair", "PairedDoubler", [5.0], replica=0)
        )
        restarts = status_restarts("pair")
    (kill,) = kills
    # Every call that ran while replica 0 was down or starting again.
    slowest = load.slowest_within(kill.killed_at, kill.ready_at)
    during = load.finished_within(kill.killed_at, kill.ready_at)
    figures = {
        "calls": load.calls,
        "failed": len(load.failures),
        "restart_sec": round(kill.restart_sec, 2),
        "calls_during_restart": during,
        "slowest_call_during_restart_sec": round(slowest, 3),
        "restarts_in_status": restarts,
    }
    record("process_kill_one_of_two_replicas", **figures)
    assert load.failures == [], f"{len(load.failures)} of {load.calls} calls failed: {load.failures[:5]}"
    assert kill.restart_sec >= restart_init, figures  # the restart really was slow
    # No call waited for it: the other replica answered meanwhile.
    assert slowest < 0.25, figures
    assert during > 100, figures
    assert restarts == {"PairEntry": 0, "PairedDoubler[0]": 1, "PairedDoubler[1]": 0}, restarts


def test_a_hanging_dependency_is_reported_as_itself_not_as_the_callers_deadline(chains_home: Path) -> None:
    """The dependency's own timeout (timeout_sec=0.5) fires first: the entrypoint answers in
    time, naming the dependency. Only a deadline the caller set, when it runs out, is a 504."""
    with pushed("ImpatientEntry", "impatient") as chain:
        url = chain.entrypoint_url + "/run_remote"
        started = time.monotonic()
        response = httpx.post(url, json={"seconds": 30}, timeout=10)
        elapsed = time.monotonic() - started
        error = response.json()["error"]
        assert response.status_code == 500 and elapsed < 3, (response.status_code, elapsed)
        assert error["exc_type"] == "DeadlineExceeded"
        assert "Sleeper did not answer within 0.5s" in error["message"], error["message"]
        assert "caller's deadline" not in error["message"]

        started = time.monotonic()
        response = httpx.post(url, json={"seconds": 30}, headers={"x-chains-timeout": "0.2"}, timeout=10)
        deadline_elapsed = time.monotonic() - started
        assert response.status_code == 504 and deadline_elapsed < 3
        assert "within the caller's deadline" in response.json()["error"]["message"]
    record(
        "process_hanging_dependency",
        dependency_timeout_sec=0.5,
        answered_after_sec=round(elapsed, 2),
        status=500,
        reported="DeadlineExceeded: Sleeper did not answer within 0.5s",
        with_caller_deadline_0_2s={"status": 504, "answered_after_sec": round(deadline_elapsed, 2)},
    )
