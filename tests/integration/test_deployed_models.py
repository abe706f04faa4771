"""Stubs of deployed models (``StubBase.from_url``) against real HTTP services on 127.0.0.1.

Each service is a small ASGI app served by uvicorn in a thread: one that fails twice before it
answers, one that streams, one that wants an API key. The stubs run on the same call policy
as chainlet stubs: these tests check that a model called by URL gets its retries, deadlines,
cancellation, metrics and credentials too.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest

import chains
from chains.call_context import CallContext, serving_call
from chains.context import Secrets
from chains.errors import ChainsRuntimeError, ChainsUsageError, DeadlineExceeded
from chains.metrics import Metrics
from tests.helpers import ServerProcess, asgi_in_thread, generate_chain, running, wait_until, write_chain

KEY = "model-key-7"


async def _body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _answer(
    send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", b"application/json"), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Model:
    """A deployed model: answers ``{"echo": <input>}`` after ``failures`` answers of 503.

    With ``key`` set it wants ``Authorization: Api-Key <key>`` and answers 401 otherwise.
    """

    def __init__(self, failures: int = 0, key: str | None = None, answer: bytes | None = None) -> None:
        self.failures = failures
        self.key = key
        self.answer = answer
        self.requests: list[dict[str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.requests.append({"path": scope["path"], **headers})
        body = await _body(receive)
        if self.key is not None and headers.get("authorization") != f"Api-Key {self.key}":
            await _answer(send, 401, b'{"detail":"invalid API key"}')
        elif len(self.requests) <= self.failures:
            await _answer(send, 503, b'{"detail":"loading"}', [(b"retry-after", b"0")])
        else:
            await _answer(send, 200, self.answer or json.dumps({"echo": json.loads(body)}).encode())


@pytest.fixture
def flaky() -> Iterator[tuple[_Model, str]]:
    model = _Model(failures=2)
    with asgi_in_thread(model) as url:
        yield model, url + "/production/predict"


class Prompt(pydantic.BaseModel):
    text: str


class Echo(pydantic.BaseModel):
    echo: Prompt


class LLM(chains.StubBase):
    async def run_remote(self, text: str) -> Echo:
        return await self.predict_async(Prompt(text=text), Echo)  # type: ignore[no-any-return]


def _context(metrics: Metrics | None = None, **secrets: str) -> chains.DeploymentContext:
    return chains.DeploymentContext(secrets=Secrets(secrets, ()), metrics=metrics)


def _metric(metrics: Metrics, name: str) -> float:
    for line in metrics.render().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def test_a_model_that_fails_twice_is_retried_and_the_retries_counted(flaky: tuple[_Model, str]) -> None:
    model, url = flaky
    metrics = Metrics("Caller")
    context = _context(metrics, baseten_api_key=KEY)
    llm = LLM.from_url(url, context, options=chains.RPCOptions(retries=2, timeout_sec=10))

    async def call() -> Echo:
        try:
            return await llm.run_remote("hi")
        finally:
            await llm.aclose()

    assert asyncio.run(call()) == Echo(echo=Prompt(text="hi"))
    assert [r["path"] for r in model.requests] == ["/production/predict"] * 3
    assert {r["authorization"] for r in model.requests} == {f"Api-Key {KEY}"}
    assert _metric(metrics, 'chains_dependency_retries_total{chainlet="Caller",dependency="LLM"}') == 2
    ok = 'chains_dependency_calls_total{chainlet="Caller",dependency="LLM",outcome="ok"}'
    assert _metric(metrics, ok) == 1


def test_predict_sync_retries_the_same_way(flaky: tuple[_Model, str]) -> None:
    model, url = flaky
    llm = LLM.from_url(url, KEY, options=chains.RPCOptions(retries=2))
    assert llm.predict_sync({"text": "sync"}) == {"echo": {"text": "sync"}}
    assert len(model.requests) == 3


def test_too_few_retries_give_up_as_dependency_unavailable(flaky: tuple[_Model, str]) -> None:
    model, url = flaky
    llm = LLM.from_url(url, KEY, options=chains.RPCOptions(retries=1))
    with pytest.raises(
        chains.DependencyUnavailable, match=r"LLM at .* answered 503 \(after 2 attempt\(s\)\)"
    ):
        llm.predict_sync({"text": "x"})
    assert len(model.requests) == 2


def test_calls_carry_the_callers_deadline_and_stop_retrying_at_it() -> None:
    busy = _Model(failures=1000)
    with asgi_in_thread(busy) as url:
        llm = LLM.from_url(url, KEY, options=chains.RPCOptions(retries=1000, timeout_sec=30))

        async def call() -> None:
            # The caller has 5 s left: every attempt says so, and once the backoff outgrows
            # what is left the stub gives up instead of sleeping past it.
            with serving_call(CallContext("deadline-test", time.monotonic() + 5)):
                try:
                    await llm.predict_async({"text": "x"})
                finally:
                    await llm.aclose()

        with pytest.raises(DeadlineExceeded, match="the next retry would start after the caller's deadline"):
            asyncio.run(call())
    first = busy.requests[0]
    assert first["x-chains-request-id"] == "deadline-test"
    assert 0 < float(first["x-chains-timeout"]) <= 5
    assert 1 < len(busy.requests) < 1000


class _Streamer:
    """A model that streams ``parts``, sending each one only once the test has read the one before."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts
        self.read = [threading.Event() for _ in parts]
        self.disconnected = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await _body(receive)
        headers = [(b"content-type", b"application/octet-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for part, read in zip(self.parts, self.read, strict=True):
            await send({"type": "http.response.body", "body": part, "more_body": True})
            if not await asyncio.to_thread(read.wait, 10):
                break
        else:
            await send({"type": "http.response.body", "body": b""})
            return
        # The reader went away: wait for the disconnect the stub's close sends.
        while (await receive())["type"] != "http.disconnect":
            pass
        self.disconnected.set()


def test_a_streaming_model_delivers_its_bytes_as_they_are_sent() -> None:
    parts = [b"first ", b"second ", b"\x00\xffthird"]
    streamer = _Streamer(parts)
    with asgi_in_thread(streamer) as url:
        llm = LLM.from_url(url + "/predict", KEY)

        async def read() -> list[bytes]:
            got: list[bytes] = []
            async for chunk in llm.predict_async_stream({"text": "go"}):
                got.append(chunk)
                # The server sends the next part only after this: each part arrived on its own.
                streamer.read[len(got) - 1].set()
            await llm.aclose()
            return got

        assert asyncio.run(read()) == parts


class _FirstThenWait:
    """A model that sends one part of its stream and then waits to see whether its caller is gone."""

    def __init__(self) -> None:
        self.disconnected = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await _body(receive)
        headers = [(b"content-type", b"application/octet-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        # The request is read: the next message is the disconnect, whenever the caller leaves.
        if (await receive())["type"] == "http.disconnect":
            self.disconnected.set()


def test_a_reader_that_stops_early_closes_the_models_stream() -> None:
    model = _FirstThenWait()
    with asgi_in_thread(model) as url:
        llm = LLM.from_url(url, KEY)

        async def read_one() -> bytes:
            stream = llm.predict_async_stream({"text": "go"})
            chunk = await anext(stream)
            await stream.aclose()  # the consumer is done: the connection is dropped
            return chunk

        async def read_and_close() -> bytes:
            try:
                return await read_one()
            finally:
                await llm.aclose()

        assert asyncio.run(read_and_close()) == b"a"
        wait_until(model.disconnected.is_set, 10, "the model seeing its caller go")


def test_a_model_wanting_a_key_refuses_a_wrong_one_naming_the_credential_once() -> None:
    model = _Model(key=KEY)
    with asgi_in_thread(model) as url:
        llm = LLM.from_url(url, _context(baseten_api_key="not-the-key"), options=chains.RPCOptions(retries=3))
        with pytest.raises(ChainsRuntimeError) as info:
            llm.predict_sync({"text": "x"})
    message = str(info.value)
    assert "refused the call (401 invalid API key): the credential it was sent is wrong" in message
    assert "'baseten_api_key'" in message
    assert len(model.requests) == 1  # a 401 is not retried


def test_a_context_without_the_key_is_refused_before_any_call_naming_the_secret() -> None:
    with pytest.raises(ChainsUsageError, match=r"the secret 'baseten_api_key' .* has no value"):
        LLM.from_url("http://127.0.0.1:9/predict", _context())


def test_a_key_that_cannot_travel_in_a_header_is_refused_naming_where_it_came_from() -> None:
    unusable = r"the credential \(Api-Key from the secret 'baseten_api_key'\) is empty or has spaces"
    with pytest.raises(ChainsUsageError, match=unusable):
        LLM.from_url("http://127.0.0.1:9/predict", _context(baseten_api_key="two words"))


class Caller(chains.ChainletBase):
    """A chainlet that calls a deployed model found in its context."""

    remote_config = chains.RemoteConfig(assets=chains.Assets(secret_keys=["bearer_token"]))

    def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
        descriptor = context.get_service_descriptor("LLM")
        assert descriptor.predict_url is not None
        self._llm = LLM.from_url(descriptor.predict_url, context, options=descriptor.options)
        self._chat = LLM.from_url(descriptor.predict_url, context, secret="bearer_token", scheme="Bearer")

    async def run_remote(self, text: str) -> str:
        answer = await self._llm.run_remote(text)
        try:
            await self._chat.predict_async({"text": text})
        except ChainsRuntimeError as exc:
            return f"{answer.echo.text}; bearer: {exc}"
        return answer.echo.text


def test_run_local_gives_the_key_and_the_service_from_its_arguments() -> None:
    model = _Model(key=KEY)
    with asgi_in_thread(model) as url:
        descriptor = chains.DeployedServiceDescriptor(
            "LLM", predict_url=url + "/predict", options=chains.RPCOptions(retries=0)
        )
        secrets = {"baseten_api_key": KEY, "bearer_token": "tok"}
        with chains.run_local(secrets=secrets, chainlet_to_service={"LLM": descriptor}):
            answer = asyncio.run(Caller().run_remote("local"))
    assert answer.startswith("local; bearer: LLM at ")
    assert "the credential it was sent is wrong (Bearer from the secret 'bearer_token')" in answer
    assert [r["authorization"] for r in model.requests] == [f"Api-Key {KEY}", "Bearer tok"]


def test_a_stub_built_from_a_descriptor_and_a_key_calls_its_predict_url() -> None:
    model = _Model(key=KEY)
    with asgi_in_thread(model) as url:
        descriptor = chains.DeployedServiceDescriptor("Whisper", predict_url=url + "/v1/predict")
        stub = LLM(descriptor, KEY)  # Truss Chains' form
        assert stub.predict_sync({"text": "d"}) == {"echo": {"text": "d"}}
    assert stub.name == "Whisper"
    assert [(r["path"], r["authorization"]) for r in model.requests] == [("/v1/predict", f"Api-Key {KEY}")]


def test_an_unknown_service_is_named_with_the_known_ones() -> None:
    context = chains.DeploymentContext(
        chainlet_to_service={"Known": chains.DeployedServiceDescriptor("Known", predict_url="http://x")}
    )
    with pytest.raises(
        ChainsUsageError, match=r"no service 'LLM' in this chainlet's context \(known: \['Known'\]\)"
    ):
        context.get_service_descriptor("LLM")


def test_rpc_options_refuse_bad_values_naming_them() -> None:
    with pytest.raises(ChainsUsageError, match="retries must be a whole number >= 0, got -1"):
        chains.RPCOptions(retries=-1)
    with pytest.raises(ChainsUsageError, match="timeout_sec must be a number > 0, got 0"):
        chains.RPCOptions(timeout_sec=0)
    assert chains.RPCOptions(retries=3, use_binary=True, concurrency_limit=2).retries == 3


# -- a result that breaks the contract: the same error from the sync and the async transport --


class Count(chains.StubBase):
    def run_remote(self) -> int:
        return self.call_remote_sync()  # type: ignore[no-any-return]

    async def run_remote_async(self) -> int:
        return await self.call_remote()  # type: ignore[no-any-return]


def test_a_result_that_breaks_the_signature_is_the_same_error_sync_and_async() -> None:
    wrong = _Model(answer=b'"not a number"')
    with asgi_in_thread(wrong) as url:
        stub = Count(url)
        with pytest.raises(
            ChainsRuntimeError, match="Count answered with a result that does not match"
        ) as sync:
            stub.run_remote()

        async def call() -> None:
            try:
                await stub.run_remote_async()
            finally:
                await stub.aclose()

        with pytest.raises(
            ChainsRuntimeError, match="Count answered with a result that does not match"
        ) as async_:
            asyncio.run(call())
        llm = LLM.from_url(url, KEY)
        with pytest.raises(ChainsRuntimeError, match="LLM answered with a result that does not match"):
            llm.predict_sync({"text": "x"}, Echo)
    assert not isinstance(sync.value, pydantic.ValidationError)
    assert str(sync.value) == str(async_.value)


# -- in a chainlet server: the key from its secrets, the calls in its metrics -----------------

MODEL_CHAIN = """
import os

import chains


class LLM(chains.StubBase):
    async def run_remote(self, text: str) -> dict:
        return await self.predict_async({"text": text})


@chains.mark_entrypoint
class Caller(chains.ChainletBase):
    def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
        self._llm = LLM.from_url(os.environ["MODEL_URL"], context, options=chains.RPCOptions(retries=2))

    async def run_remote(self, text: str) -> dict:
        return await self._llm.run_remote(text)
"""


def test_a_chainlet_server_calls_a_model_with_its_key_and_counts_the_retries(tmp_path: Path) -> None:
    model = _Model(failures=2, key=KEY)
    file = write_chain(tmp_path / "src", MODEL_CHAIN)
    directory = generate_chain(file, tmp_path / "out")["Caller"]
    with asgi_in_thread(model) as url:
        env = {"MODEL_URL": url + "/predict", "CHAINS_SECRET_baseten_api_key": KEY}
        with running(ServerProcess(directory, entrypoint=True, env=env)) as (caller,):
            response = httpx.post(
                caller.url + "/run_remote", json={"text": "served"}, headers=caller.headers, timeout=30
            )
            assert response.status_code == 200, response.text
            assert response.json() == {"echo": {"text": "served"}}
            metrics = httpx.get(caller.url + "/metrics", headers=caller.headers).text
    assert 'chains_dependency_retries_total{chainlet="Caller",dependency="LLM"} 2' in metrics
    assert 'chains_dependency_calls_total{chainlet="Caller",dependency="LLM",outcome="ok"} 1' in metrics
    assert [r["authorization"] for r in model.requests] == [f"Api-Key {KEY}"] * 3
    # The model got the caller's deadline and request id, as a chainlet would.
    assert all("x-chains-timeout" in r and "x-chains-request-id" in r for r in model.requests)
