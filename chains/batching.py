"""Adaptive batching: concurrent single calls to a chainlet, served by one call of its body.

A model is fastest when one forward pass takes many inputs. ``@chains.batched`` lets
``run_remote`` take the inputs of a whole batch while its callers (stubs, HTTP clients,
``run_local``) still send one input and get one output::

    class Embedder(chains.ChainletBase):
        remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=1))

        @chains.batched(max_batch_size=32, max_wait_ms=10)
        async def run_remote(self, texts: list[str]) -> list[list[float]]:
            return self._model.encode(texts)

This module is the authoring side (the decorator, and ``run_remote`` on an instance);
:mod:`chains.batcher` holds the scheduler that gathers the calls.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, overload

from chains.batcher import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_WAIT_MS, BatchConfig, Batcher, BatchObserver

__all__ = [
    "BatchedEndpoint",
    "BoundBatched",
    "batch_config_of",
    "batched",
    "batcher_of",
    "install_batcher",
]

In = TypeVar("In")
Out = TypeVar("Out")


class BatchedEndpoint(Generic[In, Out]):
    """What ``@chains.batched`` leaves on the class: ``run_remote`` for one input at a time.

    On an instance, ``run_remote(x)`` queues ``x`` for the next batch and returns its own
    output; ``run_remote.batch([x, y])`` calls the body directly with a list.
    """

    def __init__(self, func: Callable[..., Any], config: BatchConfig) -> None:
        # What functools.update_wrapper copies (the source reader unwraps __wrapped__).
        self.__module__ = func.__module__
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        self.__func__ = func
        self.config = config
        params = list(inspect.signature(func).parameters.values())
        self.param = params[1].name if len(params) > 1 else ""
        # A body that yields streams a batch: each step is a list, one output per input.
        self.is_stream = inspect.isasyncgenfunction(func)
        self.is_async = inspect.iscoroutinefunction(func) or self.is_stream

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> BatchedEndpoint[In, Out]: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None) -> BoundBatched[In, Out]: ...
    def __get__(
        self, instance: object | None, owner: type | None = None
    ) -> BatchedEndpoint[In, Out] | BoundBatched[In, Out]:
        if instance is None:
            return self
        return BoundBatched(self, instance)

    def call_body(self, instance: object, items: list[Any]) -> Any:
        """The body on one batch: an awaitable (a sync body runs in a worker thread), or the
        async iterator of a streaming body's steps."""
        if self.is_async:
            return self.__func__(instance, items)
        return asyncio.to_thread(self.__func__, instance, items)


class BoundBatched(Generic[In, Out]):
    """``instance.run_remote`` of a batched chainlet."""

    __slots__ = ("_endpoint", "_instance")

    def __init__(self, endpoint: BatchedEndpoint[In, Out], instance: object) -> None:
        self._endpoint = endpoint
        self._instance = instance

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """One input's output (awaitable), or for a streaming body the stream of its outputs."""
        param = self._endpoint.param
        if len(args) + len(kwargs) != 1 or (kwargs and param not in kwargs):
            raise TypeError(f"run_remote takes one input, `{param}`, by position or by name")
        item = args[0] if args else kwargs[param]
        batcher = batcher_of(self._instance)
        return batcher.stream(item) if self._endpoint.is_stream else batcher.submit(item)

    def batch(self, items: list[In]) -> Any:
        """Call the body with ``items`` directly, without waiting for other calls: an awaitable
        of the outputs, or a streaming body's steps."""
        return self._endpoint.call_body(self._instance, items)


@overload
def batched(func: Callable[[Any, list[In]], Awaitable[list[Out]]], /) -> BatchedEndpoint[In, Out]: ...
@overload
def batched(func: Callable[[Any, list[In]], list[Out]], /) -> BatchedEndpoint[In, Out]: ...
@overload
def batched(
    *, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE, max_wait_ms: float = DEFAULT_MAX_WAIT_MS
) -> Callable[[Callable[[Any, list[Any]], Any]], BatchedEndpoint[Any, Any]]: ...
def batched(
    func: Callable[..., Any] | None = None,
    /,
    *,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
) -> BatchedEndpoint[Any, Any] | Callable[[Callable[..., Any]], BatchedEndpoint[Any, Any]]:
    """Serve concurrent calls of ``run_remote`` in batches.

    The body takes a list of inputs and returns a list of outputs of the same length, in the
    same order; an output that is an exception fails only its own call. Callers send one
    input and get one output::

        @chains.batched(max_batch_size=32, max_wait_ms=10)
        async def run_remote(self, prompts: list[str]) -> list[str]:
            return await self._model.generate(prompts)

    A sync ``def`` body runs in a worker thread. Bad arguments are reported by the chainlet's
    checks, with the rest of its problems.
    """
    config = BatchConfig(max_batch_size, max_wait_ms)
    if func is not None:
        return BatchedEndpoint(func, config)

    def decorate(f: Callable[..., Any]) -> BatchedEndpoint[Any, Any]:
        return BatchedEndpoint(f, config)

    return decorate


def batch_config_of(attr: object) -> BatchConfig | None:
    """The batching of a ``run_remote`` attribute found in a class body, if it is batched."""
    return attr.config if isinstance(attr, BatchedEndpoint) else None


# -- one batcher per chainlet instance ---------------------------------------------------------

_BATCHER_ATTR = "__chains_batcher__"


def install_batcher(
    instance: object,
    *,
    chainlet: str,
    concurrency: int = 1,
    max_queue: int | None = None,
    observer: BatchObserver | None = None,
) -> Batcher | None:
    """Give a batched chainlet instance the batcher its calls go through (None: not batched)."""
    endpoint = _endpoint_of(type(instance))
    if endpoint is None:
        return None
    batcher = Batcher(
        functools.partial(endpoint.__func__, instance),
        chainlet=chainlet,
        config=endpoint.config,
        concurrency=concurrency,
        max_queue=max_queue,
        observer=observer,
        sync=not endpoint.is_async,
        streaming=endpoint.is_stream,
    )
    instance.__dict__[_BATCHER_ATTR] = batcher
    return batcher


def batcher_of(instance: object) -> Batcher:
    """The instance's batcher; one with run_local's defaults (one batch at a time) if none."""
    batcher = instance.__dict__.get(_BATCHER_ATTR)
    if isinstance(batcher, Batcher):
        return batcher
    cls = type(instance)
    # chainlet_name(), without importing the authoring layer into this lower one.
    name = getattr(getattr(cls, "remote_config", None), "name", None) or cls.__name__
    made = install_batcher(instance, chainlet=name)
    assert made is not None, "batcher_of() is called through a batched run_remote"
    return made


def _endpoint_of(cls: type) -> BatchedEndpoint[Any, Any] | None:
    for klass in cls.__mro__:
        if "run_remote" in klass.__dict__:
            attr = klass.__dict__["run_remote"]
            return attr if isinstance(attr, BatchedEndpoint) else None
    return None
