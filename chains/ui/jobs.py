"""The dashboard's jobs view: a chain's async calls, read from its job store as the entrypoint's
async routes read it (docs/jobs.md).

The store is the one the running deployment's entrypoint was given (``CHAINS_JOBS_STORE`` in
its recorded environment: the chain's ``jobs.sqlite``, or a ``postgresql://`` URL). Reading it
directly shows the jobs while the chain is down too, and needs no key::

    jobs = ChainJobs()
    jobs.recent(view.state, limit=20)  # [] when the chain keeps no jobs
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from chains.jobs.records import Job, JobStatus
from chains.jobs.settings import JOBS_STORE_ENV, JobSettings
from chains.jobs.store import JobStore
from chains.targets.state import ChainState, Deployment, chain_dir

__all__ = ["ChainJobs", "job_json"]

_EVENTS_SHOWN = 200  # a streaming job's first events, in its detail
_OUTPUT_SHOWN = 64 * 1024  # bytes of a result shown in the page, at most


def job_json(job: Job, chain: str) -> dict[str, Any]:
    """One job as the page lists it: the status the async routes answer, and its times as
    seconds since the epoch (``started`` while it runs, ``finished`` once it ended; the store
    keeps the time of its last change of status)."""
    running = job.status is JobStatus.IN_PROGRESS
    return {
        **job.status_json(chain),
        "created": job.created,
        "started": job.status_at if running else None,
        "finished": job.status_at if job.status.is_terminal else None,
        "streams": job.streams,
        "events": job.events,
        "webhook": job.webhook is not None,
    }


class ChainJobs:
    """The job store of a chain's running deployment, opened once per place it names."""

    def __init__(self) -> None:
        self._stores: dict[str, JobStore] = {}
        self._lock = threading.Lock()  # called from asyncio's worker threads

    def store(self, state: ChainState) -> JobStore | None:
        """The store of ``state``'s entrypoint; None when it keeps no jobs (async calls off, a
        target that serves none, or a store file not made yet: nothing was ever submitted)."""
        where = _store_of(state)
        if where is None:
            return None
        with self._lock:
            store = self._stores.get(where)
            if store is None:
                settings = JobSettings(store=where)
                if "://" not in where and not Path(where).exists():
                    return None  # opening would make the file: wait for the first job to
                store = self._stores[where] = settings.open_store(state.chain)
            return store

    def recent(
        self, state: ChainState, limit: int, status: JobStatus | None = None
    ) -> list[dict[str, Any]] | None:
        """The newest ``limit`` jobs, newest first; None when the chain keeps no jobs."""
        store = self.store(state)
        if store is None:
            return None
        return [job_json(job, state.chain) for job in store.recent(limit=limit, status=status)]

    def detail(self, state: ChainState, job_id: str) -> dict[str, Any] | None:
        """One job with its result (or, for a streaming job, its first events), None if unknown."""
        store = self.store(state)
        job = store.get(job_id) if store is not None else None
        if job is None or store is None:
            return None
        shown = job_json(job, state.chain)
        if job.streams:
            events = store.events(job.id, after=0, limit=_EVENTS_SHOWN)
            shown["stream"] = [{"id": seq, "text": data.decode("utf-8", "replace")} for seq, data in events]
        elif job.output is not None:
            text = job.output[:_OUTPUT_SHOWN].decode("utf-8", "replace")
            try:
                shown["output"] = json.loads(text)
            except ValueError:
                shown["output_text"] = text  # cut at the page's bound, or not JSON
        return shown


def _store_of(state: ChainState) -> str | None:
    recorded = chain_dir(state.chain) / "deployments" / state.deployment / "deployment.json"
    try:
        deployment = Deployment.model_validate_json(recorded.read_text())
    except (OSError, ValueError):
        return None  # a target that records no deployment (docker, swarm) serves no async routes
    entry = next((c for c in deployment.chainlets if c.is_entrypoint), None)
    where = entry.env.get(JOBS_STORE_ENV, "") if entry is not None else ""
    return None if where in ("", "off") else where
