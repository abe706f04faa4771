"""The supervisor notices what an exit code does not show: a hung chainlet, a blocked event
loop, a crash loop that goes on, and the helper processes a chainlet leaves behind.

Real chains on 127.0.0.1, faults made as a production meets them (SIGSTOP, ``time.sleep``
in an ``async`` body, an ``__init__`` that keeps failing, a ``subprocess`` never stopped).
Durations are recorded for docs/reliability.md; what is asserted is what would break if the
supervisor did not notice: a restart with its reason, calls that end, answers that come.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import pytest

from chains.targets.state import read_state
from tests.helpers import wait_until
from tests.reliability.conftest import cli, pushed, record

SUPERVISED = Path(__file__).parent / "sample_chains" / "supervised_chains.py"
CALLERS = 8
# Probes every second, 2 misses in a row restart: a hang is noticed within 1 * 2 + 1 = 3 s.
PERIOD_SEC, FAILURES, TIMEOUT_SEC = 1.0, 2, 1.0
WINDOW_SEC = PERIOD_SEC * FAILURES + TIMEOUT_SEC


@pytest.fixture
def probing(monkeypatch: pytest.MonkeyPatch, chains_home: Path) -> Path:
    """Liveness probes of the test's pace, for every chain the test pushes."""
    monkeypatch.setenv("CHAINS_LIVENESS_PERIOD_SEC", str(PERIOD_SEC))
    monkeypatch.setenv("CHAINS_LIVENESS_FAILURES", str(FAILURES))
    monkeypatch.setenv("CHAINS_LIVENESS_TIMEOUT_SEC", str(TIMEOUT_SEC))
    return chains_home


def pid_of(name: str, chainlet: str) -> int | None:
    return next((p.pid for p in read_state(name).replicas(chainlet) if p.state == "ready"), None)


def log_of(name: str, chainlet: str) -> str:
    return Path(read_state(name).replicas(chainlet)[0].log).read_text(errors="replace")


async def callers(url: str, until: float) -> tuple[int, list[str], list[float]]:
    """CALLERS clients without deadlines (a session timeout far above any wait asserted),
    each calling back to back until ``until``: the calls, the failures, every call's duration."""
    durations: list[float] = []
    failures: list[str] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def caller(worker: int) -> None:
            n = 0
            while time.monotonic() < until:
                x = worker * 1_000_000 + n
                n += 1
                started = time.monotonic()
                try:
                    async with session.post(url + "/run_remote", json={"x": x}) as answer:
                        body = await answer.json()
                        if answer.status != 200 or body[0] != 2 * x:
                            failures.append(f"{answer.status}: {body}")
                except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                    failures.append(repr(exc))
                durations.append(time.monotonic() - started)

        await asyncio.gather(*(caller(w) for w in range(CALLERS)))
    return len(durations), failures, durations


def test_a_stopped_dependency_under_8_callers_is_restarted_and_no_call_hangs(probing: Path) -> None:
    with pushed("DoublerEntry", "hung", file=SUPERVISED) as handle:
        stopped = pid_of("hung", "Doubler")
        assert stopped is not None

        async def scenario() -> tuple[int, list[str], list[float], float | None]:
            until = time.monotonic() + 20.0
            load = asyncio.create_task(callers(handle.entrypoint_url, until))
            await asyncio.sleep(3.0)
            os.kill(stopped, signal.SIGSTOP)
            at = time.monotonic()
            restarted_after = None
            while time.monotonic() < at + 30.0:
                now = pid_of("hung", "Doubler")
                if now is not None and now != stopped:
                    restarted_after = time.monotonic() - at
                    break
                await asyncio.sleep(0.1)
            calls, failures, durations = await load
            return calls, failures, durations, restarted_after

        calls, failures, durations, restarted_after = asyncio.run(scenario())
        assert restarted_after is not None, "the stopped Doubler was not restarted within 30 s"
        # While it does not answer, its port answers 503 (the supervisor's fence after the
        # first missed probe), and the entrypoint, its retries spent, 503 too: a fast failure
        # its caller may retry, and nothing else.
        refused = [f for f in failures if f.startswith("503:") and "DependencyUnavailable" in f]
        assert len(refused) == len(failures), [f for f in failures if f not in refused][:5]
        slowest = max(durations)
        # The longest a call can wait: the hang going unnoticed, then its one retry on the
        # restarted process (whose start the generous margin covers on a loaded machine).
        assert slowest < WINDOW_SEC + 15.0, f"a call waited {slowest:.1f}s"
        log = log_of("hung", "Doubler")
        assert "not answering its health check for" in log
        status = cli("status", "hung").stdout
        assert "not answering its health check" in status, status
        assert read_state("hung").replicas("Doubler")[0].restarts == 1
    record(
        "hung_dependency",
        callers=CALLERS,
        calls=calls,
        failed=len(failures),
        refused_503=len(refused),
        restarted_after_sec=round(restarted_after, 2),
        slowest_call_sec=round(slowest, 2),
        probe_window_sec=WINDOW_SEC,
    )


def test_a_blocked_event_loop_is_logged_with_its_line_and_restarted(probing: Path) -> None:
    with pushed("Blocker", "blocked", file=SUPERVISED) as handle:
        before = pid_of("blocked", "Blocker")
        started = time.monotonic()
        with pytest.raises(httpx.TransportError):
            # The call blocks the loop for 120 s; the supervisor kills the process first.
            httpx.post(handle.entrypoint_url + "/run_remote", json={"seconds": 120}, timeout=60)
        cut_after = time.monotonic() - started
        wait_until(lambda: pid_of("blocked", "Blocker") not in (None, before), 30, "Blocker restarted")
        log = log_of("blocked", "Blocker")
        assert "has been blocked for" in log
        assert "time.sleep(seconds)" in log  # the line to fix, from the user's file
        assert "not answering its health check" in log
        answer = httpx.post(handle.entrypoint_url + "/run_remote", json={"seconds": 0}, timeout=30)
        assert answer.status_code == 200 and answer.json() != before
    record("blocked_loop", call_cut_after_sec=round(cut_after, 2), probe_window_sec=WINDOW_SEC)


def test_a_crash_loop_is_retried_slowly_and_answered_503_at_once(
    chains_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = tmp_path / "broken"
    monkeypatch.setenv("SUPERVISED_BROKEN_FLAG", str(flag))
    with pushed("DoublerEntry", "looping", file=SUPERVISED) as handle:
        flag.write_text("")
        pid = pid_of("looping", "Doubler")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: read_state("looping").replicas("Doubler")[0].state == "failed", 90, "a crash loop")
        doubler = read_state("looping").replicas("Doubler")[0]
        started = time.monotonic()
        direct = httpx.post(doubler.url + "/run_remote", json={"x": 1}, timeout=30)
        direct_sec = time.monotonic() - started
        assert direct.status_code == 503 and "retry-after" in direct.headers, direct.text
        assert "Doubler is down" in direct.text
        started = time.monotonic()
        through = httpx.post(handle.entrypoint_url + "/run_remote", json={"x": 1}, timeout=30)
        through_sec = time.monotonic() - started
        assert through.status_code == 503 and "retry-after" in through.headers, through.text
        assert through_sec < 10.0, f"the entrypoint took {through_sec:.1f}s"  # not the backlog's wait
        assert "starting it again in" in log_of("looping", "Doubler")

        # Fixed: the supervisor starts it again by itself, no `chains restart` needed.
        flag.unlink()
        wait_until(lambda: read_state("looping").replicas("Doubler")[0].state == "ready", 120, "Doubler back")
        answer = httpx.post(handle.entrypoint_url + "/run_remote", json={"x": 4}, timeout=30)
        assert answer.status_code == 200 and answer.json()[0] == 8
        restarts = read_state("looping").replicas("Doubler")[0].restarts
    record(
        "crash_loop",
        direct_503_sec=round(direct_sec, 3),
        entrypoint_503_sec=round(through_sec, 3),
        restarts_until_fixed=restarts,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _helpers(folder: Path) -> dict[int, int]:
    return {int(p.stem): int(p.read_text()) for p in folder.glob("*.helper")}


def test_a_chainlets_helper_processes_end_with_it(
    chains_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERVISED_HELPER_DIR", str(tmp_path))
    with pushed("Spawner", "spawner", file=SUPERVISED):
        first = pid_of("spawner", "Spawner")
        assert first is not None
        helper = _helpers(tmp_path)[first]
        os.kill(first, signal.SIGKILL)  # the crash: its helper goes with it
        wait_until(lambda: not _alive(helper), 10, "the crashed chainlet's helper to end")
        wait_until(lambda: pid_of("spawner", "Spawner") not in (None, first), 30, "Spawner restarted")
        second = pid_of("spawner", "Spawner")
        assert second is not None
        wait_until(lambda: second in _helpers(tmp_path), 10, "the new helper")
        helper = _helpers(tmp_path)[second]
        assert _alive(helper)
    # `chains stop` (the context's end) stops the helper too.
    wait_until(lambda: not _alive(helper), 10, "the helper to end with `chains stop`")

    # The supervisor killed with SIGKILL: its chainlet dies with it, and `chains stop` still
    # finds the helper the chainlet left.
    with pushed("Spawner", "spawner", file=SUPERVISED):
        chainlet = pid_of("spawner", "Spawner")
        assert chainlet is not None
        wait_until(lambda: chainlet in _helpers(tmp_path), 10, "the helper")
        helper = _helpers(tmp_path)[chainlet]
        os.kill(read_state("spawner").local.supervisor_pid, signal.SIGKILL)
        wait_until(lambda: not _alive(chainlet), 10, "the chainlet to die with its supervisor")
    wait_until(lambda: not _alive(helper), 10, "the orphaned helper to end with `chains stop`")


def test_a_stale_chain_counts_no_replica_ready(chains_home: Path) -> None:
    with pushed("DoublerEntry", "orphaned", file=SUPERVISED):
        state = read_state("orphaned")
        os.kill(state.local.supervisor_pid, signal.SIGKILL)
        wait_until(lambda: not any(_alive(p.pid) for p in state.processes if p.pid), 10, "chainlets gone")
        line = next(line for line in cli("status").stdout.splitlines() if line.startswith("orphaned "))
        assert "stale (supervisor gone)  0/2 ready" in line, line


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A memory cgroup of 96 MiB of the test's own (v2, else v1), removed after."""
    v2, v1 = Path("/sys/fs/cgroup/cgroup.controllers"), Path("/sys/fs/cgroup/memory")
    base = v1 if v1.is_dir() else Path("/sys/fs/cgroup")
    group = base / f"chains-oom-{os.getpid()}"
    try:
        if os.geteuid() != 0 or not (v1.is_dir() or "memory" in v2.read_text()):
            raise OSError("not root, or no memory cgroup")
        group.mkdir()
    except OSError as exc:
        why = f"needs root and a memory cgroup to make a chainlet run out of memory ({exc})"
        if os.environ.get("CHAINS_REQUIRE_ROOT"):
            pytest.fail(why)
        pytest.skip(why)
    limit = str(96 * 1024 * 1024)
    (group / ("memory.limit_in_bytes" if base == v1 else "memory.max")).write_text(limit)
    try:
        yield group
    finally:
        wait_until(lambda: not (group / "cgroup.procs").read_text().strip(), 10, "the cgroup empty")
        group.rmdir()


def test_an_out_of_memory_death_is_named_as_such(chains_home: Path, memory_cgroup: Path) -> None:
    with pushed("Hog", "hog", file=SUPERVISED) as handle:
        pid = pid_of("hog", "Hog")
        assert pid is not None
        (memory_cgroup / "cgroup.procs").write_text(str(pid))
        with pytest.raises(httpx.TransportError):
            httpx.post(handle.entrypoint_url + "/run_remote", json={"megabytes": 400}, timeout=60)
        wait_until(lambda: pid_of("hog", "Hog") not in (None, pid), 30, "Hog restarted")
        reason = read_state("hog").replicas("Hog")[0].reason or ""
        assert "out of memory" in reason, reason
        assert "was killed for running out of memory" in log_of("hog", "Hog")
        assert "out of memory" in cli("status", "hog").stdout
        answer = httpx.post(handle.entrypoint_url + "/run_remote", json={"megabytes": 1}, timeout=30)
        assert answer.status_code == 200
    record("oom_death", reason=reason)


def test_a_helper_ends_soon_after_its_supervisor_is_killed(
    chains_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the chainlet died with its supervisor, its helper lived on until `chains stop`."""
    monkeypatch.setenv("SUPERVISED_HELPER_DIR", str(tmp_path))
    with pushed("Spawner", "orphan-helper", file=SUPERVISED):
        chainlet = pid_of("orphan-helper", "Spawner")
        assert chainlet is not None
        wait_until(lambda: chainlet in _helpers(tmp_path), 10, "the helper")
        helper = _helpers(tmp_path)[chainlet]
        killed = time.monotonic()
        os.kill(read_state("orphan-helper").local.supervisor_pid, signal.SIGKILL)  # type: ignore[union-attr]
        # No `chains stop` yet: the supervisor's reaper saw it go.
        wait_until(lambda: not _alive(helper), 10, "the helper to end with its killed supervisor")
        ended_after = time.monotonic() - killed
    record("helper_after_supervisor_kill", helper_ended_after_sec=round(ended_after, 2))


MEMORY = Path(__file__).parent / "sample_chains" / "memory_chains.py"


def test_a_helper_that_left_its_process_group_ends_with_its_chainlet(
    chains_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper in a session of its own (``start_new_session=True``) is out of the chainlet's
    process group; the chainlet's memory cgroup still holds it (root only, as cgroups are)."""
    from chains.targets.memory_limits import MemoryBounds

    bounds = MemoryBounds.find()
    if bounds.parent is None:
        why = f"needs a writable memory cgroup to hold a chainlet's processes ({bounds.why})"
        if os.environ.get("CHAINS_REQUIRE_ROOT"):
            pytest.fail(why)
        pytest.skip(why)
    monkeypatch.setenv("SUPERVISED_HELPER_DIR", str(tmp_path))
    with pushed("Escaper", "escaper", file=MEMORY):
        first = pid_of("escaper", "Escaper")
        assert first is not None
        wait_until(lambda: first in _helpers(tmp_path), 10, "the helper")
        helper = _helpers(tmp_path)[first]
        assert os.getpgid(helper) != first  # out of the chainlet's group
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: not _alive(helper), 10, "the escaped helper to end with its chainlet")
        wait_until(lambda: pid_of("escaper", "Escaper") not in (None, first), 30, "Escaper restarted")
        second = pid_of("escaper", "Escaper")
        assert second is not None
        wait_until(lambda: second in _helpers(tmp_path), 10, "the new helper")
        helper = _helpers(tmp_path)[second]
        os.kill(read_state("escaper").local.supervisor_pid, signal.SIGKILL)  # type: ignore[union-attr]
        wait_until(lambda: not _alive(helper), 10, "the escaped helper to end with its killed supervisor")


def test_calls_to_a_lone_stopped_replica_get_503_after_its_first_missed_probe(
    chains_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a call to it waited in its backlog for the whole detection window (here 6 s),
    then was answered by the restarted process."""
    monkeypatch.setenv("CHAINS_LIVENESS_PERIOD_SEC", "1")
    monkeypatch.setenv("CHAINS_LIVENESS_FAILURES", "5")
    monkeypatch.setenv("CHAINS_LIVENESS_TIMEOUT_SEC", "1")
    with pushed("DoublerEntry", "fenced", file=SUPERVISED) as handle:
        stopped = pid_of("fenced", "Doubler")
        assert stopped is not None
        doubler = read_state("fenced").replicas("Doubler")[0].url
        os.kill(stopped, signal.SIGSTOP)
        try:
            at = time.monotonic()
            wait_until(lambda: "answers 503 (Retry-After)" in log_of("fenced", "Doubler"), 30, "the fence")
            fenced_after = time.monotonic() - at
            started = time.monotonic()
            direct = httpx.post(doubler + "/run_remote", json={"x": 1}, timeout=60)
            direct_sec = time.monotonic() - started
            assert direct.status_code == 503 and direct.headers.get("retry-after") == "1", direct.text
            assert "Doubler is not answering" in direct.text
            assert pid_of("fenced", "Doubler") == stopped  # answered before any restart
            started = time.monotonic()
            through = httpx.post(handle.entrypoint_url + "/run_remote", json={"x": 1}, timeout=60)
            through_sec = time.monotonic() - started
            assert through.status_code in (200, 503), through.text  # 200: by the restarted process
            assert through.status_code == 200 or "retry-after" in through.headers
            wait_until(lambda: pid_of("fenced", "Doubler") not in (None, stopped), 30, "Doubler restarted")
        finally:
            with contextlib.suppress(ProcessLookupError):  # a failed test's stopped process
                os.kill(stopped, signal.SIGCONT)
        answer = httpx.post(handle.entrypoint_url + "/run_remote", json={"x": 2}, timeout=30)
        assert answer.status_code == 200 and answer.json()[0] == 4
    record(
        "lone_hung_replica_fenced",
        fenced_after_sec=round(fenced_after, 2),
        direct_503_sec=round(direct_sec, 3),
        entrypoint_status=through.status_code,
        entrypoint_sec=round(through_sec, 2),
    )
