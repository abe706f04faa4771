"""How a chainlet process is tied to its supervisor, how it ended, in words, and the end of
every process it started.

Each chainlet runs in a process group of its own (its pid is the group's id), so a helper
process it started is stopped with it, as systemd's ``KillMode=control-group`` does, and
dies with its supervisor (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable

from chains.server.memory_errors import OUT_OF_MEMORY_EXIT, restart_after

__all__ = ["describe_exit", "die_with", "group_exists", "kill_group", "oom_kill_count"]


_PR_SET_PDEATHSIG = 1


def die_with(parent: int) -> Callable[[], None] | None:
    """What a child runs before ``exec`` so that the kernel kills it when ``parent`` dies.

    The signal follows the death of the thread that forked the child, so children are
    spawned from the main thread only (the event loop's). The check of ``getppid`` closes
    the window in which the parent died before the request was made. None where ``prctl``
    does not exist (not Linux).
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork, not in the child
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        # A process group of its own (see above).
        os.setpgid(0, 0)
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def kill_group(pgid: int, sig: signal.Signals = signal.SIGKILL) -> bool:
    """Send ``sig`` to every process left in the group ``pgid``; False when none is left.

    The kernel does not hand out a pid that is still some group's id, so a group found by
    the pid of its (dead) first process is that chainlet's group.
    """
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def group_exists(pgid: int) -> bool:
    """Whether any process is still in the group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def oom_kill_count() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot (``oom_kill``
    in ``/proc/vmstat``); None where the kernel does not say."""
    with contextlib.suppress(OSError, ValueError), open("/proc/vmstat") as vmstat:
        for line in vmstat:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return None


def describe_exit(code: int, oom_kills: int = 0, bound: str | None = None) -> str:
    """``"exited with code 3"``, ``"was killed by SIGSEGV (exit code -11)"``; a SIGKILL while
    the kernel's out-of-memory killer killed ``oom_kills`` processes is named as such, with
    the process's memory ``bound`` (``"256 MiB (cgroup v2)"``) when it had one; exit code
    :data:`OUT_OF_MEMORY_EXIT` is a server that stopped after repeated ``MemoryError``."""
    if code == OUT_OF_MEMORY_EXIT:
        return (
            f"out of memory: MemoryError {restart_after()} times in a row (it exited with code "
            f"{code} to be restarted; give it more memory or make it use less)"
        )
    if code >= 0:
        return f"exited with code {code}"
    name = _signal_name(-code)
    if -code == signal.SIGKILL and oom_kills and bound is not None:
        return (
            f"was killed for running out of memory (OOMKilled: past its bound of {bound}, "
            "Compute(memory=...); give it more memory or make it use less)"
        )
    if -code == signal.SIGKILL and oom_kills:
        return (
            "was killed for running out of memory (OOMKilled: the kernel's out-of-memory killer "
            "sent SIGKILL; give it more memory or make it use less)"
        )
    if -code == signal.SIGKILL:
        return (
            "was killed by SIGKILL (exit code -9): by a person or program, or the kernel out of "
            "memory (see `dmesg` for 'Out of memory')"
        )
    return f"was killed by {name} (exit code {code})"


def _signal_name(number: int) -> str:
    with contextlib.suppress(ValueError):
        return signal.Signals(number).name
    return f"signal {number}"
