"""A chainlet's log is rotated and capped, `chains logs -f` follows it across rotations, and
no line is lost on the way (each is numbered and checked).

Before: the chainlet wrote its log file directly, which grew without bound.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from chains.targets.state import read_state
from tests.helpers import wait_until
from tests.reliability.conftest import pushed, record


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds ``path`` open."""
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if Path(os.readlink(fd)) == path.resolve():
                    return True
    return False


SUPERVISED = Path(__file__).parent / "sample_chains" / "supervised_chains.py"
LINES = 60_000  # of 80 bytes: 4.8 MB through a 1 MB cap


def test_a_log_is_rotated_capped_and_followed_across_rotations(
    chains_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAINS_LOG_MAX_MB", "1")
    monkeypatch.setenv("CHAINS_LOG_FILES", "6")
    with pushed("Chatty", "chatty", file=SUPERVISED) as handle:
        log = Path(read_state("chatty").processes[0].log)
        follower = subprocess.Popen(
            [sys.executable, "-m", "chains", "logs", "chatty", "-f", "-n", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        seen: list[str] = []

        def read() -> None:
            assert follower.stdout is not None
            for line in follower.stdout:
                seen.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            # `-n 0` shows what comes after the file's end as the follower opens it
            wait_until(lambda: _has_open(follower.pid, log), 30, "the follower to open the log")
            started = time.monotonic()
            answer = httpx.post(
                handle.entrypoint_url + "/run_remote", json={"lines": LINES, "tag": "T"}, timeout=120
            )
            assert answer.status_code == 200
            wait_until(
                lambda: any("T done" in line for line in seen), 60, "the follower to see the last line"
            )
            took = time.monotonic() - started
        finally:
            follower.terminate()
            follower.wait(10)
        numbers = [int(line.split()[2]) for line in seen if line.startswith("T line ")]
        assert numbers == list(range(LINES)), f"{len(numbers)} of {LINES} lines, in order: {numbers[:3]}..."
        assert not any("rotated away" in line for line in seen)
        # Twice as much again: the oldest files are removed, six are kept.
        answer = httpx.post(
            handle.entrypoint_url + "/run_remote", json={"lines": LINES, "tag": "U"}, timeout=120
        )
        assert answer.status_code == 200
        wait_until(lambda: "U done" in log.read_text(errors="replace"), 30, "the second burst logged")
        files = sorted(log.parent.glob(log.name + "*"))
        assert [f.name for f in files] == [log.name, *(f"{log.name}.{n}" for n in range(1, 6))]
        sizes = [f.stat().st_size for f in files]
        assert all(size <= 1024 * 1024 for size in sizes), sizes
        assert read_state("chatty").processes[0].log_lines_lost == 0
    record("log_rotation", lines=LINES, files=len(files), sizes_bytes=sizes, followed_sec=round(took, 2))
