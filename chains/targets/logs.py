"""Log lines for ``chains logs``: the tail of files, followed, and several streams merged.

Shared by the running targets: local follows its chainlets' log files; docker and swarm
merge the followed logs of several containers or services into one stream.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["follow_files", "last_lines", "merge_followed"]

_BLOCK = 64 * 1024


def follow_files(paths: list[Path], lines: int, follow: bool) -> Iterator[str]:
    """The last ``lines`` of each file, prefixed with its name when there are several; with
    ``follow``, then every line appended to them, until the caller stops iterating."""

    def labelled(path: Path, line: str) -> str:
        return f"{path.stem} | {line}" if len(paths) > 1 else line

    handles: list[tuple[Path, BinaryIO]] = []
    try:
        for path in paths:
            opened: BinaryIO = open(path, "rb")  # noqa: SIM115 - kept open while following
            handles.append((path, opened))
            for line in last_lines(opened, lines, unfinished=not follow):
                yield labelled(path, line)
        while follow:
            quiet = True
            for index, (path, handle) in enumerate(handles):
                for raw in iter(handle.readline, b""):
                    if not raw.endswith(b"\n"):  # a line still being written: wait for its end
                        handle.seek(-len(raw), os.SEEK_CUR)
                        break
                    quiet = False
                    yield labelled(path, raw.decode(errors="replace").rstrip("\r\n"))
                # Read to its end above: a file rotated away (renamed to NAME.log.1) is left for
                # the new file at its name, read from its start.
                renewed = _after_rotation(path, handle)
                if renewed is not None:
                    complete, passed, current = renewed
                    if not complete:
                        yield labelled(path, "[chains: older lines were rotated away before they were read]")
                    for rotated in passed:  # whole files rotated away since the last look
                        with rotated:
                            for raw in rotated:
                                yield labelled(path, raw.decode(errors="replace").rstrip("\r\n"))
                    handle.close()
                    handles[index] = (path, current)
                    quiet = False
            if quiet:
                time.sleep(0.2)
    finally:
        for _, handle in handles:
            handle.close()


def _after_rotation(path: Path, handle: BinaryIO) -> tuple[bool, list[BinaryIO], BinaryIO] | None:
    """None while ``handle`` reads the file at ``path``; once that was rotated away (renamed
    to ``NAME.log.1``), the files to read next, oldest first: those rotated after it (a fast
    writer rotates several times between two looks), then the new file at ``path``; and
    False first when files between it and the oldest kept were removed (their lines are lost
    to this reader, which says so)."""
    try:
        if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
            return None
        read = os.fstat(handle.fileno()).st_ino
        rotated: list[Path] = []
        while (older := Path(f"{path}.{len(rotated) + 1}")).exists():
            rotated.append(older)
        inodes = [r.stat().st_ino for r in rotated]
        found = read in inodes or not rotated
        newer = rotated[: inodes.index(read)] if read in inodes else rotated
        opened: list[BinaryIO] = [open(r, "rb") for r in reversed(newer)]  # noqa: SIM115 - read by the caller
        return found, opened, open(path, "rb")
    except FileNotFoundError:
        return None  # in the middle of a rotation: next time


def last_lines(handle: BinaryIO, count: int, *, unfinished: bool = True) -> list[str]:
    """The last ``count`` lines of the file ``handle`` reads, leaving it at the file's end.

    Read backwards a block at a time, so showing the end of a large log costs what it shows,
    not the whole file. With ``unfinished=False``, a last line whose newline is not written
    yet is left out and the handle left at its start, for a follower to read it whole::

        with open("Generator.log", "rb") as handle:
            print(last_lines(handle, 20))
    """
    end = handle.seek(0, os.SEEK_END)
    data = b""
    position = end
    while position > 0 and data.count(b"\n") <= count:
        step = min(_BLOCK, position)
        position -= step
        handle.seek(position)
        data = handle.read(step) + data
    if not unfinished:
        data = data[: data.rfind(b"\n") + 1]
    handle.seek(position + len(data))
    if count <= 0 or not data:
        return []
    text = data.decode(errors="replace").split("\n")
    if text[-1] == "":
        text.pop()  # the data ends with a newline: no line after it
    if position > 0:
        text = text[1:]  # the first piece starts inside a line
    return [line.rstrip("\r") for line in text[-count:]]


def merge_followed(streams: list[tuple[str, Iterator[str]]]) -> Iterator[str]:
    """The lines of several followed log streams as they come, each prefixed with its label.

    Each stream is read in a thread of its own, since a followed log blocks until its next line.
    """
    lines_queue: queue.Queue[str] = queue.Queue(maxsize=10_000)
    done = threading.Event()

    def pump(label: str, stream: Iterator[str]) -> None:
        with contextlib.suppress(Exception):
            for line in stream:
                if done.is_set():
                    return
                lines_queue.put(f"{label} | {line}")

    threads = [threading.Thread(target=pump, args=item, daemon=True) for item in streams]
    for thread in threads:
        thread.start()
    try:
        while any(t.is_alive() for t in threads) or not lines_queue.empty():
            with contextlib.suppress(queue.Empty):
                yield lines_queue.get(timeout=0.2)
    finally:
        done.set()
