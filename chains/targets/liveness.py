"""Liveness: whether a running chainlet still answers, asked on a schedule by its supervisor.

A process that has not exited can still be dead to its callers: stopped (SIGSTOP), or with
its event loop blocked by a synchronous call (``time.sleep`` in an ``async`` body). The
supervisor asks each ready replica's ``/readyz`` (which also runs the user's ``is_healthy``)
every ``period_sec``; after ``failures`` answers in a row that do not come within
``timeout_sec`` or say "not healthy", it restarts the replica, as Kubernetes does after its
liveness probe's ``failureThreshold``::

    policy = LivenessPolicy.from_environment(os.environ)
    reason = await probe("127.0.0.1", 8001, policy.timeout_sec)  # None: healthy
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from chains.wire import READYZ

__all__ = ["LivenessPolicy", "Probation", "probe"]

PERIOD_ENV = "CHAINS_LIVENESS_PERIOD_SEC"
TIMEOUT_ENV = "CHAINS_LIVENESS_TIMEOUT_SEC"
FAILURES_ENV = "CHAINS_LIVENESS_FAILURES"


@dataclass(frozen=True)
class LivenessPolicy:
    """How often a replica is asked, how long an answer may take, how many misses restart it.

    The defaults restart a hung replica about 9 s after it stopped answering: long enough
    that a busy loop's hiccup is not mistaken for a hang, short enough that callers without
    a deadline do not wait long. ``period_sec=0`` turns probing off.
    """

    period_sec: float = 3.0
    timeout_sec: float = 2.0
    failures: int = 3

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> LivenessPolicy:
        """The policy from ``CHAINS_LIVENESS_PERIOD_SEC``, ``..._TIMEOUT_SEC`` and ``..._FAILURES``
        (the defaults where unset); a value that is not a number is an error naming it."""
        default = cls()
        return cls(
            period_sec=_number(env, PERIOD_ENV, default.period_sec, 0.0),
            timeout_sec=_number(env, TIMEOUT_ENV, default.timeout_sec, 0.01),
            failures=int(_number(env, FAILURES_ENV, default.failures, 1.0)),
        )

    @property
    def enabled(self) -> bool:
        return self.period_sec > 0

    @property
    def window_sec(self) -> float:
        """The longest a replica that stopped answering goes unnoticed."""
        return self.failures * self.period_sec + self.timeout_sec


def _number(env: Mapping[str, str], name: str, default: float, least: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"{name}={raw!r} is not a number of seconds (or a count); unset it or give one"
        ) from None
    if value < least:
        raise ValueError(f"{name}={raw!r} must be at least {least:g}")
    return value


@dataclass
class Probation:
    """The probes of one replica process: when the next one is due, and the misses so far."""

    next_at: float
    misses: int = 0
    first_miss_at: float | None = None
    last_reason: str = ""
    running: asyncio.Task[str | None] | None = None

    def passed(self) -> None:
        self.misses = 0
        self.first_miss_at = None

    def missed(self, now: float, reason: str) -> None:
        if self.first_miss_at is None:
            self.first_miss_at = now
        self.misses += 1
        self.last_reason = reason

    def step(self, now: float, policy: LivenessPolicy, host: str, port: int) -> str | None:
        """Collect the probe that has ended and start the next one when due; the reason of
        a miss just counted (``misses`` then says how many in a row), else None."""
        missed = None
        task = self.running
        if task is not None:
            if not task.done():
                return None
            self.running = None
            failure = None if task.cancelled() else task.exception()
            missed = f"the probe failed: {failure!r}" if failure is not None else task.result()
            if missed is None:
                self.passed()
            else:
                self.missed(now, missed)
        if now >= self.next_at:
            self.next_at = now + policy.period_sec
            self.running = asyncio.ensure_future(probe(host, port, policy.timeout_sec))
        return missed

    def cancel(self) -> None:
        if self.running is not None:
            self.running.cancel()
            self.running = None


async def probe(host: str, port: int, timeout: float) -> str | None:
    """Ask ``GET /readyz`` of the server at ``host:port``; None when it says it is healthy,
    else why not ("no answer within 2s", "answered 503: is_healthy() returned False").

    A raw HTTP/1.1 request on a fresh connection: it costs the supervisor no client library,
    and a connection of its own is never queued behind the calls a pooled one carries.
    """
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(f"GET {READYZ} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            head = await reader.readline()
            answer = await reader.read(64 * 1024)
    except TimeoutError:
        return f"no answer within {timeout:g}s"
    except OSError as exc:
        return f"cannot connect ({exc})"
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 0.5)
    parts = head.split()
    if len(parts) < 2 or not parts[1].isdigit():
        return f"answered {head[:80]!r}, not HTTP"
    status = int(parts[1])
    if status == 200:
        return None
    return f"answered {status}: {_detail(answer)}"


def _detail(answer: bytes) -> str:
    body = answer.split(b"\r\n\r\n", 1)[-1]
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else body[:200].decode("utf-8", "replace")
