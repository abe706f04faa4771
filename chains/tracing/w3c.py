"""A hop's W3C trace context, read without OpenTelemetry's propagator machinery.

OpenTelemetry's global propagator (trace context, then baggage) takes about 8 µs to read one
hop's ``traceparent`` and ``tracestate``, more than the rest of a server span's work on the
request path; what it does with the default propagators fits in a few string operations, which
take about 3.5 µs (``benchmarks/tracing.py``, "W3C context per hop"). So :class:`Propagation`
reads them itself while the global propagator is still the default one. Anything else (a
``baggage`` header, ``OTEL_PROPAGATORS``, a propagator set by the program, a header this reader
does not take) goes through OpenTelemetry itself, so what is read is the same. Writing is left
to OpenTelemetry: doing it here saved nothing measurable.

>>> propagation = Propagation()
>>> context = propagation.extract({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
>>> f"{trace.get_current_span(context).get_span_context().span_id:016x}"
'b7ad6b7169203331'
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

__all__ = ["Propagation"]

_EMPTY = otel_context.Context()
_HEX = frozenset("0123456789abcdef")
_FLAGS = {f"{n:02x}": TraceFlags(n) for n in range(256)}
_DEFAULT_PROPAGATORS = ("", "tracecontext,baggage")


class Propagation:
    """Reads the W3C trace context of the calls one process serves; see the module.

    ``states`` are trace states this process sends often (chains' own), parsed once.
    """

    def __init__(self, states: tuple[TraceState, ...] = ()) -> None:
        default = os.environ.get("OTEL_PROPAGATORS", "").replace(" ", "") in _DEFAULT_PROPAGATORS
        # The global propagator as it is now, if it is the default: read here while it stays that
        # same object (a program may set another later; then OpenTelemetry's is used).
        self._default = propagate.get_global_textmap() if default else None
        self._states = {state.to_header(): state for state in states}

    def _fast(self) -> bool:
        return self._default is not None and propagate.get_global_textmap() is self._default

    def extract(self, headers: Mapping[str, str]) -> otel_context.Context:
        """The context of the span that sent ``headers`` (empty when they name none)."""
        if "baggage" in headers or not self._fast():
            return propagate.extract(headers)
        parent = headers.get("traceparent")
        if parent is None:
            return _EMPTY
        context = self._span_context(parent, headers.get("tracestate"))
        if context is None:
            return propagate.extract(headers)  # OpenTelemetry decides what an odd header means
        return trace.set_span_in_context(NonRecordingSpan(context), _EMPTY)

    def _span_context(self, parent: str, state_header: str | None) -> SpanContext | None:
        """``traceparent`` of version 00 as W3C defines it, or None to leave it to OpenTelemetry."""
        if len(parent) != 55 or parent[:3] != "00-" or parent[35] != "-" or parent[52] != "-":
            return None
        trace_hex, span_hex, flags = parent[3:35], parent[36:52], parent[53:]
        if not _HEX.issuperset(trace_hex) or not _HEX.issuperset(span_hex) or flags not in _FLAGS:
            return None
        trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
        if not trace_id or not span_id:
            return None
        state: TraceState | None = None
        if state_header:
            state = self._states.get(state_header)
            if state is None:
                return None
        return SpanContext(trace_id, span_id, True, _FLAGS[flags], state)
