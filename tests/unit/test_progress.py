"""The progress board: live on a terminal (a real pseudo-terminal here), plain lines elsewhere."""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Iterator
from typing import TextIO

import pytest

from chains import progress
from chains.progress import LiveBoard, PlainBoard, Stage

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TextIO, list[bytes]]]:
    """A pseudo-terminal: the stream a board writes to, and what arrived at the other end."""
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("COLUMNS", "100")
    primary, secondary = os.openpty()
    received: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(primary, 65536)
            except OSError:
                return
            if not data:
                return
            received.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stream = os.fdopen(secondary, "w", encoding="utf-8")
    yield stream, received
    stream.close()
    reader.join(10)
    os.close(primary)


def _text(stream: TextIO, received: list[bytes]) -> str:
    stream.close()  # the reader sees the end once the terminal's writer is gone
    for _ in range(200):
        if not any(t.is_alive() for t in threading.enumerate() if t.name.startswith("Thread")):
            break
        threading.Event().wait(0.01)
    return ANSI.sub("", b"".join(received).decode(errors="replace")).replace("\r", "\n")


def test_a_terminal_gets_a_live_view_with_each_items_state_and_step(
    terminal: tuple[TextIO, list[bytes]],
) -> None:
    stream, received = terminal
    shown = progress.board(title="building the images", stream=stream)
    assert isinstance(shown, LiveBoard)
    with shown:
        shown.step("Embedder", "Step 2/9 : RUN pip install -r requirements.txt")
        shown.update("Leaf", Stage.WORKING, "starting")
        shown.say("building 3 image(s): Embedder, Leaf, Mid")
        shown.update("Leaf", Stage.DONE, "built")
        shown.update("Mid", Stage.FAILED, "failed")
    text = _text(stream, received)
    raw = b"".join(received)  # once the reader has drained the terminal (a busy machine lags it)
    assert b"\x1b[" in raw  # drawn, not printed
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    said = lines.index("building 3 image(s): Embedder, Leaf, Mid")
    last = lines[-3:]  # the last frame, drawn when the board closed, below what was said
    assert said < len(lines) - 3
    assert re.fullmatch(r"\S Embedder Step 2/9 : RUN pip install -r requirements\.txt \d+s", last[0]), last
    assert re.fullmatch(r"✓ Leaf built \d+\.\ds", last[1]), last
    assert re.fullmatch(r"✗ Mid failed \d+\.\ds", last[2]), last


def test_anything_but_a_terminal_gets_plain_lines() -> None:
    stream = io.StringIO()
    shown = progress.board("to turn healthy", stream=stream)
    assert isinstance(shown, PlainBoard)
    with shown:
        shown.update("Leaf", Stage.WORKING, "starting")  # a state change alone says nothing
        shown.step("Embedder", "Step 2/9 : RUN pip install -r requirements.txt")
        shown.say("built 1 image(s) in 3.2s")
        shown.update("Leaf", Stage.DONE, "healthy")
    assert stream.getvalue() == (
        "[Embedder] Step 2/9 : RUN pip install -r requirements.txt\nbuilt 1 image(s) in 3.2s\n"
    )


def test_a_dumb_terminal_gets_plain_lines(
    terminal: tuple[TextIO, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    stream, _ = terminal
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(progress.board("to finish __init__", stream=stream), PlainBoard)


def test_the_plain_form_says_what_it_waits_for_after_a_quiet_spell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "QUIET_SEC", 0.0)
    lines: list[str] = []
    shown = PlainBoard("to finish __init__", log=lines.append)
    shown.tick()  # nothing known yet
    shown.update("Worker[0]", Stage.WORKING, "starting")
    shown.update("Worker[1]", Stage.DONE, "ready")
    shown.update("Entry", Stage.WORKING, "starting")
    shown.tick()  # the next summary is due only later
    assert len(lines) == 1 and lines[0].startswith("waiting for every chainlet to finish __init__ (")
    shown._next_summary = 0.0  # as if the interval had passed
    shown.tick()
    assert re.fullmatch(r"waiting for Entry, Worker\[0\] to finish __init__ \(\d+s; 1/3 ready\)", lines[1])


def test_the_plain_form_without_a_purpose_never_summarises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "QUIET_SEC", 0.0)
    lines: list[str] = []
    shown = PlainBoard(log=lines.append)
    shown.update("node2", Stage.WORKING, "loading 3 image(s)")
    shown.tick()
    assert lines == []
