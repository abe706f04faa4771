"""A chainlet that keeps failing with ``MemoryError`` ends itself, to be restarted.

Under a data limit (``RLIMIT_DATA``, the local target's bound for ``Compute(memory=...)`` where
it cannot make a memory cgroup) nothing kills a process out of memory: each allocation
past the bound fails, and a chainlet that leaked up to it answers every call with a
``MemoryError`` while its health check still passes. So each call that fails with one is
counted when the process is starved, that is when a small allocation fails too (one call
asking for more than the bound leaves the rest of the process well, and is not counted).
After ``CHAINS_MEMORY_ERRORS_RESTART`` (3) such calls in a row, the server logs why and exits
with :data:`OUT_OF_MEMORY_EXIT`, which its supervisor names and restarts::

    note_failure(exc)                      # in the error path of every call
    memory_message(MemoryError())          # "out of memory: ..." where Python says nothing
"""

from __future__ import annotations

import asyncio
import logging
import os

from chains.environ import positive_number
from chains.errors import ChainsUsageError

__all__ = ["BOUND_ENV", "OUT_OF_MEMORY_EXIT", "RESTART_ENV", "memory_message", "note_failure"]

# The exit status of a server that stopped after repeated MemoryError: distinct from Python's
# 1 and from the shells' 126 to 128+N, so that its supervisor can name it.
OUT_OF_MEMORY_EXIT = 75
RESTART_ENV = "CHAINS_MEMORY_ERRORS_RESTART"
# The bound the supervisor set ("256 MiB (RLIMIT_DATA)"), for the messages.
BOUND_ENV = "CHAINS_MEMORY_BOUND"
_DEFAULT_RESTART = 3
# Small enough that a process with any room left gets it, large enough that one without
# cannot serve a call.
_PROBE_BYTES = 4 * 1024 * 1024

logger = logging.getLogger("chains.server")
_starved = 0


def memory_message(exc: BaseException) -> str:
    """What to say of ``exc``: its own message, or for a ``MemoryError`` without one (Python's
    own), that the process ran out of memory and under which bound."""
    text = str(exc)
    if text or not isinstance(exc, MemoryError):
        return text
    bound = os.environ.get(BOUND_ENV)
    where = f" (its bound: {bound}, from Compute(memory=...))" if bound else ""
    return f"out of memory: an allocation failed in this chainlet{where}"


def restart_after() -> int:
    """How many starved ``MemoryError`` calls in a row end the process (0: never)."""
    if os.environ.get(RESTART_ENV, "").strip() == "0":
        return 0
    try:
        return max(1, int(positive_number(os.environ, RESTART_ENV, _DEFAULT_RESTART)))
    except ChainsUsageError as exc:  # said in the log; a failing call's answer is not the place
        logger.warning("%s; %d is used", exc, _DEFAULT_RESTART)
        return _DEFAULT_RESTART


def note_failure(exc: BaseException) -> None:
    """Count a call that failed with ``exc``; end the process after too many starved ones."""
    global _starved
    if not isinstance(exc, MemoryError):
        _starved = 0
        return
    try:
        probe = bytearray(_PROBE_BYTES)
    except MemoryError:
        _starved += 1
    else:
        del probe
        _starved = 0
        return
    limit = restart_after()
    if not limit or _starved < limit:
        return
    logger.error(
        "out of memory: MemoryError %d times in a row, and no room for %d MiB more; "
        "exiting (status %d) to be restarted",
        _starved,
        _PROBE_BYTES // 2**20,
        OUT_OF_MEMORY_EXIT,
    )
    # After this call's answer is sent: the caller gets its 503-free error, then the restart.
    asyncio.get_running_loop().call_later(0.05, os._exit, OUT_OF_MEMORY_EXIT)
