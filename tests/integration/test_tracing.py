"""Traces of a real chain: spans reach a real OTLP/HTTP receiver and the local store, and
`chains trace` draws them.

The receiver is a small HTTP server on 127.0.0.1 decoding ``ExportTraceServiceRequest`` protobuf
with OpenTelemetry's own proto package, as a collector does.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.helpers import Cli, wait_until, write_chain

CHAIN = """
import itertools
from collections.abc import AsyncIterator

import chains

_calls = itertools.count(1)


class Leaf(chains.ChainletBase):
    async def run_remote(self, text: str) -> AsyncIterator[str]:
        if next(_calls) == 1:
            raise RuntimeError("leaf not warm yet")
        for word in text.split():
            yield word.upper()


class Middle(chains.ChainletBase):
    def __init__(self, leaf: Leaf = chains.depends(Leaf, retries=2, retry_user_errors=True)) -> None:
        self._leaf = leaf

    async def run_remote(self, text: str) -> str:
        return " ".join([word async for word in self._leaf.run_remote(text)])


@chains.mark_entrypoint("traced")
class Entry(chains.ChainletBase):
    def __init__(self, middle: Middle = chains.depends(Middle)) -> None:
        self._middle = middle

    async def run_remote(self, text: str) -> str:
        return await self._middle.run_remote(text)
"""

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN_ID = "00f067aa0ba902b7"
REQUEST_ID = "req-tracing-test-1"


@dataclass
class ReceivedSpan:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    trace_state: str
    attributes: dict[str, Any]
    status_code: int
    events: list[str]
    links: list[tuple[str, str]] = field(default_factory=list)  # (trace id, span id) of each


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: every span posted to /v1/traces, decoded."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest.FromString(body)
                with lock:
                    outer.requests += 1
                    outer.spans.extend(_decode(request))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _decode(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    out = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        service=resource.get("service.name", ""),
                        name=span.name,
                        kind=span.kind,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        trace_state=span.trace_state,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        status_code=span.status.code,
                        events=[event.name for event in span.events],
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                    )
                )
    return out


# The protobuf enums' values (opentelemetry/proto/trace/v1/trace.proto).
SERVER, CLIENT = 2, 3
STATUS_ERROR = 2


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def test_a_three_hop_call_with_a_retry_and_a_stream_is_one_trace(tmp_path: Path, receiver: Receiver) -> None:
    file = write_chain(tmp_path / "src", CHAIN)
    cli = Cli(
        tmp_path / "home",
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"},
    )
    pushed = cli.push(str(file))
    try:
        answer = httpx.post(
            pushed["entrypoint_url"] + "/run_remote",
            json={"text": "see the chain"},
            headers={
                "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN_ID}-01",
                "tracestate": "vendor=opaque",
                "x-chains-request-id": REQUEST_ID,
            },
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json() == "SEE THE CHAIN"
        # Entry, Middle, two attempts at Leaf: 4 server spans and 3 client spans.
        wait_until(lambda: len(receiver.spans) >= 7, 20, "seven spans at the receiver")
        spans = list(receiver.spans)
        assert len(spans) == 7
        assert {s.trace_id for s in spans} == {TRACE_ID}
        # The caller's trace state goes on, with chains' own entry put first, as W3C has a vendor
        # add its own: whether the local store keeps the trace, decided by the entrypoint.
        assert {s.trace_state for s in spans} == {"chains=store,vendor=opaque"}
        assert {s.attributes["chains.request_id"] for s in spans} == {REQUEST_ID}
        by_id = {s.span_id: s for s in spans}

        def children(parent: ReceivedSpan, kind: int) -> list[ReceivedSpan]:
            found = [s for s in spans if s.parent_id == parent.span_id and s.kind == kind]
            return sorted(found, key=lambda s: s.attributes.get("chains.attempt", 0))

        (entry,) = [s for s in spans if s.parent_id == CLIENT_SPAN_ID]
        assert (entry.service, entry.name, entry.kind) == ("Entry", "Entry.run_remote", SERVER)
        assert entry.attributes["http.response.status_code"] == 200
        (call_middle,) = children(entry, CLIENT)
        assert call_middle.name == "call Middle"
        assert call_middle.attributes["chains.attempt"] == 1
        assert call_middle.attributes["http.response.status_code"] == 200
        assert call_middle.attributes["url.full"].endswith("/run_remote")
        assert call_middle.attributes["http.response.body.size"] == len(b'"SEE THE CHAIN"')
        (middle,) = children(call_middle, SERVER)
        assert (middle.service, middle.name) == ("Middle", "Middle.run_remote")
        first, second = children(middle, CLIENT)
        assert [first.name, second.name] == ["call Leaf", "call Leaf"]
        assert [first.attributes["chains.attempt"], second.attributes["chains.attempt"]] == [1, 2]
        assert first.attributes["chains.retries"] == second.attributes["chains.retries"] == 2
        # The failed attempt: the callee's 500, recorded as an error with its exception.
        assert first.attributes["http.response.status_code"] == 500
        assert first.status_code == STATUS_ERROR and "exception" in first.events
        assert second.attributes["http.response.status_code"] == 200
        assert second.attributes["chains.stream.items"] == 3
        assert second.attributes["http.response.body.size"] > 0
        # The client set no deadline; Middle's is the attempt's budget Entry's stub gave it.
        assert "chains.deadline_left_ms" not in call_middle.attributes
        assert 0 < second.attributes["chains.deadline_left_ms"] < first.attributes["chains.deadline_left_ms"]
        (failed_leaf,) = children(first, SERVER)
        (leaf,) = children(second, SERVER)
        assert failed_leaf.service == leaf.service == "Leaf"
        assert failed_leaf.status_code == STATUS_ERROR and "exception" in failed_leaf.events
        assert failed_leaf.attributes["http.response.status_code"] == 500
        assert leaf.attributes["chains.stream.items"] == 3
        assert leaf.status_code != STATUS_ERROR
        every = (entry, call_middle, middle, first, second, failed_leaf, leaf)
        assert set(by_id) == {s.span_id for s in every}

        # The same trace in the local store, drawn by `chains trace`.
        wait_until(
            lambda: REQUEST_ID[:12] in cli.run("trace", "traced").stdout,
            20,
            "the request listed by chains trace (by a prefix of its id)",
        )
        stored = json.loads(cli.run("trace", "traced", REQUEST_ID, "--json").stdout)
        assert {(s["span_id"], s["parent_id"]) for s in stored} == {(s.span_id, s.parent_id) for s in spans}
        cli.env["COLUMNS"] = "200"
        waterfall = cli.run("trace", "traced", REQUEST_ID[:12]).stdout
        for hop in ("Entry.run_remote", "call Middle", "Middle.run_remote", "call Leaf", "Leaf.run_remote"):
            assert hop in waterfall
        assert "attempt 1/3" in waterfall and "attempt 2/3" in waterfall and "3 items" in waterfall
        assert TRACE_ID in waterfall
    finally:
        cli.run("stop", "traced")


def test_a_call_without_traceparent_starts_a_trace_named_by_its_request_id(tmp_path: Path) -> None:
    file = write_chain(tmp_path / "src", CHAIN)
    cli = Cli(tmp_path / "home")
    pushed = cli.push(str(file))
    try:
        answer = httpx.post(pushed["entrypoint_url"] + "/run_remote", json={"text": "a b"}, timeout=30)
        assert answer.status_code == 200, answer.text
        request_id = answer.headers["x-chains-request-id"]
        stored_at_all = lambda: cli.run("trace", "traced", request_id, check=False).returncode == 0  # noqa: E731
        wait_until(stored_at_all, 20, "the trace stored")
        wait_until(
            lambda: len(json.loads(cli.run("trace", "traced", request_id, "--json").stdout)) == 7,
            20,
            "all seven spans stored",
        )
        stored = json.loads(cli.run("trace", "traced", request_id, "--json").stdout)
        assert {s["trace_id"] for s in stored} == {request_id}
        listed = json.loads(cli.run("trace", "traced", "--json").stdout)
        assert [t["request_id"] for t in listed] == [request_id]
        assert listed[0]["services"] == ["Entry", "Leaf", "Middle"] and listed[0]["errors"] == 2
        unknown = cli.run("trace", "traced", "f" * 32, check=False)
        assert unknown.returncode == 1 and "no trace of request" in unknown.stderr
    finally:
        cli.run("stop", "traced")
