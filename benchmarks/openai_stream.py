"""An OpenAI chat stream through the chain against the token chainlet called directly (issue 30).

``examples/openai/chain.py`` is pushed (local target: real processes on 127.0.0.1) with its
``Tokens`` chainlet typing as fast as it can (``delay_ms=0``), and ``Tokens`` is pushed once
more on its own as an entrypoint, in the same run. Per round, interleaved:

- ``chain``: the official ``openai`` client (async) streams a chat completion from the front
  door, which calls ``Tokens`` through its stub and turns each token into an OpenAI chunk;
- ``chain-httpx``: the same request with plain httpx, its event lines counted, not parsed:
  what the chain costs, without what the ``openai`` client spends on each chunk;
- ``direct``: a ``chains.StubBase`` by URL streams the same tokens from ``Tokens`` alone.

Measured: time to first token (from the request to the first token at the client; for the
chain, the first chunk with content) and tokens per second over the whole stream. Medians
over rounds, each round one long stream and several short ones per path.

Run from the repository root: ``.venv/bin/python -m benchmarks.openai_stream`` (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import openai

import chains
from benchmarks import harness
from chains.loader import import_chain_file

CHAIN = Path(__file__).parents[1] / "examples" / "openai" / "chain.py"
RESULTS = Path(__file__).with_name("results") / "openai_stream.json"
KEY = "sk-bench"


class TokensClient(chains.StubBase):
    """The Tokens chainlet by URL, as a chainlet's stub calls it."""

    async def run_remote(
        self, prompt: str, max_tokens: int = 16, delay_ms: float = 5.0
    ) -> AsyncIterator[str]:
        async for token in self.stream_remote(prompt=prompt, max_tokens=max_tokens, delay_ms=delay_ms):
            yield token


async def _chain(client: openai.AsyncOpenAI, tokens: int) -> tuple[float, float]:
    started = time.perf_counter()
    first = 0.0
    count = 0
    stream = await client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "benchmark"}],
        max_tokens=tokens,
        stream=True,
        extra_body={"delay_ms": 0},
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            count += 1
            if count == 1:
                first = time.perf_counter() - started
    elapsed = time.perf_counter() - started
    assert count == tokens, f"the chain streamed {count} tokens of {tokens}"
    return first, count / elapsed


async def _chain_httpx(client: httpx.AsyncClient, tokens: int) -> tuple[float, float]:
    started = time.perf_counter()
    first = 0.0
    count = 0
    body = {"model": "tiny", "messages": [{"role": "user", "content": "benchmark"}], "max_tokens": tokens}
    body.update(stream=True, delay_ms=0)
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"content":"' in line and '"content":""' not in line:
                count += 1
                if count == 1:
                    first = time.perf_counter() - started
    elapsed = time.perf_counter() - started
    assert count == tokens, f"the chain streamed {count} tokens of {tokens}"
    return first, count / elapsed


async def _direct(stub: TokensClient, tokens: int) -> tuple[float, float]:
    started = time.perf_counter()
    first = 0.0
    count = 0
    async for _ in stub.run_remote("user: benchmark", tokens, 0.0):
        count += 1
        if count == 1:
            first = time.perf_counter() - started
    elapsed = time.perf_counter() - started
    assert count == tokens, f"Tokens streamed {count} tokens of {tokens}"
    return first, count / elapsed


async def _measure(chain_url: str, tokens_url: str, rounds: int, long: int, short: int) -> dict[str, Any]:
    client = openai.AsyncOpenAI(base_url=chain_url + "/v1", api_key=KEY, max_retries=0)
    stub = TokensClient(tokens_url)
    raw = httpx.AsyncClient(base_url=chain_url, headers={"authorization": f"Bearer {KEY}"}, timeout=60)
    paths: dict[str, Callable[[int], Awaitable[tuple[float, float]]]] = {
        "chain": lambda n: _chain(client, n),
        "chain-httpx": lambda n: _chain_httpx(raw, n),
        "direct": lambda n: _direct(stub, n),
    }
    runs: dict[str, dict[str, list[float]]] = {
        path: {"first_token_ms": [], "tokens_per_s": []} for path in paths
    }
    for call in paths.values():  # warm every path: connections, imports, first-call caches
        await call(short)
    for _ in range(rounds):
        for path, call in paths.items():
            _, rate = await call(long)
            runs[path]["tokens_per_s"].append(rate)
            for _ in range(5):
                first, _ = await call(short)
                runs[path]["first_token_ms"].append(first * 1e3)
    await stub.aclose()
    await client.close()
    await raw.aclose()
    medians = {
        path: {name: statistics.median(values) for name, values in figures.items()}
        for path, figures in runs.items()
    }
    return {"medians": medians, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=5000, help="tokens of the long stream")
    parser.add_argument("--short", type=int, default=8, help="tokens of each short stream (first token)")
    parser.add_argument("--no-write", action="store_true", help="print only; keep the results file")
    args = parser.parse_args(argv)
    module, _ = import_chain_file(CHAIN)
    with tempfile.TemporaryDirectory() as home:
        os.environ["CHAINS_HOME"] = home
        with (
            chains.push(CHAIN, name="bench-openai", port=harness.free_port(), api_key=KEY) as chain,
            chains.push(module.Tokens, name="bench-tokens", port=harness.free_port()) as tokens,
        ):
            result = asyncio.run(
                _measure(chain.entrypoint_url, tokens.entrypoint_url, args.rounds, args.tokens, args.short)
            )
    result["parameters"] = {"rounds": args.rounds, "tokens": args.tokens, "short": args.short}
    result["environment"] = harness.environment(("openai", "pydantic", "uvicorn"))
    medians = result["medians"]
    for path, m in medians.items():
        print(f"{path:11s} first token {m['first_token_ms']:7.2f} ms   {m['tokens_per_s']:9.0f} tokens/s")
    via, alone = medians["chain"], medians["direct"]
    first = via["first_token_ms"] / alone["first_token_ms"]
    rate = via["tokens_per_s"] / alone["tokens_per_s"]
    print(f"chain / direct: first token x{first:.2f}, tokens/s x{rate:.2f}")
    if not args.no_write:
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
