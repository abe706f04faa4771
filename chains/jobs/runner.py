"""The workers of one entrypoint process: they claim jobs from the store, run them through
the entrypoint's own ``run_remote``, store what came of it, and deliver webhooks.

Each running job holds a lease in the store that its worker renews every few seconds; the
renewal also tells the worker which of its jobs a caller asked to cancel, and the job's task
is cancelled as a disconnecting caller's call is. A process that shuts down gives its running
jobs back unfinished; one that is killed loses them to the next claim, here or on another
replica (see :mod:`chains.jobs.store`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from chains.errors import ErrorDetail
from chains.jobs import webhook
from chains.jobs.records import Job, JobError, JobStatus
from chains.jobs.store import JobRefused, JobStore, worker_owner

__all__ = ["Describe", "Invoke", "JobFailed", "JobRunner", "RunnerSettings"]

logger = logging.getLogger("chains.jobs")

# Runs one job's input through the endpoint: the output as the endpoint's JSON, or raises.
Invoke = Callable[[Job], Awaitable[bytes]]
# What a failed attempt's exception is, as POST /run_remote would have answered it.
Describe = Callable[[BaseException, Job], ErrorDetail]


class JobFailed(Exception):
    """A job's attempt failed for a reason its retries cannot mend (its input is invalid)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class RunnerSettings:
    workers: int = 2
    lease_sec: float = 15.0
    poll_sec: float = 0.5
    webhook_timeout_sec: float = 10.0
    # Deliveries go on for this long after the job ended; the result stays fetchable after.
    webhook_give_up_sec: float = 24 * 3600.0


class JobRunner:
    """Claims and runs jobs until :meth:`stop`; ``wake`` after a submit starts one at once."""

    def __init__(
        self,
        store: JobStore,
        invoke: Invoke,
        *,
        chain: str,
        webhook_secret: str | None,
        settings: RunnerSettings | None = None,
        describe: Describe | None = None,
    ) -> None:
        self.store = store
        self._describe = describe
        self.chain = chain
        self.settings = settings or RunnerSettings()
        self.owner = worker_owner()
        self._invoke = invoke
        self._secret = webhook_secret
        self._wake = asyncio.Event()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._canceled: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._claim_loop(i)) for i in range(self.settings.workers)]
        self._tasks.append(asyncio.create_task(self._renew_loop()))
        self._tasks.append(asyncio.create_task(self._webhook_loop()))

    def wake(self) -> None:
        self._wake.set()

    async def stop(self, grace_sec: float = 10.0) -> None:
        """Stop claiming; let running jobs finish for up to ``grace_sec``, then give the rest
        back to the store unfinished (a re-push drains its jobs as it drains its calls)."""
        self._stopping = True
        self._wake.set()
        running = list(self._running.values())
        if running:
            await asyncio.wait(running, timeout=grace_sec)
        for task in self._running.values():
            task.cancel()
        for task in self._tasks:
            task.cancel()
        for task in [*self._tasks, *running]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- claiming and running ------------------------------------------------------------------

    async def _claim_loop(self, index: int) -> None:
        while not self._stopping:
            try:
                job = await asyncio.to_thread(
                    self.store.claim, self.owner, lease_sec=self.settings.lease_sec, now=time.time()
                )
            except JobRefused as exc:
                logger.warning("could not claim a job: %s", exc.message)
                job = None
            if job is None or self._stopping:
                if job is not None:
                    await asyncio.to_thread(self.store.release, job.id, self.owner, now=time.time())
                    return
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.settings.poll_sec)
                continue
            task = asyncio.create_task(self._run(job))
            self._running[job.id] = task
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if self._stopping:
                    raise
            finally:
                self._running.pop(job.id, None)

    async def _run(self, job: Job, invoke: Invoke | None = None) -> None:
        logger.info("job %s: attempt %d of %d", job.id, job.attempts, job.retry.max_attempts)
        try:
            output = await (invoke or self._invoke)(job)
        except asyncio.CancelledError:
            now = time.time()
            if job.id in self._canceled:
                self._canceled.discard(job.id)
                await asyncio.to_thread(self.store.mark_canceled, job.id, self.owner, now=now)
                logger.info("job %s: canceled", job.id)
            else:
                await asyncio.to_thread(self.store.release, job.id, self.owner, now=now)
                logger.info("job %s: given back to the queue (the server is stopping)", job.id)
            raise
        except JobFailed as exc:
            await self._failed(job, JobError(exc.code, str(exc)), retryable=False)
        except Exception as exc:
            detail = self._describe(exc, job) if self._describe is not None else None
            error = JobError(type(exc).__name__, str(exc) or type(exc).__name__, detail)
            await self._failed(job, error, retryable=True)
        else:
            stored = await self._store_output(job, output)
            if stored:
                logger.info("job %s: succeeded", job.id)
                self.wake()
            else:
                logger.warning("job %s: finished after its lease was lost; its result was not kept", job.id)

    async def _store_output(self, job: Job, output: bytes) -> bool:
        """Keep the output, waiting out a full disk or a busy store: work that finished is not
        thrown away while its lease holds (the renewals go on meanwhile)."""
        delay = 0.5
        while True:
            try:
                return await asyncio.to_thread(self.store.finish, job.id, self.owner, output, now=time.time())
            except JobRefused as exc:
                logger.error("job %s: its output cannot be stored yet (%s); retrying", job.id, exc.message)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def run_now(self, job_id: str, invoke: Invoke | None = None) -> asyncio.Task[None] | None:
        """Claim the queued job ``job_id`` and run it at once, beside the workers rather than in
        one of their slots: a caller is reading its stream live (a resumable ``/run_remote``).

        ``invoke`` runs this attempt instead of the runner's own (it may bound it by the caller's
        deadline). The run's task is made in the caller's context, so it runs in the caller's
        trace. Returns that task, or None if the job could not be claimed (the server is
        stopping, or the job is no longer queued)."""
        if self._stopping:
            return None
        job = await asyncio.to_thread(
            self.store.claim, self.owner, lease_sec=self.settings.lease_sec, now=time.time(), job_id=job_id
        )
        if job is None:
            return None
        task = asyncio.create_task(self._run(job, invoke))
        self._running[job.id] = task  # renewed and cancellable as the workers' jobs are
        task.add_done_callback(lambda _: self._running.pop(job.id, None))
        return task

    def stop_claiming(self) -> None:
        """Run no new job (the server drains); running ones go on."""
        self._stopping = True
        self._wake.set()

    async def _failed(self, job: Job, error: JobError, *, retryable: bool) -> None:
        status = await asyncio.to_thread(
            self.store.fail, job.id, self.owner, error, retryable=retryable, now=time.time()
        )
        if status is JobStatus.QUEUED:
            logger.warning(
                "job %s: attempt %d failed (%s: %s); it runs again",
                job.id,
                job.attempts,
                error.code,
                error.message,
            )
        else:
            logger.warning("job %s: failed (%s: %s)", job.id, error.code, error.message)

    async def _renew_loop(self) -> None:
        period = self.settings.lease_sec / 3
        while True:
            await asyncio.sleep(period)
            ids = list(self._running)
            try:
                canceled = await asyncio.to_thread(
                    self.store.renew, self.owner, ids, lease_sec=self.settings.lease_sec, now=time.time()
                )
            except JobRefused as exc:
                logger.warning("could not renew the leases of running jobs: %s", exc.message)
                continue
            for job_id in canceled:
                task = self._running.get(job_id)
                if task is not None and job_id not in self._canceled:
                    self._canceled.add(job_id)
                    task.cancel()

    def cancel_now(self, job_id: str) -> bool:
        """Cancel a job this process runs, without waiting for the next renewal."""
        task = self._running.get(job_id)
        if task is None:
            return False
        self._canceled.add(job_id)
        task.cancel()
        return True

    # -- webhooks ------------------------------------------------------------------------------

    async def _webhook_loop(self) -> None:
        import aiohttp  # the stubs' HTTP client, already loaded in a chainlet that calls others

        timeout = aiohttp.ClientTimeout(total=self.settings.webhook_timeout_sec)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                due = await asyncio.to_thread(self.store.webhooks_due, now=time.time())
                for job in due:
                    await self._deliver(session, job)
                await asyncio.sleep(self.settings.poll_sec)

    async def _deliver(self, session: object, job: Job) -> None:
        import aiohttp

        assert isinstance(session, aiohttp.ClientSession) and job.webhook is not None
        body = webhook.payload(job, self.chain)
        headers = {"content-type": "application/json"}
        if self._secret:
            signature = webhook.sign(body, self._secret)
            headers[webhook.SIGNATURE_HEADER] = signature
            headers[webhook.CHAINS_SIGNATURE_HEADER] = signature
        try:
            async with session.post(job.webhook, data=body, headers=headers) as response:
                delivered = 200 <= response.status < 300
                reason = f"HTTP {response.status}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            delivered, reason = False, f"{type(exc).__name__}: {exc}"
        now = time.time()
        attempts = job.webhook_attempts + 1
        retry_at = None
        if not delivered and now - job.status_at < self.settings.webhook_give_up_sec:
            retry_at = now + webhook.retry_delay(attempts)
        await asyncio.to_thread(
            self.store.webhook_attempted, job.id, delivered=delivered, retry_at=retry_at, now=now
        )
        if delivered:
            logger.info("job %s: result delivered to its webhook", job.id)
        elif retry_at is None:
            logger.error(
                "job %s: webhook delivery %d failed (%s); giving up, the result stays fetchable",
                job.id,
                attempts,
                reason,
            )
        else:
            logger.warning(
                "job %s: webhook delivery %d failed (%s); retrying in %.0fs, the result stays fetchable",
                job.id,
                attempts,
                reason,
                retry_at - now,
            )
