"""The call being served: its request id and its deadline, carried to every hop in headers.

The deadline travels as the time *remaining* (seconds, like gRPC's timeout header) rather
than as a wall-clock instant, so hops on machines with skewed clocks still agree on it.
"""

from __future__ import annotations

import contextvars
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from chains.wire import DEADLINE_HEADER, REQUEST_ID_HEADER

__all__ = [
    "CallContext",
    "current_call",
    "new_request_id",
    "serving_call",
]

_MAX_REQUEST_ID = 128


@dataclass(frozen=True)
class CallContext:
    """One incoming call: ``deadline`` is on this process's monotonic clock, or None."""

    request_id: str
    deadline: float | None = None

    def remaining(self) -> float | None:
        """Seconds left before the caller gives up, or None when it set no deadline."""
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic()

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> CallContext:
        """Read the request id (made up when absent or unusable) and the remaining time."""
        request_id = headers.get(REQUEST_ID_HEADER, "")
        if not request_id or len(request_id) > _MAX_REQUEST_ID or not request_id.isprintable():
            request_id = new_request_id()
        deadline = None
        raw = headers.get(DEADLINE_HEADER)
        if raw:
            try:
                seconds = float(raw)
            except ValueError:
                seconds = math.nan
            if math.isfinite(seconds):
                deadline = time.monotonic() + max(seconds, 0.0)
        return cls(request_id, deadline)

    def headers(self) -> dict[str, str]:
        """The headers an outgoing call carries for this context."""
        out = {REQUEST_ID_HEADER: self.request_id}
        remaining = self.remaining()
        if remaining is not None:
            out[DEADLINE_HEADER] = f"{max(remaining, 0.0):.3f}"
        return out


def new_request_id() -> str:
    """32 random hex digits: the request id, which is also the call's W3C trace id.

    Not a UUID: a UUID's variant bits would fix the top bit of the trace id's low half, which
    OpenTelemetry's ratio samplers compare with the ratio, so ``traceidratio`` at 0.5 or less
    would have kept no trace at all.
    """
    # From the random module's generator (reseeded in a forked child), as OpenTelemetry's
    # SDK makes its ids: os.urandom is a system call per id, which releases the GIL to any
    # thread waiting for it (the span writer), on every call a server serves.
    return f"{random.getrandbits(128) or 1:032x}"


_current: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar("chains_call", default=None)


def current_call() -> CallContext | None:
    """The call this code runs on behalf of, inside a chainlet server."""
    return _current.get()


class serving_call:  # lower case: used like a function, ``with serving_call(call): ...``
    """While the block runs, :func:`current_call` is ``call``.

    A class rather than a ``@contextmanager`` generator, which costs twice as much on every call
    a server serves.
    """

    __slots__ = ("_call", "_token")

    def __init__(self, call: CallContext) -> None:
        self._call = call

    def __enter__(self) -> None:
        self._token = _current.set(self._call)

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self._token)
