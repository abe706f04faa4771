"""The defaults benchmark runs, briefly, without a failed call: a smoke of ``benchmarks/defaults.py``.

It fails on errors only (a failed request, a client that opens connections past its warm-up,
a chainlet that did not log or trace), never on a time: the figures are the benchmark's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    shutil.which("wrk") is None and os.geteuid() != 0, reason="needs wrk, or root to install it with apt-get"
)
def test_the_defaults_benchmark_runs_without_errors() -> None:
    assert "failed requests and calls: 0 " in smoke("benchmarks.defaults")


def test_the_stream_reconnect_benchmark_runs_and_every_stream_arrives_whole() -> None:
    assert "every stream arrived whole, in order" in smoke("benchmarks.stream_reconnect")


def smoke(module: str) -> str:
    """What ``python -m module --smoke`` printed, once it exited 0."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
