"""Faults that must lose no accepted job: the entrypoint killed while it runs one, its
supervisor killed, a re-push with a queue of jobs, and a full disk. Side effects are counted in
the chain's log, so a job whose body finished is seen never to run twice."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from chains.deploy import stop_chain
from chains.targets.state import read_state
from tests.helpers import wait_until
from tests.jobs.conftest import Api, log_lines, push

TWICE = {"max_attempts": 2, "initial_delay_ms": 0, "max_delay_ms": 0}


def entry_pid(name: str) -> int:
    [replica] = [p for p in read_state(name).replicas("Entry") if p.pid]
    assert replica.pid is not None
    return replica.pid


def starts(log: Path, tag: str) -> int:
    return sum(1 for line in log_lines(log) if line.startswith(f"start {tag} "))


def dones(log: Path, tag: str) -> int:
    return log_lines(log).count(f"done {tag}")


def test_kill_9_of_the_entrypoint_running_a_job_runs_it_again_or_fails_it_as_configured(
    chains_home: Path, tmp_path: Path
) -> None:
    handle = push("jobs")
    try:
        api = Api(handle.entrypoint_url)
        log = tmp_path / "log"
        again = api.submit(
            {"n": 5, "log": str(log), "sleep": 3, "tag": "again"}, inference_retry_config=TWICE
        )
        once = api.submit({"n": 6, "log": str(log), "sleep": 3, "tag": "once"})
        wait_until(lambda: starts(log, "again") == 1 and starts(log, "once") == 1, 20, "both jobs running")
        os.kill(entry_pid("jobs"), signal.SIGKILL)
        status = api.wait(again, {"SUCCEEDED", "FAILED"}, timeout=60)
        assert status["status"] == "SUCCEEDED" and status["attempts"] == 2, status
        assert api.http.get(f"/async_request/{again}/output").json() == {"doubled": 10}
        lost = api.wait(once, {"SUCCEEDED", "FAILED"}, timeout=30)
        assert lost["status"] == "FAILED" and lost["errors"][0]["code"] == "WORKER_LOST", lost
        wait_until(lambda: dones(log, "again") == 1, 10, "the second attempt's side effect")
        # The killed attempt's dependency call was cancelled with its caller: one side effect.
        assert dones(log, "again") == 1
    finally:
        stop_chain("jobs", grace=5)


def test_kill_9_of_the_supervisor_then_a_push_runs_every_accepted_job(
    chains_home: Path, tmp_path: Path
) -> None:
    handle = push("jobs")
    try:
        api = Api(handle.entrypoint_url)
        log = tmp_path / "log"
        jobs = {
            f"j{i}": api.submit(
                {"n": i, "log": str(log), "sleep": 2, "tag": f"j{i}"}, inference_retry_config=TWICE
            )
            for i in range(4)
        }
        wait_until(lambda: sum(starts(log, t) for t in jobs) >= 1, 20, "a job running")
        os.kill(read_state("jobs").local.supervisor_pid, signal.SIGKILL)
        wait_until(lambda: _gone(entry_pid_or_none()), 10, "the chain gone with its supervisor")
        handle = push("jobs")
        api = Api(handle.entrypoint_url)
        for tag, job in jobs.items():
            status = api.wait(job, {"SUCCEEDED", "FAILED"}, timeout=60)
            assert status["status"] == "SUCCEEDED", (tag, status)
            assert dones(log, tag) == 1, (tag, log_lines(log))
    finally:
        stop_chain("jobs", grace=5)


_last_entry: list[int] = []


def entry_pid_or_none() -> int | None:
    if not _last_entry:
        _last_entry.append(entry_pid("jobs"))
    return _last_entry[0]


def _gone(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_repush_with_50_jobs_queued_runs_each_once(chains_home: Path, tmp_path: Path) -> None:
    handle = push("jobs")
    try:
        api = Api(handle.entrypoint_url)
        log = tmp_path / "log"
        jobs = {
            f"q{i}": api.submit({"n": i, "log": str(log), "sleep": 0.2, "tag": f"q{i}"}) for i in range(50)
        }
        handle = push("jobs")  # replaces the deployment while the queue is still long
        api = Api(handle.entrypoint_url)
        for tag, job in jobs.items():
            status = api.wait(job, {"SUCCEEDED", "FAILED", "CANCELED", "EXPIRED"}, timeout=90)
            assert status["status"] == "SUCCEEDED", (tag, status)
        assert all(dones(log, tag) == 1 for tag in jobs), log_lines(log)
        assert all(starts(log, tag) == 1 for tag in jobs), log_lines(log)
    finally:
        stop_chain("jobs", grace=5)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_a_full_disk_refuses_new_jobs_and_loses_none(
    chains_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        monkeypatch.setenv("CHAINS_JOBS_STORE", str(disk / "jobs.sqlite"))
        handle = push("jobs")
        try:
            api = Api(handle.entrypoint_url)
            log = tmp_path / "log"
            accepted = api.submit({"n": 7, "log": str(log), "sleep": 2, "tag": "kept"})
            wait_until(lambda: starts(log, "kept") == 1, 20, "the job running")
            filler = disk / "filler"
            with open(filler, "wb") as handle_file:
                try:
                    while True:
                        handle_file.write(b"\0" * 65536)
                        handle_file.flush()
                except OSError:
                    pass
            big = {"n": 1, "log": str(log), "tag": "x" * (1 << 20)}
            refused = api.http.post("/async_run_remote", json={"model_input": big})
            assert refused.status_code == 507, refused.text
            assert "full" in refused.json()["detail"]
            filler.unlink()
            status = api.wait(accepted, {"SUCCEEDED", "FAILED"}, timeout=60)
            assert status["status"] == "SUCCEEDED", status
            assert api.http.get(f"/async_request/{accepted}/output").json() == {"doubled": 14}
            assert dones(log, "kept") == 1
        finally:
            stop_chain("jobs", grace=5)
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=False)


def test_with_the_shared_store_a_restart_of_postgresql_loses_no_job(
    chains_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres: object
) -> None:
    from tests.jobs.postgres import Postgres

    assert isinstance(postgres, Postgres)
    monkeypatch.setenv("CHAINS_JOBS_STORE", postgres.url)
    handle = push("pgjobs")
    try:
        api = Api(handle.entrypoint_url)
        log = tmp_path / "log"
        jobs = {
            f"p{i}": api.submit({"n": i, "log": str(log), "sleep": 0.5, "tag": f"p{i}"}) for i in range(8)
        }
        wait_until(lambda: sum(starts(log, tag) for tag in jobs) >= 1, 20, "a job running")
        postgres.restart()  # every connection the chain held is cut
        for tag, job in jobs.items():
            status = api.wait(job, {"SUCCEEDED", "FAILED", "CANCELED", "EXPIRED"}, timeout=90)
            assert status["status"] == "SUCCEEDED", (tag, status)
            assert dones(log, tag) == 1, (tag, log_lines(log))
        # While the store is down, a submission is refused with a reason, not accepted and lost.
        postgres.stop()
        try:
            refused = api.http.post("/async_run_remote", json={"model_input": {"n": 1, "log": str(log)}})
            assert refused.status_code == 503 and "unreachable" in refused.json()["detail"], refused.text
        finally:
            postgres.start()
        later = api.submit({"n": 9, "log": str(log), "tag": "later"})
        assert api.wait(later, {"SUCCEEDED", "FAILED"}, timeout=60)["status"] == "SUCCEEDED"
    finally:
        stop_chain("pgjobs", grace=5)
