"""What ``chains trace`` prints: a list of recent requests, or one request's spans as a waterfall."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from chains.tracing.store import SpanRecord, TraceSummary

__all__ = ["print_recent", "print_waterfall"]

_BAR_WIDTH = 40


def print_recent(console: Console, chain: str, traces: Sequence[TraceSummary]) -> None:
    """One line per recent request, newest first."""
    table = Table(title=f"recent requests of chain {chain!r}", title_justify="left")
    table.add_column("request id", no_wrap=True)
    table.add_column("started", no_wrap=True)
    table.add_column("ms", justify="right")
    table.add_column("spans", justify="right")
    table.add_column("chainlets")
    table.add_column("errors", justify="right")
    for summary in traces:
        started = datetime.datetime.fromtimestamp(summary.start_ns / 1e9).strftime("%H:%M:%S.%f")[:-3]
        errors = Text(str(summary.errors), style="bold red") if summary.errors else Text("0")
        table.add_row(
            summary.request_id or summary.trace_id,
            started,
            f"{summary.duration_ms:.1f}",
            str(summary.spans),
            ", ".join(summary.services),
            errors,
        )
    console.print(table)


def print_waterfall(console: Console, spans: Sequence[SpanRecord]) -> None:
    """The spans of one trace as a tree, each with a bar placed on the trace's time line."""
    if not spans:
        return
    start = min(s.start_ns for s in spans)
    end = max(s.end_ns for s in spans)
    total = max(end - start, 1)
    first = spans[0]
    console.print(
        f"request {first.request_id or '-'}  trace {first.trace_id}  {total / 1e6:.1f} ms  {len(spans)} spans"
    )
    table = Table(box=None, pad_edge=False, show_edge=False)
    table.add_column("span", no_wrap=True)
    table.add_column("ms", justify="right", no_wrap=True)
    table.add_column("time line", no_wrap=True)
    table.add_column("details")
    for depth, span in _tree(spans):
        style = "red" if span.status == "error" else "cyan" if span.kind == "server" else "yellow"
        label = Text("  " * depth)
        label.append(span.service or "?", style="bold")
        label.append(f" {span.name}")
        offset = round((span.start_ns - start) / total * _BAR_WIDTH)
        length = max(1, round((span.end_ns - span.start_ns) / total * _BAR_WIDTH))
        offset = min(offset, _BAR_WIDTH - length)
        bar = Text(" " * offset)
        bar.append("█" * length, style=style)
        bar.append(" " * (_BAR_WIDTH - offset - length))
        table.add_row(label, f"{span.duration_ms:.1f}", bar, _details(span))
    console.print(table)


def _tree(spans: Sequence[SpanRecord]) -> list[tuple[int, SpanRecord]]:
    """Depth-first, children in start order; spans whose parent is not here (a caller outside the
    chain, or a span lost) are roots."""
    ids = {s.span_id for s in spans}
    children: dict[str, list[SpanRecord]] = {}
    roots = []
    for span in sorted(spans, key=lambda s: (s.start_ns, -s.end_ns)):
        if span.parent_id and span.parent_id in ids:
            children.setdefault(span.parent_id, []).append(span)
        else:
            roots.append(span)
    out: list[tuple[int, SpanRecord]] = []

    def visit(span: SpanRecord, depth: int) -> None:
        out.append((depth, span))
        for child in children.get(span.span_id, []):
            visit(child, depth + 1)

    for root in roots:
        visit(root, 0)
    return out


def _details(span: SpanRecord) -> Text:
    attributes = span.attributes
    parts = []
    if "chains.attempt" in attributes:
        parts.append(f"attempt {attributes['chains.attempt']}/{int(attributes.get('chains.retries', 0)) + 1}")
    if "http.response.status_code" in attributes:
        parts.append(f"HTTP {attributes['http.response.status_code']}")
    if "chains.stream.items" in attributes:
        items = attributes["chains.stream.items"]
        parts.append(f"{items} item{'s' if items != 1 else ''}")
    if "http.response.body.size" in attributes:
        parts.append(f"{attributes['http.response.body.size']} B")
    if "url.full" in attributes:
        parts.append(str(attributes["url.full"]))
    text = Text("  ".join(parts))
    if span.status == "error":
        text.append(f"  {span.status_message}", style="red")
    return text
