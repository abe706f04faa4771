"""A call the server does not let in, and how it is answered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chains.server.asgi import Send, send_json

__all__ = ["RETRY_SOON", "Refusal"]

# A refusal that a later call may not meet (not ready yet, over capacity).
RETRY_SOON = ((b"retry-after", b"1"),)


class Refusal(Exception):
    """Raised by an admission check that refuses a call: answered with ``status`` and
    ``{"detail": detail}``, plus ``headers``, before ``run_remote`` is reached.

    >>> raise Refusal(415, "send the arguments as JSON")
    """

    def __init__(self, status: int, detail: Any, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        super().__init__(status, detail)
        self.status = status
        self.detail = detail
        self.headers = headers

    async def answer(self, send: Send, headers: Sequence[tuple[bytes, bytes]]) -> int:
        """Send the refusal, with ``headers`` after its own; return its status."""
        await send_json(send, self.status, {"detail": self.detail}, [*self.headers, *headers])
        return self.status
