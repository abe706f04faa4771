"""The dashboard's charts: chainlets' ``/metrics`` read, and a bounded history of their rates.

Each poll reads the counters of every replica; the history keeps, per chainlet, one point per
poll (its replicas summed) over the last minutes, as rates between two polls::

    history = MetricsHistory(keep=300)
    history.record("Entry", "http://127.0.0.1:8000", parse_metrics(text), at=time.time())
    history.series()["Entry"][-1].rate
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Counters", "MetricsHistory", "Point", "parse_metrics"]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)")


@dataclass(frozen=True)
class Counters:
    """What one read of a chainlet replica's ``/metrics`` says (counters are totals since it
    started; ``in_flight`` is the calls, streams among them, under way now)."""

    calls: float = 0.0
    errors: float = 0.0
    latency_sum: float = 0.0
    latency_count: float = 0.0
    in_flight: float = 0.0


def parse_metrics(text: str) -> Counters:
    """The counters the dashboard charts, from a chainlet's Prometheus text exposition.

    >>> parse_metrics('chains_calls_total{chainlet="A",status="200"} 3\\nchains_in_flight{chainlet="A"} 1')
    Counters(calls=3.0, errors=0.0, latency_sum=0.0, latency_count=0.0, in_flight=1.0)
    """
    found = {"calls": 0.0, "errors": 0.0, "latency_sum": 0.0, "latency_count": 0.0, "in_flight": 0.0}
    names = {
        "chains_calls_total": "calls",  # one sample per status: summed
        "chains_errors_total": "errors",
        "chains_call_duration_seconds_sum": "latency_sum",
        "chains_call_duration_seconds_count": "latency_count",
        "chains_in_flight": "in_flight",
    }
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match[1] not in names:
            continue
        try:
            value = float(match[3])
        except ValueError:
            continue
        found[names[match[1]]] += value
    return Counters(**found)


@dataclass(frozen=True)
class Point:
    """One chainlet over one poll interval ending at ``at`` (seconds since the epoch):
    calls and errors per second, the mean latency of the calls that ended (None when none
    did) and the calls in flight at its end."""

    at: float
    rate: float
    errors: float
    latency_ms: float | None
    in_flight: float

    def to_json(self) -> dict[str, float | None]:
        return {
            "at": self.at,
            "rate": self.rate,
            "errors": self.errors,
            "latency_ms": self.latency_ms,
            "in_flight": self.in_flight,
        }


def _delta(now: float, before: float) -> float:
    # A counter that went down belongs to a process that restarted from zero (Prometheus's rule).
    return now if now < before else now - before


class MetricsHistory:
    """The last ``keep`` points of each chainlet; replicas (told apart by ``source``, their
    URL) are read separately and summed into their chainlet's point."""

    def __init__(self, keep: int = 300) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.keep = keep
        self._last: dict[tuple[str, str], tuple[float, Counters]] = {}
        self._points: dict[str, deque[Point]] = {}

    def record_poll(self, at: float, reads: Iterable[tuple[str, str, Counters | None]]) -> None:
        """One poll of every replica: ``(chainlet, source, counters)``, None for a replica
        that did not answer (its chainlet still gets a point from the others)."""
        totals: dict[str, list[float]] = {}
        polled = set()
        for chainlet, source, counters in reads:
            polled.add((chainlet, source))
            total = totals.setdefault(chainlet, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
            if counters is None:
                continue
            previous = self._last.get((chainlet, source))
            self._last[(chainlet, source)] = (at, counters)
            total[4] += counters.in_flight
            if previous is None or at <= previous[0]:
                continue
            before = previous[1]
            total[0] += _delta(counters.calls, before.calls)
            total[1] += _delta(counters.errors, before.errors)
            total[2] += _delta(counters.latency_sum, before.latency_sum)
            total[3] += _delta(counters.latency_count, before.latency_count)
            total[5] = max(total[5], at - previous[0])
        # Replicas gone from the chain (a re-push, fewer replicas) are forgotten.
        self._last = {key: value for key, value in self._last.items() if key in polled}
        for chainlet, (calls, errors, latency_sum, latency_count, in_flight, span) in totals.items():
            points = self._points.setdefault(chainlet, deque(maxlen=self.keep))
            points.append(
                Point(
                    at=at,
                    rate=calls / span if span else 0.0,
                    errors=errors / span if span else 0.0,
                    latency_ms=latency_sum / latency_count * 1000 if latency_count else None,
                    in_flight=in_flight,
                )
            )

    def series(self) -> dict[str, list[Point]]:
        """Every chainlet's points, oldest first."""
        return {chainlet: list(points) for chainlet, points in self._points.items()}

    def to_json(self) -> dict[str, list[dict[str, float | None]]]:
        return {chainlet: [p.to_json() for p in points] for chainlet, points in self._points.items()}
