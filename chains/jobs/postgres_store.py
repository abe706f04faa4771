"""The shared job store: PostgreSQL, for a chain whose entrypoint runs on several machines.

Why PostgreSQL: a job's life is a few rows changed together (a claim expires old jobs, takes
back lost leases and leases the next job in one step), which a SQL transaction gives as it is;
the store's rules are then the embedded store's own SQL (:class:`~chains.jobs.store.SqlJobStore`),
so both are tested with the same tests, and an accepted job is as durable as PostgreSQL's
commit. Each chain's tables live in a schema of their own (``chains_<name>``); each write
holds a transaction-scoped advisory lock of that schema, as SQLite's immediate transactions
hold the file's.

Named by a URL: ``CHAINS_JOBS_STORE=postgresql://user:password@host:5432/db``.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from chains.jobs.store import SCHEMA, JobLimits, JobRefused, SqlJobStore

__all__ = ["PostgresJobStore", "is_postgres_url"]

_LOCK = "SELECT pg_advisory_xact_lock(hashtext(current_schema()))"


def is_postgres_url(where: str) -> bool:
    return where.startswith(("postgresql://", "postgres://"))


class PostgresJobStore(SqlJobStore):
    """Chain ``chain``'s jobs in the PostgreSQL database at ``url``."""

    def __init__(self, url: str, chain: str, limits: JobLimits | None = None) -> None:
        import psycopg  # the ``postgres`` extra; only a chain that names such a store loads it

        self._psycopg = psycopg
        self._driver_errors = (psycopg.Error,)
        self.url = url
        self.schema = "chains_" + re.sub(r"[^a-z0-9_]", "_", chain.lower())
        self.limits = limits or JobLimits()
        self._local = threading.local()
        db = self._db(create=True)
        try:
            with db.transaction():
                db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))
                db.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                db.execute(f'SET LOCAL search_path = "{self.schema}"')
                tables = SCHEMA.format(int="BIGINT", real="DOUBLE PRECISION", blob="BYTEA")
                for statement in tables.split(";"):
                    if statement.strip():
                        db.execute(statement)
        except psycopg.Error as exc:
            self._lost(exc)
            raise self._refusal(exc) from None

    def _db(self, create: bool = False) -> Any:
        db = getattr(self._local, "db", None)
        if db is None:
            options = "" if create else f"-c search_path={self.schema}"
            try:
                db = self._psycopg.connect(self.url, autocommit=True, connect_timeout=5, options=options)
            except self._psycopg.Error as exc:
                raise self._refusal(exc) from None
            if not create:
                self._local.db = db
        return db

    def _sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def _begin(self, db: Any, durable: bool) -> None:
        db.execute("BEGIN")
        if not durable:
            db.execute("SET LOCAL synchronous_commit = off")  # a claim lost so is made again
        db.execute(_LOCK)

    def _in_transaction(self, db: Any) -> bool:
        status = db.info.transaction_status
        return bool(status != self._psycopg.pq.TransactionStatus.IDLE)

    def _refusal(self, exc: Exception) -> JobRefused:
        if isinstance(exc, JobRefused):
            return exc
        errors = self._psycopg.errors
        if isinstance(exc, errors.DiskFull):
            return JobRefused(
                507, "the job store's disk is full: no new job is accepted until space is freed"
            )
        if isinstance(exc, self._psycopg.OperationalError):
            return JobRefused(503, f"the job store is unreachable: {str(exc).strip()}; retry shortly")
        return JobRefused(503, f"the job store cannot be written: {str(exc).strip()}")

    def _was_lost(self, exc: Exception) -> bool:
        return isinstance(exc, self._psycopg.OperationalError)

    def _lost(self, exc: Exception) -> None:
        db = getattr(self._local, "db", None)
        if db is not None and (db.closed or db.broken or isinstance(exc, self._psycopg.OperationalError)):
            db.close()
            self._local.db = None

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
