"""The job store's rules, with explicit times: expiry, leases, retries, bounds, retention."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from chains.errors import ErrorDetail
from chains.jobs import (
    AsyncRequest,
    JobError,
    JobLimits,
    JobRefused,
    JobStatus,
    SqliteJobStore,
    WebhookStatus,
    webhook,
)
from chains.jobs.store import SqlJobStore, worker_owner


def async_request(**fields: object) -> AsyncRequest:
    return AsyncRequest.model_validate({"model_input": {"x": 1}, **fields})


LIMITS = JobLimits(max_queued=3, max_stored_bytes=100)


def open_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, limits: JobLimits = LIMITS
) -> SqlJobStore:
    """A new, empty store of either kind: the same rules hold for both."""
    if kind == "sqlite":
        return SqliteJobStore(tmp_path / "jobs.sqlite", limits)
    from chains.jobs.postgres_store import PostgresJobStore

    server = request.getfixturevalue("postgres")
    return PostgresJobStore(server.url, f"t{uuid.uuid4().hex[:12]}", limits)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlJobStore]:
    opened = open_store(request.param, tmp_path, request)
    yield opened
    opened.close()  # type: ignore[attr-defined]


def test_the_file_is_owner_only(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.sqlite")
    assert store.path.stat().st_mode & 0o077 == 0


def test_a_job_past_its_time_in_the_queue_expires_and_its_webhook_is_due(store: SqlJobStore) -> None:
    job = store.submit(
        async_request(max_time_in_queue_seconds=10, webhook_endpoint="http://127.0.0.1:9/h"), b"{}", now=0
    )
    assert store.claim("w", lease_sec=5, now=11) is None
    expired = store.get(job.id)
    assert expired is not None and expired.status is JobStatus.EXPIRED
    assert [j.id for j in store.webhooks_due(now=12)] == [job.id]


def test_a_lease_not_renewed_is_taken_back_and_counts_as_an_attempt(store: SqlJobStore) -> None:
    job = store.submit(
        async_request(inference_retry_config={"max_attempts": 2, "initial_delay_ms": 0}), b"{}", now=0
    )
    first = store.claim("elsewhere:1:1", lease_sec=5, now=1)
    assert first is not None and first.attempts == 1
    assert store.claim("w2", lease_sec=5, now=3) is None  # the lease still holds
    second = store.claim("w2", lease_sec=5, now=7)
    assert second is not None and second.id == job.id and second.attempts == 2
    assert not store.finish(job.id, "elsewhere:1:1", b"1", now=8)  # the old worker lost it
    assert store.finish(job.id, "w2", b"1", now=8)
    done = store.get(job.id)
    assert done is not None and done.status is JobStatus.SUCCEEDED and done.output == b"1"


def test_a_lease_of_a_dead_process_on_this_machine_is_taken_back_at_once(store: SqlJobStore) -> None:
    store.submit(
        async_request(inference_retry_config={"max_attempts": 2, "initial_delay_ms": 0}), b"{}", now=0
    )
    dead = f"{os.uname().nodename}:{2**22 + 12345}:1"  # above pid_max's default: never a process
    store.claim(dead, lease_sec=600, now=1)
    again = store.claim(worker_owner(), lease_sec=600, now=2)
    assert again is not None and again.attempts == 2


def test_failures_retry_with_back_off_then_fail(store: SqlJobStore) -> None:
    retry = {"max_attempts": 2, "initial_delay_ms": 1000, "max_delay_ms": 1000}
    job = store.submit(async_request(inference_retry_config=retry), b"{}", now=0)
    store.claim("w", lease_sec=5, now=0)
    assert store.fail(job.id, "w", JobError("E", "boom"), retryable=True, now=1) is JobStatus.QUEUED
    assert store.claim("w", lease_sec=5, now=1.5) is None  # not before its delay
    assert store.claim("w", lease_sec=5, now=2.1) is not None
    detail = ErrorDetail(exc_type="ValueError", exc_module="builtins", message="boom", request_id=job.id)
    error = JobError("ValueError", "boom", detail)
    assert store.fail(job.id, "w", error, retryable=True, now=3) is JobStatus.FAILED
    failed = store.get(job.id)
    assert failed is not None and failed.errors == (error,)  # the body's error kept whole
    assert failed.status_json("c")["errors"][0]["detail"]["exc_type"] == "ValueError"


def test_bounds_refuse_with_a_status_and_a_reason(store: SqlJobStore) -> None:
    with pytest.raises(JobRefused) as too_much:
        store.submit(async_request(), b"x" * 101, now=0)
    assert too_much.value.status == 507 and "CHAINS_JOBS_MAX_STORED_BYTES" in too_much.value.message
    for _ in range(3):
        store.submit(async_request(), b"{}", now=0)
    with pytest.raises(JobRefused) as full:
        store.submit(async_request(), b"{}", now=0)
    assert full.value.status == 503 and "CHAINS_JOBS_MAX_QUEUED" in full.value.message


def test_priority_then_age_orders_the_queue(store: SqlJobStore) -> None:
    low = store.submit(async_request(priority=2), b"{}", now=0)
    high = store.submit(async_request(priority=0), b"{}", now=1)
    mid = store.submit(async_request(priority=1), b"{}", now=2)
    order = []
    for t in (3, 4, 5):
        job = store.claim("w", lease_sec=60, now=t)
        assert job is not None
        order.append(job.id)
    assert order == [high.id, mid.id, low.id]


def test_a_claim_by_id_takes_that_job_ahead_of_the_queue_and_only_while_queued(store: SqlJobStore) -> None:
    first = store.submit(async_request(priority=0), b"{}", now=0)
    running = store.claim("w", lease_sec=60, now=1)
    assert running is not None and running.id == first.id
    older = store.submit(async_request(priority=0), b"{}", now=2)
    wanted = store.submit(async_request(priority=2), b"{}", now=3)
    job = store.claim("w", lease_sec=60, now=4, job_id=wanted.id)  # with a job in progress
    assert job is not None and job.id == wanted.id and job.status is JobStatus.IN_PROGRESS
    assert store.claim("w", lease_sec=60, now=5, job_id=wanted.id) is None  # no longer queued
    assert store.claim("w", lease_sec=60, now=5, job_id="no-such-job") is None
    later = store.claim("w", lease_sec=60, now=6)
    assert later is not None and later.id == older.id  # the queue goes on in its order


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_retention_forgets_only_ended_jobs_whose_webhook_is_settled(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = open_store(kind, tmp_path, request, JobLimits(retention_sec=100))
    kept = store.submit(async_request(), b"{}", now=0)
    hooked = store.submit(async_request(webhook_endpoint="http://127.0.0.1:9/h"), b"{}", now=0)
    for _ in range(2):
        store.claim("w", lease_sec=60, now=1)
    store.finish(kept.id, "w", b"1", now=2)
    store.finish(hooked.id, "w", b"1", now=2)
    assert store.purge(now=50) == 0
    assert store.purge(now=200) == 1  # the one whose webhook is still pending stays
    still = store.get(hooked.id)
    assert store.get(kept.id) is None and still is not None
    assert still.webhook_status is WebhookStatus.PENDING


def test_a_signature_is_checked_and_a_stale_body_refused() -> None:
    body = b'{"request_id":"r","time":"2020-01-01T00:00:00Z","data":1}'
    header = webhook.sign(body, "s")
    with pytest.raises(webhook.WebhookRefused, match="outside the tolerance"):
        webhook.verify(body, header, "s")
    with pytest.raises(webhook.WebhookRefused, match="does not match"):
        webhook.verify(body, webhook.sign(body, "other"), "s", tolerance_sec=1e12)
    # Baseten sends one signature per active secret: any one matching is enough.
    assert webhook.verify(body, f"v1=00,{header}", "s", tolerance_sec=1e12)["data"] == 1
