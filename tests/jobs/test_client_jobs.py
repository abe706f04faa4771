"""``chains.client``'s async jobs against chains pushed as local processes: ``submit`` and its
handle, sync and async (issue 31). The chain's log counts how often each body ran."""

from __future__ import annotations

import time
from pathlib import Path

import pydantic
import pytest

from chains.client import (
    AsyncClient,
    AsyncJob,
    Client,
    Job,
    JobCanceled,
    JobFailedError,
    JobOptions,
    JobStatus,
    JobTimeout,
)
from chains.deploy import ChainHandle, stop_chain
from chains.errors import ChainsRuntimeError, ChainsUsageError, RemoteError
from tests.helpers import await_until, unique_port, wait_until
from tests.jobs.conftest import Api, Receiver, log_lines, push, secret_of


class Doubled(pydantic.BaseModel):
    doubled: int


def started(log: Path, tag: str) -> bool:
    return f"start {tag}" in " ".join(log_lines(log))


def test_submit_then_result_is_the_typed_output_and_the_body_ran_once(
    pushed: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    with Client(pushed.entrypoint_url) as client:
        job = client.submit(Doubled, n=21, log=str(log), tag="a")
        assert isinstance(job, Job) and len(job.id) == 32
        assert job.status() in (JobStatus.QUEUED, JobStatus.IN_PROGRESS, JobStatus.SUCCEEDED)
        assert job.result(timeout=30) == Doubled(doubled=42)
        assert job.status() is JobStatus.SUCCEEDED
        assert job.result(timeout=0) == Doubled(doubled=42)  # an ended job answers at once
        assert job.cancel() is False  # it had already succeeded
        # The same job from its id alone, as another program would find it; untyped, plain JSON.
        assert client.job(job.id).result(timeout=5) == {"doubled": 42}
    assert sum(1 for line in log_lines(log) if line == "done a") == 1


def test_job_options_set_retries_priority_and_the_signed_webhook(pushed: ChainHandle, tmp_path: Path) -> None:
    log = tmp_path / "log"
    receiver = Receiver(secret_of("jobs"), unique_port())
    receiver.start()
    try:
        options = JobOptions(
            webhook_endpoint=receiver.url, priority=1, max_attempts=2, initial_delay_ms=50, max_delay_ms=50
        )
        with Client(pushed.entrypoint_url) as client:
            job = client.submit(Doubled, options, n=1, log=str(log), tag="opt", fail=True)
            with pytest.raises(RemoteError, match="failing opt on purpose"):
                job.result(timeout=30)
            info = job.info()
            assert (info.status, info.attempts, info.max_attempts) == (JobStatus.FAILED, 2, 2)
        assert Api(pushed.entrypoint_url).status(job.id)["priority"] == 1
        wait_until(lambda: receiver.delivered, 15, "the webhook's delivery")
        [delivery] = receiver.delivered
        assert delivery["request_id"] == job.id and delivery["status"] == "FAILED"
        assert sum(1 for line in log_lines(log) if line.startswith("start opt")) == 2
    finally:
        receiver.stop()
    # Options are checked against the entrypoint's own bounds before anything is sent.
    with pytest.raises(ValueError, match=r"JobOptions: max_attempts: .*less than or equal to 10"):
        JobOptions(max_attempts=11)


def test_a_failing_job_raises_the_error_call_raises(pushed: ChainHandle, tmp_path: Path) -> None:
    log = str(tmp_path / "log")
    with Client(pushed.entrypoint_url) as client:
        with pytest.raises(RuntimeError) as called:
            client.call(Doubled, n=1, log=log, tag="call", fail=True)
        job = client.submit(Doubled, n=1, log=log, tag="bad", fail=True)
        with pytest.raises(RuntimeError) as waited:
            job.result(timeout=30)
        assert job.status() is JobStatus.FAILED
    assert isinstance(waited.value, RemoteError)
    assert type(waited.value) is type(called.value)  # rebuilt as the call's error is
    assert waited.value.remote_message == "failing bad on purpose"
    assert waited.value.detail is not None and waited.value.detail.request_id == job.id


def test_arguments_that_do_not_fit_are_refused_at_submit(pushed: ChainHandle) -> None:
    with Client(pushed.entrypoint_url) as client, pytest.raises(ValueError, match=r"model_input\.n"):
        client.submit(Doubled, n="many", log="x")


def test_cancel_a_running_job_and_its_result_says_canceled(pushed: ChainHandle, tmp_path: Path) -> None:
    log = tmp_path / "log"
    with Client(pushed.entrypoint_url) as client:
        job = client.submit(Doubled, n=1, log=str(log), sleep=30, tag="long")
        wait_until(lambda: started(log, "long"), 15, "the job's body to start")
        assert job.status() is JobStatus.IN_PROGRESS
        assert job.cancel() is True
        with pytest.raises(JobCanceled, match=f"job {job.id} ended CANCELED") as ended:
            job.result(timeout=15)
        assert isinstance(ended.value, JobFailedError) and ended.value.job_id == job.id
        assert job.cancel() is True  # canceling again changes nothing
    assert "done long" not in log_lines(log)


def test_a_queued_job_is_queued_then_canceled_before_it_runs(
    chains_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAINS_JOB_WORKERS", "1")
    handle = push("jobs")
    log = tmp_path / "log"
    try:
        with Client(handle.entrypoint_url) as client:
            blocker = client.submit(Doubled, n=0, log=str(log), sleep=30, tag="blocker")
            wait_until(lambda: started(log, "blocker"), 15, "the first job to take the only worker")
            queued = client.submit(Doubled, n=1, log=str(log), tag="queued")
            assert queued.status() is JobStatus.QUEUED
            assert queued.cancel() is True
            assert queued.status() is JobStatus.CANCELED  # a queued job is canceled at once
            assert blocker.cancel() is True
            wait_until(lambda: blocker.status() is JobStatus.CANCELED, 15, "the running job canceled")
        assert not started(log, "queued")
    finally:
        stop_chain("jobs", grace=5)


def test_result_times_out_naming_the_job_and_the_job_goes_on(pushed: ChainHandle, tmp_path: Path) -> None:
    log = tmp_path / "log"
    with Client(pushed.entrypoint_url) as client:
        job = client.submit(Doubled, n=2, log=str(log), sleep=2, tag="slow")
        begun = time.monotonic()
        with pytest.raises(
            JobTimeout, match=f"job {job.id} is still (QUEUED|IN_PROGRESS) after 0.3s"
        ) as late:
            job.result(timeout=0.3)
        assert time.monotonic() - begun < 2  # it gave up at its timeout, not at the job's end
        assert isinstance(late.value, TimeoutError) and late.value.job_id == job.id
        assert job.result(timeout=30) == Doubled(doubled=4)  # waited for again, it ends
    with pytest.raises(ChainsUsageError, match="at least 0"):
        job.result(timeout=-1)


def test_a_streaming_job_has_no_result_its_events_are_read_and_resumed(
    streaming: ChainHandle, tmp_path: Path
) -> None:
    with Client(streaming.entrypoint_url) as client:
        job = client.submit(count=5, log=str(tmp_path / "runs"))
        with pytest.raises(ChainsUsageError, match=r"streams: .*job.events\(\)"):
            job.result(timeout=30)
        events = list(job.events())  # live: read while it runs, ended by the stream's end
        assert [e.data for e in events] == ["t0", "t1", "t2", "t3", "t4"]
        assert [e.id for e in events] == ["1", "2", "3", "4", "5"]
        assert [e.data for e in job.events(last_event_id=3)] == ["t3", "t4"]
        assert job.status() is JobStatus.SUCCEEDED
    with Client(streaming.entrypoint_url) as client, pytest.raises(ChainsRuntimeError, match="answered 404"):
        list(client.job(job.id + "x").events())  # an unknown id
    assert log_lines(tmp_path / "runs") == ["run"]


def test_events_go_on_past_a_failed_attempt_that_is_retried(streaming: ChainHandle, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    with Client(streaming.entrypoint_url) as client:
        job = client.submit(None, JobOptions(max_attempts=2), count=4, log=str(log), fail_first_at=2)
        events = list(job.events())  # the first attempt's error is not the job's: it runs again
        assert [(e.event, e.data) for e in events if e.event != "restart"] == [
            (None, "t0"),
            (None, "t1"),
            *((None, f"t{i}") for i in range(4)),
        ]
        assert [e.event for e in events].count("restart") == 1
        assert job.status() is JobStatus.SUCCEEDED
    assert log_lines(log) == ["run", "run"]


def test_events_raise_the_last_attempts_error_at_once(streaming: ChainHandle, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    with Client(streaming.entrypoint_url) as client:
        job = client.submit(None, JobOptions(max_attempts=1), count=4, log=str(log), fail_first_at=2)
        seen: list[str] = []
        # The attempt's own error, held until the events end without a new attempt: then raised
        # as the job's, not read on as a cut.
        with pytest.raises(ValueError, match="the first run fails at t2") as info:
            for event in job.events():
                seen.append(event.data)
        assert isinstance(info.value, RemoteError)
        assert seen == ["t0", "t1"]
        assert job.status() is JobStatus.FAILED


def test_a_canceled_streaming_job_raises_from_its_events(streaming: ChainHandle, tmp_path: Path) -> None:
    with Client(streaming.entrypoint_url) as client:
        job = client.submit(count=100, log=str(tmp_path / "runs"), gap=0.2)
        events = job.events()
        assert next(events).data == "t0"
        assert job.cancel() is True
        with pytest.raises(JobCanceled, match="ended CANCELED"):
            for _ in events:
                pass


async def test_the_async_client_sends_job_options(pushed: ChainHandle, tmp_path: Path) -> None:
    log = tmp_path / "log"
    async with AsyncClient(pushed.entrypoint_url) as client:
        job = await client.submit(
            Doubled, JobOptions(priority=2, max_time_in_queue_seconds=30), n=5, log=str(log)
        )
        assert await job.result(timeout=30) == Doubled(doubled=10)
    status = Api(pushed.entrypoint_url).status(job.id)
    assert status["priority"] == 2


async def test_the_async_handle_submits_waits_fails_times_out_and_cancels(
    pushed: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    async with AsyncClient(pushed.entrypoint_url) as client:
        job = await client.submit(Doubled, n=5, log=str(log), tag="async")
        assert isinstance(job, AsyncJob)
        assert await job.result(timeout=30) == Doubled(doubled=10)
        assert await job.status() is JobStatus.SUCCEEDED

        failing = await client.submit(Doubled, n=1, log=str(log), tag="async-bad", fail=True)
        with pytest.raises(RuntimeError, match="failing async-bad on purpose") as failed:
            await failing.result(timeout=30)
        assert isinstance(failed.value, RemoteError)

        slow = await client.submit(Doubled, n=1, log=str(log), sleep=30, tag="async-long")
        with pytest.raises(JobTimeout, match=f"job {slow.id} is still"):
            await slow.result(timeout=0.2)
        await await_until(lambda: started(log, "async-long"), 15, "the slow job's body to start")
        assert await slow.status() is JobStatus.IN_PROGRESS
        assert await slow.cancel() is True
        with pytest.raises(JobCanceled, match="ended CANCELED"):
            await slow.result(timeout=15)
        assert await slow.status() is JobStatus.CANCELED
    assert "done async-long" not in log_lines(log)


async def test_the_async_handle_reads_a_streaming_jobs_events(streaming: ChainHandle, tmp_path: Path) -> None:
    async with AsyncClient(streaming.entrypoint_url) as client:
        job = await client.submit(count=4, log=str(tmp_path / "runs"))
        assert [e.data async for e in job.events()] == ["t0", "t1", "t2", "t3"]
        assert [e.id async for e in job.events(last_event_id=2)] == ["3", "4"]
        with pytest.raises(ChainsUsageError, match="streams"):
            await job.result()
