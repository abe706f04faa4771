"""An OpenTelemetry span exporter writing to the chain's local trace store (:mod:`chains.tracing.store`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from chains.tracing.store import SKIP, STORE_KEY, Row, SpanRecord, SpanWriter, row_of

__all__ = ["StoreExporter", "to_record"]

logger = logging.getLogger("chains.tracing")


class StoreExporter(SpanExporter):
    """Writes each batch of ended spans to the SQLite store at ``path``, keeping ``keep`` traces::

    provider.add_span_processor(BatchSpanProcessor(StoreExporter(Path("traces.sqlite"))))

    A span of a trace its root left out of the store (``chains=skip`` in its trace state, see
    :mod:`chains.tracing.spans`) is written only if it failed or took ``slow_ms`` or longer.
    """

    def __init__(self, path: Path, keep: int = 1000, slow_ms: float = 0.0) -> None:
        self.path = path
        self._writer = SpanWriter(path, keep)
        self._warned = False
        self._slow_ns = int(slow_ms * 1e6)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        written = self.write_records([to_record(span) for span in spans if self._stores(span)])
        return SpanExportResult.SUCCESS if written else SpanExportResult.FAILURE

    def _stores(self, span: ReadableSpan) -> bool:
        if span.context is None or span.context.trace_state.get(STORE_KEY) != SKIP:
            return True
        took = (span.end_time or 0) - (span.start_time or 0)
        return span.status.status_code is StatusCode.ERROR or took >= self._slow_ns

    def write_records(self, records: list[SpanRecord]) -> bool:
        """Write spans already in the store's form; False when they could not be written."""
        return self.write_rows([row_of(record) for record in records], [r.request_id for r in records])

    def write_rows(self, rows: list[Row], request_ids: list[str]) -> bool:
        """Write spans already as the store's rows, with each one's request id (the server
        spans of :mod:`chains.tracing.records`); False when they could not be written."""
        try:
            self._writer.write_rows(rows, request_ids)
        except Exception as exc:
            self._writer.close()  # a fresh connection next time, in case this one is broken
            # Tracing must never break serving: say so once, then keep serving.
            if not self._warned:
                self._warned = True
                logger.warning("cannot write spans to %s: %s: %s", self.path, type(exc).__name__, exc)
            return False
        return True

    def shutdown(self) -> None:
        self._writer.close()


def to_record(span: ReadableSpan) -> SpanRecord:
    """A finished span as the store keeps it."""
    context = span.context
    assert context is not None
    service = span.resource.attributes.get("service.name", "")
    status = span.status.status_code
    return SpanRecord(
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        parent_id=f"{span.parent.span_id:016x}" if span.parent is not None else "",
        name=span.name,
        service=str(service),
        kind=span.kind.name.lower(),
        start_ns=span.start_time or 0,
        end_ns=span.end_time or span.start_time or 0,
        status="error" if status is StatusCode.ERROR else "ok" if status is StatusCode.OK else "unset",
        status_message=span.status.description or "",
        attributes=_plain(span.attributes),
        events=[
            {"name": event.name, "time_ns": event.timestamp, "attributes": _plain(event.attributes)}
            for event in span.events
        ],
    )


def _plain(attributes: Any) -> dict[str, Any]:
    return {
        key: list(value) if isinstance(value, tuple) else value for key, value in (attributes or {}).items()
    }
