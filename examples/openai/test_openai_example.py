"""The OpenAI-compatible chain, called by clients nobody here wrote: `openai`, LangChain, curl.

The chain is pushed once (local target, real processes on 127.0.0.1); each client calls it
as it would call OpenAI, with the chain's API key as its key.
"""

from __future__ import annotations

import base64
import json
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk

import chains
from chains.loader import import_chain_file, load_chain
from chains.routes import routes_of
from tests.helpers import unique_port, wait_until

CHAIN = Path(__file__).with_name("chain.py")
KEY = "sk-chain-test"
MESSAGES = [{"role": "user", "content": "Say something"}]
PROMPT = "user: Say something"  # what Front makes of MESSAGES for the Tokens chainlet

module, _ = import_chain_file(CHAIN)


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[chains.deploy.ChainHandle]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHAINS_HOME", str(tmp_path_factory.mktemp("home")))
        with chains.push(CHAIN, name="openai-example", port=unique_port(), api_key=KEY) as handle:
            yield handle


@pytest.fixture
def client(chain: chains.deploy.ChainHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=chain.entrypoint_url + "/v1", api_key=KEY, max_retries=0)


@pytest.fixture
def aclient(chain: chains.deploy.ChainHandle) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=chain.entrypoint_url + "/v1", api_key=KEY, max_retries=0)


def test_the_front_door_declares_openais_routes() -> None:
    chain = load_chain(CHAIN)
    routes = {(r.http_method, r.path) for r in routes_of(chain.entrypoint.cls)}
    assert routes == {
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/embeddings"),
        ("GET", "/v1/models"),
        ("GET", "/v1/models/{model}"),
    }
    assert chain.get("Embedder").endpoint.batching is not None


@pytest.mark.parametrize("serialize", [True, False])
async def test_run_local_calls_the_routes_as_methods(serialize: bool) -> None:
    oai = chains.openai
    with chains.run_local(serialize=serialize):
        front = module.Front()
        request = oai.ChatCompletionRequest(model="m", messages=MESSAGES, max_tokens=5)
        answer = await front.chat(request)
        assert answer.choices[0].message.content == module.expected_text(PROMPT, 5)
        events = await front.chat(request.model_copy(update={"stream": True}))
        data = [event.data async for event in events]
        assert data[-1] == "[DONE]"
        text = "".join(json.loads(d)["choices"][0]["delta"].get("content") or "" for d in data[:-1])
        assert text == module.expected_text(PROMPT, 5)


def test_chat_unary_sync(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=6)  # type: ignore[arg-type]
    ChatCompletion.model_validate(answer.to_dict())
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content == module.expected_text(PROMPT, 6)
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.completion_tokens == 6


def test_chat_stream_sync_with_usage_every_chunk_of_openais_type(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [ChatCompletionChunk.model_validate(chunk.to_dict()) for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == module.expected_text(PROMPT, 8)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 8
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1


async def test_chat_async_unary_and_stream(aclient: openai.AsyncOpenAI) -> None:
    answer = await aclient.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == module.expected_text(PROMPT, 4)
    stream = await aclient.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, stream=True)  # type: ignore[arg-type]
    chunks = [ChatCompletionChunk.model_validate(chunk.to_dict()) async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == module.expected_text(PROMPT, 4)
    assert all(c.usage is None for c in chunks)  # include_usage was not asked for


@pytest.mark.parametrize("encoding", ["base64", "float"])
def test_embeddings_sync(client: openai.OpenAI, encoding: str) -> None:
    texts = ["alpha", "beta gamma", "alpha"]
    if encoding == "float":
        answer = client.embeddings.create(model="tiny-embedding", input=texts, encoding_format="float")
    else:  # the client's default: it asks for base64 and decodes it
        answer = client.embeddings.create(model="tiny-embedding", input=texts)
    CreateEmbeddingResponse.model_validate(answer.to_dict())
    assert [e.index for e in answer.data] == [0, 1, 2]
    for item, text in zip(answer.data, texts, strict=True):
        expected = struct.unpack("<16f", struct.pack("<16f", *module.embed(text)))
        assert item.embedding == pytest.approx(list(expected))


async def test_embeddings_async_one_text(aclient: openai.AsyncOpenAI) -> None:
    answer = await aclient.embeddings.create(model="tiny-embedding", input="one", encoding_format="float")
    assert answer.data[0].embedding == pytest.approx(module.embed("one"))


def test_embeddings_come_as_base64_when_asked(chain: chains.deploy.ChainHandle) -> None:
    body = {"model": "e", "input": "x", "encoding_format": "base64"}
    answer = httpx.post(chain.entrypoint_url + "/v1/embeddings", json=body, headers=_auth()).json()
    raw = base64.b64decode(answer["data"][0]["embedding"])
    assert list(struct.unpack("<16f", raw)) == pytest.approx(module.embed("x"))


def test_models_list_and_retrieve(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["tiny-deterministic", "tiny-embedding"]
    assert client.models.retrieve("tiny-embedding").id == "tiny-embedding"
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("gpt-9")
    assert info.value.code == "model_not_found"


def test_refused_requests_raise_the_clients_own_exceptions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=MESSAGES, n=2)  # type: ignore[arg-type]
    assert info.value.status_code == 400
    assert info.value.code == "unsupported_parameter" and info.value.param == "n"
    assert "n=2 is not supported" in info.value.message
    with pytest.raises(openai.BadRequestError) as malformed:
        client.chat.completions.create(model="tiny", messages="not a list")  # type: ignore[arg-type]
    assert "messages" in malformed.value.message
    wrong = openai.OpenAI(base_url=client.base_url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as denied:
        wrong.models.list()
    assert denied.value.code == "invalid_api_key"


async def test_refused_requests_async(aclient: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await aclient.completions.create(model="tiny", prompt="x", n=3)
    assert info.value.param == "n"


def test_legacy_completions(client: openai.OpenAI) -> None:
    answer = client.completions.create(model="tiny", prompt="hello", max_tokens=3)
    assert answer.choices[0].text == module.expected_text("hello", 3)
    stream = client.completions.create(model="tiny", prompt="hello", max_tokens=3, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == module.expected_text("hello", 3)


def test_langchain_chat_openai_invoke_and_stream(chain: chains.deploy.ChainHandle) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model="tiny", base_url=chain.entrypoint_url + "/v1", api_key=KEY, max_tokens=5, max_retries=0
    )  # type: ignore[call-arg]
    expected = module.expected_text("user: hello there", 5)
    assert llm.invoke("hello there").content == expected
    pieces = [piece.content for piece in llm.stream("hello there")]
    assert len([p for p in pieces if p]) == 5
    assert "".join(str(p) for p in pieces) == expected


def test_curl_shows_the_tokens_as_they_come(chain: chains.deploy.ChainHandle) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    body = {"model": "tiny", "stream": True, "messages": MESSAGES, "max_tokens": 12, "delay_ms": 150}
    with subprocess.Popen(
        [
            curl,
            "-sN",
            chain.entrypoint_url + "/v1/chat/completions",
            "-H",
            f"Authorization: Bearer {KEY}",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps(body),
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            if line.startswith("data: ") and '"content":"' in line and '"content":""' not in line:
                # The first token is here while the model is still typing the other eleven.
                still_running = process.poll() is None
                lines.append(line)
                break
        rest = process.stdout.read()
    assert still_running
    assert rest.rstrip().endswith("data: [DONE]")
    deltas = [
        json.loads(line[6:])["choices"][0]["delta"].get("content")
        for line in (lines + rest.splitlines())
        if line.startswith("data: {")
    ]
    assert "".join(d or "" for d in deltas) == module.expected_text(PROMPT, 12)


def test_a_client_that_leaves_midstream_stops_the_token_chainlet(chain: chains.deploy.ChainHandle) -> None:
    log = Path(next(p.log for p in chain.state.processes if p.chainlet == "Tokens"))
    before = log.read_text().count("token stream cancelled")
    body = {"model": "tiny", "stream": True, "messages": MESSAGES, "max_tokens": 200, "delay_ms": 50}
    with httpx.stream(
        "POST", chain.entrypoint_url + "/v1/chat/completions", json=body, headers=_auth(), timeout=30
    ) as response:
        seen = 0
        for line in response.iter_lines():
            seen += line.startswith("data: {")
            if seen == 3:
                break
    # 200 tokens at 50 ms would take 10 s: the chainlet stops long before, when its caller goes.
    wait_until(
        lambda: log.read_text().count("token stream cancelled") > before, 8, "the token stream to stop"
    )
    cancelled = [line for line in log.read_text().splitlines() if "token stream cancelled" in line][-1]
    sent = int(cancelled.split("after ")[1].split()[0])
    assert sent < 200


def _auth() -> dict[str, str]:
    return {"authorization": f"Bearer {KEY}"}
