"""Tracing in one process: spans only when tracing is on, and the local trace store."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import TraceState

import chains
from chains import tracing
from chains.errors import ChainsUsageError, DependencyUnavailable
from chains.server.serve import create_app
from chains.server.settings import ServerSettings
from chains.stubs import StubOptions
from chains.tracing import TraceSettings
from chains.tracing.spans import Tracing
from chains.tracing.store import SpanRecord, recent_traces, trace_spans, write_spans
from chains.tracing.w3c import Propagation


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again on leaving: connections are refused


class Nowhere(chains.StubBase):
    async def run_remote(self, text: str) -> str:
        result: str = await self.call_remote(text=text)
        return result


@chains.mark_entrypoint
class Caller(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        stub = Nowhere(f"http://127.0.0.1:{_closed_port()}", options=StubOptions(retries=1))
        try:
            return await stub.run_remote(text)
        except DependencyUnavailable:
            return "unavailable"
        finally:
            await stub.aclose()


async def _post(app: Any, body: dict[str, Any]) -> int:
    raw = json.dumps(body).encode()
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    scope = {"type": "http", "method": "POST", "path": "/run_remote", "headers": headers}
    await app(scope, receive, send)
    return int(sent[0]["status"])


@pytest.fixture(scope="module")
def global_spans() -> InMemorySpanExporter:
    """Every span made through OpenTelemetry's global API in this process (set once per process)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


@pytest.fixture
def installed() -> Iterator[None]:
    yield
    tracing.install(None)


@pytest.mark.parametrize("on", [False, True], ids=["off", "on"])
async def test_spans_are_made_only_when_tracing_is_on(
    on: bool, global_spans: InMemorySpanExporter, installed: None
) -> None:
    global_spans.clear()
    ours = InMemorySpanExporter()
    tracing.install(Tracing.with_exporter(ours, "Caller") if on else None)
    app = create_app(Caller, settings=ServerSettings(is_entrypoint=True))
    await app.startup()
    await app.started.wait()
    assert await _post(app, {"text": "hi"}) == 200
    assert global_spans.get_finished_spans() == ()
    spans = ours.get_finished_spans()
    if not on:
        assert spans == ()
        return
    # One server span, two failed attempts (connection refused) under it.
    server, *attempts = sorted(spans, key=lambda s: s.kind.value)
    assert server.name == "Caller.run_remote" and len(attempts) == 2
    assert {a.parent.span_id for a in attempts if a.parent} == {server.context.span_id}
    assert [a.attributes["chains.attempt"] for a in sorted(attempts, key=lambda s: s.start_time or 0)] == [
        1,
        2,
    ]
    assert all(a.status.status_code is trace.StatusCode.ERROR for a in attempts)
    assert all(event.name == "exception" for a in attempts for event in a.events)


def test_tracing_is_off_without_a_collector_or_a_store() -> None:
    assert not TraceSettings.from_env({}).enabled
    assert not TraceSettings.from_env({"CHAINS_TRACE_STORE": "off"}).enabled
    on = TraceSettings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert on.enabled and on.otlp and on.store is None
    disabled = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}
    assert not TraceSettings.from_env(disabled).enabled
    assert TraceSettings.from_env({"CHAINS_TRACE_STORE": "/x/traces.sqlite"}).store == Path(
        "/x/traces.sqlite"
    )
    with pytest.raises(ChainsUsageError, match="CHAINS_TRACE_KEEP='many'"):
        TraceSettings.from_env({"CHAINS_TRACE_STORE": "t.sqlite", "CHAINS_TRACE_KEEP": "many"})


def test_tracing_off_imports_no_opentelemetry() -> None:
    code = (
        "import sys, chains.server.serve, chains.stubs\n"
        "from chains import tracing\n"
        "assert tracing.configure('Entry', 'chain', tracing.TraceSettings.from_env({})) is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


def _span(trace_id: str, span_id: str, start: int, request_id: str = "", parent: str = "") -> SpanRecord:
    attributes = {"chains.request_id": request_id} if request_id else {}
    name = "Entry.run_remote"
    return SpanRecord(
        trace_id, span_id, parent, name, "Entry", "server", start, start + 10, "ok", "", attributes
    )


def test_the_store_keeps_the_most_recent_traces(tmp_path: Path) -> None:
    path = tmp_path / "chain" / "traces.sqlite"
    for n in range(5):
        trace_id = f"{n:032x}"
        write_spans(path, [_span(trace_id, f"{n:016x}", 1000 * n, request_id=f"req-{n}")], keep=3)
    # A late span of an old trace does not bring it back to the front.
    write_spans(path, [_span(f"{4:032x}", "ff" * 8, 4500, parent=f"{4:016x}")], keep=3)
    assert [t.request_id for t in recent_traces(path)] == ["req-4", "req-3", "req-2"]
    assert recent_traces(path)[0].spans == 2
    assert trace_spans(path, "req-0") == []
    assert [s.span_id for s in trace_spans(path, "req-4")] == [f"{4:016x}", "ff" * 8]
    assert trace_spans(path, f"{3:032x}")[0].request_id == "req-3"


def test_the_store_finds_a_trace_by_a_unique_prefix(tmp_path: Path) -> None:
    path = tmp_path / "traces.sqlite"
    write_spans(
        path, [_span("ab" * 16, "01" * 8, 1, "abc-1"), _span("cd" * 16, "02" * 8, 2, "abd-2")], keep=10
    )
    assert trace_spans(path, "abc")[0].request_id == "abc-1"
    assert trace_spans(path, "ab") == []  # both requests start so: ambiguous
    assert trace_spans(path, "cdcd")[0].request_id == "abd-2"
    assert recent_traces(tmp_path / "none.sqlite") == [] and trace_spans(tmp_path / "none.sqlite", "x") == []


async def test_server_spans_reach_the_store_from_the_sinks_thread(tmp_path: Path, installed: None) -> None:
    store = tmp_path / "traces.sqlite"
    traced = tracing.configure("Caller", "chain", TraceSettings(False, store, keep=10))
    assert traced is not None
    tracing.install(traced)
    app = create_app(Caller, settings=ServerSettings(is_entrypoint=True))
    await app.startup()
    await app.started.wait()
    assert await _post(app, {"text": "hi"}) == 200
    traced.shutdown()  # hands on what still waits, as at exit
    (summary,) = recent_traces(store)
    spans = {s.name: s for s in trace_spans(store, summary.trace_id)}
    server = spans["Caller.run_remote"]
    assert server.trace_id == summary.request_id  # a trace without a caller is named by its request id
    assert server.kind == "server" and server.parent_id == ""
    assert server.attributes["http.response.status_code"] == 200
    # The stub's attempts (SDK spans, through the batch processor) are the server span's children.
    assert {s.parent_id for s in spans.values() if s.kind == "client"} == {server.span_id}


def test_a_caller_that_samples_a_trace_out_gets_no_server_span() -> None:
    from opentelemetry import propagate

    from chains.call_context import CallContext

    ours = InMemorySpanExporter()
    traced = Tracing.with_exporter(ours, "Caller")
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    for flags, recorded in (("00", False), ("01", True)):
        context = propagate.extract({"traceparent": f"00-{trace_id}-{parent}-{flags}"})
        span = traced._server_span("Caller.run_remote", CallContext("rid"), context)
        assert f"{span.get_span_context().trace_id:032x}" == trace_id  # propagated either way
        assert span.is_recording() is recorded
        span.end()
    (exported,) = ours.get_finished_spans()
    assert exported.parent is not None and f"{exported.parent.span_id:016x}" == parent


def test_otel_traces_sampler_decides_for_server_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import context

    from chains.call_context import CallContext

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    ours = InMemorySpanExporter()
    traced = Tracing.with_exporter(ours, "Caller")
    for n in range(2000):  # not hex: each a random trace id
        traced._server_span("Caller.run_remote", CallContext(f"call-{n}"), context.Context()).end()
    assert 300 < len(ours.get_finished_spans()) < 700


@pytest.mark.parametrize(
    ("variable", "value"),
    [("CHAINS_TRACE_RATE", "-1"), ("CHAINS_TRACE_RATE", "many"), ("CHAINS_TRACE_SLOW_MS", "soon")],
)
def test_a_bad_store_rate_or_slow_bound_is_refused_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ChainsUsageError, match=f"{variable}={value!r}: give"):
        TraceSettings.from_env({"CHAINS_TRACE_STORE": "/tmp/t.sqlite", variable: value})


PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
W3C_HEADERS = [
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "chains=skip"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"},
    {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "a=x,chains=store",
    },
    {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"},
    {"traceparent": "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"},
    {"traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g"},
    {"traceparent": "garbage"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "baggage": "k=v"},
    {},
]


@pytest.mark.parametrize("headers", W3C_HEADERS)
def test_the_fast_w3c_reader_reads_what_opentelemetry_reads(headers: dict[str, str]) -> None:
    ours = Propagation((TraceState([("chains", "store")]), TraceState([("chains", "skip")])))
    theirs = propagate.extract(headers)
    read = ours.extract(headers)

    def seen(context: Any) -> tuple[Any, ...]:
        span = trace.get_current_span(context).get_span_context()
        state = span.trace_state.to_header() if span.trace_state else ""
        return (
            span.trace_id,
            span.span_id,
            span.is_remote,
            span.trace_flags,
            state,
            baggage.get_all(context),
        )

    assert seen(read) == seen(theirs)
