"""What the supervisor's chainlet processes leave behind, and the watch that ends it.

A chainlet may start helper processes of its own. Each chainlet process gets a process group
(and, with ``Compute(memory=...)`` where the machine allows, a memory cgroup, which holds even a
helper that made a session of its own); when the process ends, its supervisor ends what is left
in both. When the supervisor itself dies, even of SIGKILL, the reaper (:mod:`reaper`, a process
of its own) ends them instead. :class:`Descendants` is the supervisor's side of all this::

    descendants = Descendants(tie=die_with(os.getpid()), say=print)
    descendants.watch()                                  # start the reaper
    bound = descendants.bound_for("Worker-0-3", 256 * 2**20)
    process = subprocess.Popen(argv, preexec_fn=descendants.preexec(bound))
    descendants.started(process.pid, bound)
    ...
    descendants.end(process.pid)                         # its group and cgroup, once it exited
    descendants.close()                                  # the reaper ends with nothing to end
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from chains.targets.exits import kill_group
from chains.targets.memory_limits import MemoryBound, MemoryBounds
from chains.targets.state import process_identity

__all__ = ["REAPER", "Descendants"]

# Run by path: it imports nothing of chains, so that it starts in milliseconds.
REAPER = Path(__file__).with_name("reaper.py")


class Descendants:
    """The process groups and memory cgroups of one supervisor's chainlet processes.

    ``tie`` runs in each child before it executes (it dies with its supervisor); ``say``
    writes a line to the supervisor's own log.
    """

    def __init__(self, tie: Callable[[], None] | None, say: Callable[[str], None]) -> None:
        self._tie = tie
        self._say = say
        self._memory: MemoryBounds | None = None  # found at the first chainlet with a bound
        self._bounds: dict[int, MemoryBound] = {}  # by pid, until the process's group is ended
        self._unremoved: list[MemoryBound] = []  # groups still busy when ended, retried
        self._reaper: subprocess.Popen[bytes] | None = None
        self.reaper_identity: str | None = None

    # -- memory bounds -------------------------------------------------------------------------

    def bound_for(self, name: str, limit: int) -> MemoryBound:
        """A fresh bound of ``limit`` bytes for a new process, named ``name``."""
        if self._memory is None:
            self._memory = MemoryBounds.find()
        return self._memory.for_process(name, limit)

    @property
    def unbounded_why(self) -> str:
        """Why a bound is no cgroup on this machine ("" before the first bound)."""
        return self._memory.why if self._memory is not None else ""

    def bound_of(self, pid: int) -> MemoryBound | None:
        return self._bounds.get(pid)

    def preexec(self, bound: MemoryBound | None) -> Callable[[], None] | None:
        """What a child runs before it executes: the tie to its supervisor, then its bound."""
        tie = self._tie
        if bound is None:
            return tie

        def preexec() -> None:
            if tie is not None:
                tie()
            bound.enter()

        return preexec

    # -- each process ----------------------------------------------------------------------------

    def started(self, pid: int, bound: MemoryBound | None) -> None:
        if bound is not None:
            self._bounds[pid] = bound
        self._tell(f"+ {pid} {bound.group if bound is not None and bound.group else ''}")

    def end(self, pid: int) -> None:
        """Kill what is left of what the process ``pid`` started: its process group, its memory
        cgroup (which holds even a helper that left the group); then forget them."""
        kill_group(pid)
        bound = self._bounds.pop(pid, None)
        if bound is not None and not bound.remove(wait=0.2):
            self._unremoved.append(bound)
        self._tell(f"- {pid}")

    def sweep(self, wait: float = 0.0) -> None:
        """Remove the cgroups that were still busy when their process was ended."""
        if self._unremoved:
            self._unremoved = [b for b in self._unremoved if not b.remove(wait=wait)]

    # -- the reaper ------------------------------------------------------------------------------

    @property
    def reaper_pid(self) -> int | None:
        return self._reaper.pid if self._reaper is not None else None

    def watch(self) -> None:
        """Start the reaper, which ends every group still listed when this process dies."""
        try:
            self._reaper = subprocess.Popen(
                [sys.executable, "-I", str(REAPER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # not in the way of a Ctrl-C meant for the supervisor
            )
            self.reaper_identity = process_identity(self._reaper.pid)
        except OSError as exc:
            self._say(
                f"cannot start the reaper ({exc}): helpers of its chainlets outlive a killed supervisor"
            )

    def _tell(self, line: str) -> None:
        reaper = self._reaper
        if reaper is None or reaper.stdin is None:
            return
        try:
            reaper.stdin.write(line.encode() + b"\n")
            reaper.stdin.flush()
        except OSError as exc:  # it was killed: the supervising goes on without it
            self._say(f"the reaper is gone ({exc}): helpers of its chainlets outlive a killed supervisor")
            self._reaper = None

    def close(self) -> None:
        """The last sweep, then the reaper's end: every group was ended, it has none to end."""
        self.sweep(wait=2.0)
        reaper, self._reaper = self._reaper, None
        if reaper is None:
            return
        stdin: IO[bytes] | None = reaper.stdin
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()
        try:
            reaper.wait(5)
        except subprocess.TimeoutExpired:
            reaper.kill()
            reaper.wait()
