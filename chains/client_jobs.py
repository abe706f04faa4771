"""A chain's async calls from a consumer's program: what :meth:`chains.client.Client.submit`
and :meth:`chains.client.AsyncClient.submit` return.

A submitted job is stored by the entrypoint and answered with its id at once; it runs on the
entrypoint's workers and outlives the request, the handle and the program (docs/jobs.md)::

    from chains.client import Client, JobStatus

    with Client(url, api_key=key) as client:
        job = client.submit(Summary, text="an hour of transcript")
        print(job.id, job.status())                   # JobStatus.QUEUED, IN_PROGRESS, ...
        summary = job.result(timeout=600)             # polls with back-off; a Summary
        same = client.job(job.id, Summary)            # the same job, from its id

:class:`Job` and :class:`AsyncJob` only send and read; :class:`_JobCore` decides what every
answer means (the typed status, the rebuilt error, when to poll next), so that both agree.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import httpx
import pydantic

from chains.call_policy import answer_error
from chains.client_http import Answer, AsyncHTTP
from chains.errors import (
    ChainsUsageError,
    DeadlineExceeded,
    DependencyUnavailable,
    ErrorDetail,
    JobCanceled,
    JobExpired,
    JobFailedError,
    JobTimeout,
    RemoteError,
    StreamInterrupted,
)
from chains.jobs.records import AsyncRequest, JobError, JobStatus
from chains.streaming.sse import SSE, SSEDecoder
from chains.wire import ASYNC_REQUEST, JSON_MEDIA_TYPE, SSE_MEDIA_TYPE

__all__ = ["AsyncJob", "Job", "JobInfo", "JobOptions", "JobStatus"]

T = TypeVar("T")

# The waits between two looks at a job's status: short at first (most jobs are quick), then
# doubling up to a second, which an hour-long job does not notice and a store does not feel.
FIRST_POLL_SEC = 0.05
MAX_POLL_SEC = 1.0
# A cut stream of events is read again from its last id: this many times in a row without a new
# event, waiting 0.1 s doubling up to 2 s between two tries (about 6 s in all), enough for a
# proxy's restart or a moment of lost network, short enough that a run that is gone is soon said.
RESUME_ATTEMPTS = 6
FIRST_RESUME_SEC = 0.1
MAX_RESUME_SEC = 2.0


@dataclass(frozen=True)
class JobOptions:
    """How an async call is queued, retried and reported: the fields of Baseten's async body
    besides ``model_input`` (docs/jobs.md). Given to ``submit()`` as its second positional
    argument, so that no name here can clash with an argument of the chain's own::

        options = JobOptions(priority=0, webhook_endpoint="https://example.com/hook", max_attempts=3)
        job = client.submit(Summary, options, text="...")

    The bounds are the entrypoint's: a value outside them is refused here, with ValueError.

    >>> JobOptions(priority=3)
    Traceback (most recent call last):
    ...
    ValueError: JobOptions: priority: Input should be less than or equal to 2 (got 3)
    """

    webhook_endpoint: str | None = None
    priority: int = 0  # 0 runs first, 2 last
    max_time_in_queue_seconds: int = 600  # then it is EXPIRED, unrun
    max_attempts: int = 1  # how often it runs in all, if it fails
    initial_delay_ms: int = 1000  # before the second attempt, doubling after
    max_delay_ms: int = 5000

    def __post_init__(self) -> None:
        # The request model is the one the entrypoint validates with: one place for the bounds.
        try:
            AsyncRequest.model_validate({"model_input": {}, **self.fields()})
        except pydantic.ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"] if part != "inference_retry_config")
            raise ValueError(f"JobOptions: {where}: {error['msg']} (got {error['input']!r})") from None

    def fields(self) -> dict[str, Any]:
        """The fields of the ``POST /async_run_remote`` body these options stand for."""
        shown: dict[str, Any] = {
            "priority": self.priority,
            "max_time_in_queue_seconds": self.max_time_in_queue_seconds,
            "inference_retry_config": {
                "max_attempts": self.max_attempts,
                "initial_delay_ms": self.initial_delay_ms,
                "max_delay_ms": self.max_delay_ms,
            },
        }
        if self.webhook_endpoint:
            shown["webhook_endpoint"] = self.webhook_endpoint
        return shown


class _Caller(Protocol):
    """What a handle needs of the client that made it (chains.client's, which imports this
    module: the handles name it by what it does, not by its class)."""

    @property
    def url(self) -> str: ...

    def _headers_for(self, accept: str) -> dict[str, str]: ...

    def _sending(self) -> AbstractContextManager[None]: ...

    def _result(self, output_type: Any, status: int, headers: Mapping[str, str], content: bytes) -> Any: ...

    def _late(self) -> DeadlineExceeded: ...


class _SyncCaller(_Caller, Protocol):
    @property
    def _http(self) -> httpx.Client: ...


class _AsyncCaller(_Caller, Protocol):
    @property
    def _http(self) -> AsyncHTTP: ...


@dataclass(frozen=True)
class JobInfo:
    """What ``GET /async_request/{id}`` answered, typed."""

    id: str
    status: JobStatus
    attempts: int
    max_attempts: int
    errors: tuple[JobError, ...]
    streams: bool  # its output is events (read them with ``events()``), not one result
    events: int  # how many events a streaming job has kept so far


class _EventKind(enum.Enum):
    """What one event of ``/async_request/{id}/events`` means to its reader."""

    SHOWN = "shown"  # an item, header, footer or restart: handed to the caller
    END = "end"  # the stream ended complete
    HELD = "held"  # an attempt failed: raised once no new attempt follows it


class _Polling:
    """The waits of one ``result(timeout=...)``: back-off, and never past its deadline."""

    def __init__(self, job_id: str, timeout: float | None) -> None:
        if timeout is not None and timeout < 0:
            raise ChainsUsageError(
                f"result(timeout={timeout}) must be at least 0 seconds, or None for no bound"
            )
        self._job_id = job_id
        self._timeout = timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._next = FIRST_POLL_SEC

    def wait(self, info: JobInfo) -> float:
        """Seconds to wait before the next look at a job that is not done; raises
        :class:`JobTimeout` once the deadline has passed."""
        wait = self._next
        self._next = min(self._next * 2, MAX_POLL_SEC)
        if self._deadline is None:
            return wait
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            late = JobTimeout(
                f"job {self._job_id} is still {info.status.value} after {self._timeout}s: it goes on; "
                "call result() again with a longer timeout to wait for it, or cancel() it"
            )
            late.job_id = self._job_id
            raise late
        return min(wait, remaining)


class _JobCore:
    """What :class:`Job` and :class:`AsyncJob` share: the job's routes and what each answer
    means. No I/O."""

    def __init__(self, client: _Caller, job_id: str, output_type: Any) -> None:
        if not job_id or "/" in job_id:
            raise ChainsUsageError(f"a job id is the request_id its submission answered, got {job_id!r}")
        self.id = job_id
        self._client = client
        self._output_type = output_type
        self.status_url = f"{client.url}{ASYNC_REQUEST}/{job_id}"
        self.headers = client._headers_for(JSON_MEDIA_TYPE)
        self._last_event: int | None = None
        self._resumes = 0  # tries since the last event that arrived
        # An attempt's own error, kept until the events tell whether the job runs again (an
        # ``event: restart`` follows) or not (they end): only then is it the job's.
        self._held: BaseException | None = None
        self._resumed_from: int | None = None

    def _error(self, status: int, headers: Mapping[str, str], content: bytes) -> Exception:
        return answer_error(f"job {self.id}", self._client.url, status, content, headers)

    def info(self, status: int, headers: Mapping[str, str], content: bytes) -> JobInfo:
        if status != 200:
            raise self._error(status, headers, content)
        answer = json.loads(content)
        return JobInfo(
            id=str(answer["request_id"]),
            status=JobStatus(answer["status"]),
            attempts=int(answer.get("attempts", 0)),
            max_attempts=int(answer.get("max_attempts", 1)),
            errors=tuple(JobError.from_json(error) for error in answer.get("errors", [])),
            streams="events" in answer,
            events=int(answer.get("events", 0)),
        )

    def polling(self, timeout: float | None) -> _Polling:
        return _Polling(self.id, timeout)

    def refuse_stream(self, info: JobInfo) -> None:
        if info.streams:
            raise ChainsUsageError(
                f"job {self.id} streams: it has no single result; read what it streamed with "
                "job.events() (from any event on with events(last_event_id=N))"
            )

    def failure(self, status: JobStatus, errors: tuple[JobError, ...]) -> Exception:
        """The exception an ended job that did not succeed is: its body's own error rebuilt as
        ``call()`` rebuilds it, or :class:`JobFailedError`."""
        last = errors[-1] if errors else None
        if status is JobStatus.FAILED and last is not None and last.detail is not None:
            return RemoteError.from_detail(last.detail)
        reasons = "; ".join(f"{error.code}: {error.message}" for error in errors)
        kind = _ENDS.get(status, JobFailedError)
        failed = kind(f"job {self.id} ended {status.value}" + (f" ({reasons})" if reasons else ""))
        failed.job_id = self.id
        failed.reasons = tuple((error.code, error.message) for error in errors)
        return failed

    def check_succeeded(self, info: JobInfo) -> None:
        if info.status is not JobStatus.SUCCEEDED:
            raise self.failure(info.status, info.errors)

    def output(self, status: int, headers: Mapping[str, str], content: bytes) -> Any:
        return self._client._result(self._output_type, status, headers, content)

    def canceled(self, status: int, headers: Mapping[str, str], content: bytes) -> bool:
        if status != 200:
            raise self._error(status, headers, content)
        return bool(json.loads(content)["canceled"])

    def events_headers(self, last_event_id: int | None) -> dict[str, str]:
        if last_event_id is not None and last_event_id < 0:
            raise ChainsUsageError(
                f"last_event_id={last_event_id}: event numbers start at 1 (0: from the start)"
            )
        self._last_event = last_event_id
        headers = self._client._headers_for(SSE_MEDIA_TYPE)
        if last_event_id is not None:
            headers["last-event-id"] = str(last_event_id)
        return headers

    def resume_wait(self, cut: StreamInterrupted) -> float:
        """How long to wait before reading the rest of a cut stream; raises ``cut`` once the
        tries are spent (each event that arrives gives them back)."""
        if self._last_event != self._resumed_from:
            self._resumes, self._resumed_from = 0, self._last_event
        self._resumes += 1
        if self._resumes > RESUME_ATTEMPTS:
            raise cut
        delay: float = FIRST_RESUME_SEC * 2.0 ** (self._resumes - 1)
        return min(delay, MAX_RESUME_SEC)

    def resume_headers(self) -> dict[str, str]:
        return self.events_headers(self._last_event)

    def check_resumed(self, status: int, headers: Mapping[str, str], content: bytes) -> None:
        """A reconnection's answer: a run that is gone (its retention ran out) ends the reading as
        the cut it is, rather than as an unrelated 404."""
        if status == 404:
            raise self.interrupted(RuntimeError("the run is gone: its retention ran out"))
        self.check_events(status, headers, content)

    def check_events(self, status: int, headers: Mapping[str, str], content: bytes) -> None:
        if status == 409:
            raise ChainsUsageError(f"job {self.id} does not stream: read its result with job.result()")
        if status != 200:
            raise self._error(status, headers, content)

    def kind(self, event: SSE) -> _EventKind:
        """What ``event`` means; raises the run's error for an error event."""
        if event.id is not None and event.id.isdigit():
            self._last_event = int(event.id)
        if event.event == "end":
            return _EventKind.END
        if event.event == "restart":
            self._held = None  # the failed attempt is retried: its error is not the job's
            return _EventKind.SHOWN
        if event.event != "error":
            return _EventKind.SHOWN
        payload = json.loads(event.data)
        if isinstance(payload, dict) and "exc_type" in payload:
            self._held = RemoteError.from_detail(ErrorDetail.model_validate(payload))
            return _EventKind.HELD
        if self._held is not None:
            raise self._held  # the job ended with the attempt that failed
        # The job ended without its stream's own end (canceled, expired, its worker lost).
        errors = tuple(JobError.from_json(error) for error in payload.get("errors", []))
        status = payload.get("status")
        raise self.failure(JobStatus(status) if status in _STATUSES else JobStatus.FAILED, errors)

    def ended_early(self) -> BaseException:
        """What the events ending without ``event: end`` means: a failed attempt that no other
        followed is the job's failure; anything else is a cut, to be read on."""
        return self._held if self._held is not None else self.interrupted()

    def interrupted(self, cause: BaseException | None = None) -> StreamInterrupted:
        seen = "before its first event" if self._last_event is None else f"after event {self._last_event}"
        resume = self._last_event or 0
        reason = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        return _EventsCut(
            f"the events of job {self.id} stopped {seen}, before their end{reason}: the job goes on; "
            f"read the rest with events(last_event_id={resume})"
        )


class _EventsCut(StreamInterrupted):
    """The events' connection broke: they are read on. Not the job's own error, which may be a
    StreamInterrupted too (a dependency's stream that broke), and is raised as it is."""


_STATUSES = {status.value for status in JobStatus}
# The ends without a result that have an error class of their own; any other is JobFailedError.
_ENDS: dict[JobStatus, type[JobFailedError]] = {
    JobStatus.CANCELED: JobCanceled,
    JobStatus.EXPIRED: JobExpired,
}


class Job(Generic[T]):
    """A job submitted with :meth:`chains.client.Client.submit` (or found by its id with
    :meth:`~chains.client.Client.job`); every method asks the entrypoint anew::

        job = client.submit(Summary, text="...")
        if job.status() is JobStatus.QUEUED:
            job.cancel()
        summary = job.result(timeout=60)   # raises the body's error as call() would
    """

    def __init__(self, client: _SyncCaller, job_id: str, output_type: Any = None) -> None:
        self._client = client
        self._core = _JobCore(client, job_id, output_type)

    @property
    def id(self) -> str:
        """The job's request id: the one to give ``client.job(...)``, ``chains jobs`` or Baseten's API."""
        return self._core.id

    def __repr__(self) -> str:
        return f"Job({self.id!r})"

    def _get(self, url: str) -> tuple[int, Mapping[str, str], bytes]:
        with self._client._sending():
            response = self._client._http.get(url, headers=self._core.headers)
        return response.status_code, response.headers, response.content

    def info(self) -> JobInfo:
        """The job's status, attempts and errors, as the entrypoint has them now."""
        return self._core.info(*self._get(self._core.status_url))

    def status(self) -> JobStatus:
        """Where the job is now: QUEUED, IN_PROGRESS, or one of the ends (SUCCEEDED, FAILED,
        EXPIRED, CANCELED; ``status().is_terminal``)."""
        return self.info().status

    def result(self, timeout: float | None = None) -> T:
        """Wait for the job to end (up to ``timeout`` seconds; None: as long as it takes) and
        return its result validated as the submission's output type, as ``call()`` returns it.

        Raises the body's own error rebuilt as ``call()`` raises it (a RemoteError that is also
        its original builtin type); ``chains.errors.JobCanceled``, ``JobExpired`` or (a lost
        worker) their base ``JobFailedError`` for a job that ended without a result; and
        ``chains.errors.JobTimeout`` (a TimeoutError naming the job) once ``timeout`` has passed.
        """
        polling = self._core.polling(timeout)
        info = self.info()
        self._core.refuse_stream(info)
        while not info.status.is_terminal:
            time.sleep(polling.wait(info))
            info = self.info()
        self._core.check_succeeded(info)
        result: T = self._core.output(*self._get(self._core.status_url + "/output"))
        return result

    def cancel(self) -> bool:
        """Cancel the job: a queued one at once, a running one as a caller that leaves is (its
        status turns CANCELED once its body stopped). True if it is canceled or will be, False
        if it had already ended otherwise (succeeded, failed or expired)."""
        with self._client._sending():
            response = self._client._http.delete(self._core.status_url, headers=self._core.headers)
        return self._core.canceled(response.status_code, response.headers, response.content)

    def events(self, last_event_id: int | None = None) -> Iterator[SSE]:
        """A streaming job's kept events, as they are stored (live while it runs), from the one
        after ``last_event_id`` (None or 0: from the first). Each carries its number as its
        ``id``; items are ``data``, and ``event`` is ``header``, ``footer`` or ``restart`` (a new
        attempt starts over) for the others. The iteration ends at the stream's end; an error
        is raised as :meth:`result` raises it. A cut connection is read again from the last
        event that arrived, so each event comes once, in order; StreamInterrupted (naming where
        to resume) only once the run is gone or RESUME_ATTEMPTS tries in a row brought nothing.
        """
        yield from self._follow(self._core.events_headers(last_event_id), None)

    def follow(self, first: httpx.Response) -> Iterator[SSE]:
        """The run's events from ``first``, the open answer of a resumable ``/run_remote``, read
        on from their last id after a cut, as :meth:`events` reads them."""
        yield from self._follow(self._core.events_headers(None), first)

    def _follow(self, headers: dict[str, str], first: httpx.Response | None) -> Iterator[SSE]:
        resumed = False
        while True:
            try:
                yield from self._read_events(headers, resumed, first)
                return
            except _EventsCut as cut:
                time.sleep(self._core.resume_wait(cut))
            headers, resumed, first = self._core.resume_headers(), True, None

    def _read_events(
        self, headers: dict[str, str], resumed: bool, response: httpx.Response | None
    ) -> Iterator[SSE]:
        """One connection's events; StreamInterrupted on a cut (the caller reads the rest)."""
        if response is None:
            try:
                with self._client._sending():
                    request = self._client._http.build_request(
                        "GET", self._core.status_url + "/events", headers=headers
                    )
                    response = self._client._http.send(request, stream=True)
            except DependencyUnavailable as exc:
                if not resumed:
                    raise
                raise self._core.interrupted(exc) from exc
            status = response.status_code
            check = self._core.check_resumed if resumed else self._core.check_events
            try:
                check(status, response.headers, response.read() if status != 200 else b"")
            except BaseException:
                response.close()
                raise
        try:
            decoder = SSEDecoder()
            chunks = response.iter_bytes()
            while True:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    raise self._core.ended_early() from None
                except httpx.TimeoutException as exc:
                    raise self._client._late() from exc
                except Exception as exc:  # the connection broke mid-stream (httpx's own errors)
                    raise self._core.interrupted(exc) from exc
                for event in decoder.feed(chunk):
                    kind = self._core.kind(event)
                    if kind is _EventKind.END:
                        return
                    if kind is _EventKind.SHOWN:
                        yield event
        finally:
            response.close()


class AsyncJob(Generic[T]):
    """:class:`Job` for :class:`chains.client.AsyncClient`: the same methods, awaited::

    job = await client.submit(Summary, text="...")
    summary = await job.result(timeout=60)
    async for event in job.events():      # a streaming job's kept events
        print(event.id, event.data)
    """

    def __init__(self, client: _AsyncCaller, job_id: str, output_type: Any = None) -> None:
        self._client = client
        self._core = _JobCore(client, job_id, output_type)

    @property
    def id(self) -> str:
        """The job's request id; see :attr:`Job.id`."""
        return self._core.id

    def __repr__(self) -> str:
        return f"AsyncJob({self.id!r})"

    async def _get(self, url: str) -> tuple[int, Mapping[str, str], bytes]:
        with self._client._sending():
            answer = await self._client._http.send("GET", url, None, self._core.headers, stream=False)
            content = await answer.read()
        return answer.status, answer.headers, content

    async def info(self) -> JobInfo:
        """See :meth:`Job.info`."""
        return self._core.info(*await self._get(self._core.status_url))

    async def status(self) -> JobStatus:
        """See :meth:`Job.status`."""
        return (await self.info()).status

    async def result(self, timeout: float | None = None) -> T:
        """See :meth:`Job.result`; other tasks run while it waits."""
        polling = self._core.polling(timeout)
        info = await self.info()
        self._core.refuse_stream(info)
        while not info.status.is_terminal:
            await asyncio.sleep(polling.wait(info))
            info = await self.info()
        self._core.check_succeeded(info)
        result: T = self._core.output(*await self._get(self._core.status_url + "/output"))
        return result

    async def cancel(self) -> bool:
        """See :meth:`Job.cancel`."""
        with self._client._sending():
            answer = await self._client._http.send(
                "DELETE", self._core.status_url, None, self._core.headers, stream=False
            )
            content = await answer.read()
        return self._core.canceled(answer.status, answer.headers, content)

    async def events(self, last_event_id: int | None = None) -> AsyncIterator[SSE]:
        """See :meth:`Job.events`."""
        async for event in self._follow(self._core.events_headers(last_event_id), None):
            yield event

    async def follow(self, first: Answer) -> AsyncIterator[SSE]:
        """See :meth:`Job.follow`."""
        async for event in self._follow(self._core.events_headers(None), first):
            yield event

    async def _follow(self, headers: dict[str, str], first: Answer | None) -> AsyncIterator[SSE]:
        resumed = False
        while True:
            try:
                async for event in self._read_events(headers, resumed, first):
                    yield event
                return
            except _EventsCut as cut:
                await asyncio.sleep(self._core.resume_wait(cut))
            headers, resumed, first = self._core.resume_headers(), True, None

    async def _read_events(
        self, headers: dict[str, str], resumed: bool, answer: Answer | None
    ) -> AsyncIterator[SSE]:
        """See :meth:`Job._read_events`."""
        if answer is None:
            try:
                with self._client._sending():
                    answer = await self._client._http.send(
                        "GET", self._core.status_url + "/events", None, headers, stream=True
                    )
            except DependencyUnavailable as exc:
                if not resumed:
                    raise
                raise self._core.interrupted(exc) from exc
            status = answer.status
            check = self._core.check_resumed if resumed else self._core.check_events
            try:
                check(status, answer.headers, await answer.read() if status != 200 else b"")
            except BaseException:
                await answer.aclose()
                raise
        try:
            decoder = SSEDecoder()
            chunks = answer.chunks()
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    raise self._core.ended_early() from None
                except TimeoutError as exc:
                    raise self._client._late() from exc
                except Exception as exc:  # the connection broke mid-stream (aiohttp's or httpx's)
                    raise self._core.interrupted(exc) from exc
                for event in decoder.feed(chunk):
                    kind = self._core.kind(event)
                    if kind is _EventKind.END:
                        return
                    if kind is _EventKind.SHOWN:
                        yield event
        finally:
            await answer.aclose()
