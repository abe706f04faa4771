"""The server span of a call as a plain record, turned into OpenTelemetry spans and store rows
off the request path.

OpenTelemetry's SDK spends about 50 µs of CPU on one span from its start to its export
(attribute cleaning, the sampler, span processors, the batch queue, the exporter); a chainlet
answers a call in about 40 µs. ``benchmarks/defaults.py`` measured the defaults of ``chains
push`` (every call traced into the local store) at 0.2x the bare floor with the SDK's spans.
So the one span every call has, the server span, is a :class:`ServerSpan`: an
``opentelemetry.trace.Span`` that only keeps what it is told and, when it ends, is appended to
a :class:`SpanSink`. A thread of the sink turns the records it has into the store's rows and
into SDK ``ReadableSpan`` objects for the other span processors (OTLP), in batches.

What users and exporters see is unchanged: the span is current while the call runs (its W3C
context is what stubs propagate and what user spans are children of), it records errors and
attributes through the Span API, and exporters receive an SDK span.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode

from chains.handoff import HandOff
from chains.tracing.store import NO_EVENTS, Row, encode_json

__all__ = ["ServerSpan", "SpanSink"]

_SCOPE = InstrumentationScope("chains")
_UNSET = Status(StatusCode.UNSET)
_KIND_NAMES = {kind: kind.name.lower() for kind in SpanKind}
_REQUEST_ID = "chains.request_id"  # spans.REQUEST_ID; spans imports this module
_STATUS_NAMES = {StatusCode.ERROR: "error", StatusCode.OK: "ok", StatusCode.UNSET: "unset"}


class ServerSpan(trace.Span):
    """A recording span kept as plain data until :class:`SpanSink`'s thread converts it: a
    call's server span, or a stub's attempt (``kind`` CLIENT)."""

    __slots__ = (
        "_ended",
        "_sink",
        "attributes",
        "context",
        "end_ns",
        "events",
        "kind",
        "links",
        "name",
        "parent",
        "start_ns",
        "status",
        "stored",
    )

    def __init__(
        self,
        sink: SpanSink,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: dict[str, Any],
        kind: SpanKind = SpanKind.SERVER,
        stored: bool = True,
    ) -> None:
        self._sink = sink
        # Whether the trace's root chose it for the store (SpanSink.admits); an error or a slow
        # call is stored all the same, decided as it ends.
        self.stored = stored
        self.name = name
        self.context = context
        self.parent = parent
        self.attributes = attributes
        self.kind = kind
        self.events: list[tuple[str, dict[str, Any], int]] = []
        self.links: list[SpanContext] = []
        self.status = _UNSET  # set_status replaces it, never changes it
        self.start_ns = time.time_ns()
        self.end_ns = 0
        self._ended = False

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return not self._ended

    def set_attribute(self, key: str, value: Any) -> None:
        if not self._ended:
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if not self._ended:
            self.attributes.update(attributes)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        if not self._ended:
            self.events.append((name, dict(attributes or {}), timestamp or time.time_ns()))

    def add_link(self, context: SpanContext, attributes: Any = None) -> None:
        if not self._ended and context.is_valid:
            self.links.append(context)

    def update_name(self, name: str) -> None:
        self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._ended:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        # As the SDK does: once OK, a span stays OK.
        if self.status.status_code is not StatusCode.OK:
            self.status = status

    def record_exception(
        self,
        exception: BaseException,
        attributes: Any = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        kind = type(exception)
        module = kind.__module__
        name = f"{module}.{kind.__qualname__}" if module and module != "builtins" else kind.__qualname__
        event = {
            "exception.type": name,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
            **(attributes or {}),
        }
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        self.end_ns = end_time = end_time or time.time_ns()
        sink = self._sink
        if not self.stored and (
            self.status.status_code is StatusCode.ERROR or end_time - self.start_ns >= sink.slow_ns
        ):
            self.stored = True
        if self.stored or sink.exports:
            sink.put(self)

    # -- conversions, in the sink's thread --------------------------------------------------------

    def readable(self, resource: Resource) -> ReadableSpan:
        return ReadableSpan(
            self.name,
            self.context,
            self.parent,
            resource,
            self.attributes,
            [Event(name, attributes, timestamp) for name, attributes, timestamp in self.events],
            [Link(context) for context in self.links],
            self.kind,
            status=self.status,
            start_time=self.start_ns,
            end_time=self.end_ns,
            instrumentation_scope=_SCOPE,
        )

    def row(self, service: str) -> Row:
        """The span as a row of the store (chains.tracing.store.row_of without the SpanRecord
        between: made in the sink's thread, and about a third of a stored span's cost there)."""
        context = self.context
        parent = self.parent
        status = self.status
        events = self.events
        return (
            f"{context.trace_id:032x}",
            f"{context.span_id:016x}",
            f"{parent.span_id:016x}" if parent is not None else "",
            self.name,
            service,
            _KIND_NAMES[self.kind],
            self.start_ns,
            self.end_ns,
            _STATUS_NAMES[status.status_code],
            status.description or "",
            encode_json(self.attributes),  # a tuple is a JSON array, as a list is
            encode_json([{"name": n, "time_ns": t, "attributes": a} for n, a, t in events])
            if events
            else NO_EVENTS,
        )

    @property
    def request_id(self) -> str:
        return str(self.attributes.get(_REQUEST_ID, ""))


class SpanSink:
    """Where ended :class:`ServerSpan` records go: ``write_rows`` gets the store's rows and
    every processor of ``processors`` the SDK spans.

    With ``delay_s`` a daemon thread takes what has ended every ``delay_s`` seconds (the request
    path only appends to a list); with ``delay_s=None`` each span is handed on as it ends (tests,
    embedding). What is still waiting is handed on by :meth:`flush`, also at exit. With
    ``keep``, the store is given the spans of at most the newest ``keep`` traces of each batch.

    The store is given only the spans marked ``stored``: the roots of at most ``rate`` traces
    a second (:meth:`admits`; None: every trace), and every span that failed or took
    ``slow_ms`` or longer. Every span goes to ``processors`` all the same.

    >>> sink = SpanSink(Resource.create({"service.name": "Greeter"}), [], None, delay_s=None)
    """

    def __init__(
        self,
        resource: Resource,
        processors: Sequence[SpanProcessor],
        write_rows: Callable[[list[Row], list[str]], object] | None,
        *,
        delay_s: float | None = 0.2,
        keep: int | None = None,
        rate: int | None = None,
        slow_ms: float = 0.0,
    ) -> None:
        self._resource = resource
        self._service = str(resource.attributes.get("service.name", ""))
        self._processors = tuple(processors)
        self._write_rows = write_rows
        self._keep = keep
        self._spans: HandOff[ServerSpan] = HandOff(self._hand_on, name="chains-spans", delay_s=delay_s)
        self.exports = bool(self._processors)  # every span is handed on, stored or not
        self.slow_ns = int(slow_ms * 1e6) if rate is not None else 0
        self._rate = rate
        self._second = -1
        self._left = 0

    def admits(self) -> bool:
        """Whether a new trace is stored whole: the first ``rate`` traces of each second are
        (a counter, no lock: a trace more or less in a second does not matter)."""
        if self._rate is None:
            return True
        second = time.monotonic_ns() // 1_000_000_000
        if second != self._second:
            self._second = second
            self._left = self._rate
        if self._left > 0:
            self._left -= 1
            return True
        return False

    def put(self, span: ServerSpan) -> None:
        self._spans.put(span)

    def flush(self) -> None:
        self._spans.flush()

    def close(self) -> None:
        self._spans.close()

    def _hand_on(self, spans: list[ServerSpan]) -> None:
        if not spans:
            return
        if self._write_rows is not None:
            stored = self._newest([span for span in spans if span.stored])
            service = self._service
            self._write_rows([span.row(service) for span in stored], [span.request_id for span in stored])
        for processor in self._processors:
            for span in spans:
                processor.on_end(span.readable(self._resource))

    def _newest(self, spans: list[ServerSpan]) -> list[ServerSpan]:
        """The spans of the newest ``keep`` traces of ``spans``: the store keeps no more traces
        than that, so under load the older ones of a batch would be written only to be deleted
        (the store's own pruning, kept by recency, is what decides; this only saves it work)."""
        keep = self._keep
        if keep is None or len(spans) <= keep:
            return spans
        traces: set[int] = set()
        newest = []
        for span in reversed(spans):
            trace_id = span.context.trace_id
            if trace_id not in traces:
                if len(traces) == keep:
                    continue
                traces.add(trace_id)
            newest.append(span)
        newest.reverse()
        return newest
