"""Prometheus metrics of one chainlet process: its calls, and its calls to each dependency.

Hand-written rather than a client library: the set is small and fixed, and recording a
call is two dict updates, which keeps the per-request cost negligible.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from dataclasses import dataclass, field

__all__ = ["LATENCY_BUCKETS", "DependencyCall", "Metrics"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0
    samples: int = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds
        self.samples += 1


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Counters of one process; ``render()`` gives the Prometheus text exposition format.

    >>> m = Metrics("Words")
    >>> m.call_finished(200, 0.004)
    >>> "chains_calls_total" in m.render()
    True
    """

    def __init__(self, chainlet: str) -> None:
        self.chainlet = chainlet
        self.in_flight = 0
        self.streams_cancelled = 0
        # WebSocket endpoints: sockets open now, and messages received and sent on them.
        self.sockets_open = 0
        self.socket_messages_in = 0
        self.socket_messages_out = 0
        self._calls: dict[int, int] = defaultdict(int)
        self._latency = _Histogram()
        self._dep_calls: dict[tuple[str, str], int] = defaultdict(int)
        self._dep_latency: dict[str, _Histogram] = defaultdict(_Histogram)
        self._dep_in_flight: dict[str, int] = defaultdict(int)
        self._dep_retries: dict[str, int] = defaultdict(int)

    def call_finished(self, status: int, seconds: float) -> None:
        self._calls[status] += 1
        self._latency.observe(seconds)

    def dependency_started(self, dependency: str) -> None:
        self._dep_in_flight[dependency] += 1

    def dependency_finished(self, dependency: str, outcome: str, seconds: float) -> None:
        self._dep_in_flight[dependency] -= 1
        self._dep_calls[(dependency, outcome)] += 1
        self._dep_latency[dependency].observe(seconds)

    def dependency_retried(self, dependency: str) -> None:
        self._dep_retries[dependency] += 1

    def calls(self, status: int | None = None) -> int:
        """Finished calls, all or with one status (handy in tests)."""
        if status is None:
            return sum(self._calls.values())
        return self._calls.get(status, 0)

    def render(self) -> str:
        chainlet = _label(self.chainlet)
        base = f'chainlet="{chainlet}"'
        lines = [
            "# HELP chains_calls_total Calls served, by HTTP status.",
            "# TYPE chains_calls_total counter",
        ]
        lines += [f'chains_calls_total{{{base},status="{s}"}} {n}' for s, n in sorted(self._calls.items())]
        errors = sum(n for s, n in self._calls.items() if s >= 500)
        lines += [
            "# HELP chains_errors_total Calls that ended in a server error (5xx).",
            "# TYPE chains_errors_total counter",
            f"chains_errors_total{{{base}}} {errors}",
            "# HELP chains_in_flight Calls being served now.",
            "# TYPE chains_in_flight gauge",
            f"chains_in_flight{{{base}}} {self.in_flight}",
            "# HELP chains_streams_cancelled_total Streams stopped because the client went away.",
            "# TYPE chains_streams_cancelled_total counter",
            f"chains_streams_cancelled_total{{{base}}} {self.streams_cancelled}",
            "# HELP chains_websockets_open WebSocket conversations open now.",
            "# TYPE chains_websockets_open gauge",
            f"chains_websockets_open{{{base}}} {self.sockets_open}",
            "# HELP chains_websocket_messages_total WebSocket messages, by direction.",
            "# TYPE chains_websocket_messages_total counter",
            f'chains_websocket_messages_total{{{base},direction="in"}} {self.socket_messages_in}',
            f'chains_websocket_messages_total{{{base},direction="out"}} {self.socket_messages_out}',
            "# HELP chains_call_duration_seconds Time to serve a call (to the last byte of a stream).",
            "# TYPE chains_call_duration_seconds histogram",
        ]
        lines += _histogram_lines("chains_call_duration_seconds", base, self._latency)
        lines += [
            "# HELP chains_dependency_calls_total Calls made to dependencies, by outcome.",
            "# TYPE chains_dependency_calls_total counter",
        ]
        for (dep, outcome), n in sorted(self._dep_calls.items()):
            lines.append(
                f'chains_dependency_calls_total{{{base},dependency="{_label(dep)}",outcome="{outcome}"}} {n}'
            )
        lines += [
            "# HELP chains_dependency_retries_total Retried attempts of calls to dependencies.",
            "# TYPE chains_dependency_retries_total counter",
        ]
        for dep, n in sorted(self._dep_retries.items()):
            lines.append(f'chains_dependency_retries_total{{{base},dependency="{_label(dep)}"}} {n}')
        lines += [
            "# HELP chains_dependency_in_flight Calls to dependencies under way.",
            "# TYPE chains_dependency_in_flight gauge",
        ]
        for dep, n in sorted(self._dep_in_flight.items()):
            lines.append(f'chains_dependency_in_flight{{{base},dependency="{_label(dep)}"}} {n}')
        lines += [
            "# HELP chains_dependency_call_duration_seconds Time of calls to dependencies.",
            "# TYPE chains_dependency_call_duration_seconds histogram",
        ]
        for dep, hist in sorted(self._dep_latency.items()):
            labels = f'{base},dependency="{_label(dep)}"'
            lines += _histogram_lines("chains_dependency_call_duration_seconds", labels, hist)
        return "\n".join(lines) + "\n"


def _histogram_lines(name: str, labels: str, hist: _Histogram) -> list[str]:
    lines = []
    cumulative = 0
    for bound, count in zip(LATENCY_BUCKETS, hist.counts, strict=False):
        cumulative += count
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {hist.samples}')
    lines.append(f"{name}_sum{{{labels}}} {hist.total:.6f}")
    lines.append(f"{name}_count{{{labels}}} {hist.samples}")
    return lines


class DependencyCall:
    """Records one call to a dependency, from start to finish, in ``metrics`` (if any)::

    with DependencyCall(metrics, "Words") as record:
        result = await ...
        record.ok = True
    """

    def __init__(self, metrics: Metrics | None, dependency: str) -> None:
        self._metrics = metrics
        self._dependency = dependency
        self.ok = False
        self._started = 0.0

    def __enter__(self) -> DependencyCall:
        self._started = time.perf_counter()
        if self._metrics is not None:
            self._metrics.dependency_started(self._dependency)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._metrics is not None:
            outcome = "ok" if self.ok else "error"
            self._metrics.dependency_finished(self._dependency, outcome, time.perf_counter() - self._started)
