"""An OpenAI-compatible chat chain: the official `openai` client, LangChain and curl call it as they are.

    chains push examples/openai/chain.py --name chat --port 8000 --api-key sk-local
    curl -N localhost:8000/v1/chat/completions -H 'Authorization: Bearer sk-local' \\
        -d '{"model": "tiny", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'

- ``Front`` (the entrypoint) serves ``/v1/chat/completions``, ``/v1/completions``,
  ``/v1/embeddings`` and ``/v1/models`` with ``@chains.route``, in OpenAI's shapes;
- ``Tokens`` streams the tokens of a small deterministic model (the same prompt always gets
  the same words, so tests can say what they expect);
- ``Embedder`` embeds texts in batches (``@chains.batched``): concurrent requests share a call.

See docs/openai.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import random
from collections.abc import AsyncIterator

import chains
from chains import openai as oai

logger = logging.getLogger("examples.openai")

MODEL = "tiny-deterministic"
EMBEDDING_MODEL = "tiny-embedding"
DIMENSIONS = 16

_TEXT = (
    "the chain streams every token as soon as the model makes it and the client reads each one "
    "in order through proxies that would otherwise hold the answer back until it was whole"
)
_WORDS = _TEXT.split()


class Tokens(chains.ChainletBase):
    """A tiny language model: the prompt seeds the choice of words, so its answers are repeatable."""

    remote_config = chains.RemoteConfig(name="Tokens")

    async def run_remote(
        self, prompt: str, max_tokens: int = 16, delay_ms: float = 5.0
    ) -> AsyncIterator[str]:
        rng = random.Random(hashlib.sha256(prompt.encode()).digest())
        sent = 0
        try:
            for index in range(max_tokens):
                await asyncio.sleep(delay_ms / 1000)
                word = rng.choice(_WORDS)
                sent += 1
                yield word if index == 0 else " " + word
        except (asyncio.CancelledError, GeneratorExit):
            # A client that left: its work stops here, which the example's test looks for.
            logger.warning("token stream cancelled after %d tokens", sent)
            raise


def expected_text(prompt: str, max_tokens: int) -> str:
    """What ``Tokens`` answers to ``prompt`` (for tests and the docs)."""
    rng = random.Random(hashlib.sha256(prompt.encode()).digest())
    return " ".join(rng.choice(_WORDS) for _ in range(max_tokens))


class Embedder(chains.ChainletBase):
    """Embeds texts as normalized hashed character trigrams; concurrent calls come as one batch."""

    @chains.batched(max_batch_size=32, max_wait_ms=5)
    async def run_remote(self, texts: list[str]) -> list[list[float]]:
        return [embed(text) for text in texts]


def embed(text: str) -> list[float]:
    vector = [0.0] * DIMENSIONS
    padded = f"  {text.lower()} "
    for i in range(len(padded) - 2):
        digest = hashlib.blake2b(padded[i : i + 3].encode(), digest_size=2).digest()
        vector[int.from_bytes(digest, "big") % DIMENSIONS] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def _prompt(messages: list[oai.ChatMessage]) -> str:
    return "\n".join(f"{m.role}: {m.text()}" for m in messages)


@chains.mark_entrypoint
class Front(chains.ChainletBase):
    """OpenAI's API in front of the chain's models."""

    def __init__(
        self, tokens: Tokens = chains.depends(Tokens), embedder: Embedder = chains.depends(Embedder)
    ) -> None:
        self._tokens = tokens
        self._embedder = embedder

    async def run_remote(self, prompt: str, max_tokens: int = 16) -> AsyncIterator[str]:
        """The chain's own endpoint: the tokens of one prompt, as plain text."""
        async for token in self._tokens.run_remote(prompt, max_tokens):
            yield token

    @chains.route("POST", "/v1/chat/completions", errors=oai.error_body)
    async def chat(self, body: oai.ChatCompletionRequest) -> oai.ChatCompletion | AsyncIterator[chains.SSE]:
        oai.refuse_unsupported(body)
        prompt = _prompt(body.messages)
        # A field OpenAI does not have, carried through by the model: how slowly the tiny model types.
        delay_ms = float((body.model_extra or {}).get("delay_ms", 5.0))
        deltas = self._tokens.run_remote(prompt, body.token_limit or 16, delay_ms)
        prompt_tokens = len(prompt.split())
        if body.stream:
            return oai.chat_events(
                deltas, model=body.model, include_usage=body.include_usage, prompt_tokens=prompt_tokens
            )
        return await oai.chat_completion(deltas, model=body.model, prompt_tokens=prompt_tokens)

    @chains.route("POST", "/v1/completions", errors=oai.error_body)
    async def completions(self, body: oai.CompletionRequest) -> oai.Completion | AsyncIterator[chains.SSE]:
        oai.refuse_unsupported(body)
        prompt = body.prompt if isinstance(body.prompt, str) else "\n".join(body.prompt)
        deltas = self._tokens.run_remote(prompt, body.max_tokens or 16)
        if body.stream:
            return oai.completion_events(deltas, model=body.model, include_usage=body.include_usage)
        return await oai.completion(deltas, model=body.model, prompt_tokens=len(prompt.split()))

    @chains.route("POST", "/v1/embeddings", errors=oai.error_body)
    async def embeddings(self, body: oai.EmbeddingRequest) -> oai.EmbeddingResponse:
        texts = body.texts()
        # One call per text, all at once: the batched Embedder serves them together.
        vectors = await asyncio.gather(*(self._embedder.run_remote(text) for text in texts))
        return oai.embedding_response(body, vectors, prompt_tokens=sum(len(t.split()) for t in texts))

    @chains.route("GET", "/v1/models", errors=oai.error_body)
    async def models(self) -> oai.ModelList:
        return oai.ModelList(data=[oai.Model(id=MODEL), oai.Model(id=EMBEDDING_MODEL)])

    @chains.route("GET", "/v1/models/{model}", errors=oai.error_body)
    async def model(self, model: str) -> oai.Model:
        if model not in (MODEL, EMBEDDING_MODEL):
            raise oai.OpenAIError(
                404, f"The model {model!r} does not exist", param="model", code="model_not_found"
            )
        return oai.Model(id=model)
