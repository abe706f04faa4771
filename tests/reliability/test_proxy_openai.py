"""An OpenAI stream through a real nginx, buffering on: the official client reads it whole and in order.

The example chain (examples/openai) behind nginx with its default buffering, and with buffers
forced on (X-Accel-Buffering ignored, 1 KiB buffers): each token chunk arrives once, in order,
ending with the finish chunk, the usage chunk and ``[DONE]``; with the default buffering the
first token also arrives while the model is still typing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

import chains
from chains.loader import import_chain_file
from tests.helpers import unique_port
from tests.nginx import Nginx, Site
from tests.reliability.test_proxy import VARIANTS

CHAIN = Path(__file__).parents[2] / "examples" / "openai" / "chain.py"
KEY = "sk-proxy"
MESSAGES = [{"role": "user", "content": "through the proxy"}]
PROMPT = "user: through the proxy"
PROXIES = ("buffered", "small_buffers")

module, _ = import_chain_file(CHAIN)


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory, nginx_bin: str) -> Iterator[dict[str, Site]]:
    folder = tmp_path_factory.mktemp("openai-proxy")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHAINS_HOME", str(folder / "home"))
        with chains.push(CHAIN, name="openai-proxy", port=unique_port(), api_key=KEY) as chain:
            sites = {v: Site(f"openai-{v}", chain.entrypoint_url, VARIANTS[v]) for v in PROXIES}
            nginx = Nginx(nginx_bin, folder / "nginx", list(sites.values())).start()
            try:
                yield sites
            finally:
                nginx.stop()


@pytest.mark.parametrize("variant", PROXIES)
def test_a_chat_stream_through_nginx_arrives_whole_and_in_order(sites: dict[str, Site], variant: str) -> None:
    client = openai.OpenAI(base_url=sites[variant].url + "/v1", api_key=KEY, max_retries=0)
    stream = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [ChatCompletionChunk.model_validate(chunk.to_dict()) for chunk in stream]
    deltas = [c.choices[0].delta.content for c in chunks if c.choices]
    assert deltas[0] == "" and chunks[0].choices[0].delta.role == "assistant"
    assert "".join(d or "" for d in deltas) == module.expected_text(PROMPT, 40)
    assert len([d for d in deltas if d]) == 40  # every token once: none merged, none lost
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 40


def test_through_buffering_nginx_the_first_token_comes_before_the_last_is_made(
    sites: dict[str, Site],
) -> None:
    client = openai.OpenAI(base_url=sites["buffered"].url + "/v1", api_key=KEY, max_retries=0)
    stream = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=10,
        stream=True,
        extra_body={"delay_ms": 200},
    )
    arrivals = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic())
    assert len(arrivals) == 10
    # Ten tokens 200 ms apart: had nginx held the answer back they would all arrive at once.
    assert arrivals[-1] - arrivals[0] > 1.0
