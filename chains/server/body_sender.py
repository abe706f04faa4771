"""The body of a streaming answer: its chunks sent as ASGI messages, those of a burst joined.

See :class:`BodySender` for why a stream's chunks are not each sent on their own.
"""

from __future__ import annotations

import asyncio
import time

from chains.server.asgi import Send

__all__ = ["BodySender"]

# A stream's chunks that come in a burst are sent together, but none waits longer than this,
# and no more than this many bytes wait, before the producer lets them be sent.
_FLUSH_AFTER_SEC = 0.001
_MAX_PENDING_BYTES = 64 * 1024


class BodySender:
    """Sends a stream's chunks as ``http.response.body`` messages, joining those of a burst.

    A message per chunk costs a system call and uvicorn's own work, about 5 µs, which is most
    of what a small item costs to stream. Here the chunks go to a task of their own that sends,
    in one message, whatever is waiting each time it runs, that is whenever the stream's
    producer waits for something (its next token, the network). A producer that does not wait
    (a loop that computes its items) is made to let the sender run once 1 ms has passed since
    the last send or 64 KiB are waiting, so a chunk is never held back longer than that; after
    a pause, a chunk goes out at once.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._pending: list[bytes] = []
        self._size = 0
        self._last_sent = 0.0
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None  # the sender waits for chunks
        self._taken: asyncio.Future[None] | None = None  # the producer waits for the sender

    async def write(self, chunk: bytes) -> None:
        self._pending.append(chunk)
        self._size += len(chunk)
        task = self._task
        if task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        elif task.done():
            task.result()  # the sender failed: raise its error here
        elif self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)
        if self._size >= _MAX_PENDING_BYTES or time.perf_counter() - self._last_sent >= _FLUSH_AFTER_SEC:
            if self._taken is None:
                self._taken = asyncio.get_running_loop().create_future()
            await self._taken

    async def close(self) -> None:
        """Send what is waiting and return once it has been sent (raising what sending raised)."""
        task = self._task
        if task is None:
            return
        self._closing = True
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)
        await task

    def cancel(self) -> None:
        task = self._task
        if task is None:
            return
        if task.done() and not task.cancelled():
            task.exception()  # retrieved, so that asyncio does not report it as lost
        task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self._pending:
                    if self._closing:
                        return
                    self._wakeup = loop.create_future()
                    await self._wakeup
                    self._wakeup = None
                    continue
                pending, self._pending, self._size = self._pending, [], 0
                self._last_sent = time.perf_counter()
                taken, self._taken = self._taken, None
                if taken is not None and not taken.done():  # done: the producer was cancelled
                    taken.set_result(None)
                body = pending[0] if len(pending) == 1 else b"".join(pending)
                await self._send({"type": "http.response.body", "body": body, "more_body": True})
        except BaseException as exc:
            taken, self._taken = self._taken, None
            if taken is not None and not taken.done():
                if isinstance(exc, asyncio.CancelledError):
                    taken.cancel()
                else:
                    taken.set_exception(exc)
            raise
