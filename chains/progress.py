"""What a push shows while it waits: chainlets starting, images building, images loading.

A :class:`Board` follows one group of items waited on together. Where standard error is a
terminal it is a live view drawn with rich, one line per item with its state and its clock
(``⠋ Slow  starting  12s``, ``✓ Entry  ready  4.1s``, a build's current step). Anywhere else
(a pipe, a file, CI, a test) it prints plain lines, as a log reads them: an item's steps
prefixed with its name, and now and then, while the group is waited for, a line such as
``waiting for Slow to finish __init__ (8s; 1/2 ready)``.

Targets only call a board; how it is drawn is decided here. rich is imported only when a live
view is drawn: never on ``import chains``, never in a chainlet's process.

>>> with board("to finish __init__") as shown:   # doctest: +SKIP
...     shown.update("Entry", Stage.WORKING, "starting")
...     shown.tick()
...     shown.update("Entry", Stage.DONE, "ready")
"""

from __future__ import annotations

import enum
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.live import Live

__all__ = ["Board", "LiveBoard", "PlainBoard", "Stage", "board", "live_wanted"]

# A plain board stays quiet this long, then says what it waits for every so often: a quick
# start prints nothing, a slow one is never silent for long.
QUIET_SEC = 3.0
SUMMARY_EVERY_SEC = 5.0
_REFRESHES_PER_SEC = 4


class Stage(enum.Enum):
    """Where an item on a board is."""

    WORKING = "working"  # under way: its clock runs
    DONE = "done"  # finished well: its clock stops
    FAILED = "failed"


class Board(Protocol):
    """One group of items a push waits on, shown as it goes."""

    def update(self, item: str, stage: Stage, doing: str) -> None:
        """``item`` is now at ``stage``, ``doing`` what it says ("starting", "ready", "built");
        its clock starts when it is first seen."""

    def step(self, item: str, line: str) -> None:
        """A line of ``item``'s work (a build's ``Step 3/9 : ...``): printed as
        ``[item] line`` in plain form, shown as the item's current step in a live view."""

    def say(self, line: str) -> None:
        """A line for the record, printed as it is (above a live view)."""

    def tick(self) -> None:
        """Called as the waiting goes on: a plain board says now and then what it waits for."""

    def close(self) -> None:
        """The group is done with (or given up): a live view draws its last state and ends."""

    def __enter__(self) -> Board: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


@dataclass
class _Item:
    stage: Stage
    doing: str
    started: float
    ended: float | None = None

    def clock(self, now: float) -> str:
        if self.ended is not None:
            return f"{self.ended - self.started:.1f}s"
        return f"{now - self.started:.0f}s"


class _Items:
    """The items of a board and their stages; shared by both forms, safe across threads
    (parallel builds report from their own)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: dict[str, _Item] = {}
        self.opened = time.monotonic()

    def update(self, item: str, stage: Stage, doing: str) -> None:
        now = time.monotonic()
        with self.lock:
            known = self.items.get(item)
            if known is None:
                known = self.items[item] = _Item(stage, doing, now)
            known.stage, known.doing = stage, doing
            known.ended = None if stage is Stage.WORKING else (known.ended or now)

    def snapshot(self) -> list[tuple[str, _Item]]:
        with self.lock:
            return [(name, _Item(i.stage, i.doing, i.started, i.ended)) for name, i in self.items.items()]


class PlainBoard:
    """A board as plain lines: for pipes, files and logs, where a redrawn view would be noise."""

    def __init__(
        self,
        waiting_for: str | None = None,
        *,
        unnamed: str = "every chainlet",
        log: Callable[[str], None] | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self._items = _Items()
        self._waiting_for = waiting_for
        self._unnamed = unnamed
        self._stream = stream
        self._log = log or self._print
        self._next_summary = self._items.opened + QUIET_SEC

    def _print(self, line: str) -> None:
        print(line, file=self._stream or sys.stderr, flush=True)

    def update(self, item: str, stage: Stage, doing: str) -> None:
        self._items.update(item, stage, doing)

    def step(self, item: str, line: str) -> None:
        self._items.update(item, Stage.WORKING, line)
        self._log(f"[{item}] {line}")

    def say(self, line: str) -> None:
        self._log(line)

    def tick(self) -> None:
        now = time.monotonic()
        if self._waiting_for is None or now < self._next_summary:
            return
        self._next_summary += SUMMARY_EVERY_SEC
        items = self._items.snapshot()
        waiting = sorted(name for name, item in items if item.stage is Stage.WORKING)
        done = sum(item.stage is Stage.DONE for _, item in items)
        names = ", ".join(waiting) or self._unnamed
        elapsed = now - self._items.opened
        self._log(f"waiting for {names} {self._waiting_for} ({elapsed:.0f}s; {done}/{len(items)} ready)")

    def close(self) -> None:
        pass

    def __enter__(self) -> PlainBoard:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class LiveBoard:
    """A board as a live rich view on a terminal: one line per item, redrawn as it changes."""

    def __init__(self, title: str, *, stream: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self._items = _Items()
        self._title = title
        self._console = Console(file=stream or sys.stderr, highlight=False)
        self._spinners: dict[str, Any] = {}  # one per item, so that each turns
        # What else is printed to standard error meanwhile goes above the view; standard output
        # is left alone (it may be a pipe, and is the push's answer).
        self._live: Live = Live(
            console=self._console,
            get_renderable=self._render,
            refresh_per_second=_REFRESHES_PER_SEC,
            redirect_stdout=False,
            redirect_stderr=True,
        )
        self._live.start()
        self._closed = False

    def _spinner(self, item: str) -> Any:
        from rich.spinner import Spinner

        if item not in self._spinners:
            self._spinners[item] = Spinner("dots", style="yellow")
        return self._spinners[item]

    def _render(self) -> RenderableType:
        from rich.table import Table
        from rich.text import Text

        now = time.monotonic()
        view = Table.grid(padding=(0, 2))
        view.add_column(width=1)
        view.add_column(style="bold")
        view.add_column()
        view.add_column(justify="right", style="dim")
        items = self._items.snapshot()
        if not items:
            view.add_row(self._spinner(""), Text(self._title), "", f"{now - self._items.opened:.0f}s")
        for name, item in items:
            mark: Any
            if item.stage is Stage.WORKING:
                mark, style = self._spinner(name), "yellow"
            elif item.stage is Stage.DONE:
                mark, style = Text("✓", style="green"), "green"
            else:
                mark, style = Text("✗", style="bold red"), "bold red"
            doing = Text(item.doing, style=style, overflow="ellipsis", no_wrap=True)
            view.add_row(mark, Text(name), doing, item.clock(now))
        return view

    def update(self, item: str, stage: Stage, doing: str) -> None:
        self._items.update(item, stage, doing)

    def step(self, item: str, line: str) -> None:
        self._items.update(item, Stage.WORKING, line)

    def say(self, line: str) -> None:
        self._console.print(line, markup=False, highlight=False, soft_wrap=True)

    def tick(self) -> None:
        pass  # the view redraws itself, clocks included

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._live.stop()

    def __enter__(self) -> LiveBoard:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def live_wanted(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (standard error by default) takes a live view: a terminal that can
    redraw (not ``TERM=dumb``)."""
    stream = stream or sys.stderr
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False
    return terminal and os.environ.get("TERM", "") != "dumb"


def board(
    waiting_for: str | None = None,
    *,
    title: str = "",
    unnamed: str = "every chainlet",
    log: Callable[[str], None] | None = None,
    stream: TextIO | None = None,
) -> Board:
    """A board for one group of items: live on a terminal, plain lines anywhere else.

    ``waiting_for`` ends the plain form's "waiting for A, B ..." line (None: no such line);
    ``unnamed`` stands for the items before any is known; ``log`` prints the plain form's
    lines (standard error by default).
    """
    if live_wanted(stream):
        return LiveBoard(title or f"waiting {waiting_for or ''}".strip(), stream=stream)
    return PlainBoard(waiting_for, unnamed=unnamed, log=log, stream=stream)
