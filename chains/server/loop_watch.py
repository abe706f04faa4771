"""A watch on a server's event loop from a thread of its own: a loop blocked for longer than
``CHAINS_LOOP_BLOCK_WARN_SEC`` (1 s) is logged with the stack of what blocks it.

A synchronous call in an ``async`` body (``time.sleep``, a blocking client, a long
computation) stops every call the process serves, and its health check; the line to fix
is the one this log names, like asyncio's debug mode's slow-callback warning but on in
production, where it costs one wake-up of the loop every quarter of the threshold.

Where its supervisor names a file in ``CHAINS_LOOP_BEAT_FILE``, the watch also touches it
at each wake-up the loop answered: the supervisor's sign, without a connection to the
process, of whether the process still runs its loop (a stopped or blocked one does not)::

    watch_loop(asyncio.get_running_loop(), "Generator")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
import traceback

__all__ = ["BEAT_FILE_ENV", "THRESHOLD_ENV", "watch_loop"]

THRESHOLD_ENV = "CHAINS_LOOP_BLOCK_WARN_SEC"
BEAT_FILE_ENV = "CHAINS_LOOP_BEAT_FILE"
_DEFAULT_THRESHOLD_SEC = 1.0
_STACK_LINES = 40

logger = logging.getLogger("chains.server")


def watch_loop(loop: asyncio.AbstractEventLoop, name: str, threshold: float | None = None) -> None:
    """Watch ``loop`` (running in the calling thread) until it closes; ``threshold`` 0 (or the
    environment's ``CHAINS_LOOP_BLOCK_WARN_SEC=0``) turns the watch off."""
    if threshold is None:
        threshold = _threshold()
    if threshold <= 0:
        return
    watcher = threading.Thread(
        target=_watch,
        args=(loop, threading.get_ident(), name, threshold, os.environ.get(BEAT_FILE_ENV) or None),
        name=f"{name}-loop-watch",
        daemon=True,
    )
    watcher.start()


def _threshold() -> float:
    raw = os.environ.get(THRESHOLD_ENV, "")
    try:
        return float(raw) if raw else _DEFAULT_THRESHOLD_SEC
    except ValueError:
        logger.warning("%s=%r is not a number of seconds; the default %gs is used", THRESHOLD_ENV, raw, 1.0)
        return _DEFAULT_THRESHOLD_SEC


def _touch(path: str) -> None:
    try:
        os.utime(path)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        pass  # a beat missed is a sign of life missed, never a failure of the chainlet


def _watch(
    loop: asyncio.AbstractEventLoop, thread_id: int, name: str, threshold: float, beat_file: str | None
) -> None:
    beat = [time.monotonic()]

    def heartbeat() -> None:
        beat[0] = time.monotonic()

    tick = threshold / 4
    reported_at: float | None = None  # the beat of the block already reported
    while not loop.is_closed():
        try:
            loop.call_soon_threadsafe(heartbeat)
        except RuntimeError:  # closed between the check and the call
            return
        time.sleep(tick)
        last = beat[0]
        blocked = time.monotonic() - last
        if blocked < threshold + tick:
            if beat_file is not None and blocked < 2 * tick:
                _touch(beat_file)
            if reported_at is not None:
                logger.warning("the event loop of %s is running again after %.1fs", name, last - reported_at)
                reported_at = None
            continue
        if reported_at == last:
            continue
        reported_at = last
        frame = sys._current_frames().get(thread_id)
        stack = "".join(traceback.format_stack(frame)[-_STACK_LINES:]) if frame is not None else ""
        logger.warning(
            "the event loop of %s has been blocked for %.1fs: every call and health check waits. "
            "It is running (the last line is what blocks it; run it with asyncio.to_thread, or use "
            "its async form):\n%s",
            name,
            blocked,
            stack.rstrip(),
        )
