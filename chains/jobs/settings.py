"""How an entrypoint keeps and runs its async calls: read from ``CHAINS_JOBS_*`` variables.

``chains push`` points the entrypoint at ``$CHAINS_HOME/<chain>/jobs.sqlite``, outside any one
deployment's folder, so that queued jobs outlive a re-push; without ``CHAINS_JOBS_STORE`` (a
chainlet server started by hand, say) the async routes are off.

>>> JobSettings.from_env({"CHAINS_JOBS_STORE": "/srv/jobs.sqlite", "CHAINS_JOB_WORKERS": "4"}).workers
4
>>> JobSettings.from_env({}) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from chains.environ import positive_number
from chains.jobs.store import JobLimits, JobStore

__all__ = ["JOBS_STORE_ENV", "WEBHOOK_SECRET_ENV", "JobSettings"]

JOBS_STORE_ENV = "CHAINS_JOBS_STORE"
WEBHOOK_SECRET_ENV = "CHAINS_WEBHOOK_SECRET"


@dataclass(frozen=True)
class JobSettings:
    store: str  # a file's path (SQLite), or a postgresql:// URL
    limits: JobLimits = field(default_factory=JobLimits)
    workers: int = 2
    run_timeout_sec: float = 3600.0  # one attempt's time, as Baseten's one hour
    webhook_secret: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobSettings | None:
        where = env.get(JOBS_STORE_ENV, "")
        if where in ("", "off"):
            return None

        base = JobLimits()
        limits = JobLimits(
            max_queued=int(positive_number(env, "CHAINS_JOBS_MAX_QUEUED", base.max_queued)),
            max_input_bytes=int(positive_number(env, "CHAINS_JOBS_MAX_INPUT_BYTES", base.max_input_bytes)),
            max_stored_bytes=int(positive_number(env, "CHAINS_JOBS_MAX_STORED_BYTES", base.max_stored_bytes)),
            retention_sec=positive_number(env, "CHAINS_JOBS_RETENTION_SEC", base.retention_sec),
        )
        return cls(
            store=where,
            limits=limits,
            workers=int(positive_number(env, "CHAINS_JOB_WORKERS", 2)),
            run_timeout_sec=positive_number(env, "CHAINS_JOB_TIMEOUT_SEC", 3600.0),
            webhook_secret=env.get(WEBHOOK_SECRET_ENV) or None,
        )

    def open_store(self, chain: str) -> JobStore:
        """The store these settings name, opened (its tables made if new)."""
        from chains.jobs.postgres_store import PostgresJobStore, is_postgres_url

        if is_postgres_url(self.store):
            return PostgresJobStore(self.store, chain, self.limits)
        from chains.jobs.sqlite_store import SqliteJobStore

        return SqliteJobStore(Path(self.store), self.limits)
