"""Where async calls are kept: one interface, and the rules every store behind it keeps.

The store is the only place a job lives, so what it promises is what the API promises:

- a job it accepted (``submit`` returned) is on disk and ends in a terminal state;
- a job is run by one worker at a time, under a lease the worker renews; a worker that stops
  renewing (its process was killed, its machine lost) loses the job to the next ``claim``,
  which runs it again or fails it, per the job's retry config (at-least-once);
- a result is written in the same transaction that marks the job done, so a job whose body
  finished and whose result was stored never runs again;
- a refusal (queue full, payload too big, stored bytes over the bound, disk full) is raised as
  :class:`JobRefused` before anything is kept, never a silent drop.

:class:`SqlJobStore` writes those rules once, in SQL; two databases stand behind it:
:class:`~chains.jobs.sqlite_store.SqliteJobStore`, the embedded store (one file in the chain's
state folder, nothing to install), and :class:`~chains.jobs.postgres_store.PostgresJobStore`,
the store a chain shares across machines (docs/jobs.md says why PostgreSQL).

>>> import tempfile, pathlib
>>> from chains.jobs.sqlite_store import SqliteJobStore
>>> store = SqliteJobStore(pathlib.Path(tempfile.mkdtemp()) / "jobs.sqlite")
>>> job = store.submit(AsyncRequest(model_input={"x": 1}), b'{"x": 1}', now=0.0)
>>> store.claim("worker-1", lease_sec=10, now=1.0).id == job.id
True
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from chains.jobs.records import AsyncRequest, Job, JobError, JobStatus, RetryConfig, WebhookStatus

__all__ = ["SCHEMA", "JobLimits", "JobRefused", "JobStore", "SqlJobStore", "new_job_id", "worker_owner"]


class JobRefused(Exception):
    """A job was not accepted; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class JobLimits:
    """The bounds of one chain's store (``CHAINS_JOBS_*`` variables, docs/jobs.md)."""

    max_queued: int = 10_000  # jobs queued or running at once
    max_input_bytes: int = 8 * 2**20  # one job's model_input, as JSON
    max_stored_bytes: int = 1 * 2**30  # inputs and outputs of every job kept
    retention_sec: float = 7 * 24 * 3600  # how long a finished job stays fetchable


class JobStore(Protocol):
    """What the server's async routes and workers need of a store; every time is a Unix time."""

    def submit(
        self, request: AsyncRequest, model_input: bytes, *, now: float, streams: bool = False
    ) -> Job: ...

    def append_events(self, job_id: str, owner: str, events: Sequence[bytes]) -> bool: ...

    def events(self, job_id: str, *, after: int, limit: int = 256) -> list[tuple[int, bytes]]: ...

    def get(self, job_id: str) -> Job | None: ...

    def recent(self, *, limit: int = 50, status: JobStatus | None = None) -> list[Job]: ...

    def claim(self, owner: str, *, lease_sec: float, now: float, job_id: str | None = None) -> Job | None: ...

    def renew(self, owner: str, job_ids: Sequence[str], *, lease_sec: float, now: float) -> set[str]: ...

    def finish(self, job_id: str, owner: str, output: bytes, *, now: float) -> bool: ...

    def fail(self, job_id: str, owner: str, error: JobError, *, retryable: bool, now: float) -> JobStatus: ...

    def release(self, job_id: str, owner: str, *, now: float) -> None: ...

    def cancel(self, job_id: str, *, now: float) -> Job | None: ...

    def mark_canceled(self, job_id: str, owner: str, *, now: float) -> None: ...

    def webhooks_due(self, *, now: float, limit: int = 16) -> list[Job]: ...

    def webhook_attempted(
        self, job_id: str, *, delivered: bool, retry_at: float | None, now: float
    ) -> None: ...

    def purge(self, *, now: float) -> int: ...


T = TypeVar("T")


def new_job_id() -> str:
    """A request id that names nothing but the job (32 hex digits, like Baseten's)."""
    return secrets.token_hex(16)


# The tables, with a database's names for integers, reals and blobs put in by ``format``.
SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    priority {int} NOT NULL,
    created {real} NOT NULL,
    status_at {real} NOT NULL,
    queue_deadline {real} NOT NULL,
    not_before {real} NOT NULL,
    model_input {blob} NOT NULL,
    webhook TEXT,
    webhook_status TEXT NOT NULL,
    webhook_attempts {int} NOT NULL DEFAULT 0,
    webhook_next {real} NOT NULL DEFAULT 0,
    retry TEXT NOT NULL,
    attempts {int} NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until {real} NOT NULL DEFAULT 0,
    cancel_requested {int} NOT NULL DEFAULT 0,
    output {blob},
    errors TEXT NOT NULL DEFAULT '[]',
    stored_bytes {int} NOT NULL,
    streams {int} NOT NULL DEFAULT 0,
    events {int} NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS job_events (
    job_id TEXT NOT NULL,
    seq {int} NOT NULL,
    data {blob} NOT NULL,
    PRIMARY KEY (job_id, seq)
);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (status, priority, created);
CREATE INDEX IF NOT EXISTS jobs_webhooks ON jobs (webhook_status, webhook_next);
"""

_ACTIVE = (JobStatus.QUEUED.value, JobStatus.IN_PROGRESS.value)
_ENDED_SENT = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.EXPIRED.value)


class SqlJobStore:
    """The store's rules in SQL, shared by the embedded store and the shared one: each write is
    one transaction that holds the store's write lock (SQLite's immediate transactions, an
    advisory lock in PostgreSQL), so two workers never claim the same job. A subclass gives
    the connection, the transaction's start, and what its driver's errors mean."""

    limits: JobLimits
    _driver_errors: tuple[type[Exception], ...] = ()

    # -- what a database gives -----------------------------------------------------------------

    def _db(self) -> Any:
        raise NotImplementedError

    def _begin(self, db: Any, durable: bool) -> None:
        """Start a write; ``durable``: on disk before it returns, even across a power loss (a
        claim or a lease renewal lost so would only be made again)."""
        raise NotImplementedError

    def _in_transaction(self, db: Any) -> bool:
        raise NotImplementedError

    def _refusal(self, exc: Exception) -> JobRefused:
        raise NotImplementedError

    def _sql(self, text: str) -> str:
        return text

    def _exec(self, db: Any, text: str, params: Sequence[object] = ()) -> Any:
        return db.execute(self._sql(text), tuple(params))

    def _fresh(self, start: Callable[[Any], T]) -> T:
        """``start(connection)``, once more on a new connection if the one held was broken
        (a shared store restarted since it was last used): nothing was done on a broken one."""
        for attempt in (1, 2):
            try:
                return start(self._db())
            except self._driver_errors as exc:
                self._lost(exc)
                if attempt == 2 or not self._was_lost(exc):
                    raise self._refusal(exc) from None
        raise AssertionError("unreachable")

    def _was_lost(self, exc: Exception) -> bool:
        """Whether ``exc`` means the connection broke (so a new one may well work)."""
        return False

    def _rows(self, text: str, params: Sequence[object] = ()) -> list[Any]:
        """A read outside a write's transaction."""
        return self._fresh(lambda db: list(self._exec(db, text, params).fetchall()))

    @contextmanager
    def _write(self, *, durable: bool = True) -> Iterator[Any]:
        def begin(db: Any) -> Any:
            self._begin(db, durable)
            return db

        db = self._fresh(begin)
        try:
            yield db
        except self._driver_errors as exc:
            self._rollback(db)
            self._lost(exc)
            raise self._refusal(exc) from None
        except BaseException:
            self._rollback(db)
            raise
        try:
            self._exec(db, "COMMIT")
        except self._driver_errors as exc:
            self._rollback(db)
            self._lost(exc)
            raise self._refusal(exc) from None

    def _rollback(self, db: Any) -> None:
        # The database may have rolled back by itself (SQLite after a full disk), or be gone.
        try:
            if self._in_transaction(db):
                self._exec(db, "ROLLBACK")
        except self._driver_errors:
            pass

    def _lost(self, exc: Exception) -> None:
        """Forget a connection that ``exc`` shows broken (the server restarted, say)."""

    # -- submitting and reading ----------------------------------------------------------------

    def submit(self, request: AsyncRequest, model_input: bytes, *, now: float, streams: bool = False) -> Job:
        limits = self.limits
        if len(model_input) > limits.max_input_bytes:
            raise JobRefused(
                413,
                f"model_input is {len(model_input)} bytes, over the limit of {limits.max_input_bytes} "
                "(CHAINS_JOBS_MAX_INPUT_BYTES)",
            )
        job_id = new_job_id()
        webhook = WebhookStatus.PENDING if request.webhook_endpoint else WebhookStatus.NO_WEBHOOK_PROVIDED
        with self._write() as db:
            active, stored = self._exec(
                db,
                "SELECT (SELECT COUNT(*) FROM jobs WHERE status IN (?, ?)),"
                " (SELECT COALESCE(SUM(stored_bytes), 0) FROM jobs)",
                _ACTIVE,
            ).fetchone()
            if active >= limits.max_queued:
                raise JobRefused(
                    503,
                    f"the job queue is full ({active} jobs queued or running, CHAINS_JOBS_MAX_QUEUED="
                    f"{limits.max_queued}); retry later",
                )
            if stored + len(model_input) > limits.max_stored_bytes:
                raise JobRefused(
                    507,
                    f"the job store holds {stored} bytes, and this job would pass its bound of "
                    f"{limits.max_stored_bytes} (CHAINS_JOBS_MAX_STORED_BYTES); retry once older "
                    "jobs are fetched and retired",
                )
            self._exec(
                db,
                "INSERT INTO jobs (id, status, priority, created, status_at, queue_deadline,"
                " not_before, model_input, webhook, webhook_status, retry, stored_bytes, streams)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    JobStatus.QUEUED.value,
                    request.priority,
                    now,
                    now,
                    now + request.max_time_in_queue_seconds,
                    now,
                    model_input,
                    request.webhook_endpoint,
                    webhook.value,
                    request.retry.model_dump_json(),
                    len(model_input),
                    int(streams),
                ),
            )
        job = self.get(job_id)
        assert job is not None
        return job

    def get(self, job_id: str) -> Job | None:
        rows = self._rows(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def recent(self, *, limit: int = 50, status: JobStatus | None = None) -> list[Job]:
        if status is None:
            rows = self._rows(f"SELECT {_COLUMNS} FROM jobs ORDER BY created DESC LIMIT ?", (limit,))
        else:
            rows = self._rows(
                f"SELECT {_COLUMNS} FROM jobs WHERE status = ? ORDER BY created DESC LIMIT ?",
                (status.value, limit),
            )
        return [_job(row) for row in rows]

    def events(self, job_id: str, *, after: int, limit: int = 256) -> list[tuple[int, bytes]]:
        """A streaming job's events numbered above ``after``, in order."""
        rows = self._rows(
            "SELECT seq, data FROM job_events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (job_id, after, limit),
        )
        return [(int(seq), bytes(data)) for seq, data in rows]

    # -- running -------------------------------------------------------------------------------

    def claim(self, owner: str, *, lease_sec: float, now: float, job_id: str | None = None) -> Job | None:
        """The next job to run (lowest priority value, then oldest), leased to ``owner``; jobs
        past their time in the queue expire, and jobs whose worker stopped renewing its lease
        (or whose worker on this machine is gone) are taken back first.

        ``job_id`` claims that job only, if it is still queued: a resumable stream runs at once,
        not behind the queue (chains.server.resumable)."""
        wanted = job_id  # the loop below names each lost job job_id
        with self._write(durable=False) as db:
            self._exec(
                db,
                "UPDATE jobs SET status = ?, status_at = ?, errors = ?"
                " WHERE status = ? AND queue_deadline < ?",
                (JobStatus.EXPIRED.value, now, _EXPIRED, JobStatus.QUEUED.value, now),
            )
            self._mark_webhooks_for_terminal(db, now)
            lost = self._exec(
                db,
                "SELECT id, lease_owner, lease_until, attempts, retry FROM jobs WHERE status = ?",
                (JobStatus.IN_PROGRESS.value,),
            ).fetchall()
            for job_id, lease_owner, lease_until, attempts, retry_json in lost:
                if lease_until >= now and not _owner_is_gone(lease_owner):
                    continue
                retry = RetryConfig.model_validate_json(retry_json)
                error = JobError(
                    "WORKER_LOST",
                    f"the chainlet running it stopped during attempt {attempts} of {retry.max_attempts}",
                )
                self._fail_locked(db, job_id, attempts, retry, error, retryable=True, now=now)
            if wanted is None:
                row = self._exec(
                    db,
                    "SELECT id FROM jobs WHERE status = ? AND not_before <= ?"
                    " ORDER BY priority, created LIMIT 1",
                    (JobStatus.QUEUED.value, now),
                ).fetchone()
            else:
                row = self._exec(
                    db, "SELECT id FROM jobs WHERE status = ? AND id = ?", (JobStatus.QUEUED.value, wanted)
                ).fetchone()
            if row is None:
                return None
            self._exec(
                db,
                "UPDATE jobs SET status = ?, status_at = ?, attempts = attempts + 1, lease_owner = ?,"
                " lease_until = ? WHERE id = ?",
                (JobStatus.IN_PROGRESS.value, now, owner, now + lease_sec, row[0]),
            )
        return self.get(row[0])

    def renew(self, owner: str, job_ids: Sequence[str], *, lease_sec: float, now: float) -> set[str]:
        """Extend ``owner``'s leases; returns the ids among them whose cancellation was asked."""
        if not job_ids:
            return set()
        marks = ",".join("?" * len(job_ids))
        with self._write(durable=False) as db:
            self._exec(
                db,
                f"UPDATE jobs SET lease_until = ? WHERE lease_owner = ? AND status = ? AND id IN ({marks})",
                (now + lease_sec, owner, JobStatus.IN_PROGRESS.value, *job_ids),
            )
            rows = self._exec(
                db, f"SELECT id FROM jobs WHERE cancel_requested = 1 AND id IN ({marks})", tuple(job_ids)
            ).fetchall()
        return {row[0] for row in rows}

    def append_events(self, job_id: str, owner: str, events: Sequence[bytes]) -> bool:
        """Add a streaming job's next events (numbered on from its last), if ``owner`` still
        holds the job; they count against the stored bytes like an output."""
        with self._write() as db:
            rows = self._exec(
                db,
                "SELECT events FROM jobs WHERE id = ? AND lease_owner = ? AND status = ?",
                (job_id, owner, _RUNNING),
            ).fetchall()
            if not rows:
                return False
            first = int(rows[0][0]) + 1
            rows = [(job_id, first + offset, data) for offset, data in enumerate(events)]
            db.executemany(self._sql("INSERT INTO job_events (job_id, seq, data) VALUES (?, ?, ?)"), rows)
            self._exec(
                db,
                "UPDATE jobs SET events = events + ?, stored_bytes = stored_bytes + ? WHERE id = ?",
                (len(events), sum(len(e) for e in events), job_id),
            )
        return True

    def finish(self, job_id: str, owner: str, output: bytes, *, now: float) -> bool:
        """Store the result and mark the job done, if ``owner`` still holds it."""
        with self._write() as db:
            done = self._exec(
                db,
                "UPDATE jobs SET status = ?, status_at = ?, output = ?, stored_bytes = stored_bytes + ?,"
                " lease_owner = NULL, errors = '[]' WHERE id = ? AND lease_owner = ? AND status = ?",
                (
                    JobStatus.SUCCEEDED.value,
                    now,
                    output,
                    len(output),
                    job_id,
                    owner,
                    JobStatus.IN_PROGRESS.value,
                ),
            ).rowcount
            self._mark_webhooks_for_terminal(db, now)
        return bool(done == 1)

    def fail(self, job_id: str, owner: str, error: JobError, *, retryable: bool, now: float) -> JobStatus:
        """An attempt failed: the job runs again later (per its retry config) or fails for good."""
        with self._write() as db:
            row = self._exec(
                db,
                "SELECT attempts, retry FROM jobs WHERE id = ? AND lease_owner = ? AND status = ?",
                (job_id, owner, JobStatus.IN_PROGRESS.value),
            ).fetchone()
            if row is None:
                return JobStatus.FAILED
            status = self._fail_locked(
                db,
                job_id,
                row[0],
                RetryConfig.model_validate_json(row[1]),
                error,
                retryable=retryable,
                now=now,
            )
            self._mark_webhooks_for_terminal(db, now)
        return status

    def _fail_locked(
        self,
        db: Any,
        job_id: str,
        attempts: int,
        retry: RetryConfig,
        error: JobError,
        *,
        retryable: bool,
        now: float,
    ) -> JobStatus:
        if retryable and attempts < retry.max_attempts:
            self._exec(
                db,
                "UPDATE jobs SET status = ?, status_at = ?, lease_owner = NULL, not_before = ?, errors = ?"
                " WHERE id = ?",
                (JobStatus.QUEUED.value, now, now + retry.delay(attempts), _errors_json([error]), job_id),
            )
            return JobStatus.QUEUED
        self._exec(
            db,
            "UPDATE jobs SET status = ?, status_at = ?, lease_owner = NULL, errors = ? WHERE id = ?",
            (JobStatus.FAILED.value, now, _errors_json([error]), job_id),
        )
        return JobStatus.FAILED

    def release(self, job_id: str, owner: str, *, now: float) -> None:
        """Give a job back unfinished (its server is shutting down): the attempt does not count."""
        with self._write() as db:
            self._exec(
                db,
                "UPDATE jobs SET status = ?, status_at = ?, lease_owner = NULL,"
                " attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END"
                " WHERE id = ? AND lease_owner = ? AND status = ?",
                (JobStatus.QUEUED.value, now, job_id, owner, JobStatus.IN_PROGRESS.value),
            )

    def cancel(self, job_id: str, *, now: float) -> Job | None:
        """Cancel a job: a queued one at once, a running one by asking its worker to stop."""
        with self._write() as db:
            self._exec(
                db,
                "UPDATE jobs SET status = ?, status_at = ?, webhook_status = CASE WHEN webhook IS NULL"
                " THEN webhook_status ELSE ? END WHERE id = ? AND status = ?",
                (JobStatus.CANCELED.value, now, WebhookStatus.CANCELED.value, job_id, JobStatus.QUEUED.value),
            )
            self._exec(
                db,
                "UPDATE jobs SET cancel_requested = 1 WHERE id = ? AND status = ?",
                (job_id, JobStatus.IN_PROGRESS.value),
            )
        return self.get(job_id)

    def mark_canceled(self, job_id: str, owner: str, *, now: float) -> None:
        with self._write() as db:
            self._exec(
                db,
                "UPDATE jobs SET status = ?, status_at = ?, lease_owner = NULL, webhook_status = CASE"
                " WHEN webhook IS NULL THEN webhook_status ELSE ? END"
                " WHERE id = ? AND lease_owner = ? AND status = ?",
                (
                    JobStatus.CANCELED.value,
                    now,
                    WebhookStatus.CANCELED.value,
                    job_id,
                    owner,
                    JobStatus.IN_PROGRESS.value,
                ),
            )

    # -- webhooks and retention ----------------------------------------------------------------

    def _mark_webhooks_for_terminal(self, db: Any, now: float) -> None:
        # A webhook is due once its job has ended (canceled ones are not sent).
        self._exec(
            db,
            "UPDATE jobs SET webhook_next = ?"
            " WHERE webhook_status = ? AND webhook_next = 0 AND status IN (?, ?, ?)",
            (now, WebhookStatus.PENDING.value, *_ENDED_SENT),
        )

    def webhooks_due(self, *, now: float, limit: int = 16) -> list[Job]:
        rows = self._rows(
            f"SELECT {_COLUMNS} FROM jobs WHERE webhook_status = ? AND webhook_next > 0 AND webhook_next <= ?"
            " ORDER BY webhook_next LIMIT ?",
            (WebhookStatus.PENDING.value, now, limit),
        )
        return [_job(row) for row in rows]

    def webhook_attempted(self, job_id: str, *, delivered: bool, retry_at: float | None, now: float) -> None:
        """Record a delivery: done, due again at ``retry_at``, or (``retry_at`` None) given up."""
        if delivered:
            status, next_at = WebhookStatus.SUCCEEDED, 0.0
        elif retry_at is None:
            status, next_at = WebhookStatus.FAILED, 0.0
        else:
            status, next_at = WebhookStatus.PENDING, retry_at
        with self._write(durable=False) as db:
            self._exec(
                db,
                "UPDATE jobs SET webhook_status = ?, webhook_next = ?,"
                " webhook_attempts = webhook_attempts + 1 WHERE id = ?",
                (status.value, next_at, job_id),
            )

    def purge(self, *, now: float) -> int:
        """Forget jobs that ended longer ago than the retention; returns how many."""
        with self._write() as db:
            purged = int(
                self._exec(
                    db,
                    "DELETE FROM jobs WHERE status NOT IN (?, ?) AND status_at < ? AND webhook_status != ?",
                    (*_ACTIVE, now - self.limits.retention_sec, WebhookStatus.PENDING.value),
                ).rowcount
            )
            if purged:
                self._exec(db, "DELETE FROM job_events WHERE job_id NOT IN (SELECT id FROM jobs)")
        return purged


_COLUMNS = (
    "id, status, priority, created, status_at, queue_deadline, model_input, webhook, webhook_status,"
    " retry, attempts, output, errors, cancel_requested, webhook_attempts, streams, events"
)


def _job(row: tuple[object, ...]) -> Job:
    job_id, status, priority, created, status_at, deadline, model_input, webhook, hook = row[:9]
    retry, attempts, output, errors, cancel, webhook_attempts, streams, events = row[9:]
    return Job(
        id=str(job_id),
        status=JobStatus(status),
        priority=int(priority),  # type: ignore[call-overload]
        created=float(created),  # type: ignore[arg-type]
        status_at=float(status_at),  # type: ignore[arg-type]
        queue_deadline=float(deadline),  # type: ignore[arg-type]
        model_input=bytes(model_input),  # type: ignore[call-overload]
        webhook=str(webhook) if webhook is not None else None,
        webhook_status=WebhookStatus(hook),
        retry=RetryConfig.model_validate_json(str(retry)),
        attempts=int(attempts),  # type: ignore[call-overload]
        output=bytes(output) if output is not None else None,  # type: ignore[call-overload]
        errors=tuple(JobError.from_json(e) for e in json.loads(str(errors))),
        cancel_requested=bool(cancel),
        webhook_attempts=int(webhook_attempts),  # type: ignore[call-overload]
        streams=bool(streams),
        events=int(events),  # type: ignore[call-overload]
    )


def _errors_json(errors: Sequence[JobError]) -> str:
    return json.dumps([error.as_json() for error in errors])


_RUNNING = JobStatus.IN_PROGRESS.value
_EXPIRED = _errors_json([JobError("EXPIRED", "the job waited in the queue past max_time_in_queue_seconds")])


def _owner_is_gone(owner: object) -> bool:
    """Whether a lease's owner was a process on this machine that no longer runs. An owner is
    ``host:pid:start``; a process elsewhere is judged by its lease's time alone."""
    if not isinstance(owner, str):
        return True
    host, _, rest = owner.partition(":")
    pid_text, _, started = rest.partition(":")
    if host != os.uname().nodename or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # The pid runs, but it may be a new process that got the old one's number.
    return started != "" and started != _process_start(pid)


def _process_start(pid: int) -> str:
    """The start time of ``pid`` in clock ticks since boot (Linux), or '' where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def worker_owner() -> str:
    """This process's name as a lease owner."""
    pid = os.getpid()
    return f"{os.uname().nodename}:{pid}:{_process_start(pid)}"
