"""Async calls on a chain pushed as local processes, spoken to over HTTP as Baseten's async
API is: submit, status, output, cancel, and the signed webhook a real receiver checks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chains.deploy import ChainHandle
from tests.helpers import unique_port, wait_until
from tests.jobs.conftest import Api, Receiver, log_lines, secret_of


def test_a_job_runs_its_result_is_kept_and_its_webhook_is_signed(pushed: ChainHandle, tmp_path: Path) -> None:
    api = Api(pushed.entrypoint_url)
    receiver = Receiver(secret_of("jobs"), unique_port())
    receiver.start()
    try:
        log = tmp_path / "side-effects.log"
        job = api.submit({"n": 21, "log": str(log), "tag": "a"}, webhook_endpoint=receiver.url)
        status = api.wait(job, {"SUCCEEDED", "FAILED"})
        assert status["status"] == "SUCCEEDED", status
        # Baseten's fields, so a client written against its API reads them unchanged.
        assert {"request_id", "status", "webhook_status", "created_at", "status_at", "errors"} <= set(status)
        output = api.http.get(f"/async_request/{job}/output")
        assert output.status_code == 200 and output.json() == {"doubled": 42}
        wait_until(lambda: receiver.delivered, 15, "the webhook's delivery")
        assert receiver.refused == 0
        [delivery] = receiver.delivered
        assert delivery["request_id"] == job and delivery["data"] == {"doubled": 42}
        wait_until(lambda: api.status(job)["webhook_status"] == "SUCCEEDED", 10, "the delivery recorded")
        assert sum(1 for line in log_lines(log) if line == "done a") == 1
    finally:
        receiver.stop()


def test_a_receiver_that_is_down_for_a_while_still_gets_the_result(
    pushed: ChainHandle, tmp_path: Path
) -> None:
    api = Api(pushed.entrypoint_url)
    receiver = Receiver(secret_of("jobs"), unique_port())  # not started yet: deliveries fail
    job = api.submit({"n": 1, "log": str(tmp_path / "log"), "tag": "b"}, webhook_endpoint=receiver.url)
    assert api.wait(job, {"SUCCEEDED", "FAILED"})["status"] == "SUCCEEDED"
    wait_until(lambda: api.status(job)["webhook_status"] == "PENDING", 5, "a pending delivery")
    wait_until(lambda: api.status(job)["webhook_attempts"] >= 2, 30, "two deliveries that failed")
    assert api.status(job)["webhook_status"] == "PENDING"  # still to be delivered
    assert api.http.get(f"/async_request/{job}/output").json() == {"doubled": 2}  # fetchable throughout
    receiver.start()
    try:
        wait_until(lambda: receiver.delivered, 20, "the delivery once the receiver is up")
        assert receiver.delivered[0]["data"] == {"doubled": 2}
        wait_until(lambda: api.status(job)["webhook_status"] == "SUCCEEDED", 10, "the delivery recorded")
        assert api.http.get(f"/async_request/{job}/output").json() == {"doubled": 2}
    finally:
        receiver.stop()


def test_a_webhook_signed_with_another_secret_is_refused_by_verify(
    pushed: ChainHandle, tmp_path: Path
) -> None:
    api = Api(pushed.entrypoint_url)
    receiver = Receiver("whsec_not-the-chains-secret", unique_port())
    receiver.start()
    try:
        job = api.submit({"n": 3, "log": str(tmp_path / "log")}, webhook_endpoint=receiver.url)
        api.wait(job, {"SUCCEEDED"})
        wait_until(lambda: receiver.refused >= 1, 15, "a delivery the receiver refuses")
        assert receiver.delivered == []
    finally:
        receiver.stop()


def test_cancel_a_running_job_cancels_its_work_through_the_chain(pushed: ChainHandle, tmp_path: Path) -> None:
    api = Api(pushed.entrypoint_url)
    log = tmp_path / "log"
    job = api.submit({"n": 1, "log": str(log), "sleep": 30, "tag": "long"})
    wait_until(lambda: "start long" in " ".join(log_lines(log)), 15, "the job's body to start")
    answer = api.http.delete(f"/async_request/{job}")
    assert answer.status_code == 200 and answer.json()["canceled"] is True
    assert api.wait(job, {"CANCELED", "SUCCEEDED", "FAILED"}, timeout=10)["status"] == "CANCELED"
    time.sleep(1)
    assert "done long" not in log_lines(log)
    assert api.http.get(f"/async_request/{job}/output").status_code == 409


def test_a_queued_job_is_canceled_before_it_runs_and_priorities_order_the_queue(
    chains_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chains.deploy import stop_chain
    from tests.jobs.conftest import push

    monkeypatch.setenv("CHAINS_JOB_WORKERS", "1")
    handle = push("jobs")
    try:
        api = Api(handle.entrypoint_url)
        log = tmp_path / "log"
        first = api.submit({"n": 0, "log": str(log), "sleep": 3, "tag": "first"})
        wait_until(lambda: log_lines(log), 15, "the first job to start")
        low = api.submit({"n": 1, "log": str(log), "tag": "low"}, priority=2)
        high = api.submit({"n": 2, "log": str(log), "tag": "high"}, priority=0)
        doomed = api.submit({"n": 3, "log": str(log), "tag": "doomed"}, priority=0)
        assert api.http.delete(f"/async_request/{doomed}").json()["canceled"] is True
        assert api.status(doomed)["status"] == "CANCELED"
        for job in (first, low, high):
            assert api.wait(job, {"SUCCEEDED", "FAILED"}, timeout=30)["status"] == "SUCCEEDED"
        order = [line.split()[1] for line in log_lines(log) if line.startswith("start")]
        assert order == ["first", "high", "low"]
    finally:
        stop_chain("jobs", grace=5)


def test_a_failing_job_runs_as_often_as_its_retry_config_says(pushed: ChainHandle, tmp_path: Path) -> None:
    api = Api(pushed.entrypoint_url)
    log = tmp_path / "log"
    retry = {"max_attempts": 3, "initial_delay_ms": 100, "max_delay_ms": 200}
    job = api.submit({"n": 1, "log": str(log), "tag": "bad", "fail": True}, inference_retry_config=retry)
    status = api.wait(job, {"FAILED", "SUCCEEDED"}, timeout=30)
    assert status["status"] == "FAILED" and status["attempts"] == 3
    assert "failing bad on purpose" in status["errors"][0]["message"]
    # The error as POST /run_remote would answer it, in its public form: no traceback.
    detail = status["errors"][0]["detail"]
    assert detail["exc_type"] == "RuntimeError" and detail["message"] == "failing bad on purpose"
    assert detail["request_id"] == job and detail["traceback"] == ""
    assert sum(1 for line in log_lines(log) if line.startswith("start bad")) == 3


def test_bad_requests_are_refused_at_the_door(pushed: ChainHandle) -> None:
    api = Api(pushed.entrypoint_url)
    wrong_input = api.http.post("/async_run_remote", json={"model_input": {"n": "many", "log": "x"}})
    assert wrong_input.status_code == 422
    assert wrong_input.json()["detail"][0]["loc"][:2] == ["model_input", "n"]
    for body in (
        {"model_input": {"n": 1, "log": "x"}, "priority": 3},
        {"model_input": {"n": 1, "log": "x"}, "webhook_endpoint": "ftp://example"},
        {"model_input": {"n": 1, "log": "x"}, "inference_retry_config": {"max_attempts": 11}},
        {"model_input": {"n": 1, "log": "x"}, "unknown": 1},
        {"input": {}},
    ):
        assert api.http.post("/async_run_remote", json=body).status_code == 422, body
    assert api.http.get("/async_request/nope").status_code == 404
    assert api.http.get("/async_request", params={"status": "BOGUS"}).status_code == 400


def test_the_command_line_submits_waits_for_and_lists_jobs(pushed: ChainHandle, tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    def chains(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "chains", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=os.environ,
        )

    arguments = json.dumps({"n": 4, "log": str(tmp_path / "log"), "tag": "cli"})
    submitted = chains("call", "jobs", "--async", "--json", arguments)
    assert submitted.returncode == 0, submitted.stderr
    request_id = submitted.stdout.strip()
    assert len(request_id) == 32
    output = chains("jobs", "jobs", request_id, "--wait", "30", "--output")
    assert output.returncode == 0, output.stderr
    assert json.loads(output.stdout) == {"doubled": 8}
    listed = chains("jobs", "jobs")
    assert listed.returncode == 0 and request_id in listed.stdout and "SUCCEEDED" in listed.stdout
    # Baseten's options from the command line: two attempts of a failing body, then FAILED.
    failing = json.dumps({"n": 1, "log": str(tmp_path / "log"), "tag": "twice", "fail": True})
    submitted = chains("call", "jobs", "--async", "--attempts", "2", "--priority", "1", "--json", failing)
    assert submitted.returncode == 0, submitted.stderr
    failed = Api(pushed.entrypoint_url).wait(submitted.stdout.strip(), {"FAILED", "SUCCEEDED"}, timeout=30)
    assert (failed["status"], failed["attempts"], failed["priority"]) == ("FAILED", 2, 1)
    refused = chains("call", "jobs", "--async", "--priority", "5", "--json", arguments)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr and "priority" in refused.stderr
    unknown = chains("jobs", "jobs", "0" * 32)
    assert (
        unknown.returncode == 1 and "Traceback" not in unknown.stderr and "no async request" in unknown.stderr
    )


def test_with_the_store_off_the_async_routes_say_how_to_turn_them_on(
    chains_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    from chains.deploy import stop_chain
    from tests.jobs.conftest import push

    monkeypatch.setenv("CHAINS_JOBS_STORE", "off")
    handle = push("jobs-off")
    try:
        for method, path in [("POST", "/async_run_remote"), ("GET", "/async_request/abc")]:
            answer = httpx.request(method, handle.entrypoint_url + path, json={"model_input": {}}, timeout=30)
            assert answer.status_code == 404, answer.text
            assert "async calls are off" in answer.json()["detail"]
            assert "CHAINS_JOBS_STORE=postgresql://" in answer.json()["detail"]
        other = httpx.get(handle.entrypoint_url + "/nothing-here", timeout=30).json()["detail"]
        assert "async" not in other  # the routes it lists are those it serves
    finally:
        stop_chain("jobs-off", grace=5)
