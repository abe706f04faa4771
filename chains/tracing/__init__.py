"""Tracing of calls across a chain's hops with OpenTelemetry, off unless something receives spans.

A chainlet process traces when it has somewhere to send spans: an OTLP/HTTP collector named by
the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and/or
the chain's local trace store, a SQLite file named by ``CHAINS_TRACE_STORE`` (``chains push``
sets it). With neither, OpenTelemetry is not even imported, and the server and the stubs see
``active() is None`` and do nothing more.

This module stays light: it is imported by the server and the stubs whether tracing is on or not.
The spans themselves are made in :mod:`chains.tracing.spans`, loaded only when tracing is on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from chains.errors import ChainsUsageError

if TYPE_CHECKING:
    from chains.tracing.spans import Tracing

__all__ = ["STORE_ENV", "TraceSettings", "active", "configure", "install"]

STORE_ENV = "CHAINS_TRACE_STORE"
KEEP_ENV = "CHAINS_TRACE_KEEP"
DEFAULT_KEEP = 1000
RATE_ENV = "CHAINS_TRACE_RATE"
# Traces a second each process starts and stores whole, besides errors and slow calls: the store
# then holds the last 10 s of ordinary calls at least, and a busy chainlet stops writing rows
# nobody reads (benchmarks/defaults.py: the store's rows were most of the defaults' cost).
DEFAULT_RATE = DEFAULT_KEEP // 10
SLOW_ENV = "CHAINS_TRACE_SLOW_MS"
DEFAULT_SLOW_MS = 200.0
_OFF = ("", "0", "off", "false", "none")

# The process's tracing, set once by the process that serves (a chainlet server): spans go to one
# place per process, as OpenTelemetry's own global tracer provider does.
_active: Tracing | None = None


class TraceSettings:
    """Where this process sends spans, read from the environment.

    >>> TraceSettings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}).enabled
    True
    >>> TraceSettings.from_env({}).enabled
    False
    >>> TraceSettings.from_env({"CHAINS_TRACE_RATE": "all"}).rate is None
    True
    """

    def __init__(
        self,
        otlp: bool,
        store: Path | None,
        keep: int,
        rate: int | None = DEFAULT_RATE,
        slow_ms: float = DEFAULT_SLOW_MS,
    ) -> None:
        self.otlp = otlp
        self.store = store
        self.keep = keep
        self.rate = rate  # None: the store is given every trace
        self.slow_ms = slow_ms

    @property
    def enabled(self) -> bool:
        return self.otlp or self.store is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TraceSettings:
        env = os.environ if env is None else env
        if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
            return cls(False, None, DEFAULT_KEEP)
        otlp = bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
        if env.get("OTEL_TRACES_EXPORTER", "").lower() == "none":
            otlp = False
        raw_store = env.get(STORE_ENV, "")
        store = None if raw_store.lower() in _OFF else Path(raw_store)
        raw_keep = env.get(KEEP_ENV, "")
        try:
            keep = int(raw_keep) if raw_keep else DEFAULT_KEEP
        except ValueError:
            keep = -1
        if keep < 1:
            raise ChainsUsageError(f"{KEEP_ENV}={raw_keep!r}: give the number of traces to keep, e.g. 1000")
        return cls(otlp, store, keep, _rate(env), _slow_ms(env))


def _rate(env: Mapping[str, str]) -> int | None:
    raw = env.get(RATE_ENV, "").strip()
    if raw.lower() == "all":
        return None
    try:
        rate = int(raw) if raw else DEFAULT_RATE
    except ValueError:
        rate = -1
    if rate < 0:
        raise ChainsUsageError(
            f"{RATE_ENV}={raw!r}: give how many traces a second each chainlet stores besides errors "
            f"and slow calls (e.g. {DEFAULT_RATE}), or 'all' to store every trace"
        )
    return rate


def _slow_ms(env: Mapping[str, str]) -> float:
    raw = env.get(SLOW_ENV, "").strip()
    try:
        slow = float(raw) if raw else DEFAULT_SLOW_MS
    except ValueError:
        slow = -1.0
    if not slow >= 0 or slow == float("inf"):
        raise ChainsUsageError(
            f"{SLOW_ENV}={raw!r}: give the milliseconds from which a call counts as slow and its "
            f"trace is always stored, e.g. {DEFAULT_SLOW_MS:g}"
        )
    return slow


def configure(service: str, chain: str, settings: TraceSettings | None = None) -> Tracing | None:
    """Make this process's tracing for chainlet ``service`` of ``chain``; None when tracing is off.

    The result is not installed: see :func:`install`. For example::

        tracing = configure("Greeter", "hello")
        if tracing is not None:
            install(tracing, set_global=True)
    """
    settings = settings or TraceSettings.from_env()
    if not settings.enabled:
        return None
    from chains.tracing.spans import Tracing

    return Tracing.from_settings(service, chain, settings)


def install(tracing: Tracing | None, *, set_global: bool = False) -> None:
    """Make ``tracing`` the one the server and the stubs of this process use (None: off).

    With ``set_global``, its tracer provider also becomes OpenTelemetry's global one, so that
    spans a chainlet makes itself (``opentelemetry.trace.get_tracer(...)``) go to the same place,
    as children of the call they are made in.
    """
    global _active
    _active = tracing
    if tracing is not None and set_global:
        tracing.set_global()


def active() -> Tracing | None:
    """This process's tracing, or None when it is off."""
    return _active
