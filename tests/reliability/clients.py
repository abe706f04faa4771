"""Clients of the reliability chains, in each form a real client uses: typed stubs (framed),
server-sent events, and raw HTTP bodies. Each returns what it saw, so tests can check the
items one by one and how the stream ended."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, cast

import httpx

from chains.streaming.sse import SSE
from chains.stubs import StubBase
from tests.reliability.sample_chains.reliability_chains import ITEMS, Item, Started, Summary, payload

__all__ = [
    "ITEMS",
    "Item",
    "ItemStub",
    "Outcome",
    "Started",
    "StructuredStub",
    "Summary",
    "TextStub",
    "as_sse_text",
    "close",
    "expected_text",
    "payload",
    "read_raw",
    "read_sse",
]


class ItemStub(StubBase):
    """For Producer, Relay and ItemEntry, which share a signature."""

    def run_remote(
        self, n: int, size: int = 16, delay: float = 0.0, stall_after: int = -1, stall: float = 0.0
    ) -> AsyncIterator[Item]:
        return self.stream_remote(n=n, size=size, delay=delay, stall_after=stall_after, stall=stall)


class TextStub(StubBase):
    def run_remote(
        self, n: int, size: int = 16, delay: float = 0.0, stall_after: int = -1, stall: float = 0.0
    ) -> AsyncIterator[str]:
        return self.stream_remote(n=n, size=size, delay=delay, stall_after=stall_after, stall=stall)


class StructuredStub(StubBase):
    def run_remote(
        self, n: int, size: int = 16, delay: float = 0.0, stall_after: int = -1, stall: float = 0.0
    ) -> Annotated[AsyncIterator[bytes], ITEMS]:
        return self.stream_remote(n=n, size=size, delay=delay, stall_after=stall_after, stall=stall)


async def close(stream: AsyncIterator[Any]) -> None:
    """Stop reading a stub's stream early (what it returns is an async generator)."""
    await cast(AsyncGenerator[Any, None], stream).aclose()


def expected_text(n: int, size: int) -> str:
    """The whole text TextEntry streams for ``n`` items of ``size`` characters."""
    return "".join(payload(i, size) for i in range(n))


@dataclass
class Outcome:
    """How one external client's stream went."""

    body: bytes = b""
    events: list[SSE] = field(default_factory=list)
    error: BaseException | None = None

    @property
    def event_names(self) -> list[str | None]:
        return [e.event for e in self.events]


async def read_sse(
    client: httpx.AsyncClient, url: str, arguments: dict[str, Any], headers: dict[str, str] | None = None
) -> Outcome:
    """POST and read the answer as server-sent events, keeping every event and how it ended."""
    outcome = Outcome()
    try:
        async with client.stream(
            "POST",
            url + "/run_remote",
            json=arguments,
            headers={"accept": "text/event-stream", **(headers or {})},
        ) as response:
            assert response.status_code == 200, await response.aread()
            async for event in SSE.from_chunks(response.aiter_bytes()):
                outcome.events.append(event)
    except httpx.HTTPError as exc:
        outcome.error = exc
    return outcome


async def read_raw(
    client: httpx.AsyncClient, url: str, arguments: dict[str, Any], headers: dict[str, str] | None = None
) -> Outcome:
    """POST with no Accept header and read the raw body, noting a transfer that broke off."""
    outcome = Outcome()
    chunks: list[bytes] = []
    try:
        async with client.stream("POST", url + "/run_remote", json=arguments, headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        outcome.error = exc
    outcome.body = b"".join(chunks)
    return outcome


def as_sse_text(text: str) -> str:
    """``text`` as an SSE client reads it back: SSE data cannot hold a CR, so the server sends
    each line break (CR, LF, CRLF) as a new ``data:`` line, which the client joins with LF
    (docs/wire-protocol.md). The only change the SSE form makes to a text stream."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def sse_items(outcome: Outcome) -> list[str]:
    """The data of the unnamed (item) events."""
    return [e.data for e in outcome.events if e.event is None]


def error_detail(outcome: Outcome) -> dict[str, Any]:
    (error,) = [e for e in outcome.events if e.event == "error"]
    detail: dict[str, Any] = json.loads(error.data)
    return detail
