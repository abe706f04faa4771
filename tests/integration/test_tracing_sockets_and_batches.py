"""Spans of WebSocket conversations and of batches, from real chainlet processes to a real
OTLP/HTTP receiver: a conversation through a hop is one trace (a server span per conversation,
a client span per socket a stub opens, with the messages each way), and each batched call's
span is linked with the span of the batch that computed it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.helpers import ServerProcess, generate_chain, running, wait_until, write_chain
from tests.integration.test_tracing import CLIENT, SERVER, STATUS_ERROR, ReceivedSpan, Receiver

CHAIN = """
import asyncio

import chains


class Echo(chains.ChainletBase):
    async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
        async for message in websocket:
            if message == "fail":
                raise ValueError("echo fails on purpose")
            await websocket.send(message.upper())


@chains.mark_entrypoint
class Relay(chains.ChainletBase):
    def __init__(self, echo: Echo = chains.depends(Echo)) -> None:
        self._echo = echo

    async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
        async with self._echo.run_remote() as upstream:
            async for message in websocket:
                await upstream.send(message)
                await websocket.send(await upstream.receive())


class Squares(chains.ChainletBase):
    # Batches of exactly four: the test sends four calls at once and waits long enough.
    @chains.batched(max_batch_size=4, max_wait_ms=5000)
    async def run_remote(self, n: list[int]) -> list[int]:
        await asyncio.sleep(0.01)
        return [x * x for x in n]
"""

CONVERSATION_TRACES = [f"{i:032x}" for i in range(0xA1, 0xA3)]
TRACE_IDS = [f"{i:032x}" for i in range(0xB1, 0xB5)]  # the batched calls'
PARENT_SPAN = "00f067aa0ba902b7"


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{PARENT_SPAN}-01"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as running_receiver:
        yield running_receiver


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("traced-sockets")
    src = write_chain(folder / "src", CHAIN)
    return {
        **generate_chain(src, folder / "relay", "Relay"),
        **generate_chain(src, folder / "squares", "Squares"),
    }


def _env(receiver: Receiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}


def _spans_of(receiver: Receiver, trace_id: str) -> list[ReceivedSpan]:
    return [s for s in list(receiver.spans) if s.trace_id == trace_id]


async def test_a_conversation_through_a_hop_is_one_trace_with_its_messages_counted(
    generated: dict[str, Path], receiver: Receiver
) -> None:
    echo = ServerProcess(generated["Echo"], env=_env(receiver))
    relay = ServerProcess(
        generated["Relay"], entrypoint=True, dependencies={"Echo": [echo.url]}, env=_env(receiver)
    )
    with running(echo, relay):
        url = relay.url.replace("http://", "ws://") + "/run_remote"
        clean, failed = CONVERSATION_TRACES
        async with connect(url, additional_headers={"traceparent": traceparent(clean)}) as ws:
            for word in ("one", "two", "three"):
                await ws.send(word)
                assert await ws.recv() == word.upper()
        async with connect(url, additional_headers={"traceparent": traceparent(failed)}) as ws:
            await ws.send("fine")
            assert await ws.recv() == "FINE"
            await ws.send("fail")
            with pytest.raises(ConnectionClosed):
                await ws.recv()
        assert ws.close_code == 1011

        await asyncio.to_thread(
            wait_until, lambda: len(_spans_of(receiver, clean)) >= 3, 20, "three spans of the conversation"
        )
        spans = _spans_of(receiver, clean)
        assert len(spans) == 3
        (relay_span,) = [s for s in spans if s.parent_id == PARENT_SPAN]
        assert (relay_span.service, relay_span.name, relay_span.kind) == ("Relay", "Relay.run_remote", SERVER)
        (socket_span,) = [s for s in spans if s.parent_id == relay_span.span_id]
        assert (socket_span.name, socket_span.kind) == ("call Echo", CLIENT)
        assert socket_span.attributes["url.full"] == echo.url + "/run_remote"
        (echo_span,) = [s for s in spans if s.parent_id == socket_span.span_id]
        assert (echo_span.service, echo_span.kind) == ("Echo", SERVER)
        for span in (relay_span, socket_span, echo_span):
            assert span.attributes["chains.websocket.messages_in"] == 3
            assert span.attributes["chains.websocket.messages_out"] == 3
            assert span.attributes["chains.websocket.close_code"] == 1000
            assert span.status_code != STATUS_ERROR
        # One request id across the hop, as for calls.
        assert len({s.attributes["chains.request_id"] for s in spans}) == 1

        await asyncio.to_thread(
            wait_until, lambda: len(_spans_of(receiver, failed)) >= 3, 20, "three spans of the failed one"
        )
        failing = {
            s.service + ("/client" if s.kind == CLIENT else ""): s for s in _spans_of(receiver, failed)
        }
        echo_failed = failing["Echo"]
        assert echo_failed.status_code == STATUS_ERROR and "exception" in echo_failed.events
        assert echo_failed.attributes["chains.websocket.close_code"] == 1011
        assert echo_failed.attributes["chains.websocket.messages_in"] == 2
        assert echo_failed.attributes["chains.websocket.messages_out"] == 1
        assert failing["Relay"].status_code == STATUS_ERROR
        assert failing["Relay"].attributes["chains.websocket.close_code"] == 1011
        assert failing["Relay/client"].status_code == STATUS_ERROR  # RemoteError from receive


async def test_each_batched_call_is_linked_with_the_batch_that_computed_it(
    generated: dict[str, Path], receiver: Receiver
) -> None:
    squares = ServerProcess(generated["Squares"], entrypoint=True, env=_env(receiver))
    with running(squares):
        async with httpx.AsyncClient(timeout=30) as client:

            async def square(n: int, trace_id: str) -> int:
                answer = await client.post(
                    squares.url + "/run_remote", json={"n": n}, headers={"traceparent": traceparent(trace_id)}
                )
                assert answer.status_code == 200, answer.text
                return int(answer.json())

            calls = zip((2, 3, 4, 5), TRACE_IDS, strict=True)
            squares_of = await asyncio.gather(*(square(n, t) for n, t in calls))
            assert squares_of == [4, 9, 16, 25]

        def batch_spans() -> list[ReceivedSpan]:
            return [s for s in list(receiver.spans) if s.name == "Squares.batch"]

        await asyncio.to_thread(
            wait_until,
            lambda: batch_spans() and all(_spans_of(receiver, t) for t in TRACE_IDS),
            20,
            "the batch's span and the four calls' spans",
        )
        (batch,) = batch_spans()
        assert batch.trace_id not in TRACE_IDS  # a trace of its own: it served four
        assert batch.parent_id == ""
        assert batch.attributes["chains.batch.size"] == 4
        # Its own request id, which is its trace's id, as for a call that came without a trace.
        assert batch.attributes["chains.request_id"] == batch.trace_id
        callers = [_spans_of(receiver, t) for t in TRACE_IDS]
        assert all(len(spans) == 1 for spans in callers)
        calls = [spans[0] for spans in callers]
        # Both ways: the batch names each call it served, and each call the batch.
        assert sorted(batch.links) == sorted((c.trace_id, c.span_id) for c in calls)
        for call in calls:
            assert call.name == "Squares.run_remote" and call.parent_id == PARENT_SPAN
            assert call.links == [(batch.trace_id, batch.span_id)]
            assert call.attributes["chains.batch.size"] == 4
