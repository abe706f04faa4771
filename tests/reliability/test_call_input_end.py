"""`chains call` on a WebSocket chain ends soon after its input does, also when the input
ends after the last reply came (Ctrl-D once the answer is printed, a pipe closed later).

Before: the command kept waiting for a reply that never came, until the socket's ping
timeout broke the connection (about 28 s), and then reported an error.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.reliability.conftest import ROOT, pushed, record


def test_chains_call_ends_when_its_input_ends_after_the_last_reply(chains_home: Path) -> None:
    example = ROOT / "examples" / "realtime" / "chain.py"
    with pushed("Relay", "realtime", file=example):
        call = subprocess.Popen(
            [sys.executable, "-m", "chains", "call", "realtime"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert call.stdin is not None and call.stdout is not None
            call.stdin.write("hello\n")
            call.stdin.flush()
            assert call.stdout.readline() == "HELLO\n"  # the reply is in: now the input ends
            ended = time.monotonic()
            call.stdin.close()
            # Bounded: a hang shows as this timeout, not as a test that never ends.
            code = call.wait(timeout=15)
            took = time.monotonic() - ended
            stderr = call.stderr.read() if call.stderr is not None else ""
        finally:
            if call.poll() is None:
                call.kill()
                call.wait()
        assert code == 0, stderr
        assert "error" not in stderr.lower(), stderr
    record("call_input_end", exit_after_input_end_sec=round(took, 2))
