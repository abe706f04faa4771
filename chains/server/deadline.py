"""The caller's deadline over the call it made: whether it has passed, and a stream's items bounded by it.

A unary call's ``run_remote`` is wrapped in one ``asyncio.timeout``; a stream is bounded item by
item by :func:`until_deadline`, so that what is ready at the deadline still goes out and only the
wait for the next item fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from chains.errors import DeadlineExceeded

__all__ = ["END", "loop_time", "passed", "until_deadline"]

# What ``anext(stream, END)`` gives for a stream that has ended.
END: Any = object()


def passed(deadline: float | None) -> bool:
    """Whether the caller's deadline is over, give or take the event loop's clock granularity
    (uvloop's is a millisecond): a stub capped by it may time out a moment before our scope."""
    return deadline is not None and deadline - time.monotonic() < 0.01


def loop_time(deadline: float | None) -> float | None:
    """``deadline`` (time.monotonic) on the event loop's clock, which asyncio.timeout_at takes."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


async def until_deadline(
    first: Any, rest: AsyncIterator[Any], deadline: float | None, expired: DeadlineExceeded
) -> AsyncIterator[Any]:
    """``first`` (unless it is :data:`END`), then ``rest``'s items, raising ``expired`` when a
    wait for the next item outlasts ``deadline`` (time.monotonic; None: no deadline)."""
    if first is END:
        return
    yield first
    if deadline is None:
        async for item in rest:
            yield item
        return
    watch = _PullDeadline(deadline)
    try:
        while not watch.fired:
            task, cancelling = watch.task, watch.task.cancelling()
            watch.pulling = True
            try:
                item = await anext(rest, END)
            except asyncio.CancelledError:
                if watch.cancelled and task.uncancel() <= cancelling:
                    raise expired from None
                raise
            # A TimeoutError here is run_remote's own (the watch cancels, it raises nothing):
            # it goes out as what it is, like any other exception.
            finally:
                watch.pulling = False
            if watch.cancelled:
                task.uncancel()  # the item came in the same turn as the deadline, as with asyncio.timeout
            if item is END:
                return
            yield item
    finally:
        watch.handle.cancel()
    # The deadline passed while the consumer had an item: from here on each wait for an item
    # is wrapped on its own, so what is ready at once still goes out and the first wait fails.
    while True:
        # The timeout wraps only the wait for the next item, never a `yield`: a cancel scope
        # must not stay open while the consumer runs.
        scope = asyncio.timeout_at(loop_time(deadline))
        try:
            async with scope:
                item = await anext(rest, END)
        except TimeoutError:
            if scope.expired():
                raise expired from None
            raise  # run_remote's own
        if item is END:
            return
        yield item


class _PullDeadline:
    """The caller's deadline over a stream's waits for its next item, with one timer per stream.

    It does what ``asyncio.timeout_at(deadline)`` around each wait does (the first item's wait
    is still wrapped so), without a timer per item, which cost about a third of the CPU time of
    streaming small items: the timer cancels the task only while it waits for an item, and marks
    the deadline as passed otherwise, after which :func:`until_deadline` wraps each wait as before.
    """

    __slots__ = ("cancelled", "fired", "handle", "pulling", "task")

    def __init__(self, deadline: float) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.pulling = False
        self.fired = False
        self.cancelled = False
        loop = asyncio.get_running_loop()
        self.handle = loop.call_at(loop.time() + (deadline - time.monotonic()), self._expire)

    def _expire(self) -> None:
        self.fired = True
        if self.pulling:
            self.cancelled = True
            self.task.cancel()
