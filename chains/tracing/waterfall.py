"""What ``chains trace`` prints: a list of recent requests, or one request's spans as a waterfall."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from chains.tracing.store import SpanRecord, TraceSummary

__all__ = ["print_recent", "print_waterfall"]

_BAR_WIDTH = 40  # at most: wider bars say no more, and leave the details no room
_MIN_BAR_WIDTH = 10
_MS_WIDTH = 8
_SHORT_ID = 12  # hex digits of a request id shown in the list: any unique prefix finds it


def print_recent(console: Console, chain: str, traces: Sequence[TraceSummary]) -> None:
    """One line per recent request, newest first, in the console's width: ids shortened to a
    unique prefix (which ``chains trace CHAIN ID`` takes), chainlet names wrapped, not cut."""
    ids = [summary.request_id or summary.trace_id for summary in traces]
    length = _unique_prefix(ids)
    table = Table(
        title=f"recent requests of chain {chain!r}",
        title_justify="left",
        title_style="bold",
        box=None,
        pad_edge=False,
        header_style="bold",
    )
    for header in ("request", "started"):
        table.add_column(header, no_wrap=True, min_width=len(header))
    for header in ("ms", "spans", "errors"):
        table.add_column(header, no_wrap=True, justify="right", min_width=len(header))
    table.add_column("chainlets", overflow="fold", min_width=len("chainlets"), ratio=1)
    for summary, request in zip(traces, ids, strict=True):
        started = datetime.datetime.fromtimestamp(summary.start_ns / 1e9).strftime("%H:%M:%S")
        errors = Text(str(summary.errors), style="bold red") if summary.errors else Text("0")
        table.add_row(
            request[:length],
            started,
            f"{summary.duration_ms:.1f}",
            str(summary.spans),
            errors,
            ", ".join(summary.services),
        )
    console.print(table)


def _unique_prefix(ids: Sequence[str]) -> int:
    """The shortest length, from :data:`_SHORT_ID` up, at which ``ids`` differ from each other."""
    length = _SHORT_ID
    while length < max((len(i) for i in ids), default=0) and len({i[:length] for i in ids}) < len(set(ids)):
        length += 4
    return length


def print_waterfall(console: Console, spans: Sequence[SpanRecord]) -> None:
    """The spans of one trace as a tree, each with a bar placed on the trace's time line, in the
    console's width: the details go on a line of their own when they do not fit beside it."""
    if not spans:
        return
    start = min(s.start_ns for s in spans)
    end = max(s.end_ns for s in spans)
    total = max(end - start, 1)
    first = spans[0]
    ids = f"request {first.request_id or '-'}"
    if first.trace_id != first.request_id:
        ids += f"  trace {first.trace_id}"
    console.print(f"{ids}  {total / 1e6:.1f} ms  {len(spans)} spans", overflow="fold")
    rows = [(depth, span, _label(depth, span), _details(span)) for depth, span in _tree(spans)]
    width = console.width
    label_width = min(max(len(label) for _, _, label, _ in rows), width - _MS_WIDTH - 2 - _MIN_BAR_WIDTH)
    details_width = max(len(details) for *_, details in rows)
    inline = label_width + _MS_WIDTH + 2 + _BAR_WIDTH + 2 + details_width <= width
    bar_width = (
        _BAR_WIDTH if inline else max(_MIN_BAR_WIDTH, min(_BAR_WIDTH, width - label_width - _MS_WIDTH - 2))
    )
    header = Text("span".ljust(label_width) + "ms".rjust(_MS_WIDTH) + "  " + "time line".ljust(bar_width))
    console.print(header.append("  details" if inline else ""), style="bold", no_wrap=True, crop=False)
    for depth, span, label, details in rows:
        style = "red" if span.status == "error" else "cyan" if span.kind == "server" else "yellow"
        if len(label) > label_width:  # a name longer than the line allows: on a line of its own
            console.print(label, overflow="fold")
            label = Text("")
        offset = round((span.start_ns - start) / total * bar_width)
        length = max(1, round((span.end_ns - span.start_ns) / total * bar_width))
        offset = min(offset, bar_width - length)
        line = label.copy()
        line.pad_right(label_width - len(label))
        line.append(f"{span.duration_ms:.1f}".rjust(_MS_WIDTH) + "  " + " " * offset)
        line.append("█" * length, style=style)
        if inline and details:
            line.append(" " * (bar_width - offset - length) + "  ")
            line.append_text(details)
        console.print(line, no_wrap=True, crop=False)
        if details and not inline:
            indented = Text(" " * (2 * depth + 2))
            indented.append_text(details)
            console.print(indented, overflow="fold", style="dim")


def _label(depth: int, span: SpanRecord) -> Text:
    """The service in bold, then the span's name; a server span's ``Service.run_remote`` names
    its service once."""
    label = Text("  " * depth)
    service = span.service or "?"
    label.append(service, style="bold")
    name = span.name.removeprefix(service) if span.name.startswith(f"{service}.") else f" {span.name}"
    label.append(name)
    return label


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
    if "chains.batch.size" in attributes:
        parts.append(f"batch of {attributes['chains.batch.size']}")
    if "url.full" in attributes:
        parts.append(str(attributes["url.full"]))
    text = Text("  ".join(parts))
    if span.status == "error":
        text.append(f"  {span.status_message}", style="red")
    return text
