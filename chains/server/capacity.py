"""How many calls a chainlet runs at once, and how many may wait for their turn.

``Compute(concurrency=N)`` calls run at once, each holding a slot, and up to ``max_queue`` more
wait for one; a call beyond that is refused with 503 at once, which a caller's retry may send
to another replica. A ``@chains.batched`` endpoint's calls take no slot: its batcher bounds the
batches that run at once, and the calls that wait for one.
"""

from __future__ import annotations

import asyncio
import collections

from chains.batcher import BatchConfig, Batcher
from chains.batching import install_batcher
from chains.metrics import Metrics
from chains.server.refusal import RETRY_SOON, Refusal

__all__ = ["Capacity"]


class Capacity:
    """The slots of a chainlet's ``concurrency`` and the bound of the queue before them.

    >>> capacity = Capacity(concurrency=2, max_queue=None)
    >>> await capacity.enter()  # raises Refusal(503) when over capacity
    >>> capacity.leave()
    """

    __slots__ = ("_free", "_max_queue", "_queue_setting", "_waiters", "batcher", "concurrency")

    def __init__(self, concurrency: int, max_queue: int | None) -> None:
        self.concurrency = concurrency
        self._queue_setting = max_queue
        self._max_queue = max_queue if max_queue is not None else 4 * concurrency
        # A semaphore of its own rather than asyncio.Semaphore, whose acquire looks at every
        # waiter twice per call (about 1.5 µs of a call that finds a slot free at once,
        # benchmarks/request_path.py): free slots, and the calls waiting for one in order.
        self._free = concurrency
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.batcher: Batcher | None = None

    def install_batcher(
        self, instance: object, batching: BatchConfig | None, chainlet: str, metrics: Metrics
    ) -> Batcher | None:
        """Put a batched endpoint's calls behind a batcher (None: the endpoint is not batched)."""
        if batching is None:
            return None
        # The concurrency limit counts batches; the queue bound counts calls, so that by
        # default a few full batches may wait.
        max_queue = self._queue_setting
        if max_queue is None:
            max_queue = 4 * self.concurrency * batching.max_batch_size
        batcher = install_batcher(
            instance, chainlet=chainlet, concurrency=self.concurrency, max_queue=max_queue, observer=metrics
        )
        if batcher is not None:
            metrics.batch_queue = lambda: batcher.queued
        self.batcher = batcher
        return batcher

    async def enter(self) -> None:
        """Wait for a slot (a batched call takes none), or raise :class:`Refusal` (503) when the
        queue is full; every call let in calls :meth:`leave` once it is done."""
        batcher = self.batcher
        if batcher is not None:
            if batcher.full:
                raise Refusal(503, f"over capacity: {batcher.queued} calls waiting for a batch", RETRY_SOON)
            return
        if self._free and not self._waiters:
            self._free -= 1
            return
        if len(self._waiters) >= self._max_queue:
            busy = f"{self.concurrency} calls running, {len(self._waiters)} waiting"
            raise Refusal(503, f"over capacity: {busy}", RETRY_SOON)
        turn = asyncio.get_running_loop().create_future()
        self._waiters.append(turn)
        try:
            await turn  # leave() hands this call the slot of one that ended
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # handed a slot as it was cancelled: the next one takes it
            elif turn in self._waiters:  # else _release passed it by, as cancelled
                self._waiters.remove(turn)
            raise

    def leave(self) -> None:
        if self.batcher is None:
            self._release()

    def _release(self) -> None:
        waiters = self._waiters
        while waiters:
            turn = waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._free += 1

    async def try_take_slot(self) -> bool:
        """Take a slot if one is free now (a WebSocket holds it while open)."""
        if not self._free or self._waiters:
            return False
        self._free -= 1
        return True

    def release_slot(self) -> None:
        self._release()
