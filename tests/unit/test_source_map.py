"""Tracebacks mapped back to the user's files, the cause found, chains' own frames left out."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from chains.source_map import Cause, condense, drop_cancellations, find_cause, to_user_files

OWN = Path(__file__).parents[2] / "chains"
STDLIB = sysconfig.get_paths()["stdlib"]

LOG = f"""\
2026-01-01 10:00:00,000 INFO Fmt rid=- uvicorn.error: Waiting for application startup.
2026-01-01 10:00:00,001 ERROR Fmt rid=- chains.server: chainlet Fmt failed to start
Traceback (most recent call last):
  File "{OWN}/server/app.py", line 112, in _build
    self.instance = await asyncio.to_thread(self._factory, self.metrics)
                    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{STDLIB}/asyncio/threads.py", line 25, in to_thread
    return await loop.run_in_executor(None, func_call)
  File "/home/u/.chains/c/deployments/20260101-x/generated/Fmt/src/pkg/models.py", line 9, in load
    raise FileNotFoundError("weights.bin")
  File "/home/u/.chains/c/deployments/20260101-x/generated/Fmt/src/chain.py", line 37, in __init__
    self.model = load()
FileNotFoundError: weights.bin
2026-01-01 10:00:00,002 INFO Fmt rid=- uvicorn.error: Shutting down
"""


def test_frames_in_the_generated_copy_point_at_the_users_files() -> None:
    mapped = to_user_files(LOG, "/home/u/project")
    assert 'File "/home/u/project/pkg/models.py", line 9, in load' in mapped
    assert 'File "/home/u/project/chain.py", line 37, in __init__' in mapped
    assert "generated/" not in mapped
    assert f'File "{OWN}/server/app.py"' in mapped  # chains' own frames are not the user's


def test_the_cause_is_the_exception_with_the_users_last_frame() -> None:
    cause = find_cause(to_user_files(LOG, "/p").splitlines())
    assert cause == Cause("FileNotFoundError: weights.bin", "chain.py, line 37, in __init__")
    assert str(cause) == "FileNotFoundError: weights.bin (chain.py, line 37, in __init__)"
    assert find_cause(["just a line", "ValueError: not in a traceback"]) is None


def test_the_cause_of_the_last_of_several_tracebacks_wins() -> None:
    second = "Traceback (most recent call last):\n  File \"/p/x.py\", line 2, in f\n    g()\nKeyError: 'k'\n"
    assert find_cause((LOG + second).splitlines()) == Cause("KeyError: 'k'", "x.py, line 2, in f")


def test_condense_leaves_out_the_frames_of_chains_and_python_counted() -> None:
    lines = condense(LOG.splitlines())
    assert "  (2 frames of chains and Python left out)" in lines
    assert not any("server/app.py" in line or "to_thread" in line for line in lines)
    assert not any("^^^^" in line for line in lines)  # a hidden frame's caret goes with it
    assert any("models.py" in line for line in lines) and lines[-2] == "FileNotFoundError: weights.bin"


def test_the_traceback_of_a_cancelled_start_is_left_out_and_is_no_cause() -> None:
    lines = [
        "10:00 INFO Slow chains.server: draining",
        "10:00 ERROR Slow chains.server: chainlet Slow failed to start",
        "Traceback (most recent call last):",
        f'  File "{OWN}/server/app.py", line 112, in _build',
        "    self.instance = await asyncio.to_thread(self._factory, self.metrics)",
        "asyncio.exceptions.CancelledError",
        "10:00 INFO Slow uvicorn.error: Finished",
    ]
    assert drop_cancellations(lines) == [lines[0], lines[-1]]
    assert find_cause(lines) is None
    real = ["Traceback (most recent call last):", '  File "/p/x.py", line 1, in f', "ValueError: v"]
    assert drop_cancellations(real) == real
