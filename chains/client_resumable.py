"""The parts of a resumable stream, as :meth:`chains.client.Client.resumable_stream` and
:meth:`chains.client.AsyncClient.resumable_stream` give them: the server-sent events of the
run (its first answer, then readings from the last id after each cut) turned back into the
items the entrypoint streamed, or into the frames of a structured stream (header, items,
footer) for the very readers ``stream()`` uses, each part once, in order (docs/jobs.md,
"Resumable streams").

A structured stream's events become frames again rather than being parsed here: the frame
reader is the one place that knows a structured stream's order, its missing header or
footer, its "read the header first" and how to word a part that does not validate, and a
resumable stream keeps every one of those answers the same as ``stream()``'s.

``event: restart`` says the run started over (a new attempt of its job): its earlier events
belong to an attempt that will never end. A restart before the reader took any part of the
earlier attempt is passed over. After one, what the caller already holds cannot be taken
back, and mixing two attempts would hand out items twice or a header that does not belong to
the items after it: the reading stops with :class:`~chains.errors.StreamInterrupted`, naming
where the new attempt's events start.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from chains.errors import StreamInterrupted
from chains.streaming.framing import (
    END_FRAME,
    KIND_FOOTER,
    KIND_HEADER,
    KIND_ITEM,
    encode_frame,
    encode_preamble,
)
from chains.streaming.sse import SSE
from chains.streaming.types import StreamTypes
from chains.wire import wire_adapter

__all__ = ["AsyncFrameSource", "FrameSource", "item_decoder", "items", "items_async"]

# Events that are not items: a structured stream's parts (an item reader skips them).
_PARTS = frozenset({"header", "footer"})
_RESTART = "restart"
_FRAME_KINDS = {"header": KIND_HEADER, "footer": KIND_FOOTER}


def item_decoder(of: Any) -> Callable[[SSE], Any]:
    """How one item event becomes the item ``of`` names (as the SSE form encoded it)."""
    if of is str:
        return lambda event: event.data
    if of is bytes:
        return lambda event: base64.b64decode(event.data)
    if of is SSE:
        return lambda event: event
    adapter = wire_adapter(of)
    return lambda event: adapter.validate_json(event.data)


def _started_over(event: SSE, run_id: str, taken: str) -> StreamInterrupted:
    try:
        attempt = f"attempt {int(json.loads(event.data)['attempt'])}"
    except (ValueError, KeyError, TypeError):
        attempt = "a new attempt"
    return StreamInterrupted(
        f"run {run_id} started over at event {event.id} ({attempt}) after this reader had taken "
        f"{taken} of the earlier attempt, which the new one does not go on from: what was read is "
        f"incomplete. The new attempt's events are client.job({run_id!r}).events(last_event_id={event.id})"
    )


def _taken(items: int, header: bool) -> str:
    counted = f"{items} item{'s' if items != 1 else ''}"
    return f"its header and {counted}" if header else counted


def items(events: Iterator[SSE], decode: Callable[[SSE], Any], run_id: str) -> Iterator[Any]:
    """The items of a resumable stream read as an item type (a header and footer are skipped)."""
    count = 0
    for event in events:
        kind = event.event
        if kind == _RESTART:
            if count:
                raise _started_over(event, run_id, _taken(count, False))
        elif kind not in _PARTS:
            count += 1
            yield decode(event)


async def items_async(
    events: AsyncIterator[SSE], decode: Callable[[SSE], Any], run_id: str
) -> AsyncIterator[Any]:
    """See :func:`items`."""
    count = 0
    async for event in events:
        kind = event.event
        if kind == _RESTART:
            if count:
                raise _started_over(event, run_id, _taken(count, False))
        elif kind not in _PARTS:
            count += 1
            yield decode(event)


class _Framer:
    """One structured stream's events as frames: what the sync and async sources share. No I/O.

    The SSE form carries no fingerprint, so the preamble is the reader's own: a producer of
    other types shows as parts that do not validate, not as a schema mismatch.
    """

    __slots__ = ("_header", "_items", "_run_id", "preamble")

    def __init__(self, types: StreamTypes[Any, Any, Any], run_id: str) -> None:
        wire = types.wire
        self.preamble = encode_preamble(wire.fingerprint, wire.name)
        self._run_id = run_id
        self._header = False
        self._items = 0

    def frame(self, event: SSE) -> bytes | None:
        """The frame ``event`` stands for, or None for one that stands for none."""
        kind = event.event
        if kind == _RESTART:
            if self._header or self._items:
                raise _started_over(event, self._run_id, _taken(self._items, self._header))
            return None
        frame_kind = _FRAME_KINDS.get(kind or "", KIND_ITEM)
        if frame_kind == KIND_HEADER:
            self._header = True
        elif frame_kind == KIND_ITEM:
            self._items += 1
        return encode_frame(frame_kind, event.data.encode())


class FrameSource:
    """The frames of a resumable structured stream, from its events, for a blocking reader.

    ``events`` is what ``Job.follow`` reads (it ends at the stream's end, raises its errors
    and resumes after cuts); ``close`` releases the first answer, which ``events`` owns only
    once it has started::

        source = FrameSource(TOKENS, job.id, job.follow(response), response.close)
        reader = FrameReader(TOKENS.wire, source)
    """

    __slots__ = ("_close", "_events", "_framer", "_state")

    def __init__(
        self,
        types: StreamTypes[Any, Any, Any],
        run_id: str,
        events: Iterator[SSE],
        close: Callable[[], None],
    ) -> None:
        self._framer = _Framer(types, run_id)
        self._events = events
        self._close = close
        self._state = 0  # 0: preamble due, 1: events, 2: ended

    def __iter__(self) -> FrameSource:
        return self

    def __next__(self) -> bytes:
        if self._state == 0:
            self._state = 1
            return self._framer.preamble
        if self._state == 2:
            raise StopIteration
        for event in self._events:
            frame = self._framer.frame(event)
            if frame is not None:
                return frame
        self._state = 2
        return END_FRAME  # the events end only at the stream's own end; errors are raised

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if close is not None:
            close()
        self._close()


class AsyncFrameSource:
    """:class:`FrameSource` for ``AsyncJob.follow``; ``aclose`` (the reader's) releases it."""

    __slots__ = ("_close", "_events", "_framer", "_state")

    def __init__(
        self,
        types: StreamTypes[Any, Any, Any],
        run_id: str,
        events: AsyncIterator[SSE],
        close: Callable[[], Awaitable[None]],
    ) -> None:
        self._framer = _Framer(types, run_id)
        self._events = events
        self._close = close
        self._state = 0

    def __aiter__(self) -> AsyncFrameSource:
        return self

    async def __anext__(self) -> bytes:
        if self._state == 0:
            self._state = 1
            return self._framer.preamble
        if self._state == 2:
            raise StopAsyncIteration
        async for event in self._events:
            frame = self._framer.frame(event)
            if frame is not None:
                return frame
        self._state = 2
        return END_FRAME

    async def aclose(self) -> None:
        close = getattr(self._events, "aclose", None)
        if close is not None:
            await close()
        await self._close()
