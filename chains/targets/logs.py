"""Log lines for ``chains logs``: the tail of files, followed, and several streams merged.

Shared by the running targets: local follows its chainlets' log files; docker and swarm
merge the followed logs of several containers or services into one stream.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["follow_files", "merge_followed"]


def follow_files(paths: list[Path], lines: int, follow: bool) -> Iterator[str]:
    """The last ``lines`` of each file, prefixed with its name when there are several; with
    ``follow``, then every line appended to them, until the caller stops iterating."""
    handles = []
    try:
        for path in paths:
            handle = open(path, errors="replace")  # noqa: SIM115 - kept open while following
            handles.append((path, handle))
            for line in handle.read().splitlines()[-lines:]:
                yield f"{path.stem} | {line}" if len(paths) > 1 else line
        while follow:
            quiet = True
            for path, handle in handles:
                for line in iter(handle.readline, ""):
                    quiet = False
                    text = line.rstrip("\n")
                    yield f"{path.stem} | {text}" if len(paths) > 1 else text
            if quiet:
                time.sleep(0.2)
    finally:
        for _, handle in handles:
            handle.close()


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
