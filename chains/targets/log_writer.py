"""Each local chainlet's log, written by its supervisor: rotated, capped, and never short
of a line without saying so.

A chainlet's output comes to the supervisor through a pipe and is appended to
``NAME.log``; past ``CHAINS_LOG_MAX_MB`` (64) the file becomes ``NAME.log.1`` (the older
ones ``.2``, ...; ``CHAINS_LOG_FILES`` (3) are kept, the oldest removed), as Docker's
``max-size``/``max-file`` do. A write that fails (a full disk) is counted, said once on the
supervisor's stderr and in the log itself once writing works again::

    log = RotatingLog(Path("logs/Worker.log"), LogLimits.from_environment(os.environ))
    log.write(b"a line\\n")
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LogLimits", "LogPipe", "RotatingLog", "owner_only"]

MAX_MB_ENV = "CHAINS_LOG_MAX_MB"
FILES_ENV = "CHAINS_LOG_FILES"


def owner_only(path: str, flags: int) -> int:
    """An ``open()`` opener for log files: readable by their owner alone, since they hold
    exception messages and request ids. An older file that others could read is made so too."""
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return fd


@dataclass(frozen=True)
class LogLimits:
    """How large one log file grows, and how many files of a chainlet are kept in all."""

    max_bytes: int = 64 * 1024 * 1024
    files: int = 3

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> LogLimits:
        default = cls()
        try:
            megabytes = float(env.get(MAX_MB_ENV) or default.max_bytes / 1024 / 1024)
            files = int(env.get(FILES_ENV) or default.files)
        except ValueError:
            raise ValueError(
                f"{MAX_MB_ENV} must be a number of megabytes and {FILES_ENV} a whole number; "
                f"got {env.get(MAX_MB_ENV)!r} and {env.get(FILES_ENV)!r}"
            ) from None
        if megabytes <= 0 or files < 1:
            raise ValueError(f"{MAX_MB_ENV} must be over 0 and {FILES_ENV} at least 1")
        return cls(max_bytes=max(int(megabytes * 1024 * 1024), 1), files=files)


class RotatingLog:
    """One chainlet replica's log file, shared by its processes (an old one draining, its successor)."""

    def __init__(self, path: Path, limits: LogLimits) -> None:
        self.path = path
        self.limits = limits
        self.lost_lines = 0
        self._lost_said = 0
        self._closed = False
        # Unbuffered: a write a full disk refuses is counted as lost, not kept to go out later.
        self._file = open(path, "ab", buffering=0, opener=owner_only)  # noqa: SIM115 - kept open while the replica runs

    def write(self, data: bytes) -> None:
        if self._closed:  # the supervisor has stopped: its processes have nothing left to say
            return
        try:
            self._reopen_if_moved()
            room = self.limits.max_bytes - self._file.tell()
            if len(data) > room:
                # Rotated at the end of the last line that fits: a line is split over two files
                # only when it is longer than the room left.
                cut = data.rfind(b"\n", 0, max(room, 0)) + 1
                self._file.write(data[:cut])
                data = data[cut:]
                self._rotate()
            self._file.write(data)
            self._file.flush()
        except OSError as exc:
            self._lost(data, exc)
            return
        if self.lost_lines > self._lost_said:
            self._say_lost()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._file.close()

    def _reopen_if_moved(self) -> None:
        # Another deployment's supervisor (a re-push) may have rotated the file under this one;
        # a rotation that failed half-way (a full disk) left it closed.
        try:
            moved = self._file.closed or os.stat(self.path).st_ino != os.fstat(self._file.fileno()).st_ino
        except FileNotFoundError:
            moved = True
        if moved:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = open(self.path, "ab", buffering=0, opener=owner_only)  # noqa: SIM115

    def _rotate(self) -> None:
        self._file.close()
        rotated = self.limits.files - 1  # the files kept besides the current one
        if rotated == 0:
            self.path.unlink(missing_ok=True)
        else:
            Path(f"{self.path}.{rotated}").unlink(missing_ok=True)
            for number in range(rotated - 1, 0, -1):
                older = Path(f"{self.path}.{number}")
                if older.exists():
                    older.rename(f"{self.path}.{number + 1}")
            self.path.rename(f"{self.path}.1")
        self._file = open(self.path, "ab", buffering=0, opener=owner_only)  # noqa: SIM115

    def _lost(self, data: bytes, exc: OSError) -> None:
        first = self.lost_lines == 0 or self.lost_lines == self._lost_said
        self.lost_lines += max(data.count(b"\n"), 1)
        if first:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            with contextlib.suppress(OSError):
                sys.stderr.write(
                    f"{stamp} supervisor: cannot write {self.path} ({exc}); counting the lost lines\n"
                )
                sys.stderr.flush()

    def _say_lost(self) -> None:
        missing = self.lost_lines - self._lost_said
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError):
            self._file.write(
                f"{stamp} SUPERVISOR: {missing} log lines could not be written here (disk full?)\n".encode()
            )
            self._file.flush()
            self._lost_said = self.lost_lines


class LogPipe(asyncio.Protocol):
    """A chainlet process's output pipe, copied into its log."""

    def __init__(self, log: RotatingLog) -> None:
        self._log = log
        self.ended = asyncio.Event()  # the process's end of the pipe is closed, all of it written

    def data_received(self, data: bytes) -> None:
        self._log.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended.set()
