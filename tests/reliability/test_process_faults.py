"""Process faults under load: `kill -9` of a dependency costs the entrypoint's callers nothing.

A steady load of unary calls (16 at a time, 20 s) runs against a pushed chain while a
dependency's process is killed; every call is counted and checked. The supervisor restarts
the process, the stubs' retries cover the calls it took down with it, and with two replicas
the calls move to the live one instead of waiting for the restart: what shows it is which
process answered each call, and how often the entrypoint retried, not how long calls took
(durations are recorded as figures for docs/reliability.md, never asserted).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx

from chains.targets.state import read_state
from tests.reliability.conftest import metric, pushed, record, status_restarts

CONCURRENCY = 16
DURATION_SEC = 20.0


@dataclass
class Load:
    """What a steady load saw: every call, every failure, and when each call ran."""

    calls: int = 0
    failures: list[str] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)  # (start, seconds), monotonic
    served_by: list[tuple[float, int]] = field(default_factory=list)  # (start, pid) when answers name it

    def slowest_within(self, start: float, end: float) -> float:
        """The longest call that was running at some point of [start, end]."""
        return max((d for s, d in self.spans if s <= end and s + d >= start), default=0.0)

    def finished_within(self, start: float, end: float) -> int:
        return sum(1 for s, d in self.spans if start <= s + d <= end)

    def overlapping(self, start: float, end: float) -> int:
        """Calls that were running at some point of [start, end]."""
        return sum(1 for s, d in self.spans if s <= end and s + d >= start)


Check = Callable[[int, bytes], int | None]
"""Whether ``body`` is the right answer to ``x`` (ValueError if not); the pid it names, if any."""


def doubled(x: int, body: bytes) -> None:
    if body != str(2 * x).encode():
        raise ValueError(f"{body[:300]!r} is not {2 * x}")


def doubled_by(x: int, body: bytes) -> int:
    value, pid = json.loads(body)
    if value != 2 * x:
        raise ValueError(f"{body[:300]!r} is not [{2 * x}, pid]")
    return int(pid)


async def steady_load(url: str, load: Load, until: float, check: Check = doubled) -> None:
    """CONCURRENCY callers, each calling the entrypoint back to back until ``until``."""
    timeout = aiohttp.ClientTimeout(total=30)  # a call this slow counts as failed, not as a hang
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def caller(worker: int) -> None:
            n = 0
            while time.monotonic() < until:
                x = worker * 1_000_000 + n
                n += 1
                started = time.monotonic()
                status = 0
                try:
                    async with session.post(url + "/run_remote", json={"x": x}) as response:
                        status, body = response.status, await response.read()
                    if status != 200:
                        raise ValueError(body[:300])
                    pid = check(x, body)
                    if pid is not None:
                        load.served_by.append((started, pid))
                except (ValueError, TypeError) as exc:
                    load.failures.append(f"{status}: {exc}")
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


def kill_replica(chain: str, chainlet: str, replica: int = 0) -> Kill:
    """`kill -9` one replica."""
    record_ = next(p for p in read_state(chain).replicas(chainlet) if p.replica == replica)
    assert record_.pid is not None and record_.state == "ready"
    kill = Kill(chainlet, replica, record_.pid, time.monotonic())
    os.kill(record_.pid, signal.SIGKILL)
    return kill


async def wait_restarted(chain: str, kill: Kill, timeout: float = 15) -> Kill:
    """Wait until the supervisor has the killed replica ready again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = next(p for p in read_state(chain).replicas(kill.chainlet) if p.replica == kill.replica)
        if now.state == "ready" and now.pid not in (None, kill.old_pid):
            kill.ready_at, kill.new_pid = time.monotonic(), now.pid
            return kill
        await asyncio.sleep(0.02)
    raise AssertionError(f"{kill.chainlet}[{kill.replica}] was not restarted within {timeout}s")


async def kill_and_wait(chain: str, chainlet: str, replica: int = 0, timeout: float = 15) -> Kill:
    """`kill -9` one replica, then wait until the supervisor has it ready again."""
    return await wait_restarted(chain, kill_replica(chain, chainlet, replica), timeout)


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
    retries_metric = 'chains_dependency_retries_total{chainlet="PairEntry",dependency="PairedDoubler"}'

    async def scenario(url: str) -> tuple[Load, Kill, float]:
        load = Load()
        start = time.monotonic()

        async def chaos() -> Kill:
            await asyncio.sleep(5.0)
            return kill_replica("pair", "PairedDoubler", 0)

        kill, _ = await asyncio.gather(chaos(), steady_load(url, load, start + DURATION_SEC, doubled_by))
        # Replica 0's new process is held in __init__ until now: during the load, a call it
        # answered could only have waited for it (in its port's backlog, say).
        (chains_home / "paired-release-0").touch()
        released_at = time.monotonic()
        return load, await wait_restarted("pair", kill, timeout=60), released_at

    with pushed("PairEntry", "pair") as chain:
        survivor = next(p.pid for p in read_state("pair").replicas("PairedDoubler") if p.replica == 1)
        load, kill, released_at = asyncio.run(scenario(chain.entrypoint_url))
        retries = metric(chain.entrypoint_url, retries_metric)
        restarts = status_restarts("pair")
    # Every call started after the kill, and who answered it.
    after_kill = [pid for started, pid in load.served_by if started >= kill.killed_at]
    overlapping = load.overlapping(kill.killed_at, released_at)
    figures = {
        "calls": load.calls,
        "failed": len(load.failures),
        "calls_started_after_the_kill": len(after_kill),
        "answered_by": {
            "survivor": after_kill.count(survivor),
            "killed": after_kill.count(kill.old_pid),
            "restarted": after_kill.count(kill.new_pid),
        },
        "retries_at_entrypoint": int(retries),
        "calls_overlapping_the_restart": overlapping,
        "slowest_call_after_the_kill_sec": round(load.slowest_within(kill.killed_at, released_at), 3),
        "restart_sec": round(kill.restart_sec, 2),
        "ready_after_release_sec": round(kill.ready_at - released_at, 2),
        "restarts_in_status": restarts,
    }
    record("process_kill_one_of_two_replicas", **figures)
    assert load.failures == [], f"{len(load.failures)} of {load.calls} calls failed: {load.failures[:5]}"
    # No call waited for the restart: none was answered by replica 0's new process, which was
    # held until the load had ended (a call queued on its port would have been, or timed out);
    # the survivor answered them.
    assert kill.new_pid not in after_kill, figures
    assert survivor in after_kill and set(after_kill) <= {survivor, kill.old_pid}, figures
    # The kill was felt, and each call it touched moved to the survivor in one retry: a call
    # that backed off and tried replica 0 again would count more than one.
    assert 1 <= retries <= overlapping, figures
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
