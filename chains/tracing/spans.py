"""The spans of a chain: one server span per call a chainlet serves, one client span per attempt
a stub makes, linked across hops by W3C ``traceparent``/``tracestate`` headers.

A WebSocket conversation is one server span on the chainlet and one client span per socket a
stub opens, each with the messages it received and sent. A batch of ``@chains.batched`` is a
span of its own (a trace of its own, since it serves many), linked both ways with the server
span of every call it served, so a call's trace shows which batch computed it.

Loaded only when tracing is on (see :mod:`chains.tracing`).

Every span carries ``chains.request_id``, the call's ``x-chains-request-id``; a call that arrives
without a ``traceparent`` starts a trace whose id *is* its request id (when that is 32 hex
digits, as the ids chains makes are), so a request id can be looked up in any tracing tool.
"""

from __future__ import annotations

import contextvars
import logging
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from chains.call_context import CallContext
from chains.tracing.records import ServerSpan, SpanSink
from chains.tracing.store import SKIP, STORE_KEY
from chains.tracing.w3c import Propagation

__all__ = ["BatchSpan", "ClientAttempt", "Conversation", "Tracing"]

logger = logging.getLogger("chains.tracing")

T = TypeVar("T")
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# The local store is read by `chains trace` right after a call: spans wait at most this long.
_STORE_DELAY_MS = 500

# Attribute names: OpenTelemetry's HTTP conventions where they exist, chains.* for the rest.
REQUEST_ID = "chains.request_id"
DEPENDENCY = "chains.dependency"
ATTEMPT = "chains.attempt"
RETRIES = "chains.retries"
DEADLINE_LEFT_MS = "chains.deadline_left_ms"
ATTEMPT_TIMEOUT_MS = "chains.attempt_timeout_ms"
ITEMS = "chains.stream.items"
STATUS_CODE = "http.response.status_code"
REQUEST_BYTES = "http.request.body.size"
RESPONSE_BYTES = "http.response.body.size"
URL = "url.full"
MESSAGES_IN = "chains.websocket.messages_in"
MESSAGES_OUT = "chains.websocket.messages_out"
CLOSE_CODE = "chains.websocket.close_code"
BATCH_SIZE = "chains.batch.size"
BATCH_WAIT_MS = "chains.batch.wait_ms"
# On a batched call's span: the request id of the batch that served it, whose trace it is (the
# local store keeps no links, so a reader of the store follows this to the batch's trace).
BATCH_REQUEST_ID = "chains.batch.request_id"
# On a resumable call's span: the id of the run (a streaming job) it started, whose own calls
# are the span's children, and whose events are read again at /async_request/{id}/events.
RUN_ID = "chains.run_id"

# The root of a trace decides whether the local store keeps it whole, and tells every hop in
# the trace's W3C tracestate (``chains=store`` or ``chains=skip``), so that a trace is never
# stored by one chainlet and left out by the next; see SpanSink.admits.
_STORE = "store"
_STORED_STATE = TraceState([(STORE_KEY, _STORE)])
_SKIPPED_STATE = TraceState([(STORE_KEY, SKIP)])

_EMPTY = otel_context.Context()
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_random = random.Random()

_trace_id_wanted: contextvars.ContextVar[int] = contextvars.ContextVar("chains_trace_id", default=0)


class _RequestIdTraceIds(RandomIdGenerator):
    """Random ids, except a new trace's id, which is the request id being served when it is one."""

    def generate_trace_id(self) -> int:
        return _trace_id_wanted.get() or super().generate_trace_id()


def _trace_id_of(request_id: str) -> int:
    if len(request_id) != 32:
        return 0
    try:
        return int(request_id, 16)
    except ValueError:
        return 0


class Tracing:
    """Makes the spans of one process; see :func:`chains.tracing.configure`."""

    def __init__(self, provider: TracerProvider, chain: str, sink: SpanSink | None = None) -> None:
        self.provider = provider
        self.chain = chain
        self._tracer = provider.get_tracer("chains")
        # Where server spans go (plain records, see chains.tracing.records); None: nowhere.
        self._sink = sink
        # A sampler other than the default (every trace, or as the caller says) is asked about
        # each server span, as the SDK would: OTEL_TRACES_SAMPLER names it.
        self._sampler = provider.sampler if os.environ.get("OTEL_TRACES_SAMPLER") else None
        self._propagation = Propagation((_STORED_STATE, _SKIPPED_STATE))

    @classmethod
    def from_settings(cls, service: str, chain: str, settings: Any) -> Tracing:
        resource = Resource.create({"service.name": service, "service.namespace": chain})
        if os.environ.get("OTEL_SERVICE_NAME"):
            resource = Resource.create({"service.namespace": chain})  # the variable names the service
        provider = TracerProvider(resource=resource, id_generator=_RequestIdTraceIds())
        processors: list[SpanProcessor] = []
        write_rows = None
        if settings.store is not None:
            from chains.tracing.export import StoreExporter

            store_exporter: SpanExporter = StoreExporter(
                settings.store, keep=settings.keep, slow_ms=settings.slow_ms
            )
            provider.add_span_processor(
                BatchSpanProcessor(store_exporter, schedule_delay_millis=_STORE_DELAY_MS)
            )
            # The server spans' own writer: a connection of its own, for a thread of its own.
            write_rows = StoreExporter(settings.store, keep=settings.keep).write_rows
        if settings.otlp:
            otlp = BatchSpanProcessor(_otlp_exporter())
            provider.add_span_processor(otlp)
            processors.append(otlp)
        sink = SpanSink(
            provider.resource,
            processors,
            write_rows,
            delay_s=_STORE_DELAY_MS / 1e3,
            keep=settings.keep,
            rate=settings.rate,
            slow_ms=settings.slow_ms,
        )
        return cls(provider, chain, sink)

    @classmethod
    def with_exporter(cls, exporter: SpanExporter, service: str, chain: str = "chain") -> Tracing:
        """Tracing that hands every span to ``exporter`` as it ends (tests, embedding)::

        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        tracing = Tracing.with_exporter(InMemorySpanExporter(), "Greeter")
        """
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        resource = Resource.create({"service.name": service, "service.namespace": chain})
        provider = TracerProvider(resource=resource, id_generator=_RequestIdTraceIds())
        processor = SimpleSpanProcessor(exporter)
        provider.add_span_processor(processor)
        return cls(provider, chain, SpanSink(provider.resource, [processor], None, delay_s=None))

    def set_global(self) -> None:
        trace.set_tracer_provider(self.provider)

    def shutdown(self) -> None:
        """Send the spans still waiting (at exit, OpenTelemetry does it by itself)."""
        if self._sink is not None:
            self._sink.close()
        self.provider.shutdown()

    # -- the server side -----------------------------------------------------------------------

    async def serve(
        self,
        chainlet: str,
        call: CallContext,
        headers: Mapping[str, str],
        receive: Receive,
        send: Send,
        handler: Callable[[Receive, Send], Awaitable[int]],
        method: str = "run_remote",
    ) -> int:
        """Run ``handler`` (which answers one call and returns its status) inside its server span,
        named ``<chainlet>.<method>`` (``method``: ``run_remote``, or a ``@chains.route``'s name).

        The span is a plain record (:class:`~chains.tracing.records.ServerSpan`), made here
        instead of by the SDK: what it costs per call is in ``benchmarks/defaults.py``.
        """
        parent = self._propagation.extract(headers)
        span = self._server_span(f"{chainlet}.{method}", call, parent)
        received = 0
        sent = 0
        status = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            nonlocal sent, status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            else:
                sent += len(message.get("body", b""))
            await send(message)

        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            status = await handler(counting_receive, counting_send)
            return status
        except BaseException as exc:
            _record(span, exc)
            raise
        finally:
            otel_context.detach(token)
            span.set_attributes({STATUS_CODE: status, REQUEST_BYTES: received, RESPONSE_BYTES: sent})
            if status >= 500 and span.is_recording() and not _has_error(span):
                span.set_status(Status(StatusCode.ERROR, f"answered {status}"))
            span.end()

    def _server_span(self, name: str, call: CallContext, parent: otel_context.Context) -> trace.Span:
        """A server span of ``call``, the child of the span in ``parent`` if any; a trace of
        its own otherwise, whose id is the request id when that is one (see the module)."""
        attributes: dict[str, Any] = {REQUEST_ID: call.request_id}
        remaining = call.remaining()
        if remaining is not None:
            attributes[DEADLINE_LEFT_MS] = round(remaining * 1e3, 3)
        return self._plain_span(name, SpanKind.SERVER, attributes, parent, _trace_id_of(call.request_id))

    def _plain_span(
        self,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        parent: otel_context.Context | None,
        trace_id_wanted: int = 0,
    ) -> trace.Span:
        """A span recorded as a plain record (chains.tracing.records), the child of the span in
        ``parent`` (None: the current context); without one, the root of a trace whose id is
        ``trace_id_wanted`` (0: random). Sampled as the SDK would."""
        caller = trace.get_current_span(parent).get_span_context()
        span_id = _random.getrandbits(64) or 1
        sink = self._sink
        state: TraceState | None
        if caller.is_valid:
            trace_id, state, parent_context = caller.trace_id, caller.trace_state, caller
            sampled = caller.trace_flags.sampled  # as the SDK's default sampler: the caller decides
        else:
            trace_id = trace_id_wanted or _random.getrandbits(128) or 1
            state, parent_context, sampled = None, None, True
        if self._sampler is not None:
            decision = self._sampler.should_sample(parent, trace_id, name, kind, attributes)
            sampled = decision.decision is Decision.RECORD_AND_SAMPLE
        flags = _SAMPLED if sampled else _NOT_SAMPLED
        if sink is None:
            return NonRecordingSpan(SpanContext(trace_id, span_id, False, flags, state))
        decided = state.get(STORE_KEY) if state else None
        if decided is None:  # this span is the root, or its caller is not a chainlet: decide here
            stored = sink.admits()
            if not state:
                state = _STORED_STATE if stored else _SKIPPED_STATE
            else:
                state = state.add(STORE_KEY, _STORE if stored else SKIP)
        else:
            stored = decided != SKIP
        context = SpanContext(trace_id, span_id, False, flags, state)
        if not sampled:
            return NonRecordingSpan(context)
        return ServerSpan(sink, name, context, parent_context, attributes, kind, stored)

    def conversation(self, chainlet: str, call: CallContext, headers: Mapping[str, str]) -> Conversation:
        """The server span of one WebSocket conversation; enter it around ``run_remote``, so the
        sockets and calls it makes are its children."""
        parent = propagate.extract(headers)
        wanted = _trace_id_wanted.set(_trace_id_of(call.request_id))
        try:
            span = self._tracer.start_span(
                f"{chainlet}.run_remote",
                context=parent,
                kind=SpanKind.SERVER,
                attributes={REQUEST_ID: call.request_id},
            )
        finally:
            _trace_id_wanted.reset(wanted)
        return Conversation(span, trace.set_span_in_context(span, parent))

    def socket(self, dependency: str, call: CallContext) -> Conversation:
        """The client span of one WebSocket a stub opens to ``dependency``, from its opening
        to its close; enter it while opening, so the upgrade's headers carry it."""
        attributes = {REQUEST_ID: call.request_id, DEPENDENCY: dependency}
        span = self._tracer.start_span(f"call {dependency}", kind=SpanKind.CLIENT, attributes=attributes)
        return Conversation(span, trace.set_span_in_context(span))

    @staticmethod
    def caller() -> trace.Span:
        """The span of the call being served (a batched call's, taken when it queues)."""
        return trace.get_current_span()

    def batch(
        self, chainlet: str, callers: list[trace.Span], waits_ms: list[float], call: CallContext
    ) -> BatchSpan:
        """The span of one batch, run as ``call`` (its own request id), linked with each of its
        ``callers``' spans both ways: the batch's span names every call it served, and every
        call's span the batch that served it."""
        links = [trace.Link(c.get_span_context()) for c in callers if c.get_span_context().is_valid]
        attributes: dict[str, Any] = {REQUEST_ID: call.request_id, BATCH_SIZE: len(callers)}
        if waits_ms:
            attributes[BATCH_WAIT_MS] = round(max(waits_ms), 3)
        # A root: a batch serves calls of many traces, none of which it belongs to more than
        # another. Its trace id is its request id, as for a call that arrives without a trace.
        wanted = _trace_id_wanted.set(_trace_id_of(call.request_id))
        try:
            span = self._tracer.start_span(
                f"{chainlet}.batch", context=otel_context.Context(), links=links, attributes=attributes
            )
        finally:
            _trace_id_wanted.reset(wanted)
        served_by = span.get_span_context()
        for caller in callers:
            if caller.is_recording():
                caller.add_link(served_by)
                caller.set_attribute(BATCH_SIZE, len(callers))
                caller.set_attribute(BATCH_REQUEST_ID, call.request_id)
        return BatchSpan(span, call)

    @staticmethod
    def mark_run(run_id: str) -> None:
        """Name, on the span of the call being served, the resumable run it started."""
        trace.get_current_span().set_attribute(RUN_ID, run_id)

    def record_error(self, exc: BaseException) -> None:
        """Record ``exc`` on the span of the call being served: status ERROR and an exception event."""
        _record(trace.get_current_span(), exc)

    def recording(self, hook: Callable[[BaseException], None]) -> Callable[[BaseException], None]:
        """``hook``, recording the error on the current call's span first (a stream's own error)."""
        span = trace.get_current_span()

        def record_then(exc: BaseException) -> None:
            _record(span, exc)
            hook(exc)

        return record_then

    def count_items(self, items: AsyncIterator[T]) -> AsyncIterator[T]:
        """``items``, counting them on the current span as they go by."""
        span = trace.get_current_span()
        return _counted(items, span)

    # -- the client side -----------------------------------------------------------------------

    def attempt(
        self,
        dependency: str,
        attempt: int,
        retries: int,
        call: CallContext,
        request_bytes: int,
    ) -> ClientAttempt:
        """The client span of one attempt at calling ``dependency``; enter it around the attempt."""
        attributes: dict[str, Any] = {
            REQUEST_ID: call.request_id,
            DEPENDENCY: dependency,
            ATTEMPT: attempt,
            RETRIES: retries,
            REQUEST_BYTES: request_bytes,
        }
        remaining = call.remaining()
        if remaining is not None:
            attributes[DEADLINE_LEFT_MS] = round(remaining * 1e3, 3)
        return ClientAttempt(self._plain_span(f"call {dependency}", SpanKind.CLIENT, attributes, None))

    @staticmethod
    def inject(headers: dict[str, str]) -> None:
        """Add ``traceparent`` (and ``tracestate``) for the current span to outgoing ``headers``."""
        propagate.inject(headers)

    @staticmethod
    def current_attempt() -> ClientAttempt:
        return ClientAttempt(trace.get_current_span(), owned=False)


class ClientAttempt:
    """One attempt's client span: current while the attempt runs, so its headers carry it."""

    __slots__ = ("_owned", "_token", "kept", "span")

    def __init__(self, span: trace.Span, owned: bool = True) -> None:
        self.span = span
        self._owned = owned
        self._token: object = None
        self.kept = False

    def __enter__(self) -> ClientAttempt:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]
        if exc is not None:
            code = getattr(exc, "status", 0)
            if isinstance(code, int) and code:
                self.span.set_attribute(STATUS_CODE, code)
            _record(self.span, exc)
        if exc is not None or not self.kept:
            self.span.end()

    def target(self, url: str) -> None:
        self.span.set_attribute(URL, url)

    def answered(self, status: int, response_bytes: int | None = None) -> None:
        if response_bytes is None:
            self.span.set_attribute(STATUS_CODE, status)
        else:
            self.span.set_attributes({STATUS_CODE: status, RESPONSE_BYTES: response_bytes})

    def keep(self) -> None:
        """The attempt opened a stream: the span ends with the stream (:meth:`finish`), not here."""
        self.kept = True

    def finish(self, items: int, response_bytes: int, error: BaseException | None = None) -> None:
        self.span.set_attributes({ITEMS: items, RESPONSE_BYTES: response_bytes})
        if error is not None:
            _record(self.span, error)
        self.span.end()


class Conversation:
    """The span of one WebSocket conversation (server) or socket (client): current while it is
    entered, ended by :meth:`finish` with the messages each way and how it closed."""

    __slots__ = ("_context", "_token", "span")

    def __init__(self, span: trace.Span, context: otel_context.Context) -> None:
        self.span = span
        self._context = context
        self._token: object = None

    def __enter__(self) -> Conversation:
        self._token = otel_context.attach(self._context)
        return self

    def __exit__(self, *exc_info: object) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]

    def target(self, url: str) -> None:
        self.span.set_attribute(URL, url)

    def record(self, exc: BaseException) -> None:
        """Record a failure that ended the conversation (it is answered, not raised)."""
        _record(self.span, exc)

    def finish(
        self, messages_in: int, messages_out: int, close_code: int | None, error: BaseException | None = None
    ) -> None:
        attributes: dict[str, Any] = {MESSAGES_IN: messages_in, MESSAGES_OUT: messages_out}
        if close_code is not None:
            attributes[CLOSE_CODE] = close_code
        self.span.set_attributes(attributes)
        if error is not None:
            _record(self.span, error)
        self.span.end()


class BatchSpan:
    """One batch's span: current while its body starts, so the spans the body makes are its children."""

    __slots__ = ("_token", "call", "span")

    def __init__(self, span: trace.Span, call: CallContext) -> None:
        self.span = span
        self.call = call  # what the batch runs as: its request id, its callers' latest deadline
        self._token: object = None

    def __enter__(self) -> BatchSpan:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, *exc_info: object) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]

    def waited(self, wait_ms: float) -> None:
        """How long the batch's oldest call waited, when that was known only after it started."""
        self.span.set_attribute(BATCH_WAIT_MS, round(wait_ms, 3))

    def finish(self, error: BaseException | None = None) -> None:
        if error is not None:
            _record(self.span, error)
        self.span.end()


def _record(span: trace.Span, exc: BaseException) -> None:
    if not span.is_recording():
        return
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))


def _has_error(span: trace.Span) -> bool:
    status = getattr(span, "status", None)
    return status is not None and status.status_code is StatusCode.ERROR


async def _counted(items: AsyncIterator[T], span: trace.Span) -> AsyncIterator[T]:
    count = 0
    try:
        async for item in items:
            count += 1
            yield item
    finally:
        span.set_attribute(ITEMS, count)


def _otlp_exporter() -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        from chains.errors import ChainsUsageError

        raise ChainsUsageError(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set, but the OTLP exporter is not installed: "
            "pip install 'chains-sdk[tracing]' (or unset the variable)"
        ) from None
    # Reads OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout, compression) by itself.
    exporter: SpanExporter = OTLPSpanExporter()
    return exporter
