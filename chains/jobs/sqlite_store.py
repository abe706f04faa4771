"""The embedded job store: one SQLite file, owner-only, nothing to install.

WAL mode lets the entrypoint's replicas and ``chains jobs`` use the file at once; every write
is an immediate transaction (the file's write lock, taken at its start), and
``synchronous=FULL`` puts an accepted job, a result and a stream's events on disk before the
write returns; claims and lease renewals, which a power loss would only have made again, are
written without waiting for the disk (``synchronous=NORMAL``; benchmarks/README.md, jobs).

>>> import tempfile, pathlib
>>> store = SqliteJobStore(pathlib.Path(tempfile.mkdtemp()) / "jobs.sqlite")
>>> store.recent()
[]
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from chains.jobs.store import SCHEMA, JobLimits, JobRefused, SqlJobStore

__all__ = ["SqliteJobStore"]

_BUSY_TIMEOUT_SEC = 10.0


class SqliteJobStore(SqlJobStore):
    """Jobs in the SQLite file ``path`` (created 0600: inputs and outputs are users' data)."""

    _driver_errors = (sqlite3.OperationalError,)

    def __init__(self, path: Path, limits: JobLimits | None = None) -> None:
        self.path = path
        self.limits = limits or JobLimits()
        self._local = threading.local()
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        try:
            # executescript commits by itself: the schema is its own transaction.
            self._db().executescript(SCHEMA.format(int="INTEGER", real="REAL", blob="BLOB"))
        except sqlite3.OperationalError as exc:
            raise self._refusal(exc) from None

    def _db(self) -> sqlite3.Connection:
        # One connection a thread: the server calls the store from asyncio's worker threads.
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_SEC, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            self._local.db = db
            self._local.durable = True
            for suffix in ("-wal", "-shm"):
                side = Path(f"{self.path}{suffix}")
                if side.exists():
                    side.chmod(0o600)
        return db

    def _begin(self, db: Any, durable: bool) -> None:
        if durable != getattr(self._local, "durable", True):
            db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._local.durable = durable
        db.execute("BEGIN IMMEDIATE")

    def _in_transaction(self, db: Any) -> bool:
        return bool(db.in_transaction)

    def _refusal(self, exc: Exception) -> JobRefused:
        text = str(exc)
        if "full" in text:
            return JobRefused(
                507, "the job store's disk is full: no new job is accepted until space is freed"
            )
        if "locked" in text or "busy" in text:
            return JobRefused(503, "the job store is busy; retry shortly")
        return JobRefused(503, f"the job store cannot be written: {text}")

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
