"""Tracebacks as their reader wants them: in the user's own files, the cause first.

A deployed chainlet runs a copy of the chain's folder (``generated/<Chainlet>/src/``), so the
frames of its tracebacks name the copy. The copy is byte for byte the user's file, so the
line numbers hold: only the folder is swapped back. Frames of chains itself and of Python's
standard library say nothing about the user's mistake and are left out, counted.
"""

from __future__ import annotations

import os
import re
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SOURCE_DIR_ENV",
    "Cause",
    "condense",
    "drop_cancellations",
    "find_cause",
    "in_user_files",
    "to_user_files",
]

# Set by a target whose chainlets run where the user's chain folder is (the local one): that
# folder, so that a chainlet's own error bodies name the user's files too.
SOURCE_DIR_ENV = "CHAINS_SOURCE_DIR"

# `File "<anything>/generated/<Chainlet>/src/<path in the chain's folder>"`
_GENERATED_FRAME = re.compile(r'File "[^"\n]*?/generated/[^/"\n]+/src/([^"\n]+)"')
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)(?:, in (.+))?$')
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(:\s.*)?$")
_OWN = str(Path(__file__).resolve().parent)
_STDLIB = str(Path(sysconfig.get_paths()["stdlib"]).resolve())


def to_user_files(text: str, source_dir: str | Path) -> str:
    """``text`` with every frame in a generated copy pointing at the user's file instead."""
    folder = str(source_dir).rstrip("/")
    return _GENERATED_FRAME.sub(lambda m: f'File "{folder}/{m.group(1)}"', text)


def in_user_files(text: str) -> str:
    """``text`` mapped by :func:`to_user_files` onto this process's chain folder, when its
    target named one in ``CHAINS_SOURCE_DIR``; as it is otherwise."""
    folder = os.environ.get(SOURCE_DIR_ENV)
    return to_user_files(text, folder) if folder else text


def _is_framework(filename: str) -> bool:
    return filename.startswith((_OWN + "/", _STDLIB + "/")) or filename.startswith("<frozen ")


@dataclass(frozen=True)
class Cause:
    """The exception that ended a traceback, and the user's frame that raised it."""

    exception: str  # "RuntimeError: cannot load the model weights"
    where: str | None = None  # "chain.py, line 5, in __init__"

    def __str__(self) -> str:
        return f"{self.exception} ({self.where})" if self.where else self.exception


def find_cause(lines: Iterable[str]) -> Cause | None:
    """The last traceback's exception line in ``lines``, with its last frame outside chains
    and the standard library; None when there is no traceback."""
    cause: Cause | None = None
    in_traceback = False
    where: str | None = None
    for line in lines:
        if line.startswith(_TRACEBACK):
            in_traceback, where = True, None
            continue
        if not in_traceback:
            continue
        frame = _FRAME.match(line)
        if frame is not None:
            if not _is_framework(frame.group(1)):
                func = f", in {frame.group(3)}" if frame.group(3) else ""
                where = f"{Path(frame.group(1)).name}, line {frame.group(2)}{func}"
            continue
        if line[:1].isspace() or not line:
            continue  # a frame's source line, or a caret
        if _EXCEPTION.match(line) and not _is_cancellation(line):
            cause = Cause(line.strip(), where)
        in_traceback = False
    return cause


def _is_cancellation(line: str) -> bool:
    return line.split(":", 1)[0].rsplit(".", 1)[-1] in ("CancelledError", "KeyboardInterrupt")


def drop_cancellations(lines: list[str]) -> list[str]:
    """``lines`` without the tracebacks of a cancellation (a process stopped while it was
    still starting, by the push that gave up waiting), and the log line that introduced each:
    they are about the stopping, not about the chainlet."""
    out: list[str] = []
    index = 0
    while index < len(lines):
        if not lines[index].startswith(_TRACEBACK):
            out.append(lines[index])
            index += 1
            continue
        end = index + 1
        while end < len(lines) and (lines[end][:1].isspace() or not lines[end]):
            end += 1
        if end < len(lines) and _is_cancellation(lines[end]):
            if out and not out[-1][:1].isspace():
                out.pop()
            index = end + 1
            continue
        out.extend(lines[index : end + 1])
        index = end + 1
    return out


def condense(lines: Iterable[str]) -> list[str]:
    """``lines`` with the frames of chains and the standard library inside tracebacks left
    out (each run of them replaced by one line saying how many)."""
    out: list[str] = []
    in_traceback = False
    skipping = False
    hidden = 0

    def flush() -> None:
        nonlocal hidden
        if hidden:
            out.append(f"  ({hidden} frame{'s' if hidden != 1 else ''} of chains and Python left out)")
            hidden = 0

    for line in lines:
        if line.startswith(_TRACEBACK):
            in_traceback, skipping = True, False
            out.append(line)
            continue
        if in_traceback:
            frame = _FRAME.match(line)
            if frame is not None:
                skipping = _is_framework(frame.group(1))
                if skipping:
                    hidden += 1
                    continue
                flush()
                out.append(line)
                continue
            if line[:1].isspace():
                if not skipping:
                    out.append(line)
                continue
            flush()
            in_traceback = skipping = False
        out.append(line)
    flush()
    return out
