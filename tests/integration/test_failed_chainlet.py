"""A chainlet that failed for good: answered at once, shown as degraded, restarted by hand."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import Cli, wait_until, write_chain

SOURCE = """
import os

import chains


class Worker(chains.ChainletBase):
    def __init__(self) -> None:
        # The test creates this file to make every later start of Worker fail.
        if os.path.exists(os.environ["WORKER_BROKEN_FLAG"]):
            raise RuntimeError("the model weights are gone")

    async def run_remote(self, x: int) -> int:
        return 2 * x


@chains.mark_entrypoint("degrade")
class Entry(chains.ChainletBase):
    def __init__(self, worker: Worker = chains.depends(Worker)) -> None:
        self._worker = worker

    async def run_remote(self, x: int) -> int:
        return await self._worker.run_remote(x)
"""


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    tool = Cli(tmp_path / "home", env={"WORKER_BROKEN_FLAG": str(tmp_path / "broken")})
    yield tool
    tool.run("stop", "degrade", check=False)


def _worker_state(cli: Cli) -> str:
    state = cli.state("degrade")
    return str(next(p["state"] for p in state["processes"] if p["chainlet"] == "Worker"))


def test_a_chainlet_that_failed_for_good_is_answered_at_once_and_restarted(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(tmp_path / "chain", SOURCE)
    url = str(cli.push(str(file))["entrypoint_url"])
    assert httpx.post(url + "/run_remote", json={"x": 2}, timeout=30).json() == 4

    # Every restart of Worker now fails in __init__: after the supervisor's restarts it gives up.
    (tmp_path / "broken").write_text("")
    pid = next(p["pid"] for p in cli.state("degrade")["processes"] if p["chainlet"] == "Worker")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: _worker_state(cli) == "failed", 60, "Worker to be given up on")

    started = time.monotonic()
    answer = httpx.post(url + "/run_remote", json={"x": 2}, timeout=30)
    took = time.monotonic() - started
    assert answer.status_code == 503, answer.text
    assert "Worker" in answer.text
    assert took < 5.0, f"the entrypoint took {took:.1f}s to answer"  # not the stub's 600 s timeout

    overview = cli.run("status").stdout
    assert "degrade  degraded (Worker failed)  1/2 ready" in overview
    detail = cli.run("status", "degrade")
    assert "degraded" in detail.stderr and "chains restart degrade Worker" in detail.stderr

    called = cli.run("call", "degrade", "--json", '{"x": 1}', check=False)
    assert called.returncode == 1
    assert "503" in called.stderr or "Worker" in called.stderr
    assert "chains restart degrade" in called.stderr

    # Still broken: the restart says so and the chainlet stays failed.
    again = cli.run("restart", "degrade", "Worker", "--timeout", "30", check=False)
    assert again.returncode == 1 and "Worker failed again" in again.stderr

    (tmp_path / "broken").unlink()
    restarted = cli.run("restart", "degrade", "Worker", "--timeout", "60")
    assert "restarted Worker of chain 'degrade'" in restarted.stdout
    assert _worker_state(cli) == "ready"
    assert httpx.post(url + "/run_remote", json={"x": 5}, timeout=30).json() == 10
    assert "degrade  running  2/2 ready" in cli.run("status").stdout


def test_restart_of_a_running_chain_swaps_every_chainlet(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(tmp_path / "chain", SOURCE)
    url = str(cli.push(str(file))["entrypoint_url"])
    before = {p["chainlet"]: p["pid"] for p in cli.state("degrade")["processes"]}
    assert "restarted Worker, Entry" in cli.run("restart", "degrade").stdout
    after = {p["chainlet"]: p["pid"] for p in cli.state("degrade")["processes"]}
    assert all(after[name] != before[name] for name in before)
    assert httpx.post(url + "/run_remote", json={"x": 3}, timeout=30).json() == 6
    unknown = cli.run("restart", "degrade", "Nope", check=False)
    assert unknown.returncode == 1 and "has no chainlet 'Nope'" in unknown.stderr


def test_a_slow_start_is_reported_while_waiting_and_its_timeout_says_what_to_do(
    cli: Cli, tmp_path: Path
) -> None:
    file = write_chain(
        tmp_path / "slow",
        """
        import time

        import chains

        @chains.mark_entrypoint("degrade")
        class Slow(chains.ChainletBase):
            def __init__(self) -> None:
                time.sleep(60)  # a model loading

            async def run_remote(self) -> str:
                return "x"
        """,
    )
    result = cli.run("push", str(file), "--timeout", "8", check=False)
    assert result.returncode == 1
    assert "waiting for Slow to finish __init__ (3s; 0/1 ready)" in result.stderr
    error = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert error.startswith("error: chainlets not ready after 8s: Slow (still in __init__;")
    assert "--timeout 300" in error
    assert "CancelledError" not in result.stderr and "Traceback" not in result.stderr
    assert "--- last lines of Slow.log ---" in result.stderr
