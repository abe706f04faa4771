"""The OpenAI-compatible example on the docker target: the official client through the
entrypoint's published port, its routes served by the containers' generated servers."""

from __future__ import annotations

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from tests.docker.conftest import ROOT, Cli

pytestmark = pytest.mark.docker

CHAIN = ROOT / "examples" / "openai" / "chain.py"
KEY = "sk-docker"


def test_the_openai_client_calls_the_chain_on_docker(engine: object, cli: Cli) -> None:
    from chains.loader import import_chain_file

    module, _ = import_chain_file(CHAIN)
    pushed = cli.push(str(CHAIN), "--name", "dk-openai", "--api-key", KEY, "--timeout", "300")
    try:
        client = openai.OpenAI(base_url=pushed["entrypoint_url"] + "/v1", api_key=KEY, max_retries=0)
        messages = [{"role": "user", "content": "hi"}]
        stream = client.chat.completions.create(
            model="tiny",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [ChatCompletionChunk.model_validate(chunk.to_dict()) for chunk in stream]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == module.expected_text(
            "user: hi", 6
        )
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
        vectors = client.embeddings.create(
            model="tiny-embedding", input=["a", "b"]
        )  # through the batched Embedder
        assert [e.index for e in vectors.data] == [0, 1]
        assert [m.id for m in client.models.list()] == ["tiny-deterministic", "tiny-embedding"]
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="tiny", messages=messages, n=2)  # type: ignore[arg-type]
    finally:
        cli.run("stop", "dk-openai", check=False)
