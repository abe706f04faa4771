"""One policy for every stub call, whatever transport carries it.

Replica choice, the deadline of each attempt, the headers every call carries, retries with
backoff, what a failed answer means and the decoding of a result are decided here, once, for
the async transport (aiohttp) and the sync one (httpx) alike, and for chainlet stubs and
stubs of deployed models (``StubBase.from_url``) alike::

    policy = CallPolicy("Words", ["http://127.0.0.1:8001"], StubOptions(retries=2))
    result = await policy.unary("/run_remote", body, decode=json.loads, accept="application/json")

Failures before a response, and 429/502/503/504, are retried with exponential backoff and
jitter, on a replica the call has not tried yet first; a stream only until it starts. What
is retried, how long to wait and what an answer means are :mod:`chains.call_policy`'s, which
the WebSocket dial and ``chains.client`` share; the async and the sync loop here only differ
in how they sleep. (They replaced tenacity: with the decisions shared, each loop is a few
lines, where tenacity needed an async and a sync copy of its setup, and a trick to skip its
machinery, about 70 µs a call, on the first attempt.)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pydantic

from chains import tracing
from chains.call_context import CallContext, current_call, new_request_id
from chains.call_policy import (
    RECONNECT_TRIES,
    RETRY_STATUSES,
    answer_error,
    check_wait,
    read_on_headers,
    read_on_refused,
    reconnect_delay,
    retry_after_seconds,
    stop_headers,
    wait_before_retry,
)
from chains.errors import (
    ChainsRuntimeError,
    DeadlineExceeded,
    DependencyUnavailable,
    RemoteError,
    StreamInterrupted,
)
from chains.limits import CallLimit
from chains.metrics import DependencyCall, Metrics
from chains.rpc_options import StubOptions
from chains.stubs.aiohttp_transport import AiohttpTransport
from chains.stubs.transport import AsyncTransport, ByteStream, Response, SyncTransport, TransportError
from chains.wire import BINARY_MEDIA_TYPE, JSON_MEDIA_TYPE, RECONNECT_HEADER, STREAM_ID_HEADER

if TYPE_CHECKING:
    from chains.tracing.spans import ClientAttempt

__all__ = ["RETRY_STATUSES", "CallPolicy", "Decode", "DecodeStream"]


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


class _OpenStream:
    """A stream as it is being read: its body now, where it came from and the run it belongs to."""

    __slots__ = ("body", "call", "stream_id", "url")

    def __init__(self, body: ByteStream, url: str, stream_id: str | None, call: CallContext) -> None:
        self.body = body
        self.url = url
        self.stream_id = stream_id  # None: the callee keeps no run to read on from
        self.call = call


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
        self._stopping: set[asyncio.Task[None]] = set()  # stopped streams being told so

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

        Retried until the response starts. After that a broken connection is read on from the
        byte it stopped at, from the same replica, while it keeps the run (docs/wire-protocol.md,
        "Cut connections"); only then is it raised as :class:`StreamInterrupted`. A consumer
        that stops early tells the callee, which stops its producer at once. The call holds its
        concurrency slot until the stream ends.
        """
        call = self._call_context()
        with DependencyCall(self.metrics, self.name) as record:
            async with self._limit.slot():
                opened: list[ClientAttempt] = []
                stream: _OpenStream = await self._with_retries(
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
                    stream.body.close()
                    if not record.ok and not isinstance(error, (StreamInterrupted, RemoteError)):
                        self._stop(stream)  # the consumer stopped early: its producer may stop now
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
        raise self._failure(response.status, response.body, response.headers, url)

    async def _open_stream(
        self, tried: list[str], path: str, body: bytes, accept: str, call: CallContext
    ) -> _OpenStream:
        timeout = self._attempt_timeout(call)
        url = self._next_url(tried)
        headers = self._headers(call, timeout, accept)
        headers[RECONNECT_HEADER] = "1"
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
            return _OpenStream(response.stream, url + path, response.headers.get(STREAM_ID_HEADER), call)
        raise self._failure(response.status, response.body, response.headers, url)

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

    async def _chunks(self, stream: _OpenStream, received: list[int]) -> AsyncIterator[bytes]:
        """The body as it arrives, counted in ``received[0]``; a connection that breaks is read
        on where it stopped, or is an interrupted stream once :data:`RECONNECT_TRIES` tries in a
        row brought no byte."""
        tries = 0
        while True:
            try:
                async for chunk in stream.body.chunks():
                    received[0] += len(chunk)
                    tries = 0
                    yield chunk
                return
            except TransportError as exc:
                cut: BaseException = exc
            stream.body.close()
            if stream.stream_id is None:  # a callee that keeps no runs to come back to
                raise StreamInterrupted(f"the stream from {self.name} broke off: {cut}") from cut
            while True:
                if tries >= RECONNECT_TRIES:
                    raise StreamInterrupted(
                        f"the stream from {self.name} broke off after {received[0]} bytes and could "
                        f"not be read on within {RECONNECT_TRIES} tries: {cut}"
                    ) from cut
                await asyncio.sleep(reconnect_delay(tries))
                tries += 1
                try:
                    stream.body = await self._read_on(stream, stream.stream_id, received[0], cut)
                    break
                except (TransportError, TimeoutError) as exc:
                    cut = exc  # the replica is not answering (yet): try again

    async def _read_on(
        self, stream: _OpenStream, stream_id: str, offset: int, cut: BaseException
    ) -> ByteStream:
        """The rest of ``stream`` from byte ``offset``, asked of the replica that sent the rest
        (the run lives in its memory); raises :class:`StreamInterrupted` when it is not there."""
        remaining = stream.call.remaining()
        timeout = self.options.timeout_sec if remaining is None else min(self.options.timeout_sec, remaining)
        if timeout <= 0:
            raise StreamInterrupted(
                f"the stream from {self.name} broke off after {offset} bytes, with no time left to read "
                f"on: {cut}"
            ) from cut
        headers = read_on_headers(self._plain_headers(), stream_id, offset)
        response = await self.transport.send(stream.url, b"", headers, timeout, stream=True)
        if response.status == 200 and response.stream is not None:
            if self.metrics is not None:
                self.metrics.dependency_retried(self.name)
            return response.stream
        raise read_on_refused(self.name, offset, cut, response.status, response.body) from cut

    def _plain_headers(self) -> dict[str, str]:
        headers = {"content-type": JSON_MEDIA_TYPE, "accept-encoding": "identity"}
        if self.authorization:
            headers["authorization"] = self.authorization
        return headers

    def _stop(self, stream: _OpenStream) -> None:
        """Tell the callee that this stream's consumer stopped on purpose, without waiting: a
        cut connection alone leaves its run waiting for the reader to come back."""
        if stream.stream_id is None:
            return
        headers = stop_headers(self._plain_headers(), stream.stream_id)
        try:
            task = asyncio.get_running_loop().create_task(self._send_stop(stream.url, headers))
        except RuntimeError:  # no loop left (the process is ending): the run's wait ends it
            return
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _send_stop(self, url: str, headers: dict[str, str]) -> None:
        with contextlib.suppress(TransportError, TimeoutError):
            await self.transport.send(url, b"", headers, 5.0)

    # -- outcomes ----------------------------------------------------------------------------

    def _result(self, payload: bytes, decode: Decode) -> Any:
        try:
            return decode(payload)
        except pydantic.ValidationError as exc:
            raise ChainsRuntimeError(
                f"{self.name} answered with a result that does not match its signature: {exc}"
            ) from None

    def _failure(self, status: int, payload: bytes, headers: Mapping[str, str], url: str) -> Exception:
        """The exception for a non-200 answer: retryable, or what the caller sees."""
        if status in RETRY_STATUSES:
            retry_after = retry_after_seconds(headers.get("retry-after"))
            return _Retryable(
                f"{self.name} at {url} answered {status}", retry_after=retry_after, status=status
            )
        error = answer_error(self.name, url, status, payload, headers, unauthorized=self._unauthorized())
        # 500, or the status an HTTPException asked for: either way the callee's own error.
        if self.options.retry_user_errors and status == 500 and isinstance(error, RemoteError):
            exc_type = error.detail.exc_type if error.detail is not None else type(error).__name__
            return _Retryable(f"{self.name} at {url} raised {exc_type}", status=status, remote=error)
        return error

    def _unauthorized(self) -> str:
        """What a 401 means for this stub's credential."""
        if self._is_chain_token:
            return "the chain's token is wrong"
        if self.authorization:
            named = f" ({self.credential})" if self.credential else ""
            return f"the credential it was sent is wrong{named}"
        return "it wants a credential and none was sent"

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
        retry = 0
        while True:
            try:
                return await attempt(tried, *args)
            except _Retryable as exc:
                retry += 1
                seconds = self._after_failure(exc, retry, tried, call)
            if seconds > 0:
                await asyncio.sleep(seconds)

    def _with_retries_sync(self, call: CallContext, attempt: Callable[..., Any], *args: Any) -> Any:
        tried: list[str] = []
        retry = 0
        while True:
            try:
                return attempt(tried, *args)
            except _Retryable as exc:
                retry += 1
                seconds = self._after_failure(exc, retry, tried, call)
            if seconds > 0:
                time.sleep(seconds)

    def _after_failure(self, exc: _Retryable, retry: int, tried: list[str], call: CallContext) -> float:
        """What follows a retryable failure, for async and sync calls alike: the seconds to wait
        before retry number ``retry``, or the exception that ends the call (retries used up, or
        a wait that would end past the caller's deadline)."""
        if retry > self.options.retries:
            raise self._gave_up(exc) from None
        other_replica = len(set(tried)) < len(self.urls)
        seconds = wait_before_retry(retry, retry_after=exc.retry_after, other_replica=other_replica)
        check_wait(self.name, seconds, call.remaining())
        if self.metrics is not None:
            self.metrics.dependency_retried(self.name)
        return seconds

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


def _note_answer(status: int, size: int | None = None) -> None:
    """Put the answer's status and size on the attempt's span, when tracing."""
    traced = tracing.active()
    if traced is not None:
        traced.current_attempt().answered(status, size)
