"""What `chains push` shows while chainlets start: a live view in a terminal (drawn with
rich), plain lines anywhere else. The terminal is a real pseudo-terminal, the chain real
processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Cli, write_chain

# Control sequences: colours, cursor moves and erasures (a live view redraws with them).
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

SLOW_START = """
    import time

    import chains

    class Quick(chains.ChainletBase):
        async def run_remote(self, x: int) -> int:
            return x

    @chains.mark_entrypoint("{name}")
    class Slow(chains.ChainletBase):
        def __init__(self, quick: Quick = chains.depends(Quick)) -> None:
            time.sleep({seconds})  # a model loading
            self._quick = quick

        async def run_remote(self, x: int) -> int:
            return await self._quick.run_remote(x) + 1
"""


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    tool = Cli(tmp_path / "home", env={"TERM": "xterm", "COLUMNS": "100"})
    yield tool
    for state_file in tool.home.glob("*/state.json"):
        tool.run("stop", state_file.parent.name, check=False)


def _in_terminal(cli: Cli, *args: str, timeout: float = 120) -> tuple[int, str, str]:
    """``chains ARGS`` with its standard error on a pseudo-terminal (standard output a pipe, as
    when a script reads it): exit code, standard output, and what the terminal received."""
    primary, secondary = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "chains", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=secondary,
        env=cli.env,
    )
    os.close(secondary)
    received: list[bytes] = []

    def drain() -> None:  # a terminal nobody reads blocks its writer
        while True:
            try:
                data = os.read(primary, 65536)
            except OSError:  # the other side closed: the process ended
                return
            if not data:
                return
            received.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        out, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        reader.join(10)
        os.close(primary)
    return process.returncode, out.decode(), b"".join(received).decode(errors="replace")


def test_a_terminal_shows_each_chainlet_starting_then_ready(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(tmp_path / "slow", SLOW_START.format(name="progress-tty", seconds=4))
    code, out, terminal = _in_terminal(cli, "push", str(file), "--json")
    assert code == 0, terminal
    assert json.loads(out.splitlines()[-1])["name"] == "progress-tty"  # standard output stays plain
    assert ANSI.search(terminal), "no live view was drawn"
    frames = ANSI.sub("", terminal).replace("\r", "\n")
    lines = [" ".join(line.split()) for line in frames.splitlines()]
    slow = [line for line in lines if " Slow " in f" {line} "]
    first_ready = next(i for i, line in enumerate(slow) if "ready" in line)
    assert first_ready > 0 and "starting" in slow[first_ready - 1], slow
    # Its clock ran while it started, and the last frame shows both ready with their times.
    assert any(re.search(r"Slow starting [1-9]\d*s$", line) for line in slow), slow
    assert re.search(r"✓ Slow ready \d+\.\ds$", slow[-1]), slow
    assert any(re.search(r"✓ Quick ready \d+\.\ds$", line) for line in lines), lines
    # The plain line of a pipe is not drawn in a terminal.
    assert "waiting for" not in frames


def test_a_pipe_gets_plain_lines_and_no_control_codes(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(tmp_path / "slow", SLOW_START.format(name="progress-pipe", seconds=8))
    result = cli.run("push", str(file), "--json")
    waiting = re.findall(r"waiting for (.+) to finish __init__ \((\d+)s; (\d)/2 ready\)", result.stderr)
    # Said after 3 s, then every 5 s; by 8 s Slow is still sleeping in its __init__.
    assert [seconds for _, seconds, _ in waiting][:2] == ["3", "8"], result.stderr
    assert "Slow" in waiting[1][0].split(", "), result.stderr
    assert "\x1b" not in result.stderr and "\x1b" not in result.stdout
    assert "✓" not in result.stderr


def test_a_timeout_in_a_terminal_ends_the_view_before_the_error(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(tmp_path / "slow", SLOW_START.format(name="progress-late", seconds=60))
    code, out, terminal = _in_terminal(cli, "push", str(file), "--timeout", "6")
    assert code == 1 and out == ""
    text = ANSI.sub("", terminal).replace("\r", "\n")
    view = text.index("Slow")
    error = text.index("error: chainlets not ready after 6s: ")
    assert view < error
    headline = text[error:].splitlines()[0]
    assert re.search(r"after 6s: (Quick, )?Slow \(still in __init__;", headline), headline
    # The view's last frame, drawn when the push gave up, still shows Slow starting.
    last_frame = [" ".join(line.split()) for line in text[:error].splitlines() if "Slow" in line][-1]
    assert re.search(r"Slow starting \d+s$", last_frame), last_frame
    assert "CancelledError" not in text and "Traceback" not in text
