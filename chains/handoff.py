"""Records handed off the request path to a thread that delivers them in batches.

The request log and the span sink both cost a call more to deliver one record (a formatted
line, an SQLite row) than to answer it (``benchmarks/defaults.py``). So a call only appends
the record to a list; a daemon thread wakes when there is something, waits ``delay_s`` for
more to gather, and delivers the batch at once::

    lines = HandOff(lambda batch: print(*batch, sep="\\n"), name="chains-lines", delay_s=0.1)
    lines.put("Entry 200 1.2ms")   # an append: no lock, no system call
    lines.flush()                  # what is waiting, now (also done at exit)

What may be lost: the records of the last ``delay_s`` when the process is killed with SIGKILL;
at a normal exit what is waiting is delivered first.
"""

from __future__ import annotations

import atexit
import inspect
import threading
import time
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["HandOff"]

T = TypeVar("T")


class HandOff(Generic[T]):
    """Records of type ``T`` put by any thread, given to ``deliver`` in batches by a thread of
    its own named ``name``; with ``delay_s=None``, each record is delivered at once, in the
    thread that puts it (for tests, and for processes that must not start threads).

    A bound method ``deliver`` is held weakly: its object owns this hand-off, and a cycle
    between the two would be left for the garbage collector when the owner is dropped.
    """

    def __init__(self, deliver: Callable[[list[T]], object], *, name: str, delay_s: float | None) -> None:
        self._deliver = _weakly(deliver) if inspect.ismethod(deliver) else deliver
        self._delay_s = delay_s
        self._pending: list[T] = []
        self._lock = threading.Lock()  # one delivery at a time: the thread's, or a flush's
        self._wake = threading.Event()
        self._closed = False
        if delay_s is not None:
            threading.Thread(target=self._run, name=name, daemon=True).start()
            # A daemon thread dies with the process: what is waiting at exit is delivered
            # first. Registered as it starts, so it runs before the hooks registered earlier.
            atexit.register(_flush_at_exit, weakref.ref(self))

    def put(self, record: T) -> None:
        if self._delay_s is None:
            with self._lock:
                self._deliver([record])
            return
        pending = self._pending
        pending.append(record)  # list.append is atomic: no lock on the request path
        if len(pending) == 1:
            self._wake.set()

    def flush(self) -> None:
        with self._lock:
            # Copy, then delete what was copied: a record put meanwhile stays for the next flush.
            batch = self._pending[:]
            del self._pending[: len(batch)]
            if batch:
                self._deliver(batch)

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self.flush()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait()
            if self._closed:
                return
            time.sleep(self._delay_s or 0)  # let a batch gather
            self._wake.clear()
            self.flush()
            if self._pending:  # put during the flush, after put saw a list that was not empty
                self._wake.set()


def _weakly(method: Callable[[list[T]], object]) -> Callable[[list[T]], object]:
    ref = weakref.WeakMethod(method)

    def deliver(batch: list[T]) -> object:
        live = ref()
        return None if live is None else live(batch)

    return deliver


def _flush_at_exit(hand_off: weakref.ref[HandOff[T]]) -> None:
    live = hand_off()
    if live is not None:
        live.flush()
