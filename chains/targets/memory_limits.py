"""The bound on a local chainlet's memory that ``Compute(memory=...)`` asks for, where the
machine allows one, and what the kernel recorded when a process went past it.

Each process the supervisor starts for a replica gets, in this order of preference:

- a memory cgroup of its own (v2 ``memory.max``, or v1 ``memory.limit_in_bytes`` on a
  machine that mounts the memory controller in the v1 hierarchy), made under the
  supervisor's own cgroup, where that folder is writable (root, or a delegated subtree).
  The kernel's out-of-memory killer ends the process there at the bound, and the group's
  own count (``oom_kill`` in ``memory.events`` or ``memory.oom_control``) names the death;
  the group also holds every helper process the chainlet starts, even one that left its
  process group, so that they end with it;
- else ``RLIMIT_DATA``, the limit on a process's private writable memory (its heap, its
  anonymous mappings, its threads' stacks), pages it has not touched yet included: the
  process is not killed, its allocations past the bound fail (``MemoryError`` in Python).
  Not ``RLIMIT_AS``: a chainlet at rest has about 500 MiB of address space (malloc reserves
  64 MiB per thread's arena) for under 60 MiB resident and 90 MiB of data, so an
  address-space bound of the size a user names would leave it no room at all.

A chainlet whose ``Compute`` names no ``memory`` is not bounded on the local target (the
default of 512Mi is for the platforms that need a size). ``CHAINS_MEMORY_CGROUP=0`` asks for
``RLIMIT_DATA`` even where a cgroup could be made::

    bounds = MemoryBounds.find()                    # once per supervisor
    bound = bounds.for_process("Worker-0-3", 256 * 2**20)
    subprocess.Popen(argv, preexec_fn=bound.enter)  # in the child, before exec
    ...
    bound.oom_kills()                               # 1: the kernel killed it at the bound
    bound.remove()                                  # kills what is left in it, removes it
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["CGROUP_ENV", "MemoryBound", "MemoryBounds", "MemoryKind"]

MemoryKind = Literal["cgroup v2", "cgroup v1", "RLIMIT_DATA"]

CGROUP_ENV = "CHAINS_MEMORY_CGROUP"
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_V1_MEMORY = _CGROUP_ROOT / "memory"


@dataclass(frozen=True)
class MemoryBound:
    """The bound of one process: its cgroup (None under ``RLIMIT_DATA``) and its size in bytes."""

    kind: MemoryKind
    limit: int
    group: Path | None = None

    def enter(self) -> None:
        """Run in the child before ``exec``: join the group, or set the data limit.

        Only system calls: a forked child of a threaded process must not take locks.
        """
        if self.group is None:
            resource.setrlimit(resource.RLIMIT_DATA, (self.limit, self.limit))
            return
        fd = os.open(self.group / "cgroup.procs", os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)

    def describe(self) -> str:
        """``"256 MiB (cgroup v2)"``, for the supervisor's log."""
        return f"{self.limit / 2**20:.0f} MiB ({self.kind})"

    def oom_kills(self) -> int:
        """How many of the group's processes the kernel's out-of-memory killer has killed (0 under
        ``RLIMIT_DATA``, where nothing is killed, and where the kernel does not say)."""
        if self.group is None:
            return 0
        name = "memory.events" if self.kind == "cgroup v2" else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in (self.group / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def pids(self) -> list[int]:
        if self.group is None:
            return []
        with contextlib.suppress(OSError, ValueError):
            return [int(p) for p in (self.group / "cgroup.procs").read_text().split()]
        return []

    def kill_all(self) -> None:
        """SIGKILL every process still in the group: the chainlet's helpers, wherever their
        process group (``cgroup.kill`` on v2 where the kernel has it, else one by one)."""
        if self.group is None:
            return
        with contextlib.suppress(OSError):
            (self.group / "cgroup.kill").write_text("1")
            return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self, wait: float = 2.0) -> bool:
        """Kill what is left in the group and remove it once empty; False when it is still
        busy after ``wait`` seconds (it is left for the next try)."""
        if self.group is None:
            return True
        deadline = time.monotonic() + wait
        while True:
            self.kill_all()
            try:
                self.group.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)


@dataclass(frozen=True)
class MemoryBounds:
    """Where the supervisor makes its processes' cgroups: the folder of its own cgroup, or
    None where it cannot (``RLIMIT_DATA`` then); ``why`` says why not, for the log."""

    parent: Path | None
    kind: MemoryKind
    why: str = ""

    @classmethod
    def find(
        cls, env: Mapping[str, str] | None = None, cgroup_file: Path = Path("/proc/self/cgroup")
    ) -> MemoryBounds:
        """The cgroup folder this process may make memory groups in (v2, else v1);
        ``CHAINS_MEMORY_CGROUP=0`` in ``env`` (the process's environment) asks for ``RLIMIT_DATA``."""
        if (os.environ if env is None else env).get(CGROUP_ENV, "").strip() == "0":
            return cls(None, "RLIMIT_DATA", f"{CGROUP_ENV}=0")
        try:
            lines = cgroup_file.read_text().splitlines()
        except OSError as exc:
            return cls(None, "RLIMIT_DATA", f"cannot read {cgroup_file} ({exc})")
        paths = {}
        for line in lines:
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path.lstrip("/")
        why = "no memory cgroup"
        if (_CGROUP_ROOT / "cgroup.controllers").is_file() and "" in paths:
            found = _v2_parent(_CGROUP_ROOT / paths[""])
            if isinstance(found, Path):
                return cls(found, "cgroup v2")
            why = found
        elif "memory" in paths and _V1_MEMORY.is_dir():
            parent = _V1_MEMORY / paths["memory"]
            if os.access(parent, os.W_OK):
                return cls(parent, "cgroup v1")
            why = f"{parent} is not writable"
        return cls(None, "RLIMIT_DATA", why)

    def for_process(self, name: str, limit: int) -> MemoryBound:
        """A fresh group named ``name`` bounded at ``limit`` bytes, or ``RLIMIT_DATA`` where no
        group can be made."""
        if self.parent is None:
            return MemoryBound("RLIMIT_DATA", limit)
        group = self.parent / name
        try:
            group.mkdir(exist_ok=True)
            limit_file = "memory.max" if self.kind == "cgroup v2" else "memory.limit_in_bytes"
            (group / limit_file).write_text(str(limit))
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            return MemoryBound("RLIMIT_DATA", limit)
        if self.kind == "cgroup v2":
            # The bound is memory, not memory and swap: a process that swaps its way past it
            # would be slowed instead of stopped.
            with contextlib.suppress(OSError):
                (group / "memory.swap.max").write_text("0")
        return MemoryBound(self.kind, limit, group)


def _v2_parent(own: Path) -> Path | str:
    """``own`` if memory groups can be made in it, else why not. A v2 group gives its
    children a controller only when it has no processes of its own, so a supervisor
    inside a leaf group (a systemd service's) cannot, unless memory is delegated already."""
    try:
        if "memory" in (own / "cgroup.subtree_control").read_text().split():
            return own if os.access(own, os.W_OK) else f"{own} is not writable"
        if "memory" not in (own / "cgroup.controllers").read_text().split():
            return f"{own} has no memory controller"
        (own / "cgroup.subtree_control").write_text("+memory")
    except OSError as exc:
        return f"cannot give memory groups to {own}'s children ({exc.strerror or exc})"
    return own
