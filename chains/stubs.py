"""Stubs: how a chainlet calls another one over HTTP.

A stub class declares ``run_remote`` with the dependency's signature and delegates to
:meth:`StubBase.call_remote` or :meth:`StubBase.stream_remote`; the code generator writes
one per dependency, and a person can write one to call any compatible service by URL::

    class Words(chains.StubBase):
        async def run_remote(self, text: str) -> AsyncIterator[Token]:
            async for token in self.stream_remote(text=text):
                yield token

    words = Words("http://127.0.0.1:8001")

Every call carries the chain's token, the request id and the remaining deadline; failures
before a response (and 429/502/503/504) are retried with exponential backoff and jitter,
on another replica first; a stream is retried only until its first byte.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import aiohttp
import pydantic
import tenacity

from chains import codec, tracing
from chains.call_context import CallContext, current_call, new_request_id
from chains.chainlet import DEFAULT_RETRIES, DEFAULT_TIMEOUT_SEC, DependencyMarker
from chains.endpoint import EndpointSpec, analyze_endpoint
from chains.errors import (
    ChainsRuntimeError,
    ChainsUsageError,
    DeadlineExceeded,
    DependencyUnavailable,
    ErrorDetail,
    RemoteError,
    StreamInterrupted,
)
from chains.limits import CallLimit
from chains.locations import Locator
from chains.server.metrics import DependencyCall, Metrics
from chains.server.settings import DEFAULT_MAX_FRAME_BYTES, RUN_REMOTE
from chains.streaming import FRAMED_MEDIA_TYPE, decode_framed, shape_of
from chains.websocket.protocol import WebSocketProtocol

if TYPE_CHECKING:
    import httpx

    from chains.tracing.spans import ClientAttempt

__all__ = ["StubBase", "StubOptions"]

logger = logging.getLogger("chains.stubs")

RETRY_STATUSES = frozenset({429, 502, 503, 504})
_MAX_BACKOFF_SEC = 2.0
_FIRST_BACKOFF_SEC = 0.05


@dataclass(frozen=True)
class StubOptions:
    """How a stub calls: ``chains.depends(...)`` arguments, or set by hand."""

    retries: int = DEFAULT_RETRIES
    timeout_sec: float = DEFAULT_TIMEOUT_SEC
    concurrency_limit: int | None = None
    use_binary: bool = False  # MessagePack instead of JSON for arguments and unary results
    # Truss Chains' semantics: an exception raised by the callee is retried too (off by
    # default: a user error usually fails the same way again, and the callee's side effects
    # would repeat). ``depends(retry_user_errors=True)`` or CHAINS_RETRY_USER_ERRORS=1.
    retry_user_errors: bool = False

    @classmethod
    def from_marker(cls, marker: DependencyMarker, *, retry_user_errors: bool = False) -> StubOptions:
        return cls(
            marker.retries,
            marker.timeout_sec,
            marker.concurrency_limit,
            marker.use_binary,
            retry_user_errors or marker.retry_user_errors,
        )


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


class StubBase:
    """Base class of stubs; see the module docstring for an example.

    ``urls`` are the replicas of one service; calls are spread over them in turn.
    """

    endpoint: ClassVar[EndpointSpec | None] = None

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        name: str | None = None,
        options: StubOptions | None = None,
        token: str | None = None,
        path: str = RUN_REMOTE,
        authorization: str | None = None,
        metrics: Metrics | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        url_list = [urls] if isinstance(urls, str) else list(urls)
        if not url_list:
            raise ChainsUsageError(f"{type(self).__name__} needs at least one URL")
        if token and authorization:
            raise ChainsUsageError(f"{type(self).__name__}: give a token or an authorization, not both")
        self.urls = tuple(u.rstrip("/") for u in url_list)
        self.name = name or type(self).__name__
        self.options = options or StubOptions()
        self.path = path
        self._authorization = f"Bearer {token}" if token else authorization
        self._is_chain_token = bool(token)
        self._metrics = metrics
        self._max_frame_bytes = max_frame_bytes
        self._turn = itertools.count(random.randrange(len(self.urls)))
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._sync_client: httpx.Client | None = None
        self._warned_blocking = False
        self._limit = CallLimit(self.options.concurrency_limit)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.urls)})"

    # -- the endpoint ------------------------------------------------------------------------

    @classmethod
    def _endpoint(cls) -> EndpointSpec:
        """The wire shape, read from the subclass's own ``run_remote`` signature (once)."""
        spec = cls.__dict__.get("endpoint")
        if spec is None:
            result = analyze_endpoint(cls, cls.__name__, Locator(cls), final=True, stub=True)
            if result.spec is None:
                raise ChainsUsageError(violations=result.violations)
            spec = result.spec
            cls.endpoint = spec
        return spec

    # -- connections -------------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            # One pooled session per stub per event loop: keep-alive to every replica.
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30, enable_cleanup_closed=True)
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None)
            )
            self._session_loop = loop
        return self._session

    async def aclose(self) -> None:
        """Close pooled connections (a server does this at shutdown)."""
        if self._session is not None:
            await self._session.close()
        if self._sync_client is not None:
            self._sync_client.close()

    def _headers(self, call: CallContext, attempt_timeout: float, accept: str) -> dict[str, str]:
        content_type = codec.BINARY_MEDIA_TYPE if self.options.use_binary else "application/json"
        # The session does not decompress (auto_decompress=False), so it must not invite a
        # compressed answer: aiohttp would otherwise offer gzip, and a compressing proxy on the
        # way would hand the frame decoder or the JSON codec gzip bytes.
        headers = {"content-type": content_type, "accept": accept, "accept-encoding": "identity"}
        headers.update(CallContext(call.request_id, time.monotonic() + attempt_timeout).headers())
        if self._authorization:
            headers["authorization"] = self._authorization
        traced = tracing.active()
        if traced is not None:
            traced.inject(headers)  # the attempt's span is the current one
        return headers

    @property
    def _unary_accept(self) -> str:
        return codec.BINARY_MEDIA_TYPE if self.options.use_binary else "application/json"

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

    # -- deadlines ---------------------------------------------------------------------------

    def _call_context(self) -> CallContext:
        return current_call() or CallContext(new_request_id())

    def _attempt_timeout(self, call: CallContext) -> float:
        """This attempt's budget: ``timeout_sec``, capped by what the caller has left."""
        remaining = call.remaining()
        budget = self.options.timeout_sec if remaining is None else min(self.options.timeout_sec, remaining)
        if budget <= 0:
            raise DeadlineExceeded(f"no time left to call {self.name}: the caller's deadline has passed")
        return budget

    async def _with_retries(
        self,
        call: CallContext,
        attempt: Callable[..., Awaitable[Any]],
        *args: Any,
        size: int = 0,
        opened: list[ClientAttempt] | None = None,
    ) -> Any:
        tried: list[str] = []
        traced = tracing.active()
        if traced is not None:
            attempt = self._traced(call, attempt, size, opened)
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

    def _traced(
        self,
        call: CallContext,
        attempt: Callable[..., Awaitable[Any]],
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
                        span.target(tried[-1] + self.path)
                if opened is not None:
                    span.keep()
                    opened.append(span)
                return result

        return traced

    def _traced_sync(self, call: CallContext, size: int) -> Callable[..., Any]:
        def traced(tried: list[str], *args: Any) -> Any:
            active = tracing.active()
            assert active is not None
            with active.attempt(self.name, len(tried) + 1, self.options.retries, call, size) as span:
                try:
                    return self._attempt_sync(tried, *args)
                finally:
                    if tried:
                        span.target(tried[-1] + self.path)

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

    def _gave_up(self, exc: _Retryable) -> Exception:
        if exc.remote is not None:
            return exc.remote
        attempts = self.options.retries + 1
        if exc.status == 504:
            return DeadlineExceeded(f"{exc.reason} (after {attempts} attempt(s))")
        error = DependencyUnavailable(f"{exc.reason} (after {attempts} attempt(s))")
        error.retry_after = exc.retry_after
        return error

    def _wait(self, state: tenacity.RetryCallState, tried: list[str]) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        # Any retryable failure moves on to a replica this call has not tried yet, at once: a
        # backoff or a Retry-After is about the replica that failed (down, restarting, busy),
        # not about the others.
        if isinstance(exc, _Retryable) and len(set(tried)) < len(self.urls):
            return 0.0
        backoff: float = tenacity.wait_exponential_jitter(
            initial=_FIRST_BACKOFF_SEC, max=_MAX_BACKOFF_SEC, jitter=_FIRST_BACKOFF_SEC
        )(state)
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return max(backoff, exc.retry_after)
        return backoff

    def _sleep_within(self, call: CallContext) -> Any:
        async def sleep(seconds: float) -> None:
            remaining = call.remaining()
            if remaining is not None and seconds >= remaining:
                raise DeadlineExceeded(
                    f"{self.name} did not answer in time: the next retry would start "
                    "after the caller's deadline"
                )
            await asyncio.sleep(seconds)

        return sleep

    def _count_retry(self, state: tenacity.RetryCallState) -> None:
        if self._metrics is not None:
            self._metrics.dependency_retried(self.name)

    # -- unary calls -------------------------------------------------------------------------

    async def call_remote(self, *args: Any, **kwargs: Any) -> Any:
        """Call the endpoint and return its decoded result."""
        endpoint = self._endpoint()
        body = codec.encode_args(endpoint, args, kwargs, binary=self.options.use_binary)
        call = self._call_context()
        with DependencyCall(self._metrics, self.name) as record:
            async with self._limit.slot():
                result = await self._with_retries(
                    call, self._attempt_unary, endpoint, body, call, size=len(body)
                )
            record.ok = True
            return result

    async def _attempt_unary(
        self, tried: list[str], endpoint: EndpointSpec, body: bytes, call: CallContext
    ) -> Any:
        timeout = self._attempt_timeout(call)
        url = self._next_url(tried)
        try:
            async with asyncio.timeout(timeout):
                async with self._client().post(
                    url + self.path, data=body, headers=self._headers(call, timeout, self._unary_accept)
                ) as response:
                    payload = await response.read()
                    status = response.status
                    retry_after = response.headers.get("retry-after")
                    _note_answer(status, len(payload))
        except TimeoutError:
            raise DeadlineExceeded(f"{self.name} did not answer within {timeout:.3g}s ({url})") from None
        except aiohttp.ClientError as exc:
            raise _Retryable(f"{self.name} at {url}: {type(exc).__name__}: {exc}", connection=True) from exc
        if status == 200:
            try:
                return codec.decode_result(endpoint, payload, binary=self.options.use_binary)
            except pydantic.ValidationError as exc:
                raise ChainsRuntimeError(
                    f"{self.name} answered with a result that does not match its signature: {exc}"
                ) from None
        raise self._failure(status, payload, retry_after, url)

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
            sent = (
                "the chain's token is wrong"
                if self._is_chain_token
                else "the credential it was sent is wrong"
                if self._authorization
                else "it wants a credential and none was sent"
            )
            return ChainsRuntimeError(f"{self.name} at {url} refused the call (401 {reason}): {sent}")
        return ChainsRuntimeError(f"{self.name} at {url} answered {status}: {reason}")

    # -- streams -----------------------------------------------------------------------------

    async def stream_remote(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Call a streaming endpoint and yield its items as they arrive.

        Retried until the first byte of the stream; after that a broken connection raises
        :class:`StreamInterrupted`, and the producer's own error a :class:`RemoteError`.
        """
        endpoint = self._endpoint()
        shape = shape_of(endpoint)
        body = codec.encode_args(endpoint, args, kwargs, binary=self.options.use_binary)
        call = self._call_context()
        with DependencyCall(self._metrics, self.name) as record:
            async with self._limit.slot():
                opened: list[ClientAttempt] = []
                response: aiohttp.ClientResponse = await self._with_retries(
                    call, self._open_stream, body, call, size=len(body), opened=opened
                )
                items = 0
                error: BaseException | None = None
                try:
                    chunks = _chunks(response, self.name)
                    async for item in decode_framed(shape, chunks, max_frame_size=self._max_frame_bytes):
                        items += 1
                        yield item
                    record.ok = True
                except Exception as exc:  # not the consumer stopping early, which is no error
                    error = exc
                    raise
                finally:
                    # Closing, not releasing: if the consumer stopped early the producer must
                    # see the disconnect and cancel its generator.
                    response.close()
                    if opened:
                        opened[-1].finish(items, response.content.total_bytes, error)

    async def _open_stream(self, tried: list[str], body: bytes, call: CallContext) -> aiohttp.ClientResponse:
        timeout = self._attempt_timeout(call)
        url = self._next_url(tried)
        headers = self._headers(call, timeout, FRAMED_MEDIA_TYPE)
        try:
            async with asyncio.timeout(timeout):
                response = await self._client().post(url + self.path, data=body, headers=headers)
                _note_answer(response.status)
                if response.status == 200:
                    return response
                payload = await response.read()
        except TimeoutError:
            raise DeadlineExceeded(
                f"{self.name} did not start its stream within {timeout:.3g}s ({url})"
            ) from None
        except aiohttp.ClientError as exc:
            raise _Retryable(f"{self.name} at {url}: {type(exc).__name__}: {exc}", connection=True) from exc
        raise self._failure(response.status, payload, response.headers.get("retry-after"), url)

    # -- WebSocket endpoints -----------------------------------------------------------------

    def connect_remote(self) -> AbstractAsyncContextManager[WebSocketProtocol]:
        """Open a conversation with a WebSocket endpoint: ``async with stub.connect_remote() as ws:``
        (see :mod:`chains.websocket.client`)."""
        from chains.websocket.client import connect

        return connect(
            self._client(),
            self.urls,
            self.path,
            name=self.name,
            retries=self.options.retries,
            timeout_sec=self.options.timeout_sec,
            authorization=self._authorization,
            metrics=self._metrics,
            max_message_bytes=self._max_frame_bytes,
        )

    # -- sync unary calls (for sync endpoints) -----------------------------------------------

    def call_remote_sync(self, *args: Any, **kwargs: Any) -> Any:
        """Call a sync endpoint from sync code (a thread), with the same retries and errors."""
        if not self._warned_blocking and _on_event_loop():
            self._warned_blocking = True
            logger.warning(
                "%s.run_remote is sync and was called on a running event loop, which waits for the "
                "whole call and serves nothing else meanwhile; from async code, call it as "
                "`await asyncio.to_thread(stub.run_remote, ...)`",
                self.name,
            )
        endpoint = self._endpoint()
        body = codec.encode_args(endpoint, args, kwargs, binary=self.options.use_binary)
        call = self._call_context()
        tried: list[str] = []
        retrying = tenacity.Retrying(**self._retry_policy(tried))
        attempt = self._attempt_sync if tracing.active() is None else self._traced_sync(call, len(body))
        try:
            return retrying(attempt, tried, endpoint, body, call)
        except _Retryable as exc:
            raise self._gave_up(exc) from None

    def _attempt_sync(self, tried: list[str], endpoint: EndpointSpec, body: bytes, call: CallContext) -> Any:
        # Imported here: only sync calls need httpx, and an async chainlet server should not pay
        # for loading it.
        import httpx

        if self._sync_client is None:
            self._sync_client = httpx.Client(timeout=None)
        timeout = self._attempt_timeout(call)
        url = self._next_url(tried)
        try:
            response = self._sync_client.post(
                url + self.path,
                content=body,
                headers=self._headers(call, timeout, self._unary_accept),
                timeout=timeout,
            )
        except httpx.TimeoutException:
            raise DeadlineExceeded(f"{self.name} did not answer within {timeout:.3g}s ({url})") from None
        except httpx.TransportError as exc:
            raise _Retryable(f"{self.name} at {url}: {type(exc).__name__}: {exc}", connection=True) from exc
        _note_answer(response.status_code, len(response.content))
        if response.status_code == 200:
            return codec.decode_result(endpoint, response.content, binary=self.options.use_binary)
        raise self._failure(response.status_code, response.content, response.headers.get("retry-after"), url)


async def _chunks(response: aiohttp.ClientResponse, name: str) -> AsyncIterator[bytes]:
    """The body as it arrives; a connection that breaks is an interrupted stream."""
    try:
        async for chunk in response.content.iter_any():
            yield chunk
    except (aiohttp.ClientError, ConnectionError) as exc:
        raise StreamInterrupted(f"the stream from {name} broke off: {type(exc).__name__}: {exc}") from exc


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


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
