"""Calling a deployed chain's entrypoint from any Python program: :class:`Client` and
:class:`AsyncClient`.

A consumer needs only pydantic and httpx: this module, ``chains.errors``, ``chains.streaming``
and ``chains.jobs.records`` import nothing else, so the chains package installed with
``pip install --no-deps chains-sdk`` next to those two is enough (see ``docs/clients.md``)::

    from chains.client import Client

    with Client("http://127.0.0.1:8000", api_key="...") as client:
        greeting = client.call(str, name="Ada")                   # a unary result, validated
        for token in client.stream(Token, prompt="hi"):           # an item stream
            print(token.text)
        with client.stream(TOKENS, prompt="hi") as reader:        # header, items, footer
            started = reader.read_header()
            texts = [token.text for token in reader.read_items()]
            usage = reader.read_footer()
        job = client.submit(str, name="Ada")                      # an async call, stored
        greeting = job.result(timeout=600)                        # polled for, validated

Streams are requested in the framed form, the one that tells a complete stream from a cut
one: a stream that stops before its end frame (a proxy timing out, a restarted server)
raises :class:`~chains.errors.StreamInterrupted`, the producer's own failure a
:class:`~chains.errors.RemoteError` (also an instance of its original builtin type), exactly
as between chainlets. The readers are those of ``chains.streaming``; the synchronous client
drives them over a blocking body (see :func:`_drive`). ``submit`` starts an async call (a job
that outlives the request) and returns its handle, :class:`~chains.client_jobs.Job` or
:class:`~chains.client_jobs.AsyncJob` (docs/jobs.md, "From Python").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, ClassVar, Generic, Protocol, TypeVar, overload

import httpx
import pydantic
import pydantic_core

from chains.call_policy import (
    RECONNECT_TRIES,
    answer_error,
    read_on_headers,
    read_on_refused,
    reconnect_delay,
    stop_headers,
)
from chains.client_http import Answer, AsyncHTTP, Unreachable, async_http
from chains.client_jobs import AsyncJob, Job, JobInfo, JobOptions, JobStatus
from chains.client_resumable import AsyncFrameSource, FrameSource, item_decoder, items, items_async
from chains.errors import (
    ChainsRuntimeError,
    DeadlineExceeded,
    DependencyUnavailable,
    JobCanceled,
    JobExpired,
    JobFailedError,
    JobTimeout,
    StreamProtocolError,
)
from chains.streaming.frame_reader import FrameReader
from chains.streaming.kinds import STRUCTURED
from chains.streaming.reader import (
    FooterStreamReader,
    HeaderFooterStreamReader,
    HeaderStreamReader,
    StreamReader,
    stream_reader,
)
from chains.streaming.shape import StreamShape
from chains.streaming.transport import connection_broke
from chains.streaming.types import StreamTypes
from chains.wire import (
    ASYNC_RUN_REMOTE,
    FRAMED_MEDIA_TYPE,
    JSON_MEDIA_TYPE,
    RECONNECT_HEADER,
    RESUMABLE_HEADER,
    RUN_ID_HEADER,
    RUN_REMOTE,
    SSE_MEDIA_TYPE,
    STREAM_ID_HEADER,
    wire_adapter,
)

__all__ = [
    "AsyncClient",
    "AsyncJob",
    "Client",
    "Job",
    "JobCanceled",
    "JobExpired",
    "JobFailedError",
    "JobInfo",
    "JobOptions",
    "JobStatus",
    "JobTimeout",
    "Stream",
    "StructuredStream",
]

T = TypeVar("T")
ItemT = TypeVar("ItemT")
HeaderT = TypeVar("HeaderT")
FooterT = TypeVar("FooterT")
_HttpT = TypeVar("_HttpT", httpx.Client, AsyncHTTP)
_STOP_SEC = 5.0  # how long telling the entrypoint that a reader stopped may take


class _BaseClient(Generic[_HttpT]):
    """What :class:`Client` and :class:`AsyncClient` share: building the request, and what an
    answer, a failure to get one, and a stream's start mean. The two only send and read."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"a chain's URL starts with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"content-type": JSON_MEDIA_TYPE, **(headers or {})}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._run_url = self.url + RUN_REMOTE
        self._submit_url = self.url + ASYNC_RUN_REMOTE
        self._name = "the chain's entrypoint"  # what errors call it: "... at URL answered 503"
        self._http: _HttpT = self._open(timeout)

    def _open(self, timeout: float | None) -> _HttpT:
        raise NotImplementedError

    @staticmethod
    def _body(arguments: dict[str, Any]) -> bytes:
        # The wire's JSON: bytes as base64, models by alias (what the server validates against).
        return pydantic_core.to_json(arguments, by_alias=True, bytes_mode="base64")

    def _submit_body(self, options: JobOptions | None, arguments: dict[str, Any]) -> bytes:
        # Baseten's async body: run_remote's arguments by name under model_input, as on the wire.
        fields = options.fields() if options is not None else {}
        return self._body({"model_input": arguments, **fields})

    def _submitted(self, status: int, headers: Mapping[str, str], content: bytes) -> str:
        """The request id a submission was answered with."""
        if status != 200:
            raise answer_error(self._name, self.url, status, content, headers)
        request_id: str = json.loads(content)["request_id"]
        return request_id

    def _headers_for(self, accept: str) -> dict[str, str]:
        return {**self._headers, "accept": accept}

    @contextmanager
    def _sending(self) -> Iterator[None]:
        """Raise a failure to reach the entrypoint as the chain's own error for it."""
        try:
            yield
        except (httpx.TimeoutException, TimeoutError) as exc:
            raise self._late() from exc
        except (httpx.TransportError, Unreachable) as exc:
            raise DependencyUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from exc

    def _result(self, output_type: Any, status: int, headers: Mapping[str, str], content: bytes) -> Any:
        if status != 200:
            raise answer_error(self._name, self.url, status, content, headers)
        kind = headers.get("content-type", "")
        if not kind.startswith(JSON_MEDIA_TYPE):
            raise ChainsRuntimeError(
                f"{self.url} answered {kind or 'no content type'}, not a JSON result: the entrypoint "
                "streams; read it with .stream(...)"
            )
        if output_type is None:
            return json.loads(content)
        try:
            return wire_adapter(output_type).validate_json(content)
        except pydantic.ValidationError as exc:
            raise ChainsRuntimeError(
                f"{self.url} answered with a result that is not a {_name(output_type)}: {exc}"
            ) from None

    def _check_stream(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        """Raise for an answer that is not a framed stream (``body``: what was read of it)."""
        if status != 200:
            raise answer_error(self._name, self.url, status, body, headers)
        kind = headers.get("content-type", "")
        if not kind.startswith(FRAMED_MEDIA_TYPE):
            raise StreamProtocolError(
                f"{self.url} answered {kind or 'no content type'}, not a chains stream: the entrypoint "
                "returns one result; call it with .call(...)"
            )

    def _late(self) -> DeadlineExceeded:
        return DeadlineExceeded(f"{self.url} did not answer within {self.timeout}s")

    def _resumable_headers(self) -> dict[str, str]:
        return {**self._headers_for(SSE_MEDIA_TYPE), RESUMABLE_HEADER: "1"}

    def _run_id(self, status: int, headers: Mapping[str, str], body: bytes) -> str:
        """The id of the run a resumable stream's answer names (``body``: what was read of it)."""
        if status != 200:
            raise answer_error(self._name, self.url, status, body, headers)
        run_id = headers.get(RUN_ID_HEADER)
        if not run_id:
            raise StreamProtocolError(
                f"{self.url} answered a resumable stream without {RUN_ID_HEADER}: is it a chains "
                "entrypoint recent enough to keep resumable streams?"
            )
        return run_id


def _shape(of: Any) -> StreamShape:
    if isinstance(of, StreamTypes):
        return StreamShape.of(STRUCTURED, types=of)
    return StreamShape.for_item_type(of)


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def _drive(step: Awaitable[T]) -> T:
    """The result of an awaitable that never suspends.

    A :class:`FrameReader` fed a blocking iterator of chunks awaits nothing that waits: each
    of its awaits completes at once. Running its coroutines to their end here lets the
    synchronous client use the very same reader (and checks) as the asynchronous one.
    """
    steps = step.__await__()
    try:
        steps.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    steps.close()
    raise RuntimeError("a synchronous stream read had to wait on an event loop")  # a bug, not input


class _Chunks(Protocol):
    """What a blocking reader reads: a plain answer's body, or a resumable stream's frames."""

    def __iter__(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class Stream(Generic[ItemT]):
    """The items of one stream read by :class:`Client`, as they arrive.

    Iterate it (once); use it as a context manager, or call :meth:`close`, to release the
    connection when leaving before the end::

        with client.stream(str, prompt="hi") as pieces:
            for piece in pieces:
                print(piece, end="")
    """

    # Whether an unread header is refused before the items (a structured stream's reader).
    _header_first: ClassVar[bool] = False

    def __init__(self, shape: StreamShape, body: _Chunks) -> None:
        self._body = body
        self._reader = FrameReader(shape.wire, body)
        self._items: AsyncGenerator[Any, None] | None = None

    def read_items(self) -> Iterator[ItemT]:
        """The items, parsed, until the footer or the end of the stream.

        Raises StreamInterrupted if the stream stops before its end, RemoteError if the
        producer failed, and StreamSchemaMismatch if it streams another schema.
        """
        if self._items is None:
            try:
                _drive(self._reader.start())
            except BaseException:
                self.close()
                raise
            if self._header_first:
                # Checked before the items' generator exists, and without closing: the stream
                # stays readable once the header is taken, as the asynchronous reader does.
                self._reader.refuse_unread_header()
            self._items = self._reader.items()
        items = self._items
        try:
            while True:
                try:
                    item: ItemT = _drive(anext(items))
                except StopAsyncIteration:
                    return
                yield item
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[ItemT]:
        return self.read_items()

    @property
    def items_read(self) -> int:
        return self._reader.items_read

    def close(self) -> None:
        """Stop reading and release the connection."""
        if self._items is not None:
            _drive(self._items.aclose())
        self._body.close()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_S = TypeVar("_S", bound=Stream[Any])


class StructuredStream(Stream[ItemT], Generic[ItemT, HeaderT, FooterT]):
    """A structured stream (header, items, footer) read by :class:`Client`.

    Its header comes first: :meth:`read_items` (or iterating) while a header that arrived is
    unread raises ChainsUsageError, as the asynchronous reader does, rather than skip it.
    """

    _header_first = True

    def read_header(self) -> HeaderT:
        """The header (None when the types declare none); it comes first."""
        header: HeaderT = _drive(self._reader.header())
        return header

    def read_footer(self) -> FooterT:
        """The footer, once the end of the stream confirms it is complete (skips unread items)."""
        try:
            footer: FooterT = _drive(self._reader.footer())
        except BaseException:
            self.close()
            raise
        self.close()
        return footer


class Client(_BaseClient[httpx.Client]):
    """A blocking client of one chain's entrypoint (the URL ``chains push`` printed).

    ``api_key`` is sent as ``Authorization: Bearer``; ``timeout`` (seconds, None for none)
    bounds each wait for the server::

        with Client(url, api_key=key) as client:
            print(client.call(list[str], names=["Ada"]))
    """

    def _open(self, timeout: float | None) -> httpx.Client:
        return httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout or 10.0, 10.0)))

    def _request(self, accept: str, arguments: dict[str, Any]) -> httpx.Request:
        return self._http.build_request(
            "POST", self._run_url, content=self._body(arguments), headers=self._headers_for(accept)
        )

    def _read_on(self, stream_id: str, offset: int) -> httpx.Response:
        """The rest of stream ``stream_id`` from byte ``offset`` (its answer, not checked yet)."""
        headers = read_on_headers(self._headers, stream_id, offset)
        request = self._http.build_request("POST", self._run_url, headers=headers)
        return self._http.send(request, stream=True)

    def _stop(self, stream_id: str) -> None:
        """Tell the entrypoint that this stream's reader stopped on purpose (best effort)."""
        with contextlib.suppress(httpx.HTTPError):
            self._http.post(self._run_url, headers=stop_headers(self._headers, stream_id), timeout=_STOP_SEC)

    @overload
    def call(self, output_type: type[T], /, **arguments: Any) -> T: ...
    @overload
    def call(self, output_type: Any = None, /, **arguments: Any) -> Any: ...
    def call(self, output_type: Any = None, /, **arguments: Any) -> Any:
        """Call a unary entrypoint with ``arguments``; its result validated as ``output_type``
        (a model, ``list[str]``, ...), or the plain JSON value when it is None."""
        with self._sending():
            response = self._http.send(self._request(JSON_MEDIA_TYPE, arguments))
        return self._result(output_type, response.status_code, response.headers, response.content)

    @overload
    def stream(
        self, of: StreamTypes[ItemT, HeaderT, FooterT], /, **arguments: Any
    ) -> StructuredStream[ItemT, HeaderT, FooterT]: ...
    @overload
    def stream(self, of: type[ItemT], /, **arguments: Any) -> Stream[ItemT]: ...
    def stream(self, of: Any, /, **arguments: Any) -> Stream[Any]:
        """Call a streaming entrypoint: ``of`` is what it streams, ``str``, ``bytes``,
        ``chains.SSE``, an item type, or the ``StreamTypes`` of a structured stream.

        The request is sent at once: a refusal or an error before the stream starts is raised
        here, and anything after it while reading.
        """
        request = self._request(FRAMED_MEDIA_TYPE, arguments)
        request.headers[RECONNECT_HEADER] = "1"
        with self._sending():
            response = self._http.send(request, stream=True)
        try:
            status = response.status_code
            self._check_stream(status, response.headers, response.read() if status != 200 else b"")
        except BaseException:
            response.close()
            raise
        if isinstance(of, StreamTypes):
            return StructuredStream(_shape(of), _Body(response, self))
        return Stream(_shape(of), _Body(response, self))

    @overload
    def resumable_stream(
        self, of: StreamTypes[ItemT, HeaderT, FooterT], /, **arguments: Any
    ) -> StructuredStream[ItemT, HeaderT, FooterT]: ...
    @overload
    def resumable_stream(self, of: type[ItemT], /, **arguments: Any) -> Iterator[ItemT]: ...
    def resumable_stream(self, of: Any, /, **arguments: Any) -> Iterator[Any] | Stream[Any]:
        """Call a streaming entrypoint as a resumable stream (docs/jobs.md): the run outlives a
        cut connection, and the stream is read on from the last event that arrived, so each
        part comes once, in order. ``of`` is ``str``, ``bytes``, ``chains.SSE`` or an item type
        (an iterator of the items), or the ``StreamTypes`` of a structured stream (the
        :class:`StructuredStream` ``stream()`` gives, read and checked the same way)::

            for token in client.resumable_stream(Token, prompt="hi"):
                print(token.text)
            with client.resumable_stream(TOKENS, prompt="hi") as reader:
                started = reader.read_header()
                texts = [token.text for token in reader.read_items()]
                usage = reader.read_footer()

        The request is sent at once; StreamInterrupted is raised only once the run is gone, the
        tries to read on are spent, or the run started over after a part of it was read (the
        entrypoint needs a job store: see docs/jobs.md).
        """
        decode = None if isinstance(of, StreamTypes) else item_decoder(of)
        request = self._http.build_request(
            "POST", self._run_url, content=self._body(arguments), headers=self._resumable_headers()
        )
        with self._sending():
            response = self._http.send(request, stream=True)
        try:
            status = response.status_code
            run_id = self._run_id(status, response.headers, response.read() if status != 200 else b"")
        except BaseException:
            response.close()
            raise
        events = Job(self, run_id).follow(response)
        if decode is None:
            return StructuredStream(_shape(of), FrameSource(of, run_id, events, response.close))
        return items(events, decode, run_id)

    @overload
    def submit(
        self, output_type: type[T], options: JobOptions | None = None, /, **arguments: Any
    ) -> Job[T]: ...
    @overload
    def submit(
        self, output_type: Any = None, options: JobOptions | None = None, /, **arguments: Any
    ) -> Job[Any]: ...
    def submit(
        self, output_type: Any = None, options: JobOptions | None = None, /, **arguments: Any
    ) -> Job[Any]:
        """Submit an async call of the entrypoint with ``arguments`` (docs/jobs.md): it is
        stored and answered at once, and runs on the entrypoint's workers. The returned
        :class:`Job`'s ``result()`` is validated as ``output_type``, as :meth:`call`'s is::

            job = client.submit(Summary, text="...")
            summary = job.result(timeout=600)
            urgent = client.submit(Summary, JobOptions(priority=0, webhook_endpoint=hook), text="...")

        ``options`` (:class:`JobOptions`: priority, webhook, time in the queue, retries) is
        positional, so that the chain's arguments may have any names. Arguments that do not fit
        ``run_remote`` are refused here, with ValueError.
        """
        with self._sending():
            response = self._http.post(
                self._submit_url,
                content=self._submit_body(options, arguments),
                headers=self._headers_for(JSON_MEDIA_TYPE),
            )
        return Job(
            self, self._submitted(response.status_code, response.headers, response.content), output_type
        )

    @overload
    def job(self, job_id: str, output_type: type[T], /) -> Job[T]: ...
    @overload
    def job(self, job_id: str, output_type: Any = None, /) -> Job[Any]: ...
    def job(self, job_id: str, output_type: Any = None, /) -> Job[Any]:
        """The handle of a job submitted earlier (by this program or any other), from its id."""
        return Job(self, job_id, output_type)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient(_BaseClient[AsyncHTTP]):
    """The asyncio client of one chain's entrypoint; see :class:`Client`::

    async with AsyncClient(url) as client:
        async for piece in client.stream(str, prompt="hi"):
            print(piece, end="")
        reader = client.stream(TOKENS, prompt="hi")      # chains.stream_reader's reader
        started = await reader.read_header()
    """

    def _open(self, timeout: float | None) -> AsyncHTTP:
        return async_http(timeout)  # aiohttp when installed: see chains.client_http

    @overload
    async def call(self, output_type: type[T], /, **arguments: Any) -> T: ...
    @overload
    async def call(self, output_type: Any = None, /, **arguments: Any) -> Any: ...
    async def call(self, output_type: Any = None, /, **arguments: Any) -> Any:
        """Call a unary entrypoint; see :meth:`Client.call`."""
        with self._sending():
            answer = await self._http.post(
                self._run_url, self._body(arguments), self._headers_for(JSON_MEDIA_TYPE), stream=False
            )
            content = await answer.read()
        return self._result(output_type, answer.status, answer.headers, content)

    @overload
    async def stream(
        self, of: StreamTypes[ItemT, None, None], /, **arguments: Any
    ) -> StreamReader[ItemT]: ...
    @overload
    async def stream(
        self, of: StreamTypes[ItemT, HeaderT, None], /, **arguments: Any
    ) -> HeaderStreamReader[ItemT, HeaderT]: ...
    @overload
    async def stream(
        self, of: StreamTypes[ItemT, None, FooterT], /, **arguments: Any
    ) -> FooterStreamReader[ItemT, FooterT]: ...
    @overload
    async def stream(
        self, of: StreamTypes[ItemT, HeaderT, FooterT], /, **arguments: Any
    ) -> HeaderFooterStreamReader[ItemT, HeaderT, FooterT]: ...
    @overload
    async def stream(self, of: type[ItemT], /, **arguments: Any) -> AsyncGenerator[ItemT, None]: ...
    async def stream(self, of: Any, /, **arguments: Any) -> Any:
        """Call a streaming entrypoint; see :meth:`Client.stream`. For ``StreamTypes`` it is
        the reader ``chains.stream_reader`` makes (``read_header``, ``read_items``,
        ``read_footer``), for anything else an async generator of the items."""
        with self._sending():
            headers = {**self._headers_for(FRAMED_MEDIA_TYPE), RECONNECT_HEADER: "1"}
            answer = await self._http.post(self._run_url, self._body(arguments), headers, stream=True)
            try:
                self._check_stream(
                    answer.status, answer.headers, await answer.read() if answer.status != 200 else b""
                )
            except BaseException:
                await answer.aclose()
                raise
        source = _AsyncBody(answer, self)
        if isinstance(of, StreamTypes):
            return stream_reader(of, source)
        return _items(FrameReader(_shape(of).wire, source))

    @overload
    async def resumable_stream(
        self, of: StreamTypes[ItemT, None, None], /, **arguments: Any
    ) -> StreamReader[ItemT]: ...
    @overload
    async def resumable_stream(
        self, of: StreamTypes[ItemT, HeaderT, None], /, **arguments: Any
    ) -> HeaderStreamReader[ItemT, HeaderT]: ...
    @overload
    async def resumable_stream(
        self, of: StreamTypes[ItemT, None, FooterT], /, **arguments: Any
    ) -> FooterStreamReader[ItemT, FooterT]: ...
    @overload
    async def resumable_stream(
        self, of: StreamTypes[ItemT, HeaderT, FooterT], /, **arguments: Any
    ) -> HeaderFooterStreamReader[ItemT, HeaderT, FooterT]: ...
    @overload
    async def resumable_stream(self, of: type[ItemT], /, **arguments: Any) -> AsyncIterator[ItemT]: ...
    async def resumable_stream(self, of: Any, /, **arguments: Any) -> Any:
        """See :meth:`Client.resumable_stream`; for ``StreamTypes`` it is the reader
        :meth:`stream` gives (``read_header``, ``read_items``, ``read_footer``)::

            async for token in await client.resumable_stream(Token, prompt="hi"):
                print(token.text)
            reader = await client.resumable_stream(TOKENS, prompt="hi")
            started = await reader.read_header()
        """
        decode = None if isinstance(of, StreamTypes) else item_decoder(of)
        with self._sending():
            answer = await self._http.post(
                self._run_url, self._body(arguments), self._resumable_headers(), stream=True
            )
            try:
                status = answer.status
                run_id = self._run_id(status, answer.headers, await answer.read() if status != 200 else b"")
            except BaseException:
                await answer.aclose()
                raise
        events = AsyncJob(self, run_id).follow(answer)
        if decode is None:
            return stream_reader(of, AsyncFrameSource(of, run_id, events, answer.aclose))
        return items_async(events, decode, run_id)

    @overload
    async def submit(
        self, output_type: type[T], options: JobOptions | None = None, /, **arguments: Any
    ) -> AsyncJob[T]: ...
    @overload
    async def submit(
        self, output_type: Any = None, options: JobOptions | None = None, /, **arguments: Any
    ) -> AsyncJob[Any]: ...
    async def submit(
        self, output_type: Any = None, options: JobOptions | None = None, /, **arguments: Any
    ) -> AsyncJob[Any]:
        """Submit an async call; see :meth:`Client.submit`::

        job = await client.submit(Summary, text="...")
        summary = await job.result(timeout=600)
        """
        with self._sending():
            answer = await self._http.post(
                self._submit_url,
                self._submit_body(options, arguments),
                self._headers_for(JSON_MEDIA_TYPE),
                stream=False,
            )
            content = await answer.read()
        return AsyncJob(self, self._submitted(answer.status, answer.headers, content), output_type)

    @overload
    def job(self, job_id: str, output_type: type[T], /) -> AsyncJob[T]: ...
    @overload
    def job(self, job_id: str, output_type: Any = None, /) -> AsyncJob[Any]: ...
    def job(self, job_id: str, output_type: Any = None, /) -> AsyncJob[Any]:
        """The handle of a job submitted earlier, from its id; see :meth:`Client.job`."""
        return AsyncJob(self, job_id, output_type)

    async def _read_on(self, stream_id: str, offset: int) -> Answer:
        """See :meth:`Client._read_on`."""
        headers = read_on_headers(self._headers, stream_id, offset)
        return await self._http.post(self._run_url, b"", headers, stream=True)

    async def _stop(self, stream_id: str) -> None:
        """See :meth:`Client._stop`."""
        with contextlib.suppress(Unreachable, TimeoutError):
            async with asyncio.timeout(_STOP_SEC):
                await self._http.post(
                    self._run_url, b"", stop_headers(self._headers, stream_id), stream=False
                )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class _Body:
    """The chunks of a streamed response; a timeout while waiting for one is the deadline's.

    A connection that breaks is read on from the byte it stopped at, while the entrypoint keeps
    the run (docs/wire-protocol.md, "Cut connections"); a reader that leaves before the end says so,
    and the entrypoint stops the run at once instead of waiting for it to come back.
    """

    def __init__(self, response: httpx.Response, client: Client) -> None:
        self._response = response
        self._chunks = response.iter_bytes()
        self._client = client
        self._stream_id = response.headers.get(STREAM_ID_HEADER)
        self._offset = 0
        self._tries = 0  # tries to read on in a row, with no byte between them
        self._ended = False

    def __iter__(self) -> _Body:
        return self

    def __next__(self) -> bytes:
        while True:
            try:
                chunk = next(self._chunks)
            except StopIteration:
                self._ended = True
                raise
            except httpx.TimeoutException as exc:
                raise self._client._late() from exc
            except Exception as exc:
                if self._stream_id is None or not connection_broke(exc):
                    raise
                self._read_on(self._stream_id, exc)
                continue
            self._offset += len(chunk)
            self._tries = 0
            return chunk

    def _read_on(self, stream_id: str, cut: Exception) -> None:
        self._response.close()
        while self._tries < RECONNECT_TRIES:
            time.sleep(reconnect_delay(self._tries))
            self._tries += 1
            try:
                response = self._client._read_on(stream_id, self._offset)
            except httpx.TransportError as exc:
                cut = exc
                continue
            if response.status_code == 200:
                self._response, self._chunks = response, response.iter_bytes()
                return
            body = response.read()
            response.close()
            self._ended = True  # nothing left to stop
            raise read_on_refused(self._client._name, self._offset, cut, response.status_code, body) from cut
        raise cut  # the frame reader reports it as a stream that broke off

    def close(self) -> None:
        self._response.close()
        if not self._ended and self._stream_id is not None:
            self._ended = True
            self._client._stop(self._stream_id)


class _AsyncBody:
    """:class:`_Body` for :class:`AsyncClient`; ``aclose`` (the reader's) releases the connection."""

    def __init__(self, answer: Answer, client: AsyncClient) -> None:
        self._answer = answer
        self._chunks = answer.chunks()
        self._client = client
        self._stream_id = answer.headers.get(STREAM_ID_HEADER)
        self._offset = 0
        self._tries = 0  # tries to read on in a row, with no byte between them
        self._ended = False

    def __aiter__(self) -> _AsyncBody:
        return self

    async def __anext__(self) -> bytes:
        while True:
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self._ended = True
                raise
            except TimeoutError as exc:
                raise self._client._late() from exc
            except Exception as exc:
                if self._stream_id is None or not connection_broke(exc):
                    raise
                await self._read_on(self._stream_id, exc)
                continue
            self._offset += len(chunk)
            self._tries = 0
            return chunk

    async def _read_on(self, stream_id: str, cut: Exception) -> None:
        await self._answer.aclose()
        while self._tries < RECONNECT_TRIES:
            await asyncio.sleep(reconnect_delay(self._tries))
            self._tries += 1
            try:
                answer = await self._client._read_on(stream_id, self._offset)
            except Unreachable as exc:
                cut = exc
                continue
            if answer.status == 200:
                self._answer, self._chunks = answer, answer.chunks()
                return
            body = await answer.read()
            await answer.aclose()
            self._ended = True
            raise read_on_refused(self._client._name, self._offset, cut, answer.status, body) from cut
        raise cut

    async def aclose(self) -> None:
        await self._answer.aclose()
        if not self._ended and self._stream_id is not None:
            self._ended = True
            await self._client._stop(self._stream_id)


async def _items(reader: FrameReader) -> AsyncGenerator[Any, None]:
    try:
        async for item in reader.items():
            yield item
    finally:
        await reader.aclose()
