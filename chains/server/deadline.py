"""The caller's deadline over the call it made: whether it has passed, and a stream's items bounded by it.

A unary call's ``run_remote`` is wrapped in one ``asyncio.timeout``; a stream is bounded item by
item by :func:`until_deadline`, so that what is ready at the deadline still goes out and only the
wait for the next item fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from chains.errors import DeadlineExceeded

__all__ = ["END", "BodyReads", "loop_time", "passed", "until_deadline", "within_deadline"]

# What ``anext(stream, END)`` gives for a stream that has ended.
END: Any = object()

# The body reads' one timer looks this many times per limit, so a read is cut after between
# the limit and a quarter more.
_BODY_TICKS = 4


class BodyReads:
    """The limit on how long a request body takes to arrive, for every call of a server at once.

    ``asyncio.timeout`` around each call's body read cost about 5 µs of CPU per call (a timer
    made and cancelled, the task looked up twice: ``benchmarks/request_path.py``), while the
    body almost always came with the headers and the read never waits. So the reads in
    progress are kept in a dict, and one timer, armed only while there are any, cancels those
    that outlast the limit (between ``limit_s`` and 1.25 times it)::

        reads = BodyReads(60.0)
        task = reads.start()
        try:
            body = await read_body(receive, limit, length)
        except asyncio.CancelledError:
            if reads.cut(task):
                ...  # answer 408
            raise
        finally:
            reads.stop(task)
    """

    __slots__ = ("_cut", "_handle", "_loop", "_reading", "_tick", "limit_s")

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading: dict[asyncio.Task[Any], int] = {}  # each read's task: the tick it started in
        self._cut: set[asyncio.Task[Any]] = set()
        self._tick = 0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> asyncio.Task[Any]:
        """The current task, whose read starts now (call :meth:`stop` with it when it ends)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None
        self._reading[task] = self._tick
        if self._handle is None:
            self._handle = loop.call_later(self.limit_s / _BODY_TICKS, self._sweep)
        return task

    def stop(self, task: asyncio.Task[Any]) -> None:
        self._reading.pop(task, None)

    def cut(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task`` was cancelled for outlasting the limit (its cancel is then undone)."""
        if task not in self._cut:
            return False
        self._cut.discard(task)
        task.uncancel()
        return True

    def _sweep(self) -> None:
        self._tick += 1
        oldest = self._tick - _BODY_TICKS - 1  # started at least _BODY_TICKS whole ticks ago
        reading = self._reading
        for task in [task for task, tick in reading.items() if tick <= oldest]:
            del reading[task]
            self._cut.add(task)
            task.cancel()
        if reading:
            assert self._loop is not None
            self._handle = self._loop.call_later(self.limit_s / _BODY_TICKS, self._sweep)
        else:
            self._handle = None


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


async def within_deadline(
    stream: AsyncIterator[Any], deadline: float, expired: DeadlineExceeded
) -> AsyncIterator[Any]:
    """``stream``'s items, bounded by ``deadline`` (time.monotonic) as a served stream's are: the
    wait for the first item in one scope, then :func:`until_deadline`. ``stream`` is closed
    when this is, since a stream that outlived its caller's deadline must not go on."""
    async with aclosing(stream):  # type: ignore[type-var]
        scope = asyncio.timeout_at(loop_time(deadline))
        try:
            async with scope:
                first = await anext(stream, END)
        except TimeoutError:
            if scope.expired():
                raise expired from None
            raise  # run_remote's own
        async for item in until_deadline(first, stream, deadline, expired):
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
