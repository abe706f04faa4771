"""The entrypoint's async routes: Baseten's async API over the chain's job store.

- ``POST /async_run_remote``: ``{"model_input": {...}, "webhook_endpoint", "priority",
  "max_time_in_queue_seconds", "inference_retry_config"}`` → ``{"request_id": "..."}``, once
  the job is on disk;
- ``GET /async_request/{id}``: its status, with Baseten's fields;
- ``GET /async_request/{id}/output``: its result, as ``POST /run_remote`` would have answered;
- ``GET /async_request/{id}/events``: a streaming job's events as server-sent events, each with
  its number as its ``id``, live while it runs and afterwards; a reader that comes back with
  ``Last-Event-ID`` (an ``EventSource`` does so by itself) gets the rest, never a second run;
- ``DELETE /async_request/{id}``: cancel it, queued or running;
- ``GET /async_request``: the latest jobs (``?status=QUEUED&limit=20``).

They take the same credentials as ``/run_remote``. Workers in this process run the jobs
(:mod:`chains.jobs.runner`); see docs/jobs.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any
from urllib.parse import parse_qs

import pydantic

from chains import codec
from chains.call_context import CallContext, serving_call
from chains.errors import DeadlineExceeded, ErrorDetail
from chains.jobs.records import AsyncRequest, Job, JobStatus
from chains.jobs.runner import JobFailed, JobRunner, RunnerSettings
from chains.jobs.store import JobRefused, JobStore
from chains.model import ChainletSpec
from chains.server.asgi import (
    BodyTooLarge,
    ClientGone,
    Receive,
    Scope,
    Send,
    header_map,
    read_body,
    send_bytes,
    send_json,
)
from chains.server.credentials import Credentials
from chains.server.deadline import within_deadline
from chains.server.request import StreamCount
from chains.streaming import shape_of
from chains.streaming.forms import encode_sse
from chains.wire import ASYNC_REQUEST, ASYNC_RUN_REMOTE

__all__ = ["JobRoutes"]


_JSON = b"application/json"
_EVENT_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_QUEUED_EVENTS = 1024  # events a streaming job may run ahead of the store by
_BATCH_EVENTS = 1024  # events stored in one write, at most
# An item of a text, bytes or typed stream is an unnamed event; header, footer, end, error
# and restart are named (an SSE endpoint's own named events are not counted as items).
_NAMED_EVENT = b"event: "
_POLL_SEC = 0.05  # how often a reader asks the store for new events (another replica may write them)


class JobRoutes:
    """Serves the async routes of one entrypoint, and runs its jobs."""

    def __init__(
        self,
        spec: ChainletSpec,
        chain: str,
        store: JobStore,
        credentials: Credentials,
        invoke: Callable[[dict[str, Any]], Awaitable[Any]],
        open_stream: Callable[[dict[str, Any]], AsyncIterator[Any]],
        *,
        max_body_bytes: int,
        run_timeout_sec: float,
        webhook_secret: str | None,
        workers: int = 2,
        public_errors: bool = True,
    ) -> None:
        self.spec = spec
        self.chain = chain
        self.store = store
        self._credentials = credentials
        self._invoke_endpoint = invoke
        self._open_stream = open_stream
        self._max_body = max_body_bytes
        self._run_timeout = run_timeout_sec
        self._public_errors = public_errors
        self.runner = JobRunner(
            store,
            self._run_job,
            chain=chain,
            webhook_secret=webhook_secret,
            settings=RunnerSettings(workers=workers),
            describe=self._describe,
        )

    @staticmethod
    def handles(path: str) -> bool:
        return path in (ASYNC_RUN_REMOTE, ASYNC_REQUEST) or path.startswith(ASYNC_REQUEST + "/")

    def start(self) -> None:
        self.runner.start()

    async def stop(self, grace_sec: float) -> None:
        await self.runner.stop(grace_sec)

    # -- running one job -----------------------------------------------------------------------

    async def _run_job(self, job: Job, deadline: float | None = None) -> bytes:
        """Run one attempt of ``job``, within the run timeout and, for a resumable stream whose
        caller sent one, the caller's ``deadline`` (time.monotonic) when that comes first."""
        endpoint = self.spec.endpoint
        try:
            arguments = codec.decode_args(endpoint, job.model_input)
        except pydantic.ValidationError as exc:
            raise JobFailed("INVALID_INPUT", _errors_text(exc)) from None
        # The job's id is the call's request id in every attempt: a body that must not repeat
        # a side effect keys it by the request id (docs/jobs.md).
        run_deadline = time.monotonic() + self._run_timeout
        if deadline is not None and deadline >= run_deadline:
            deadline = None  # the run timeout comes first, and ends the run as before
        # The dependencies' calls carry the earlier of the two, as a plain call's carry its caller's.
        call = CallContext(job.id, run_deadline if deadline is None else deadline)
        with serving_call(call):
            async with asyncio.timeout(self._run_timeout):
                if endpoint.is_stream:
                    return await self._run_stream(job, arguments, deadline)
                value = await self._invoke_endpoint(arguments)
        return codec.encode_result(endpoint, value)

    def _describe(self, exc: BaseException, job: Job) -> ErrorDetail:
        """A failed attempt's error as ``POST /run_remote`` answers it: whoever may read the
        job's status sees what a caller of the entrypoint would (no tracebacks, unless the
        chain shows them), so that a client raises the same error for both."""
        detail = ErrorDetail.from_exception(exc, self.spec.name)
        if self._public_errors:
            return detail.public(job.id)
        return detail.model_copy(update={"request_id": job.id})

    async def _run_stream(self, job: Job, arguments: dict[str, Any], deadline: float | None = None) -> bytes:
        """Run a streaming job: its events, in their SSE form, go to the store as they come,
        in batches as large as the store's pace makes them (one write a batch). Past the
        caller's ``deadline`` the stream ends with its error event naming DeadlineExceeded,
        as a plain stream past its caller's deadline does."""
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=_QUEUED_EVENTS)
        writer = asyncio.create_task(self._write_events(job, queue))
        failures: list[BaseException] = []

        async def put(event: bytes | None) -> None:
            if not queue.full() and not writer.done():
                queue.put_nowait(event)
                return
            # Never wait on a full queue whose writer has stopped (its lease was lost).
            putter = asyncio.ensure_future(queue.put(event))
            await asyncio.wait({putter, writer}, return_when=asyncio.FIRST_COMPLETED)
            if not putter.done():
                putter.cancel()
            if writer.done() and (event is not None or writer.exception() is not None):
                writer.result()

        try:
            if job.events:
                # What an earlier attempt streamed stays; a reader learns that the rest starts over.
                # Any event kept before this attempt began is an earlier attempt's: one that failed
                # or lost its worker, or one a stopping server gave back unfinished, which does not
                # count among the attempts (so job.attempts may be 1 again here).
                await put(b'event: restart\ndata: {"attempt": %d}\n\n' % job.attempts)
            source = self._open_stream(arguments)
            if deadline is not None:
                expired = DeadlineExceeded(f"{self.spec.name} did not answer within the caller's deadline")
                source = within_deadline(source, deadline, expired)
            chunks = encode_sse(
                shape_of(self.spec.endpoint), source, chainlet=self.spec.name, on_error=failures.append
            )
            async with aclosing(chunks):
                async for chunk in chunks:
                    for event in chunk.split(b"\n\n")[:-1]:
                        await put(event + b"\n\n")
            await put(None)
            await writer
        finally:
            writer.cancel()
        if failures:
            raise failures[0]
        return b"null"

    async def _write_events(self, job: Job, queue: asyncio.Queue[bytes | None]) -> None:
        while True:
            batch = [await queue.get()]
            while len(batch) < _BATCH_EVENTS and not queue.empty():
                batch.append(queue.get_nowait())
            done = batch[-1] is None
            events = [event for event in batch if event is not None]
            if events:
                kept = await asyncio.to_thread(self.store.append_events, job.id, self.runner.owner, events)
                if not kept:
                    raise JobFailed("WORKER_LOST", "the job's lease was lost while it streamed")
            if done:
                return

    # -- HTTP ----------------------------------------------------------------------------------

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = header_map(scope)
        refusal = self._credentials.refusal(headers)
        if refusal is not None:
            await send_json(send, 401, {"detail": refusal})
            return
        path: str = scope["path"]
        method: str = scope["method"]
        try:
            if path == ASYNC_RUN_REMOTE:
                if method != "POST":
                    await _not_allowed(send, "POST", path)
                    return
                await self._submit(headers, receive, send)
                return
            if path == ASYNC_REQUEST:
                if method != "GET":
                    await _not_allowed(send, "GET", path)
                    return
                await self._list(scope, send)
                return
            job_id, _, rest = path[len(ASYNC_REQUEST) + 1 :].partition("/")
            if rest == "output" and method == "GET":
                await self._output(job_id, send)
            elif rest == "events" and method == "GET":
                await self._events(job_id, scope, headers, receive, send)
            elif rest == "" and method == "GET":
                await self._status(job_id, send)
            elif rest == "" and method == "DELETE":
                await self._cancel(job_id, send)
            else:
                await send_json(send, 404, {"detail": f"no route {method} {path}; see docs/jobs.md"})
        except JobRefused as exc:
            retry = [(b"retry-after", b"5")] if exc.status == 503 else []
            await send_json(send, exc.status, {"detail": exc.message}, retry)

    async def _submit(self, headers: dict[str, str], receive: Receive, send: Send) -> None:
        if self.spec.endpoint.output_kind.is_socket:
            detail = f"{self.spec.name} holds WebSocket conversations: it takes no async calls"
            await send_json(send, 400, {"detail": detail})
            return
        body = await self.read_request_body(headers, receive, send)
        if body is None:
            return
        try:
            request = AsyncRequest.model_validate_json(body)
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            await send_json(send, 422, {"detail": errors})
            return
        model_input = await self.checked_input(request.model_input, send, ("model_input",))
        if model_input is None:
            return
        streams = self.spec.endpoint.is_stream
        job = await asyncio.to_thread(
            functools.partial(self.store.submit, request, model_input, now=time.time(), streams=streams)
        )
        self.runner.wake()
        await send_json(send, 200, {"request_id": job.id})

    async def _status(self, job_id: str, send: Send) -> None:
        job = await asyncio.to_thread(self.store.get, job_id)
        if job is None:
            await _not_found(send, job_id)
            return
        await send_json(send, 200, job.status_json(self.chain))

    async def _output(self, job_id: str, send: Send) -> None:
        job = await asyncio.to_thread(self.store.get, job_id)
        if job is None:
            await _not_found(send, job_id)
        elif job.streams:
            detail = f"async request {job_id} streams: read GET /async_request/{job_id}/events"
            await send_json(send, 409, {"detail": detail, **job.status_json(self.chain)})
        elif job.status is not JobStatus.SUCCEEDED or job.output is None:
            await send_json(
                send,
                409,
                {
                    "detail": f"async request {job_id} has no output: it is {job.status.value}",
                    **job.status_json(self.chain),
                },
            )
        else:
            await send_bytes(send, 200, job.output, _JSON)

    async def _events(
        self, job_id: str, scope: Scope, headers: dict[str, str], receive: Receive, send: Send
    ) -> None:
        job = await asyncio.to_thread(self.store.get, job_id)
        if job is None:
            await _not_found(send, job_id)
            return
        if not job.streams:
            await send_json(send, 409, {"detail": f"async request {job_id} does not stream: GET its /output"})
            return
        after = _resume_point(headers.get("last-event-id"), scope)
        if after is None:
            detail = "Last-Event-ID (or ?after=) must be the number of an event this stream sent"
            await send_json(send, 400, {"detail": detail})
            return
        await self.send_stream(job, after, receive, send)

    def refusal(self, headers: dict[str, str]) -> str | None:
        """Why these credentials may not call (None: they may)."""
        return self._credentials.refusal(headers)

    async def read_request_body(self, headers: dict[str, str], receive: Receive, send: Send) -> bytes | None:
        """The request's body; None once it was refused (413) or its caller went away."""
        try:
            return await read_body(receive, self._max_body, headers.get("content-length"))
        except BodyTooLarge:
            await send_json(send, 413, {"detail": f"request body over the limit of {self._max_body} bytes"})
        except ClientGone:
            pass
        return None

    async def checked_input(
        self, arguments: dict[str, Any], send: Send, loc: tuple[str, ...] = ()
    ) -> bytes | None:
        """``run_remote``'s ``arguments`` as a job keeps them, checked against its signature; None
        once refused with 422 (each error's ``loc`` after ``loc``). Refused at the door, not
        accepted and failed later: the caller is still here to see why."""
        model_input = json.dumps(arguments, separators=(",", ":"), allow_nan=False).encode()
        try:
            codec.decode_args(self.spec.endpoint, model_input)
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            await send_json(send, 422, {"detail": [{**e, "loc": [*loc, *e["loc"]]} for e in errors]})
            return None
        return model_input

    async def start_stream(
        self, model_input: bytes, deadline: float | None = None
    ) -> tuple[Job, asyncio.Task[None] | None]:
        """Store a streaming job for ``model_input`` (already validated) and run it at once, beside
        the workers: its caller reads it live (chains.server.resumable). ``deadline`` (the
        caller's, time.monotonic) bounds this run when it comes before the run timeout.

        Returns the job and the task running it here, in the caller's context; None when it
        could not be run at once and was left to the workers (the server is stopping)."""
        job = await asyncio.to_thread(
            functools.partial(
                self.store.submit, AsyncRequest(model_input={}), model_input, now=time.time(), streams=True
            )
        )
        invoke = None if deadline is None else functools.partial(self._run_job, deadline=deadline)
        task = await self.runner.run_now(job.id, invoke)
        if task is None:
            self.runner.wake()  # the server is stopping: a worker of the next server runs it
        return job, task

    async def send_stream(
        self,
        job: Job,
        after: int,
        receive: Receive,
        send: Send,
        extra_headers: list[tuple[bytes, bytes]] | None = None,
        count: StreamCount | None = None,
    ) -> None:
        """Answer a job's events above ``after`` as server-sent events, live until its end or
        until the reader goes (which leaves the job running); ``count``, if given, counts the
        items sent and whether the stream failed (a resumable call's request-log line)."""
        gone = asyncio.Event()
        watcher = asyncio.create_task(_watch_disconnect(receive, gone))
        try:
            headers = _EVENT_HEADERS + (extra_headers or [])
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            # Reconnect soon after a cut: the rest is kept, so nothing is lost by waiting less.
            await send({"type": "http.response.body", "body": b"retry: 500\n\n", "more_body": True})
            await self._send_events(job, after, send, gone, count)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()

    async def _send_events(
        self, job: Job, after: int, send: Send, gone: asyncio.Event, count: StreamCount | None = None
    ) -> None:
        """The job's events above ``after``, then each new one as it is stored, until it ends.

        A stream's own ``error`` event ends the reading only once the job has ended: a job that
        runs again streams on after it (``event: restart``)."""
        failed_last = False
        while not gone.is_set():
            events = await asyncio.to_thread(self.store.events, job.id, after=after, limit=_BATCH_EVENTS)
            if events:
                # The id goes last, so that it wins over an id the endpoint's own SSE event set.
                body = b"".join(b"%sid: %d\n\n" % (data[:-1], seq) for seq, data in events)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                after, last = events[-1]
                if count is not None:
                    count.items += sum(1 for _, data in events if not data.startswith(_NAMED_EVENT))
                    count.failed = last.startswith(b"event: error\n")
                if last.startswith(b"event: end\n"):
                    return
                failed_last = last.startswith(b"event: error\n")
                continue
            current = await asyncio.to_thread(self.store.get, job.id)
            if current is None or current.status.is_terminal:
                if current is not None and current.events > after:
                    continue  # stored just before it ended
                if count is not None:
                    count.failed = current is None or current.status is not JobStatus.SUCCEEDED
                if not failed_last:  # it ended without its stream's own end: say how
                    status = current.status.value if current is not None else "GONE"
                    errors = [e.as_json() for e in current.errors] if current is not None else []
                    detail = json.dumps({"status": status, "errors": errors}).encode()
                    await send(
                        {
                            "type": "http.response.body",
                            "body": b"event: error\ndata: " + detail + b"\n\n",
                            "more_body": True,
                        }
                    )
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gone.wait(), _POLL_SEC)

    async def _cancel(self, job_id: str, send: Send) -> None:
        job = await asyncio.to_thread(self.store.cancel, job_id, now=time.time())
        if job is None:
            await _not_found(send, job_id)
            return
        self.runner.cancel_now(job_id)
        if job.status is JobStatus.CANCELED or job.cancel_requested:
            canceled, message = (
                True,
                "canceled" if job.status is JobStatus.CANCELED else "cancellation requested",
            )
        else:
            canceled, message = False, f"the request already ended: {job.status.value}"
        await send_json(send, 200, {"request_id": job_id, "canceled": canceled, "message": message})

    async def _list(self, scope: Scope, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        status_text = query.get("status", [""])[0].upper()
        try:
            status = JobStatus(status_text) if status_text else None
            limit = min(max(int(query.get("limit", ["50"])[0]), 1), 1000)
        except ValueError:
            known = ", ".join(s.value for s in JobStatus)
            await send_json(send, 400, {"detail": f"status must be one of {known}, and limit a number"})
            return
        jobs = await asyncio.to_thread(lambda: self.store.recent(limit=limit, status=status))
        await send_json(send, 200, {"requests": [job.status_json(self.chain) for job in jobs]})


def _resume_point(last_event_id: str | None, scope: Scope) -> int | None:
    """The number of the last event a returning reader saw (0: from the start), or None."""
    text = last_event_id
    if text is None:
        text = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("after", ["0"])[0]
    text = text.strip()
    return int(text) if text.isdigit() else None


async def _watch_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


async def _not_found(send: Send, job_id: str) -> None:
    await send_json(send, 404, {"detail": f"no async request {job_id!r} (or its retention ran out)"})


async def _not_allowed(send: Send, method: str, path: str) -> None:
    await send_json(send, 405, {"detail": f"use {method} {path}"}, [(b"allow", method.encode())])


def _errors_text(exc: pydantic.ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
        for e in exc.errors(include_url=False, include_input=False, include_context=False)
    )
