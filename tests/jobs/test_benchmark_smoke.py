"""The jobs benchmark runs end to end (small counts): it fails on errors, never on a time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_jobs_benchmark_runs(tmp_path: Path) -> None:
    env = {**os.environ, "CHAINS_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.jobs", "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "jobs/s" in done.stdout and "kept and numbered" in done.stdout
    assert "a resumable /run_remote" in done.stdout
