"""The end of a killed supervisor's chainlets' helpers: ``python reaper.py`` (run by path, so
that it imports nothing of chains and starts in milliseconds).

The kernel kills a supervisor's chainlets when it dies, even of SIGKILL (``PR_SET_PDEATHSIG``),
but not what they started: a helper process (``subprocess.Popen`` in ``__init__``) would live
on until ``chains stop``. This process is the supervisor's watch over them. The supervisor
tells it, one line each on its stdin, every process group (and memory cgroup) it starts and
every one it has ended::

    + 4242 /sys/fs/cgroup/chains/Worker-0-3
    - 4242

When its stdin ends, which happens when the supervisor is gone however it went, it kills
every group still listed (SIGKILL to the process group, and to each process left in the
cgroup, which holds even a helper that made a session of its own), removes those cgroups,
and exits. A supervisor that stops as it should has listed every group as ended first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path


def _end(pgid: int, group: str) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if not group:
        return
    folder = Path(group)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            pids = (folder / "cgroup.procs").read_text().split()
        except OSError:
            return  # removed already
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            folder.rmdir()
            return
        except OSError:
            time.sleep(0.05)  # the killed processes are still leaving it


def main() -> None:
    # A terminal's Ctrl-C or hang-up meant for the supervisor is not for this process: it
    # ends when the supervisor does (its stdin's end), and only then.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    groups: dict[int, str] = {}
    for line in sys.stdin:
        parts = line.split(maxsplit=2)
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        if parts[0] == "+":
            groups[int(parts[1])] = parts[2].strip() if len(parts) > 2 else ""
        elif parts[0] == "-":
            groups.pop(int(parts[1]), None)
    for pgid, group in groups.items():
        _end(pgid, group)


if __name__ == "__main__":
    main()
