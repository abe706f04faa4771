"""A caller's cap on its concurrent calls to one dependency (``depends(concurrency_limit=...)``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["CallLimit"]


class CallLimit:
    """At most ``limit`` calls at once through :meth:`slot`; ``None`` means no limit.

    The semaphore is made on first use, inside the event loop that uses it: stubs are built
    before the server's loop runs (and run_local's before ``asyncio.run``)::

        limit = CallLimit(2)
        async with limit.slot():
            ...  # the whole call, a stream's consumption included
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._semaphore: asyncio.Semaphore | None = None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self.limit is None:
            yield
            return
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.limit)
        async with self._semaphore:
            yield
