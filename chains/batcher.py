"""The batch scheduler behind ``@chains.batched``: single calls in, one body call per batch.

A batch goes when ``max_batch_size`` calls wait or when the oldest of them has waited
``max_wait_ms``, counted from its arrival, so calls that queued while the model ran go at
once when it is free; at most ``concurrency`` batches run at once. Each caller gets its own
output, its own error, or (for a body that yields one list per step) its own stream; a call
whose deadline passes or whose caller leaves is dropped before its batch runs::

    batcher = Batcher(embed, chainlet="Embedder", config=BatchConfig(32, 10))
    vector = await batcher.submit("some text")
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from chains import tracing
from chains.call_context import CallContext, current_call, new_request_id, serving_call
from chains.errors import BatchQueueFull, BatchSizeError, ChainsRuntimeError, DeadlineExceeded

if TYPE_CHECKING:
    from chains.tracing.spans import BatchSpan

__all__ = ["DEFAULT_MAX_BATCH_SIZE", "DEFAULT_MAX_WAIT_MS", "BatchConfig", "BatchObserver", "Batcher"]

DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_MAX_WAIT_MS = 10.0
# How long a thread may keep the GIL while another waits for it, in a process with a sync
# batched body (Python's default is 5 ms): see Batcher._executor_for.
_SWITCH_INTERVAL_S = 0.0005


@dataclass(frozen=True)
class BatchConfig:
    """The arguments of ``@chains.batched``."""

    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    max_wait_ms: float = DEFAULT_MAX_WAIT_MS

    def problems(self) -> list[str]:
        """What is wrong with the decorator's arguments, in plain words."""
        found = []
        size = self.max_batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            found.append(f"max_batch_size must be a whole number >= 1, got {size!r}")
        wait = self.max_wait_ms
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < float("inf"):
            found.append(f"max_wait_ms must be a number >= 0 (milliseconds), got {wait!r}")
        return found

    def describe(self) -> str:
        return f"batched: up to {self.max_batch_size} calls per run, waiting up to {self.max_wait_ms:g} ms"


class BatchObserver(Protocol):
    """Where the batcher reports each batch it starts (the server's metrics)."""

    def batch_started(self, size: int, waits: Sequence[float]) -> None: ...


@dataclass(eq=False)
class _Call:
    """One caller's input. ``future`` is done once the call is over: with its output (unary),
    or, for a stream, when its last item or its error is in ``items``."""

    item: Any
    future: asyncio.Future[Any]
    arrived: float  # the event loop's clock
    context: CallContext | None
    items: asyncio.Queue[Any] | None = None  # a streaming call's outputs, then _END or an error
    span: Any = None  # the caller's span when tracing: the batch's span links to it

    def fail(self, error: BaseException) -> None:
        if self.future.done():
            return
        if self.items is None:
            self.future.set_exception(error)
        else:
            self.future.set_result(None)
            self.items.put_nowait(_Failed(error))

    def end(self) -> None:
        if not self.future.done():
            self.future.set_result(None)
            assert self.items is not None
            self.items.put_nowait(_END)


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_END: Any = object()


@dataclass(eq=False)
class _Running:
    """The batch a worker thread computes; it moves on to the next full batch by itself (see
    :meth:`Batcher._work`), so the loop reads which batch was the last once the thread is done."""

    batch: list[_Call]
    span: BatchSpan | None


@dataclass
class _LoopState:
    """What belongs to one event loop: run_local may serve each call under its own."""

    loop: asyncio.AbstractEventLoop
    slots: asyncio.Semaphore
    queue: collections.deque[_Call] = field(default_factory=collections.deque)
    dispatcher: asyncio.Task[None] | None = None
    wakeup: asyncio.Future[None] | None = None
    running: set[asyncio.Future[Any]] = field(default_factory=set)


class Batcher:
    """Gathers single calls into batches for ``body`` and hands each caller its own output.

    ``body`` is a coroutine function, with ``sync=True`` a function run in worker threads, or
    with ``streaming=True`` an async generator function yielding one list of outputs per step
    (callers then read :meth:`stream`).
    ``concurrency`` batches run at once at most; past ``max_queue`` waiting calls,
    :meth:`submit` raises :class:`BatchQueueFull` (``None``: no bound)::

        batcher = Batcher(body, chainlet="Embedder", config=BatchConfig(32, 10))
        vector = await batcher.submit("some text")
    """

    def __init__(
        self,
        body: Callable[[list[Any]], Any],
        *,
        chainlet: str,
        config: BatchConfig,
        concurrency: int = 1,
        max_queue: int | None = None,
        observer: BatchObserver | None = None,
        sync: bool = False,
        streaming: bool = False,
    ) -> None:
        self._body = body
        self._sync = sync
        self._streaming = streaming
        self._executor: ThreadPoolExecutor | None = None
        self.chainlet = chainlet
        self.config = config
        self.concurrency = concurrency
        self.max_queue = max_queue
        self._observer = observer
        self._max_wait = config.max_wait_ms / 1000
        self._state: _LoopState | None = None

    @property
    def queued(self) -> int:
        """Calls waiting for a batch."""
        return len(self._state.queue) if self._state is not None else 0

    @property
    def full(self) -> bool:
        return self.max_queue is not None and self.queued >= self.max_queue

    async def submit(self, item: Any) -> Any:
        """Queue ``item`` for a batch and return its output (or raise its error)."""
        state, call = self._enqueue(item, streaming=False)
        try:
            return await call.future
        except asyncio.CancelledError:
            # The caller left (its client went away, or its deadline passed): its item goes.
            if not call.future.done() or call.future.cancelled():
                # Not in the queue: in a running batch already, whose output for it is dropped.
                with contextlib.suppress(ValueError):
                    state.queue.remove(call)
            raise

    async def stream(self, item: Any) -> AsyncIterator[Any]:
        """Queue ``item`` for a streaming batch and yield its output of each step."""
        state, call = self._enqueue(item, streaming=True)
        assert call.items is not None
        try:
            while True:
                value = await call.items.get()
                if value is _END:
                    return
                if isinstance(value, _Failed):
                    raise value.error
                yield value
        finally:
            # However the caller stopped reading, its batch stops producing for it; a batch
            # that every caller has left stops altogether.
            if not call.future.done():
                call.future.cancel()
            with contextlib.suppress(ValueError):
                state.queue.remove(call)

    def _enqueue(self, item: Any, *, streaming: bool) -> tuple[_LoopState, _Call]:
        state = self._current()
        queue = state.queue
        if self.max_queue is not None and len(queue) >= self.max_queue:
            raise BatchQueueFull(f"{self.chainlet}: {len(queue)} calls are waiting for a batch already")
        items: asyncio.Queue[Any] | None = asyncio.Queue() if streaming else None
        call = _Call(item, state.loop.create_future(), state.loop.time(), current_call(), items)
        traced = tracing.active()
        if traced is not None:
            call.span = traced.caller()
        queue.append(call)
        # The dispatcher sleeps until the oldest call's wait is over; it needs waking only
        # for the first call or for a full batch.
        if len(queue) == 1 or len(queue) == self.config.max_batch_size:
            wakeup = state.wakeup
            if wakeup is not None and not wakeup.done():
                wakeup.set_result(None)
        return state, call

    async def close(self) -> None:
        """Stop dispatching; calls still waiting fail with a clear error."""
        state, self._state = self._state, None
        if state is None:
            return
        if state.dispatcher is not None:
            state.dispatcher.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        while state.queue:
            state.queue.popleft().fail(ChainsRuntimeError(f"{self.chainlet} is shutting down"))

    def _current(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._state
        if state is None or state.loop is not loop:
            state = self._state = _LoopState(loop, asyncio.Semaphore(self.concurrency))
        if state.dispatcher is None or state.dispatcher.done():
            # A context of its own: created by a caller's call, the dispatcher (and every batch
            # it starts) would otherwise run inside that caller's context, its span included.
            state.dispatcher = loop.create_task(self._dispatch(state), context=contextvars.Context())
        return state

    async def _dispatch(self, state: _LoopState) -> None:
        while True:
            await state.slots.acquire()
            try:
                batch = await self._next_batch(state)
            except BaseException:
                state.slots.release()
                raise
            self._run(state, batch)

    def _run(self, state: _LoopState, batch: list[_Call]) -> None:
        """Start ``batch`` on a slot already taken; :meth:`_finished` passes the slot on."""
        if not batch:  # every call of it left or ran out of time on the way
            state.slots.release()
            return
        running, holder = self._start(state, batch)
        state.running.add(running)
        running.add_done_callback(functools.partial(self._finished, state, holder))

    async def _next_batch(self, state: _LoopState) -> list[_Call]:
        queue, size, loop = state.queue, self.config.max_batch_size, state.loop
        while True:
            if not queue:
                await self._sleep(state, None)
                continue
            if len(queue) >= size:
                break
            due = queue[0].arrived + self._max_wait
            if loop.time() >= due:
                break
            await self._sleep(state, due)
        return self._take(state)

    def _ready(self, state: _LoopState) -> list[_Call]:
        """The next batch if it may go now (full, or its oldest call has waited), else none."""
        queue = state.queue
        if not queue:
            return []
        if len(queue) < self.config.max_batch_size and state.loop.time() < queue[0].arrived + self._max_wait:
            return []
        return self._take(state)

    def _take(self, state: _LoopState) -> list[_Call]:
        queue, size = state.queue, self.config.max_batch_size
        batch: list[_Call] = []
        now = time.monotonic()
        while queue and len(batch) < size:
            call = queue.popleft()
            if not self._expired(call, now):
                batch.append(call)  # a call whose deadline has passed leaves room for another
        return batch

    def _expired(self, call: _Call, now: float) -> bool:
        """Fail ``call`` with a deadline error if its caller's deadline has passed."""
        deadline = call.context.deadline if call.context is not None else None
        if deadline is None or deadline > now:
            return False
        call.fail(DeadlineExceeded(f"{self.chainlet}: the caller's deadline passed before its batch ran"))
        return True

    async def _sleep(self, state: _LoopState, until: float | None) -> None:
        wakeup = state.wakeup = state.loop.create_future()
        timer = state.loop.call_at(until, _wake, wakeup) if until is not None else None
        try:
            await wakeup
        finally:
            state.wakeup = None
            if timer is not None:
                timer.cancel()

    def _start(self, state: _LoopState, batch: list[_Call]) -> tuple[asyncio.Future[Any], _Running]:
        """Start the body on ``batch`` now: a sync body's thread starts at once, rather than once
        a task gets its turn behind the callers the previous batch has just woken."""
        loop = state.loop
        started = loop.time()
        if self._observer is not None:
            self._observer.batch_started(len(batch), [started - c.arrived for c in batch])
        span: BatchSpan | None = None
        traced = tracing.active()
        if traced is not None:
            callers = [c.span for c in batch if c.span is not None]
            waits_ms = [(started - c.arrived) * 1e3 for c in batch]
            span = traced.batch(self.chainlet, callers, waits_ms, _batch_context(batch))
        holder = _Running(batch, span)
        if self._sync and not self._streaming:
            return loop.run_in_executor(self._executor_for(), self._work, state, holder), holder
        with contextlib.nullcontext() if span is None else span:
            return self._start_body(loop, batch, span), holder

    def _start_body(
        self, loop: asyncio.AbstractEventLoop, batch: list[_Call], span: BatchSpan | None
    ) -> asyncio.Future[Any]:
        items = [c.item for c in batch]
        try:
            with serving_call(_batch_context(batch) if span is None else span.call):
                if self._streaming:
                    return asyncio.ensure_future(self._pump(batch, self._body(items)))
                started_body: asyncio.Future[Any] = asyncio.ensure_future(self._body(items))
                return started_body
        except Exception as exc:  # the body could not even start, e.g. a sync one called as async
            failed: asyncio.Future[Any] = loop.create_future()
            failed.set_exception(exc)
            return failed

    # -- a sync body: batch after batch in its worker thread --------------------------------

    def _executor_for(self) -> ThreadPoolExecutor:
        """The worker threads of a sync body, made on first use. The model's thread needs the GIL
        for a moment as each batch starts and ends, while the event loop holds it to answer
        the callers of the batch before and to read their next calls; with Python's default
        switch interval it waits up to 5 ms each time, which measured a tenth of the model's
        time at 64 callers. The process's interval is lowered to 0.5 ms (never raised)."""
        if self._executor is None:
            if sys.getswitchinterval() > _SWITCH_INTERVAL_S:
                sys.setswitchinterval(_SWITCH_INTERVAL_S)
            self._executor = ThreadPoolExecutor(self.concurrency, f"{self.chainlet}-batch")
        return self._executor

    def _work(self, state: _LoopState, running: _Running) -> Any:
        """Run the body on ``running.batch`` in this worker thread, then on each next batch that
        is full by then, without going back to the event loop in between: a thread handing each
        batch to the loop and the loop the next one back costs two wake-ups per batch, which a
        loaded machine stretches to milliseconds while the model waits. Every batch but the last
        is answered through :meth:`_continued`; the last one's outputs are the result, answered
        by :meth:`_finished` as an async body's are."""
        while True:
            error: Exception | None = None
            outputs: Any = None
            try:
                outputs = contextvars.Context().run(self._call_sync, running.batch, running.span)
            except Exception as exc:
                error = exc
            following = self._take_full(state)
            if not following:
                if error is not None:
                    raise error
                return outputs
            done, done_span = running.batch, running.span
            span = None
            traced = tracing.active()
            if traced is not None:
                callers = [c.span for c in following if c.span is not None]
                span = traced.batch(self.chainlet, callers, [], _batch_context(following))
            running.batch, running.span = following, span
            state.loop.call_soon_threadsafe(self._continued, done, done_span, outputs, error, following, span)

    def _call_sync(self, batch: list[_Call], span: BatchSpan | None) -> Any:
        call = _batch_context(batch) if span is None else span.call
        with serving_call(call), contextlib.nullcontext() if span is None else span:
            return self._body([c.item for c in batch])

    def _take_full(self, state: _LoopState) -> list[_Call]:
        """From the worker thread: the next batch if ``max_batch_size`` calls wait (a partial
        one is the dispatcher's to time), else none. Each deque operation is atomic, so a caller
        leaving meanwhile either is not taken or has its output dropped; futures are the loop's,
        so calls past their deadline are failed there."""
        queue, size = state.queue, self.config.max_batch_size
        if self._state is not state or len(queue) < size:
            return []
        batch: list[_Call] = []
        expired: list[_Call] = []
        now = time.monotonic()
        while len(batch) < size:
            try:
                call = queue.popleft()
            except IndexError:
                break
            deadline = call.context.deadline if call.context is not None else None
            (expired if deadline is not None and deadline <= now else batch).append(call)
        if expired:
            state.loop.call_soon_threadsafe(self._take_expired, expired)
        return batch

    def _take_expired(self, calls: list[_Call]) -> None:
        now = time.monotonic()
        for call in calls:
            self._expired(call, now)

    def _continued(
        self,
        batch: list[_Call],
        span: BatchSpan | None,
        outputs: Any,
        error: Exception | None,
        following: list[_Call],
        following_span: BatchSpan | None,
    ) -> None:
        """On the loop: a worker thread finished ``batch`` and went on to ``following``, whose
        waits are counted here, where the loop's clock is (a little late: the loop's turn)."""
        state = self._state
        if state is not None:
            now = state.loop.time()
            waits = [now - c.arrived for c in following]
            if self._observer is not None:
                self._observer.batch_started(len(following), waits)
            if following_span is not None:
                following_span.waited(max(waits) * 1e3)
        self._deliver(batch, span, outputs, error)

    def _finished(self, state: _LoopState, holder: _Running, running: asyncio.Future[Any]) -> None:
        """A batch ended: its slot goes straight to the next batch if one is ready, which then
        starts before this batch's callers are woken; the model would otherwise wait while
        their responses are written, and for the dispatcher's turn after them."""
        state.running.discard(running)
        error: BaseException | None = None
        outputs: Any = None
        try:
            outputs = running.result()
        except asyncio.CancelledError:
            error = ChainsRuntimeError(f"{self.chainlet}: the batch was cancelled (the server is stopping)")
        except Exception as exc:
            error = exc
        if self._state is state:  # not closed meanwhile
            following = self._ready(state)
            if following:
                self._run(state, following)
            else:
                state.slots.release()
        self._deliver(holder.batch, holder.span, outputs, error)

    def _deliver(
        self, batch: list[_Call], span: BatchSpan | None, outputs: Any, error: BaseException | None
    ) -> None:
        """Hand each caller of a finished batch its output or its error."""
        if error is None and not self._streaming:
            try:
                _check_outputs(self.chainlet, batch, outputs)
            except BatchSizeError as exc:
                error = exc
        if span is not None:
            span.finish(error)
        if self._streaming and error is None:
            return  # _pump gave each caller its items
        if error is not None:
            for call in batch:
                call.fail(error)
            return
        for call, output in zip(batch, outputs, strict=True):
            if call.future.done():  # the caller left while its batch ran
                continue
            if isinstance(output, Exception):
                call.future.set_exception(output)
            else:
                call.future.set_result(output)

    async def _pump(self, batch: list[_Call], steps: AsyncIterator[Any]) -> None:
        """Hand each step's outputs of a streaming body to their callers' streams."""
        try:
            async with contextlib.aclosing(steps):  # type: ignore[type-var]
                async for outputs in steps:
                    _check_outputs(self.chainlet, batch, outputs)
                    listening = False
                    for call, output in zip(batch, outputs, strict=True):
                        if call.future.done():  # left, or failed at an earlier step
                            continue
                        if isinstance(output, Exception):
                            call.fail(output)
                            continue
                        assert call.items is not None
                        call.items.put_nowait(output)
                        listening = True
                    if not listening:
                        return  # every caller has left: stop computing for nobody
        except Exception as exc:
            for call in batch:
                call.fail(exc)
            return
        for call in batch:
            call.end()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _check_outputs(chainlet: str, batch: list[_Call], outputs: Any) -> None:
    if isinstance(outputs, list | tuple) and len(outputs) == len(batch):
        return
    got = f"{len(outputs)} outputs" if isinstance(outputs, list | tuple) else f"a {type(outputs).__name__}"
    raise BatchSizeError(
        f"chainlet {chainlet}: the batched run_remote got {len(batch)} inputs and returned {got}; "
        "return a list with one output (or exception) per input, in the order of the inputs"
    )


def _batch_context(batch: list[_Call]) -> CallContext:
    """The call a batch runs on behalf of: a request id of its own, and the latest of its
    callers' deadlines (none if one caller has none), since it must serve each of them."""
    deadlines = [c.context.deadline if c.context is not None else None for c in batch]
    deadline = None if any(d is None for d in deadlines) else max(d for d in deadlines if d is not None)
    return CallContext(new_request_id(), deadline)
