"""A caller's cap on its concurrent calls to one dependency (``depends(concurrency_limit=...)``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["CallLimit"]

logger = logging.getLogger("chains.stubs")


class CallLimit:
    """At most ``limit`` calls at once through :meth:`slot`; ``None`` means no limit.

    The semaphore is made on first use, inside the event loop that uses it: stubs are built
    before the server's loop runs (and run_local's before ``asyncio.run``)::

        limit = CallLimit(2)
        async with limit.slot():
            ...  # the whole call, a stream's consumption included
    """

    def __init__(self, limit: int | None, name: str = "") -> None:
        self.limit = limit
        self.name = name
        self._semaphore: asyncio.Semaphore | None = None
        # A call that has to wait for a slot is said in the log, at most once per this many
        # seconds (Truss Chains' attribute name, which its files set to 0 in tests).
        self._log_interval_sec = 300.0
        self._logged_at = float("-inf")

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self.limit is None:
            yield
            return
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.limit)
        if self._semaphore.locked():
            now = time.monotonic()
            if now - self._logged_at >= self._log_interval_sec:
                self._logged_at = now
                logger.warning(
                    "calls to %s wait for a slot: concurrency_limit=%d calls are in flight; spread the "
                    "calls out, or raise the limit in depends(..., concurrency_limit=...)",
                    self.name or "a dependency",
                    self.limit,
                )
        async with self._semaphore:
            yield
