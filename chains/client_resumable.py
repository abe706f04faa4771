"""The items of a resumable stream, as :meth:`chains.client.Client.resumable_stream` and
:meth:`chains.client.AsyncClient.resumable_stream` give them: the server-sent events of the
run (its first answer, then readings from the last id after each cut) turned back into the
items the entrypoint streamed, each once, in order (docs/jobs.md, "Resumable streams")."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from chains.errors import ChainsUsageError
from chains.streaming.sse import SSE
from chains.streaming.types import StreamTypes
from chains.wire import wire_adapter

__all__ = ["item_decoder", "items", "items_async"]

# Events that are not items: a structured stream's parts, and an attempt that starts over.
_NOT_ITEMS = frozenset({"header", "footer", "restart"})


def item_decoder(of: Any) -> Callable[[SSE], Any]:
    """How one item event becomes the item ``of`` names (as the SSE form encoded it)."""
    if isinstance(of, StreamTypes):
        raise ChainsUsageError(
            "resumable_stream reads items only: pass the item type, not StreamTypes (a resumable "
            "stream's header and footer are read with client.job(run_id).events())"
        )
    if of is str:
        return lambda event: event.data
    if of is bytes:
        return lambda event: base64.b64decode(event.data)
    if of is SSE:
        return lambda event: event
    adapter = wire_adapter(of)
    return lambda event: adapter.validate_json(event.data)


def _is_item(event: SSE) -> bool:
    return event.event not in _NOT_ITEMS


def items(events: Iterator[SSE], decode: Callable[[SSE], Any]) -> Iterator[Any]:
    for event in events:
        if _is_item(event):
            yield decode(event)


async def items_async(events: AsyncIterator[SSE], decode: Callable[[SSE], Any]) -> AsyncIterator[Any]:
    async for event in events:
        if _is_item(event):
            yield decode(event)
