"""``StubBase``: the typed face of a stub, over the shared call policy.

A chainlet's stub declares ``run_remote`` with the dependency's signature and delegates to
:meth:`StubBase.call_remote` or :meth:`StubBase.stream_remote`; the code generator writes one
per dependency. A stub of a deployed model (any HTTP service taking JSON) is made with
:meth:`StubBase.from_url` and calls :meth:`StubBase.predict_async` and its kin.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, TypeVar

from chains import codec
from chains.context import BASETEN_API_KEY_SECRET, DeployedServiceDescriptor, DeploymentContext
from chains.endpoint import EndpointSpec, analyze_endpoint
from chains.errors import ChainsUsageError
from chains.limits import CallLimit
from chains.locations import Locator
from chains.metrics import Metrics
from chains.rpc_options import StubOptions
from chains.streaming import decode_framed, shape_of
from chains.stubs.policy import CallPolicy
from chains.stubs.transport import AsyncTransport
from chains.websocket.protocol import WebSocketProtocol
from chains.wire import (
    BINARY_MEDIA_TYPE,
    DEFAULT_MAX_FRAME_BYTES,
    FRAMED_MEDIA_TYPE,
    JSON_MEDIA_TYPE,
    RUN_REMOTE,
)

__all__ = ["StubBase"]

logger = logging.getLogger("chains.stubs")

StubT = TypeVar("StubT", bound="StubBase")
ModelT = TypeVar("ModelT")


class StubBase:
    """Base class of stubs; ``urls`` are the replicas of one service, called in turn.

    ``transport`` replaces the aiohttp client under async calls (see
    :mod:`chains.stubs.transport`); everything else about a call stays the same.
    ``ssl_context`` is what ``https://`` callees are verified with (a chain's own CA, see
    :mod:`chains.tls`); by default the system's authorities.

    A chainlet's stub (the code generator writes these)::

        class Words(chains.StubBase):
            async def run_remote(self, text: str) -> AsyncIterator[Token]:
                async for token in self.stream_remote(text=text):
                    yield token

        words = Words("http://127.0.0.1:8001")

    A deployed model's stub, called by URL with the context's API key::

        class LLM(chains.StubBase):
            async def run_remote(self, prompt: str) -> str:
                return (await self.predict_async({"prompt": prompt}))["text"]

        llm = LLM.from_url(predict_url, context, options=chains.RPCOptions(retries=3))

    Every call carries a request id and the remaining deadline; failures before a response
    (and 429/502/503/504) are retried with exponential backoff and jitter, on another replica
    first; a stream is retried only until its first byte.
    """

    endpoint: ClassVar[EndpointSpec | None] = None

    def __init__(
        self,
        urls: str | Sequence[str] | DeployedServiceDescriptor,
        api_key: str | None = None,
        *,
        name: str | None = None,
        options: StubOptions | None = None,
        token: str | None = None,
        path: str = RUN_REMOTE,
        authorization: str | None = None,
        metrics: Metrics | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        transport: AsyncTransport | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if isinstance(urls, DeployedServiceDescriptor):
            # Truss Chains' form: ``Stub(context.get_service_descriptor(name), api_key)``.
            descriptor = urls
            urls = [descriptor.predict_url] if descriptor.predict_url else list(descriptor.urls)
            name = name or descriptor.name
            options = options or descriptor.options
            if descriptor.predict_url:
                path = ""
        if api_key is not None:
            if authorization:
                raise ChainsUsageError(
                    f"{type(self).__name__}: give an api_key or an authorization, not both"
                )
            authorization = _api_key_header(type(self).__name__, api_key)
        url_list = [urls] if isinstance(urls, str) else list(urls)
        if not url_list:
            raise ChainsUsageError(f"{type(self).__name__} needs at least one URL")
        if token and authorization:
            raise ChainsUsageError(f"{type(self).__name__}: give a token or an authorization, not both")
        self.urls = tuple(u.rstrip("/") for u in url_list)
        self.name = name or type(self).__name__
        self.options = options or StubOptions()
        self.path = path
        self._max_frame_bytes = max_frame_bytes
        self._warned_blocking = False
        self._policy = CallPolicy(
            self.name,
            self.urls,
            self.options,
            authorization=f"Bearer {token}" if token else authorization,
            is_chain_token=bool(token),
            metrics=metrics,
            transport=transport,
            ssl_context=ssl_context,
        )
        if api_key is not None:
            self._policy.credential = "the Api-Key given to the stub"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.urls)})"

    def connect_remote(self) -> AbstractAsyncContextManager[WebSocketProtocol]:
        """Open a conversation with a WebSocket endpoint: ``async with stub.connect_remote() as ws:``
        (see :mod:`chains.websocket.client`)."""
        from chains.stubs.aiohttp_transport import AiohttpTransport
        from chains.websocket.client import connect

        transport = self._policy.transport
        if not isinstance(transport, AiohttpTransport):
            raise ChainsUsageError(
                f"{type(self).__name__}: WebSocket calls go over aiohttp; this stub was given "
                f"another transport ({type(transport).__name__})"
            )
        return connect(
            transport.session(),
            self.urls,
            self.path,
            name=self.name,
            retries=self.options.retries,
            timeout_sec=self.options.timeout_sec,
            authorization=self._policy.authorization,
            metrics=self._policy.metrics,
            max_message_bytes=self._max_frame_bytes,
        )

    @property
    def _async_semaphore_wrapper(self) -> CallLimit:
        # Truss Chains' name for the concurrency limit, which its test chains tune.
        return self._policy._limit

    async def aclose(self) -> None:
        """Close pooled connections (a server does this at shutdown)."""
        await self._policy.aclose()

    # -- a deployed model, by URL ------------------------------------------------------------

    @classmethod
    def from_url(
        cls: type[StubT],
        predict_url: str,
        context_or_api_key: DeploymentContext | str,
        options: StubOptions | None = None,
        *,
        secret: str | None = None,
        scheme: str = "Api-Key",
    ) -> StubT:
        """A stub of the deployed model answering at ``predict_url``.

        Its calls send ``Authorization: Api-Key <key>``, the key given or the context's
        ``baseten_api_key`` secret; ``secret`` names another secret of the context, sent
        with ``scheme`` (``"Bearer"`` for most APIs). Within a chainlet the calls carry its
        deadline and request id and count in its metrics, as its chainlet stubs' calls do::

            llm = LLM.from_url(url, context, options=chains.RPCOptions(retries=3, timeout_sec=30))
            openai = Chat.from_url(url, context, secret="openai_key", scheme="Bearer")
        """
        metrics = None
        if isinstance(context_or_api_key, DeploymentContext):
            context = context_or_api_key
            metrics = context.metrics
            key = context.get_baseten_api_key() if secret is None else context.secrets[secret]
            source = f"{scheme} from the secret {secret or BASETEN_API_KEY_SECRET!r}"
        elif isinstance(context_or_api_key, str):
            if secret is not None:
                raise ChainsUsageError(
                    f"{cls.__name__}.from_url: `secret` names a secret of a context, not of a key"
                )
            key = context_or_api_key
            source = f"the {scheme} given to from_url"
        else:
            raise ChainsUsageError(
                f"{cls.__name__}.from_url takes a DeploymentContext or an API key (str), "
                f"got {type(context_or_api_key).__name__}"
            )
        stub = cls(
            predict_url,
            name=cls.__name__,
            options=options,
            path="",
            authorization=_api_key_header(cls.__name__, key, scheme, source),
            metrics=metrics,
        )
        stub._policy.credential = source
        return stub

    async def predict_async(self, json_or_model: Any, output_model: type[ModelT] | None = None) -> Any:
        """POST ``json_or_model`` (JSON-able data or a pydantic model) and return the answer,
        as data or validated into ``output_model``."""
        binary = self.options.use_binary
        body = codec.encode_payload(json_or_model, binary=binary)
        return await self._policy.unary(self.path, body, _PayloadDecoder(output_model, binary), self._accept)

    def predict_sync(self, json_or_model: Any, output_model: type[ModelT] | None = None) -> Any:
        """:meth:`predict_async` from sync code, with the same retries, deadline and errors."""
        binary = self.options.use_binary
        body = codec.encode_payload(json_or_model, binary=binary)
        return self._policy.unary_sync(self.path, body, _PayloadDecoder(output_model, binary), self._accept)

    async def predict_async_stream(self, json_or_model: Any) -> AsyncIterator[bytes]:
        """POST ``json_or_model`` and yield the answer's bytes as they arrive.

        Retried until the answer starts; a connection that breaks after that raises
        :class:`~chains.StreamInterrupted`.
        """
        body = codec.encode_payload(json_or_model, binary=self.options.use_binary)
        async for chunk in self._policy.stream(self.path, body, "*/*", _as_is):
            yield chunk

    # -- a chainlet's endpoint ---------------------------------------------------------------

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

    @property
    def _accept(self) -> str:
        return BINARY_MEDIA_TYPE if self.options.use_binary else JSON_MEDIA_TYPE

    async def call_remote(self, *args: Any, **kwargs: Any) -> Any:
        """Call the endpoint and return its decoded result."""
        endpoint = self._endpoint()
        binary = self.options.use_binary
        body = codec.encode_args(endpoint, args, kwargs, binary=binary)
        return await self._policy.unary(self.path, body, _ResultDecoder(endpoint, binary), self._accept)

    async def stream_remote(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Call a streaming endpoint and yield its items as they arrive.

        Retried until the first byte of the stream; after that a broken connection raises
        :class:`StreamInterrupted`, and the producer's own error a :class:`RemoteError`.
        """
        endpoint = self._endpoint()
        shape = shape_of(endpoint)
        body = codec.encode_args(endpoint, args, kwargs, binary=self.options.use_binary)
        max_frame = self._max_frame_bytes

        def decode(chunks: AsyncIterator[bytes]) -> AsyncIterator[Any]:
            return decode_framed(shape, chunks, max_frame_size=max_frame)

        async for item in self._policy.stream(self.path, body, FRAMED_MEDIA_TYPE, decode):
            yield item

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
        binary = self.options.use_binary
        body = codec.encode_args(endpoint, args, kwargs, binary=binary)
        return self._policy.unary_sync(self.path, body, _ResultDecoder(endpoint, binary), self._accept)


def _api_key_header(
    stub: str, key: str, scheme: str = "Api-Key", source: str = "the api_key argument"
) -> str:
    if not key or not key.isprintable() or key != key.strip() or " " in key:
        raise ChainsUsageError(
            f"{stub}: the credential ({source}) is empty or has spaces or unprintable "
            "characters, so it cannot travel in an Authorization header"
        )
    return f"{scheme} {key}"


class _ResultDecoder:  # a function with its arguments bound: cheaper than a closure or a partial
    __slots__ = ("_binary", "_endpoint")

    def __init__(self, endpoint: EndpointSpec, binary: bool) -> None:
        self._endpoint = endpoint
        self._binary = binary

    def __call__(self, payload: bytes) -> Any:
        return codec.decode_result(self._endpoint, payload, binary=self._binary)


class _PayloadDecoder:
    __slots__ = ("_binary", "_model")

    def __init__(self, model: type[Any] | None, binary: bool) -> None:
        self._model = model
        self._binary = binary

    def __call__(self, payload: bytes) -> Any:
        return codec.decode_payload(payload, self._model, binary=self._binary)


def _as_is(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    return chunks


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
