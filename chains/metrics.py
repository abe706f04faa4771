"""Prometheus metrics of one chainlet process: its calls, and its calls to each dependency.

The server counts the calls it serves and renders ``/metrics``; stubs and the WebSocket
client record their calls to dependencies (:class:`DependencyCall`), so it sits below both.

Hand-written rather than a client library: the set is small and fixed, and recording a
call is two dict updates, which keeps the per-request cost negligible.
"""

from __future__ import annotations

import bisect
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["BATCH_SIZE_BUCKETS", "LATENCY_BUCKETS", "DependencyCall", "Metrics", "batching_summary"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class _Histogram:
    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    samples: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
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
        # Set by the server for a batched endpoint: how many calls wait for a batch now.
        self.batch_queue: Callable[[], int] | None = None
        self._batch_sizes = _Histogram(BATCH_SIZE_BUCKETS)
        self._batch_waits = _Histogram()

    def batch_started(self, size: int, waits: Sequence[float]) -> None:
        """A batch of ``size`` calls started; ``waits``: how long each call waited for it."""
        self._batch_sizes.observe(size)
        for wait in waits:
            self._batch_waits.observe(wait)

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
        if self.batch_queue is not None:
            lines += [
                "# HELP chains_batch_queue_length Calls waiting for a batch.",
                "# TYPE chains_batch_queue_length gauge",
                f"chains_batch_queue_length{{{base}}} {self.batch_queue()}",
                "# HELP chains_batch_size Calls served by one run of a batched run_remote.",
                "# TYPE chains_batch_size histogram",
                *_histogram_lines("chains_batch_size", base, self._batch_sizes),
                "# HELP chains_batch_wait_seconds Time a call waited for its batch to start.",
                "# TYPE chains_batch_wait_seconds histogram",
                *_histogram_lines("chains_batch_wait_seconds", base, self._batch_waits),
            ]
        return "\n".join(lines) + "\n"


def _histogram_lines(name: str, labels: str, hist: _Histogram) -> list[str]:
    lines = []
    cumulative = 0
    for bound, count in zip(hist.buckets, hist.counts, strict=False):
        cumulative += count
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {hist.samples}')
    lines.append(f"{name}_sum{{{labels}}} {hist.total:.6f}")
    lines.append(f"{name}_count{{{labels}}} {hist.samples}")
    return lines


_SAMPLE = re.compile(
    r"^(chains_batch_queue_length|chains_batch_size_sum|chains_batch_size_count)\{[^}]*\} (\S+)$"
)


def batching_summary(text: str) -> str | None:
    """``queue 3, mean batch 12.4`` from a chainlet's /metrics text; None if it is not batched.

    >>> batching_summary('chains_batch_queue_length{chainlet="Model"} 3')
    'queue 3, mean batch -'
    """
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is not None:
            found[match.group(1)] = float(match.group(2))
    if "chains_batch_queue_length" not in found:
        return None
    batches = found.get("chains_batch_size_count", 0.0)
    mean = f"{found.get('chains_batch_size_sum', 0.0) / batches:.1f}" if batches else "-"
    return f"queue {found['chains_batch_queue_length']:.0f}, mean batch {mean}"


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
