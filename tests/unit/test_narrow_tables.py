"""The command line's tables and waterfalls at 80 columns, rendered as text at that width:
every line fits, no header or name is cut to an ellipsis, and a batch is not a request."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from chains.terminal import table
from chains.tracing.store import SpanRecord, TraceSummary, recent_traces, write_spans
from chains.tracing.waterfall import print_recent, print_waterfall

WIDTH = 80
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LONG = "ChainEntrypointWithALongName"


def console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=WIDTH, force_terminal=True, color_system="standard"), out


def lines_of(text: str) -> list[str]:
    plain = [ANSI.sub("", line).rstrip() for line in text.splitlines()]
    too_wide = [line for line in plain if len(line) > WIDTH]
    assert not too_wide, "\n".join(too_wide)
    assert "…" not in "\n".join(plain), "\n".join(plain)
    return plain


def span(
    span_id: str, parent: str, name: str, service: str, start: int, end: int, **attributes: object
) -> SpanRecord:
    kind = "server" if name.endswith(".run_remote") else "client"
    attrs = {"chains.request_id": "a" * 32, **attributes}
    return SpanRecord("a" * 32, span_id, parent, name, service, kind, start, end, "ok", "", attrs)


SPANS = [
    span("01", "", f"{LONG}.run_remote", LONG, 0, 31_000_000, **{"http.response.status_code": 200}),
    span(
        "02",
        "01",
        "call Greeter",
        LONG,
        100_000,
        30_000_000,
        **{
            "chains.attempt": 1,
            "chains.retries": 2,
            "http.response.status_code": 200,
            "url.full": "http://127.0.0.1:34139/run_remote",
        },
    ),
    span("03", "02", "Greeter.run_remote", "Greeter", 1_000_000, 29_000_000, **{"chains.stream.items": 3}),
    span("04", "03", "call Embedder", "Greeter", 2_000_000, 20_000_000),
    span("05", "04", "Embedder.run_remote", "Embedder", 3_000_000, 19_000_000, **{"chains.batch.size": 3}),
]


def test_the_waterfall_fits_with_every_name_whole() -> None:
    out_console, out = console()
    print_waterfall(out_console, SPANS)
    lines = lines_of(out.getvalue())
    text = "\n".join(lines)
    assert lines[1].split() == ["span", "ms", "time", "line"]
    for label in (f"{LONG}.run_remote", f"{LONG} call Greeter", "Greeter.run_remote", "Embedder.run_remote"):
        assert label in text
    # The details, which do not fit beside a bar at 80 columns, sit below their span, whole.
    below = lines[lines.index(next(line for line in lines if "call Greeter" in line)) + 1]
    assert below.split() == ["attempt", "1/3", "HTTP", "200", "http://127.0.0.1:34139/run_remote"]
    assert "batch of 3" in text
    assert all("31.0" in line for line in lines if line.startswith(f"{LONG}.run_remote"))


def test_a_wide_terminal_keeps_the_details_beside_the_bars() -> None:
    out = io.StringIO()
    print_waterfall(Console(file=out, width=200, force_terminal=False), SPANS)
    row = next(line for line in out.getvalue().splitlines() if "call Greeter" in line)
    assert row.rstrip().endswith("http://127.0.0.1:34139/run_remote") and "█" in row


def test_the_list_of_requests_fits_with_headers_and_names_whole() -> None:
    traces = [
        TraceSummary(
            f"{n:x}" * 32,
            f"{n:x}" * 32,
            1_700_000_000 * 10**9,
            1_700_000_000 * 10**9 + 31_000_000,
            9,
            0,
            (LONG, "Embedder", "Greeter"),
            f"{LONG}.run_remote",
        )
        for n in range(1, 4)
    ]
    out_console, out = console()
    print_recent(out_console, "tracedemo", traces)
    lines = lines_of(out.getvalue())
    assert lines[1].split() == ["request", "started", "ms", "spans", "errors", "chainlets"]
    text = "\n".join(lines)
    assert "Embedder, Greeter" in text
    # Ids are shortened to a prefix that tells them apart, which `chains trace NAME ID` takes.
    assert [line.split()[0] for line in lines[2:] if line[:1] != " "] == ["1" * 12, "2" * 12, "3" * 12]


@pytest.mark.parametrize("columns", [4, 6, 7])
def test_status_and_push_tables_fit(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    rows = [
        ("CHAINLET", "URL", "PID", "STATE", "RESTARTS", "UPTIME", "BATCHING"),
        ("Greeter", "http://127.0.0.1:34139", "1234567", "restarting", "0", "3h 12m", "-"),
        (
            "Embedder[2]",
            "http://127.0.0.1:34199",
            "1234568",
            "ready",
            "12",
            "3h 12m",
            "max 4, 20 ms; 3.0 per batch",
        ),
    ]
    lines = lines_of(table([row[:columns] for row in rows], terminal=True, state_column=3))
    assert lines[0].split() == list(rows[0][:columns])
    text = "\n".join(lines)
    assert "Greeter" in text and "Embedder[2]" in text and "restarting" in text
    if columns < 7:
        assert "http://127.0.0.1:34139" in text  # whole, to be copied


def test_the_list_leaves_out_batches(tmp_path: Path) -> None:
    path = tmp_path / "traces.sqlite"
    request = span("01", "", "Entry.run_remote", "Entry", 0, 10)
    batch = SpanRecord(
        "b" * 32,
        "02",
        "",
        "Embedder.batch",
        "Embedder",
        "internal",
        5,
        8,
        "ok",
        "",
        {"chains.request_id": "b" * 32, "chains.batch.size": 3},
    )
    write_spans(path, [request, batch], keep=10)
    assert [t.trace_id for t in recent_traces(path)] == ["b" * 32, "a" * 32]
    assert [t.trace_id for t in recent_traces(path, batches=False)] == ["a" * 32]
