"""``Compute(memory=...)`` on the local target: each chainlet process bounded in a memory
cgroup of its own where the machine allows one (root: required in CI by
``CHAINS_REQUIRE_ROOT``), else by ``RLIMIT_DATA``; a death at the bound named as one; a process
that keeps failing with ``MemoryError`` restarted, its errors saying what happened.

Real chains on 127.0.0.1. Allocations past the bound under ``RLIMIT_DATA`` are of pages never
touched (``bytes(n)``: calloc), so the tests never take the machine's memory.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from chains.targets.memory_limits import CGROUP_ENV, MemoryBounds
from chains.targets.state import read_state
from tests.helpers import wait_until
from tests.reliability.conftest import cli, pushed, record

MEMORY = Path(__file__).parent / "sample_chains" / "memory_chains.py"
BOUND = 192 * 1024 * 1024


def pid_of(name: str, chainlet: str) -> int | None:
    return next((p.pid for p in read_state(name).replicas(chainlet) if p.state == "ready"), None)


def log_of(name: str, chainlet: str) -> str:
    return Path(read_state(name).replicas(chainlet)[0].log).read_text(errors="replace")


def data_limit(pid: int) -> int | None:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max data size"):
            soft = line.split()[3]
            return None if soft == "unlimited" else int(soft)
    return None


def memory_cgroup_limit(pid: int) -> int | None:
    """The memory limit of the cgroup ``pid`` is in (v2 ``memory.max``, or v1's)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").is_file():
            raw = (Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max").read_text().strip()
            return None if raw == "max" else int(raw)
        if "memory" in controllers.split(","):
            folder = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            return int((folder / "memory.limit_in_bytes").read_text())
    return None


@pytest.fixture
def data_bound(monkeypatch: pytest.MonkeyPatch, chains_home: Path) -> Path:
    """The bound as a machine without a writable memory cgroup gives it: ``RLIMIT_DATA``."""
    monkeypatch.setenv(CGROUP_ENV, "0")
    return chains_home


@pytest.fixture
def memory_cgroups(chains_home: Path) -> Path:
    """Skip (fail in CI) where the supervisor cannot make memory cgroups: not root, or none."""
    bounds = MemoryBounds.find()
    if bounds.parent is None:
        why = f"needs a writable memory cgroup to bound a chainlet in one ({bounds.why})"
        if os.environ.get("CHAINS_REQUIRE_ROOT"):
            pytest.fail(why)
        pytest.skip(why)
    return chains_home


def test_compute_memory_is_a_cgroup_bound_and_its_oom_kill_is_named(memory_cgroups: Path) -> None:
    with pushed("BoundedHog", "bounded", file=MEMORY) as handle:
        pid = pid_of("bounded", "BoundedHog")
        assert pid is not None
        assert memory_cgroup_limit(pid) == BOUND  # before: no bound at all
        assert "memory bounded at 192 MiB (cgroup v" in log_of("bounded", "BoundedHog")
        url = handle.entrypoint_url + "/run_remote"
        assert httpx.post(url, json={"megabytes": 32, "touch": True}, timeout=30).status_code == 200
        with pytest.raises(httpx.TransportError):
            httpx.post(url, json={"megabytes": 400, "touch": True}, timeout=60)
        wait_until(lambda: pid_of("bounded", "BoundedHog") not in (None, pid), 30, "BoundedHog restarted")
        reason = read_state("bounded").replicas("BoundedHog")[0].reason or ""
        # Named from the process's own cgroup, with its bound: not a guess from the machine's count.
        assert "was killed for running out of memory (OOMKilled: past its bound of 192 MiB" in reason, reason
        assert "past its bound of 192 MiB" in log_of("bounded", "BoundedHog")
        assert "past its bound" in cli("status", "bounded").stdout
        new = pid_of("bounded", "BoundedHog")
        assert new is not None and memory_cgroup_limit(new) == BOUND
        assert httpx.post(url, json={"megabytes": 1, "touch": True}, timeout=30).status_code == 200
    record("memory_cgroup_bound", bound_mib=BOUND // 2**20, asked_mib=400, reason=reason)


def test_compute_memory_is_a_data_bound_without_a_cgroup(data_bound: Path) -> None:
    with pushed("BoundedHog", "as-bounded", file=MEMORY) as handle:
        pid = pid_of("as-bounded", "BoundedHog")
        assert pid is not None
        assert data_limit(pid) == BOUND  # before: unlimited
        assert "memory bounded at 192 MiB (RLIMIT_DATA)" in log_of("as-bounded", "BoundedHog")
        url = handle.entrypoint_url + "/run_remote"
        answer = httpx.post(url, json={"megabytes": 1024, "touch": False}, timeout=30)
        assert answer.status_code == 500, answer.text
        error = answer.json()["error"]
        assert error["exc_type"] == "MemoryError"
        # Python's MemoryError says nothing; the answer says what it was, and the bound.
        assert error["message"].startswith("out of memory"), error
        assert "192 MiB (RLIMIT_DATA)" in error["message"], error
        # One call asking too much leaves the process well: it is neither killed nor restarted.
        assert httpx.post(url, json={"megabytes": 16, "touch": True}, timeout=30).json() == pid
        assert pid_of("as-bounded", "BoundedHog") == pid
    record("memory_data_bound", bound_mib=BOUND // 2**20, message=error["message"])


def test_a_chainlet_that_keeps_failing_with_memory_error_is_restarted(data_bound: Path) -> None:
    with pushed("Leaky", "leaky", file=MEMORY) as handle:
        first = pid_of("leaky", "Leaky")
        assert first is not None
        url = handle.entrypoint_url + "/run_remote"
        failed, messages = 0, set()
        for _ in range(40):  # it fills up at the first call; each later call fails, or nearly
            try:
                answer = httpx.post(url, json={"megabytes": 1024}, timeout=30)
            except httpx.TransportError:
                break  # cut as the process exited: it has seen enough
            if answer.status_code == 500:
                failed += 1
                messages.add(answer.json()["error"]["message"])
            if pid_of("leaky", "Leaky") != first:
                break
        wait_until(lambda: pid_of("leaky", "Leaky") not in (None, first), 30, "Leaky restarted")
        replica = read_state("leaky").replicas("Leaky")[0]
        # Before: it answered MemoryError with an empty message forever, and stayed ready.
        assert replica.restarts == 1
        reason = replica.reason or ""
        assert reason.startswith("out of memory: MemoryError 3 times in a row"), reason
        log = log_of("leaky", "Leaky")
        assert "out of memory: MemoryError 3 times in a row" in log
        assert "MemoryError 3 times in a row" in cli("status", "leaky").stdout
        assert failed >= 3 and all(m.startswith("out of memory") for m in messages), messages
        # The new process answers. A call of the loop above may have reached it too, and filled
        # it as it filled the first (the supervisor restarts at once): so this call asks for
        # nothing, and is answered even by a full one.
        answer = httpx.post(url, json={"megabytes": 0}, timeout=30)
        assert answer.status_code == 200 and answer.json()[0] not in (first, None), answer.text
    record("memory_error_restart", failed_calls=failed, reason=replica.reason)
