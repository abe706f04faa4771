"""One policy for every stub call, whatever transport carries it.

Replica choice, the deadline of each attempt, the headers every call carries, retries with
backoff, what a failed answer means and the decoding of a result are decided here, once, for
the async transport (aiohttp) and the sync one (httpx) alike, and for chainlet stubs and
stubs of deployed models (``StubBase.from_url``) alike::

    policy = CallPolicy("Words", ["http://127.0.0.1:8001"], StubOptions(retries=2))
    result = await policy.unary("/run_remote", body, decode=json.loads, accept="application/json")

Failures before a response, and 429/502/503/504, are retried with exponential backoff and
jitter, on a replica the call has not tried yet first; a stream only until it starts.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import pydantic
import tenacity

from chains import codec, tracing
from chains.call_context import CallContext, current_call, new_request_id
from chains.errors import (
    ChainsRuntimeError,
    DeadlineExceeded,
    DependencyUnavailable,
    ErrorDetail,
    RemoteError,
    StreamInterrupted,
)
from chains.limits import CallLimit
from chains.metrics import DependencyCall, Metrics
from chains.rpc_options import StubOptions
from chains.stubs.aiohttp_transport import AiohttpTransport
from chains.stubs.transport import AsyncTransport, ByteStream, Response, SyncTransport, TransportError
from chains.wire import BINARY_MEDIA_TYPE, JSON_MEDIA_TYPE

if TYPE_CHECKING:
    from chains.tracing.spans import ClientAttempt

__all__ = ["RETRY_STATUSES", "CallPolicy", "Decode", "DecodeStream"]

RETRY_STATUSES = frozenset({429, 502, 503, 504})
_MAX_BACKOFF_SEC = 2.0
_FIRST_BACKOFF_SEC = 0.05
# 0.05 s doubling per retry, plus up to 0.05 s of jitter, capped at 2 s (the cap is applied to
# the sum in _wait). Built from parts that every tenacity in the supported range has alike:
# wait_exponential_jitter names its first wait `initial` up to 9.1 and deprecates that name
# for `multiplier`, which older versions lack, from 9.2.
_BACKOFF = tenacity.wait_exponential(
    multiplier=_FIRST_BACKOFF_SEC, max=_MAX_BACKOFF_SEC
) + tenacity.wait_random(0, _FIRST_BACKOFF_SEC)

Decode = Callable[[bytes], Any]
"""A unary result from its body; a pydantic ``ValidationError`` means it broke the contract."""
DecodeStream = Callable[[AsyncIterator[bytes]], AsyncIterator[Any]]
"""A stream's items from its chunks."""


class _Retryable(Exception):
    """One attempt failed in a way another attempt may not: a connection error or 429/5xx."""

    def __init__(
        self,
        reason: str,
        retry_after: float | None = None,
        connection: bool = False,
        status: int = 0,
        remote: RemoteError | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.connection = connection
        self.status = status
        self.remote = remote  # a callee's own exception, retried on request: raised as itself at the end


class CallPolicy:
    """How one stub calls the replicas ``urls`` of the service ``name``.

    ``authorization`` is the ``Authorization`` header every call carries (``is_chain_token``
    when it is the chain's internal token, which changes what a 401 is said to mean).
    """

    def __init__(
        self,
        name: str,
        urls: Sequence[str],
        options: StubOptions,
        *,
        authorization: str | None = None,
        is_chain_token: bool = False,
        metrics: Metrics | None = None,
        transport: AsyncTransport | None = None,
        sync_transport: SyncTransport | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.urls = tuple(urls)
        self.options = options
        self.authorization = authorization
        self._is_chain_token = is_chain_token
        # Where ``authorization`` came from, named when it is refused ("Api-Key from the secret ...").
        self.credential: str | None = None
        self.metrics = metrics
        self._turn = itertools.count(random.randrange(len(self.urls)))
        self._limit = CallLimit(options.concurrency_limit, name)
        # Given to the default transports: what https:// callees are verified with.
        self._ssl_context = ssl_context
        self.transport: AsyncTransport = transport or AiohttpTransport(ssl_context)
        self._sync_transport = sync_transport
        self._content_type = BINARY_MEDIA_TYPE if options.use_binary else JSON_MEDIA_TYPE

    async def aclose(self) -> None:
        """Close pooled connections (a server does this at shutdown)."""
        await self.transport.aclose()
        if self._sync_transport is not None:
            self._sync_transport.close()

    # -- replicas, deadlines, headers --------------------------------------------------------

    def _next_url(self, tried: list[str]) -> str:
        """The next replica in turn that this call has not tried yet (any, once all have been);
        it is added to ``tried``. Concurrent calls share the turn, so without ``tried`` a retry
        could land on the replica that has just failed."""
        url = self.urls[next(self._turn) % len(self.urls)]
        for _ in range(len(self.urls) - 1):
            if url not in tried:
                break
            url = self.urls[next(self._turn) % len(self.urls)]
        tried.append(url)
        return url

    @staticmethod
    def _call_context() -> CallContext:
        return current_call() or CallContext(new_request_id())

    def _attempt_timeout(self, call: CallContext) -> float:
        """This attempt's budget: ``timeout_sec``, capped by what the caller has left."""
        remaining = call.remaining()
        budget = self.options.timeout_sec if remaining is None else min(self.options.timeout_sec, remaining)
        if budget <= 0:
            raise DeadlineExceeded(f"no time left to call {self.name}: the caller's deadline has passed")
        return budget

    def _headers(self, call: CallContext, attempt_timeout: float, accept: str) -> dict[str, str]:
        # The async transport does not decompress, so no call may invite a compressed answer:
        # aiohttp would otherwise offer gzip, and a compressing proxy on the way would hand the
        # frame decoder or the JSON codec gzip bytes.
        headers = {"content-type": self._content_type, "accept": accept, "accept-encoding": "identity"}
        headers.update(CallContext(call.request_id, time.monotonic() + attempt_timeout).headers())
        if self.authorization:
            headers["authorization"] = self.authorization
        traced = tracing.active()
        if traced is not None:
            traced.inject(headers)  # the attempt's span is the current one
        return headers

    # -- calls -------------------------------------------------------------------------------

    async def unary(self, path: str, body: bytes, decode: Decode, accept: str) -> Any:
        """POST ``body`` to ``path`` of a replica; the decoded result, after any retries."""
        call = self._call_context()
        with DependencyCall(self.metrics, self.name) as record:
            async with self._limit.slot():
                result = await self._with_retries(
                    call, self._attempt_unary, path, body, decode, accept, call, path=path, size=len(body)
                )
            record.ok = True
            return result

    async def stream(self, path: str, body: bytes, accept: str, decode: DecodeStream) -> AsyncIterator[Any]:
        """POST ``body`` and yield what ``decode`` makes of the chunks as they arrive.

        Retried until the response starts; after that a broken connection raises
        :class:`StreamInterrupted`. The call holds its concurrency slot until the stream ends.
        """
        call = self._call_context()
        with DependencyCall(self.metrics, self.name) as record:
            async with self._limit.slot():
                opened: list[ClientAttempt] = []
                stream: ByteStream = await self._with_retries(
                    call,
                    self._open_stream,
                    path,
                    body,
                    accept,
                    call,
                    path=path,
                    size=len(body),
                    opened=opened,
                )
                items = 0
                received = [0]
                error: BaseException | None = None
                try:
                    async for item in decode(self._chunks(stream, received)):
                        items += 1
                        yield item
                    record.ok = True
                except Exception as exc:  # not the consumer stopping early, which is no error
                    error = exc
                    raise
                finally:
                    stream.close()
                    if opened:
                        opened[-1].finish(items, received[0], error)

    def unary_sync(self, path: str, body: bytes, decode: Decode, accept: str) -> Any:
        """:meth:`unary` from sync code (a thread): the same attempts, retries and errors."""
        call = self._call_context()
        with DependencyCall(self.metrics, self.name) as record:
            attempt = (
                self._attempt_sync if tracing.active() is None else self._traced_sync(call, len(body), path)
            )
            result = self._with_retries_sync(call, attempt, path, body, decode, accept, call)
            record.ok = True
            return result

    # -- attempts ----------------------------------------------------------------------------

    async def _attempt_unary(
        self, tried: list[str], path: str, body: bytes, decode: Decode, accept: str, call: CallContext
    ) -> Any:
        timeout = self._attempt_timeout(call)
        url = self._next_url(tried)
        try:
            response = await self.transport.send(
                url + path, body, self._headers(call, timeout, accept), timeout
            )
        except TimeoutError:
            raise DeadlineExceeded(f"{self.name} did not answer within {timeout:.3g}s ({url})") from None
        except TransportError as exc:
            raise _Retryable(f"{self.name} at {url}: {exc}", connection=True) from exc
        return self._answer(response, url, decode)

    def _answer(self, response: Response, url: str, decode: Decode) -> Any:
        """The decoded result of a unary answer, or the failure it is (async and sync alike)."""
        _note_answer(response.status, len(response.body))
        if response.status == 200:
            return self._result(response.body, decode)
        raise self._failure(response.status, response.body, response.headers.get("retry-after"), url)

    async def _open_stream(
        self, tried: list[str], path: str, body: bytes, accept: str, call: CallContext
    ) -> ByteStream:
        timeout = self._attempt_timeout(call)
        url = self._next_url(tried)
        headers = self._headers(call, timeout, accept)
        try:
            response = await self.transport.send(url + path, body, headers, timeout, stream=True)
        except TimeoutError:
            raise DeadlineExceeded(
                f"{self.name} did not start its stream within {timeout:.3g}s ({url})"
            ) from None
        except TransportError as exc:
            raise _Retryable(f"{self.name} at {url}: {exc}", connection=True) from exc
        _note_answer(response.status)
        if response.status == 200 and response.stream is not None:
            return response.stream
        raise self._failure(response.status, response.body, response.headers.get("retry-after"), url)

    def _attempt_sync(
        self, tried: list[str], path: str, body: bytes, decode: Decode, accept: str, call: CallContext
    ) -> Any:
        if self._sync_transport is None:
            # Imported here: only sync calls need httpx, and an async chainlet server should
            # not pay for loading it.
            from chains.stubs.httpx_transport import HttpxTransport

            self._sync_transport = HttpxTransport(self._ssl_context)
        timeout = self._attempt_timeout(call)
        url = self._next_url(tried)
        try:
            response = self._sync_transport.send(
                url + path, body, self._headers(call, timeout, accept), timeout
            )
        except TimeoutError:
            raise DeadlineExceeded(f"{self.name} did not answer within {timeout:.3g}s ({url})") from None
        except TransportError as exc:
            raise _Retryable(f"{self.name} at {url}: {exc}", connection=True) from exc
        return self._answer(response, url, decode)

    async def _chunks(self, stream: ByteStream, received: list[int]) -> AsyncIterator[bytes]:
        """The body as it arrives, counted in ``received[0]``; a connection that breaks is an
        interrupted stream."""
        try:
            async for chunk in stream.chunks():
                received[0] += len(chunk)
                yield chunk
        except TransportError as exc:
            raise StreamInterrupted(f"the stream from {self.name} broke off: {exc}") from exc

    # -- outcomes ----------------------------------------------------------------------------

    def _result(self, payload: bytes, decode: Decode) -> Any:
        try:
            return decode(payload)
        except pydantic.ValidationError as exc:
            raise ChainsRuntimeError(
                f"{self.name} answered with a result that does not match its signature: {exc}"
            ) from None

    def _failure(self, status: int, payload: bytes, retry_after: str | None, url: str) -> Exception:
        """The exception for a non-200 answer: retryable, or what the caller sees."""
        if status in RETRY_STATUSES:
            return _Retryable(
                f"{self.name} at {url} answered {status}", retry_after=_seconds(retry_after), status=status
            )
        detail = _json_or_none(payload)
        if status == 422 and isinstance(detail, dict) and isinstance(detail.get("detail"), list):
            return RemoteError.from_detail(codec.invalid_arguments_detail(self.name, detail["detail"]))
        # 500, or the status an HTTPException asked for: either way the callee's error detail.
        if status >= 400 and isinstance(detail, dict) and isinstance(detail.get("error"), dict):
            try:
                error = ErrorDetail.model_validate(detail["error"])
            except pydantic.ValidationError:
                pass
            else:
                remote = RemoteError.from_detail(error)
                if self.options.retry_user_errors and status == 500:
                    raised = f"{self.name} at {url} raised {error.exc_type}"
                    return _Retryable(raised, status=status, remote=remote)
                return remote
        reason = (
            detail.get("detail") if isinstance(detail, dict) else payload[:200].decode("utf-8", "replace")
        )
        if status == 401:
            named = f" ({self.credential})" if self.credential else ""
            sent = (
                "the chain's token is wrong"
                if self._is_chain_token
                else f"the credential it was sent is wrong{named}"
                if self.authorization
                else "it wants a credential and none was sent"
            )
            return ChainsRuntimeError(f"{self.name} at {url} refused the call (401 {reason}): {sent}")
        return ChainsRuntimeError(f"{self.name} at {url} answered {status}: {reason}")

    def _gave_up(self, exc: _Retryable) -> Exception:
        if exc.remote is not None:
            return exc.remote
        attempts = self.options.retries + 1
        if exc.status == 504:
            return DeadlineExceeded(f"{exc.reason} (after {attempts} attempt(s))")
        error = DependencyUnavailable(f"{exc.reason} (after {attempts} attempt(s))")
        error.retry_after = exc.retry_after
        return error

    # -- retries -----------------------------------------------------------------------------

    async def _with_retries(
        self,
        call: CallContext,
        attempt: Callable[..., Awaitable[Any]],
        *args: Any,
        path: str = "",
        size: int = 0,
        opened: list[ClientAttempt] | None = None,
    ) -> Any:
        tried: list[str] = []
        if tracing.active() is not None:
            attempt = self._traced(call, attempt, path, size, opened)
        # The first attempt runs on its own: most calls succeed at once, and tenacity's
        # machinery costs about 70 µs a call, as much as the HTTP request itself (measured in
        # benchmarks/README.md). Only a retryable failure brings tenacity in, which is handed
        # that failure as its first attempt's outcome and goes on exactly as if it had made it.
        try:
            return await attempt(tried, *args)
        except _Retryable as exc:
            first_failure: list[_Retryable] = [exc]

        async def attempts(*arguments: Any) -> Any:
            if first_failure:
                raise first_failure.pop()
            return await attempt(*arguments)

        retrying = tenacity.AsyncRetrying(sleep=self._sleep_within(call), **self._retry_policy(tried))
        try:
            return await retrying(attempts, tried, *args)
        except _Retryable as exc:
            raise self._gave_up(exc) from None

    def _with_retries_sync(self, call: CallContext, attempt: Callable[..., Any], *args: Any) -> Any:
        tried: list[str] = []
        try:  # the first attempt on its own, as in _with_retries
            return attempt(tried, *args)
        except _Retryable as exc:
            first_failure: list[_Retryable] = [exc]

        def attempts(*arguments: Any) -> Any:
            if first_failure:
                raise first_failure.pop()
            return attempt(*arguments)

        retrying = tenacity.Retrying(sleep=self._sleep_within_sync(call), **self._retry_policy(tried))
        try:
            return retrying(attempts, tried, *args)
        except _Retryable as exc:
            raise self._gave_up(exc) from None

    def _traced(
        self,
        call: CallContext,
        attempt: Callable[..., Awaitable[Any]],
        path: str,
        size: int,
        opened: list[ClientAttempt] | None,
    ) -> Callable[..., Awaitable[Any]]:
        """``attempt`` inside a client span of its own; a stream's span (``opened``) ends with it."""

        async def traced(tried: list[str], *args: Any) -> Any:
            active = tracing.active()
            assert active is not None
            with active.attempt(self.name, len(tried) + 1, self.options.retries, call, size) as span:
                try:
                    result = await attempt(tried, *args)
                finally:
                    if tried:
                        span.target(tried[-1] + path)
                if opened is not None:
                    span.keep()
                    opened.append(span)
                return result

        return traced

    def _traced_sync(self, call: CallContext, size: int, path: str) -> Callable[..., Any]:
        def traced(tried: list[str], *args: Any) -> Any:
            active = tracing.active()
            assert active is not None
            with active.attempt(self.name, len(tried) + 1, self.options.retries, call, size) as span:
                try:
                    return self._attempt_sync(tried, *args)
                finally:
                    if tried:
                        span.target(tried[-1] + path)

        return traced

    def _retry_policy(self, tried: list[str]) -> dict[str, Any]:
        """What async and sync calls retry, how often and how long they wait in between."""
        return {
            "stop": tenacity.stop_after_attempt(self.options.retries + 1),
            "wait": functools.partial(self._wait, tried=tried),
            "retry": tenacity.retry_if_exception_type(_Retryable),
            "before_sleep": self._count_retry,
            "reraise": True,
        }

    def _wait(self, state: tenacity.RetryCallState, tried: list[str]) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        # Any retryable failure moves on to a replica this call has not tried yet, at once: a
        # backoff or a Retry-After is about the replica that failed (down, restarting, busy),
        # not about the others.
        if isinstance(exc, _Retryable) and len(set(tried)) < len(self.urls):
            return 0.0
        backoff = min(float(_BACKOFF(state)), _MAX_BACKOFF_SEC)
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return max(backoff, exc.retry_after)
        return backoff

    def _check_sleep(self, call: CallContext, seconds: float) -> None:
        remaining = call.remaining()
        if remaining is not None and seconds >= remaining:
            raise DeadlineExceeded(
                f"{self.name} did not answer in time: the next retry would start after the caller's deadline"
            )

    def _sleep_within(self, call: CallContext) -> Callable[[float], Awaitable[None]]:
        async def sleep(seconds: float) -> None:
            self._check_sleep(call, seconds)
            await asyncio.sleep(seconds)

        return sleep

    def _sleep_within_sync(self, call: CallContext) -> Callable[[float], None]:
        def sleep(seconds: float) -> None:
            self._check_sleep(call, seconds)
            time.sleep(seconds)

        return sleep

    def _count_retry(self, state: tenacity.RetryCallState) -> None:
        if self.metrics is not None:
            self.metrics.dependency_retried(self.name)


def _note_answer(status: int, size: int | None = None) -> None:
    """Put the answer's status and size on the attempt's span, when tracing."""
    traced = tracing.active()
    if traced is not None:
        traced.current_attempt().answered(status, size)


def _seconds(retry_after: str | None) -> float | None:
    if not retry_after:
        return None
    try:
        return max(float(retry_after), 0.0)
    except ValueError:
        return None  # an HTTP date: fall back to the backoff


def _json_or_none(payload: bytes) -> Any:
    try:
        return pydantic.TypeAdapter(Any).validate_json(payload)
    except pydantic.ValidationError:
        return None
