"""The local trace store: the recent traces of one chain in a SQLite file, and how to read them.

``chains push`` (the local target) points every chainlet at ``$CHAINS_HOME/<chain>/traces.sqlite``;
each chainlet process writes the spans it ends there (:mod:`chains.tracing.export`), and the file
keeps the last ``CHAINS_TRACE_KEEP`` traces (1000 by default). SQLite, in WAL mode, lets the
chainlets write at once and a reader (``chains trace``, a dashboard) read meanwhile; a file needs no
process of its own, so traces outlive a crash, a restart or a re-push of the chain.

Reading needs neither OpenTelemetry nor a running chain::

    from chains.targets.state import chain_dir
    from chains.tracing import store

    path = store.store_path(chain_dir("hello"))
    for summary in store.recent_traces(path):
        print(summary.request_id, summary.duration_ms, summary.services)
    spans = store.trace_spans(path, "4bf92f3577b34da6a3ce929d0e0e4736")
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import closing, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Row",
    "SpanRecord",
    "SpanWriter",
    "TraceSummary",
    "recent_traces",
    "row_of",
    "store_path",
    "trace_spans",
    "write_spans",
]

STORE_FILE = "traces.sqlite"
# spans.BATCH_SIZE, spelled here so that reading the store needs no OpenTelemetry.
_BATCH_SIZE = "chains.batch.size"
_BUSY_TIMEOUT_MS = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    trace_id TEXT PRIMARY KEY,
    request_id TEXT NOT NULL DEFAULT '',
    start_ns INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_start ON traces (start_ns);
CREATE INDEX IF NOT EXISTS traces_request ON traces (request_id);
CREATE TABLE IF NOT EXISTS spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    parent_id TEXT NOT NULL DEFAULT '',
    name TEXT NOT NULL,
    service TEXT NOT NULL,
    kind TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    status TEXT NOT NULL,
    status_message TEXT NOT NULL DEFAULT '',
    attributes TEXT NOT NULL,
    events TEXT NOT NULL,
    PRIMARY KEY (trace_id, span_id)
);
"""


@dataclass(frozen=True)
class SpanRecord:
    """One span as stored: ids are lower-case hex, times nanoseconds since the epoch.

    ``kind`` is OpenTelemetry's (``server``, ``client``, ``internal``...), ``status`` one of
    ``unset``, ``ok`` and ``error``; ``events`` are ``{"name", "time_ns", "attributes"}`` dicts.
    """

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    service: str
    kind: str
    start_ns: int
    end_ns: int
    status: str
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def request_id(self) -> str:
        return str(self.attributes.get("chains.request_id", ""))

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def to_json(self) -> dict[str, Any]:
        """Plain data, for a JSON answer."""
        return {**asdict(self), "duration_ms": self.duration_ms}


@dataclass(frozen=True)
class TraceSummary:
    """One trace in a list of recent ones."""

    trace_id: str
    request_id: str
    start_ns: int
    end_ns: int
    spans: int
    errors: int
    services: tuple[str, ...]
    root: str  # the name of its first span

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "services": list(self.services), "duration_ms": self.duration_ms}


def store_path(chain_folder: Path) -> Path:
    """The store of the chain whose state is kept in ``chain_folder``
    (``chains.targets.state.chain_dir(name)``, that is ``$CHAINS_HOME/<name>``)."""
    return chain_folder / STORE_FILE


def _connect(path: Path, check_same_thread: bool = True) -> sqlite3.Connection:
    connection = sqlite3.connect(
        path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=check_same_thread
    )
    connection.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    return connection


# One row of the spans table: the fields of a SpanRecord in its order, attributes and events
# as JSON text.
Row = tuple[str, str, str, str, str, str, int, int, str, str, str, str]

# One encoder for every row: json.dumps with an argument other than the object makes an
# encoder per call, about a microsecond of each span's row.
encode_json = json.JSONEncoder(default=str).encode
NO_EVENTS = "[]"

# The W3C tracestate key by which a trace's root tells every hop whether this store keeps the
# trace (``store``) or only its errors and slow calls (``skip``); see chains.tracing.spans.
STORE_KEY = "chains"
SKIP = "skip"


def row_of(span: SpanRecord) -> Row:
    """``span`` as a row of the spans table."""
    return (
        span.trace_id,
        span.span_id,
        span.parent_id,
        span.name,
        span.service,
        span.kind,
        span.start_ns,
        span.end_ns,
        span.status,
        span.status_message,
        encode_json(span.attributes),
        encode_json(span.events) if span.events else NO_EVENTS,
    )


class SpanWriter:
    """Adds spans to the store at ``path`` (created if missing), keeping its ``keep`` most recent
    traces. Several processes may write one store at once; one writer is used by one thread at a
    time (an exporter's), over one connection kept open::

        with closing(SpanWriter(Path("traces.sqlite"), keep=1000)) as writer:
            writer.write(spans)
    """

    def __init__(self, path: Path, keep: int) -> None:
        self.path = path
        self.keep = keep
        self._db: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Owner-only, as the chain's state is: spans hold exception messages and request
            # ids. SQLite gives the WAL and shared-memory files the database file's mode.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            for file in (self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm"))):
                with suppress(FileNotFoundError):  # a store older than this rule
                    os.chmod(file, 0o600)
            db = _connect(self.path, check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode = WAL")
                db.executescript(_SCHEMA)
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def write(self, spans: Sequence[SpanRecord]) -> None:
        self.write_rows([row_of(span) for span in spans], [span.request_id for span in spans])

    def write_rows(self, rows: Sequence[Row], request_ids: Sequence[str]) -> None:
        """Write spans already in the table's form (:func:`row_of`), with each one's request
        id, in one transaction."""
        if not rows:
            return
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR REPLACE INTO spans VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            # A trace starts when its earliest span does; its request id is that of any span.
            db.executemany(
                "INSERT INTO traces VALUES (?, ?, ?) ON CONFLICT (trace_id) DO UPDATE SET "
                "start_ns = min(start_ns, excluded.start_ns), "
                "request_id = CASE WHEN request_id = '' THEN excluded.request_id ELSE request_id END",
                [(row[0], rid, row[6]) for row, rid in zip(rows, request_ids, strict=True)],
            )
            stale = "SELECT trace_id FROM traces ORDER BY start_ns DESC LIMIT -1 OFFSET ?"
            db.execute(f"DELETE FROM spans WHERE trace_id IN ({stale})", (self.keep,))
            db.execute(f"DELETE FROM traces WHERE trace_id IN ({stale})", (self.keep,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def write_spans(path: Path, spans: Sequence[SpanRecord], keep: int) -> None:
    """Add ``spans`` to the store at ``path`` once (see :class:`SpanWriter` to write many times)."""
    with closing(SpanWriter(path, keep)) as writer:
        writer.write(spans)


def recent_traces(path: Path, limit: int = 20, *, batches: bool = True) -> list[TraceSummary]:
    """The ``limit`` most recent traces in the store, newest first (none when there is no store).

    Without ``batches``, the traces of ``@chains.batched`` batches are left out: each is a
    trace of its own, linked with the requests it served, and would list as many rows again.
    """
    if not path.exists():
        return []
    with closing(_connect(path)) as db:
        if not _has_tables(db):
            return []
        rows = db.execute(
            "SELECT t.trace_id, t.request_id, t.start_ns, max(s.end_ns), count(s.span_id), "
            "sum(s.status = 'error'), group_concat(DISTINCT s.service), "
            "(SELECT name FROM spans f WHERE f.trace_id = t.trace_id ORDER BY f.start_ns LIMIT 1) "
            "FROM traces t JOIN spans s ON s.trace_id = t.trace_id "
            "WHERE ? OR NOT EXISTS (SELECT 1 FROM spans b WHERE b.trace_id = t.trace_id "
            "AND b.parent_id = '' AND b.name LIKE '%.batch' AND instr(b.attributes, ?) > 0) "
            "GROUP BY t.trace_id ORDER BY t.start_ns DESC LIMIT ?",
            (batches, json.dumps(_BATCH_SIZE), limit),
        ).fetchall()
    return [
        TraceSummary(
            trace_id=row[0],
            request_id=row[1],
            start_ns=row[2],
            end_ns=row[3],
            spans=row[4],
            errors=row[5] or 0,
            services=tuple(sorted((row[6] or "").split(","))),
            root=row[7] or "",
        )
        for row in rows
    ]


def trace_spans(path: Path, request_or_trace_id: str) -> list[SpanRecord]:
    """Every span of the trace of a request id (or of a trace id), in start order; [] if unknown.

    A unique prefix of either id is enough.
    """
    wanted = request_or_trace_id.strip().lower()
    if not wanted or not path.exists():
        return []
    with closing(_connect(path)) as db:
        if not _has_tables(db):
            return []
        found = db.execute(
            "SELECT trace_id FROM traces WHERE request_id = ? OR trace_id = ? LIMIT 1", (wanted, wanted)
        ).fetchone()
        if found is None:
            prefixed = db.execute(
                "SELECT trace_id FROM traces "
                "WHERE substr(request_id, 1, ?) = ? OR substr(trace_id, 1, ?) = ? LIMIT 2",
                (len(wanted), wanted, len(wanted), wanted),
            ).fetchall()
            if len(prefixed) != 1:
                return []
            found = prefixed[0]
        rows = db.execute(
            "SELECT * FROM spans WHERE trace_id = ? ORDER BY start_ns, end_ns DESC", (found[0],)
        ).fetchall()
    return [_span(row) for row in rows]


def _span(row: Iterable[Any]) -> SpanRecord:
    (trace_id, span_id, parent_id, name, service, kind, start, end, status, message, attrs, events) = row
    return SpanRecord(
        trace_id, span_id, parent_id, name, service, kind, start, end, status, message,
        json.loads(attrs), json.loads(events),
    )  # fmt: skip


def _has_tables(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = 'spans'").fetchone() is not None
