"""``chains.run_local``: a whole chain in one process, with stubs that behave like remote ones."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pydantic
import pydantic_core

from chains import codec
from chains.await_check import PendingCall
from chains.chainlet import construct
from chains.checks import build_chain
from chains.context import DeployedServiceDescriptor, DeploymentContext, Secrets
from chains.errors import ChainsUsageError, DeadlineExceeded, ErrorDetail, RemoteError
from chains.limits import CallLimit
from chains.local_routes import with_routes
from chains.model import Chainlet, ChainletSpec, DependencyMarker, building_with
from chains.streaming import decode_framed, encode_framed, shape_of
from chains.websocket.protocol import WebSocketProtocol

__all__ = ["LocalStub", "run_local"]


@contextmanager
def run_local(
    secrets: Mapping[str, str] | None = None,
    data_dir: str | Path | None = None,
    serialize: bool = True,
    chainlet_to_service: Mapping[str, DeployedServiceDescriptor] | None = None,
) -> Iterator[None]:
    """Build chainlets in this process, their dependencies injected as local stubs.

    With ``serialize=True`` (the default) every call's arguments and results go through the
    same wire codecs as a deployed chain, so a value that would not survive the wire fails
    here. Keyword arguments given to the constructor replace injected dependencies::

        with chains.run_local(secrets={"hf_token": "test"}):
            entry = Entry()
            print(asyncio.run(entry.run_remote("hi")))

            fake = Entry(words=FakeWords())     # a fake instead of the real dependency

    ``chainlet_to_service`` adds services (deployed models, say) to every chainlet's
    ``DeploymentContext``, for ``context.get_service_descriptor(name)``; dependencies still
    run in this process.
    """
    runner = _LocalRunner(
        dict(secrets or {}),
        Path(data_dir) if data_dir is not None else None,
        serialize,
        dict(chainlet_to_service or {}),
    )
    with building_with(runner.build):
        yield


class _LocalRunner:
    def __init__(
        self,
        secrets: dict[str, str],
        data_dir: Path | None,
        serialize: bool,
        services: dict[str, DeployedServiceDescriptor],
    ) -> None:
        self._secrets = secrets
        self._services = services
        self._data_dir = data_dir
        self._serialize = serialize
        # One instance per dependency class, as a deployment has one service per chainlet.
        self._instances: dict[type[Chainlet], Chainlet] = {}

    def build(self, cls: type[Chainlet], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Chainlet:
        chain = build_chain(cls)
        specs = {spec.cls: spec for spec in chain.chainlets}
        instance = self._build(specs[cls], specs, args, kwargs)
        if specs[cls].endpoint.output_kind.yields_frames:
            _complete_structured_stream(instance, specs[cls])
        return instance

    def _build(
        self,
        spec: ChainletSpec,
        specs: dict[type, ChainletSpec],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Chainlet:
        init = inspect.signature(spec.cls.__init__)
        try:
            given = init.bind_partial(None, *args, **kwargs).arguments
        except TypeError as exc:
            raise ChainsUsageError(f"{spec.name}(): {exc}") from None
        given.pop(next(iter(init.parameters)), None)
        for dep in spec.dependencies:
            if dep.param not in given:
                callee = specs[dep.chainlet_cls]
                instance = self._instance(callee, specs)
                stub = LocalStub(callee, instance, dep.marker, self._serialize)
                given[dep.param] = with_routes(stub, callee, instance, dep.marker, self._serialize)
        if spec.context_param is not None and spec.context_param not in given:
            given[spec.context_param] = self._context(spec)
        return construct(spec.cls, (), given)

    def _instance(self, spec: ChainletSpec, specs: dict[type, ChainletSpec]) -> Chainlet:
        if spec.cls not in self._instances:
            self._instances[spec.cls] = self._build(spec, specs, (), {})
        return self._instances[spec.cls]

    def _context(self, spec: ChainletSpec) -> DeploymentContext:
        declared = spec.remote_config.assets.secret_keys
        return DeploymentContext(
            secrets=Secrets(self._secrets, declared, spec.name),
            chainlet_to_service={
                **{dep.name: DeployedServiceDescriptor(dep.name) for dep in spec.dependencies},
                **self._services,
            },
            data_dir=self._data_dir,
            environment="local",
        )


class LocalStub:
    """Calls a chainlet instance in this process the way a remote stub calls its server.

    Errors arrive as :class:`RemoteError` (an instance of the original builtin type), each
    attempt is bounded by ``timeout_sec``, ``concurrency_limit`` holds for whole calls,
    streams included, and with ``serialize`` every value crosses the wire codecs.
    """

    def __init__(
        self, spec: ChainletSpec, instance: Chainlet, marker: DependencyMarker, serialize: bool
    ) -> None:
        self._spec = spec
        self._endpoint = spec.endpoint
        self._instance = instance
        self._marker = marker
        self._serialize = serialize
        self._limit = CallLimit(marker.concurrency_limit, spec.name)
        self._pool: ThreadPoolExecutor | None = None
        endpoint = self._endpoint
        method: Callable[..., Any]
        if endpoint.output_kind.is_socket:
            method = self._connect
        elif endpoint.is_stream:
            method = self._stream
        elif endpoint.is_async:
            method = self._pending_call
        else:
            method = self._call_sync
        self.run_remote = method

    def __repr__(self) -> str:
        return f"LocalStub({self._spec.name})"

    def __getattr__(self, name: str) -> Any:
        # Truss's run_local hands out the instances themselves, and its tests read their
        # attributes (`chain.dep.value`): anything but the endpoint is the instance's own.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._instance, name)

    @property
    def _async_semaphore_wrapper(self) -> CallLimit:
        # Truss Chains' name for the concurrency limit, which its test chains tune.
        return self._limit

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        endpoint = self._endpoint
        if not self._serialize:
            return codec.bind_arguments(endpoint, args, kwargs)
        binary = self._marker.use_binary
        body = codec.encode_args(endpoint, args, kwargs, binary=binary)
        try:
            return codec.decode_args(endpoint, body, binary=binary)
        except pydantic.ValidationError as exc:
            raise codec.invalid_arguments(endpoint, exc) from None

    def _result(self, value: Any) -> Any:
        if not self._serialize:
            return value
        try:
            body = codec.encode_result(self._endpoint, value, binary=self._marker.use_binary)
        except (pydantic.ValidationError, pydantic_core.PydanticSerializationError) as exc:
            raise self._remote(exc) from None
        return codec.decode_result(self._endpoint, body, binary=self._marker.use_binary)

    def _remote(self, exc: BaseException) -> RemoteError:
        return RemoteError.from_detail(ErrorDetail.from_exception(exc, self._spec.name))

    def _pending_call(self, *args: Any, **kwargs: Any) -> PendingCall[Any]:
        # Not a bare coroutine: forgetting `await` then says so, naming the dependency.
        return PendingCall.of_caller(lambda: self._call_async(*args, **kwargs), self._spec.name, self)

    async def _call_async(self, *args: Any, **kwargs: Any) -> Any:
        arguments = self._arguments(args, kwargs)
        async with self._limit.slot():
            try:
                async with asyncio.timeout(self._marker.timeout_sec):
                    value = await self._endpoint.call(self._instance.run_remote, arguments)  # type: ignore[attr-defined]
            except TimeoutError:
                raise self._deadline() from None
            except Exception as exc:
                raise self._remote(exc) from None
        return self._result(value)

    def _call_sync(self, *args: Any, **kwargs: Any) -> Any:
        arguments = self._arguments(args, kwargs)
        # In a worker thread, so that timeout_sec bounds the call as it does a deployed one;
        # as there, the callee's work goes on after the caller stopped waiting.
        if self._pool is None:
            self._pool = ThreadPoolExecutor(thread_name_prefix=f"chains-local-{self._spec.name}")
        call = contextvars.copy_context().run
        future = self._pool.submit(call, self._endpoint.call, self._instance.run_remote, arguments)  # type: ignore[attr-defined]
        try:
            value = future.result(timeout=self._marker.timeout_sec)
        except FutureTimeout:
            raise self._deadline() from None
        except Exception as exc:
            raise self._remote(exc) from None
        return self._result(value)

    def _deadline(self) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"call to {self._spec.name} did not finish within timeout_sec={self._marker.timeout_sec}"
        )

    def _connect(self) -> AbstractAsyncContextManager[WebSocketProtocol]:
        return _local_socket(self._instance, self._spec.name, self._serialize, self._limit)

    async def _stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        arguments = self._arguments(args, kwargs)
        endpoint = self._endpoint
        async with self._limit.slot():
            source = self._endpoint.call(self._instance.run_remote, arguments)  # type: ignore[attr-defined]
            # A structured stream is framed even without serialize: its reader needs the end
            # frame that a server appends, or it would report the stream as interrupted.
            if self._serialize or endpoint.output_kind.yields_frames:
                shape = shape_of(endpoint)
                framed = encode_framed(shape, source, chainlet=self._spec.name)
                async for value in decode_framed(shape, framed):
                    yield value
                return
            async for value in _wrap_errors(source, self._remote):
                yield value


@asynccontextmanager
async def _local_socket(
    instance: Chainlet, name: str, serialize: bool, limit: CallLimit
) -> AsyncIterator[WebSocketProtocol]:
    from chains.websocket.local import connect

    async with limit.slot(), connect(instance, name=name, serialize=serialize) as socket:
        yield socket


async def _wrap_errors(
    source: AsyncIterator[Any], convert: Callable[[BaseException], RemoteError]
) -> AsyncIterator[Any]:
    try:
        async for value in source:
            yield value
    except Exception as exc:
        raise convert(exc) from None


def _complete_structured_stream(instance: Chainlet, spec: ChainletSpec) -> None:
    """Make the ``run_remote`` of a chainlet built by the test itself yield a whole stream.

    A structured stream's generator yields the writer's frames; the server appends the end
    frame (or an error frame). Called directly, without that, ``stream_reader`` would take
    the stream for one cut short. Wrapped here, a test reads it as a caller of the deployed
    chain would::

        with chains.run_local():
            reader = chains.stream_reader(TYPES, Entry().run_remote("hi"))
    """
    method = instance.run_remote  # type: ignore[attr-defined]
    shape = shape_of(spec.endpoint)

    @functools.wraps(method)
    async def run_remote(*args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
        framed = encode_framed(shape, method(*args, **kwargs), chainlet=spec.name)
        async for chunk in decode_framed(shape, framed):
            yield chunk

    instance.run_remote = run_remote  # type: ignore[attr-defined]
