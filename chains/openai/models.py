"""Pydantic models of OpenAI's API: chat completions, completions, embeddings, the models list.

They follow the fields OpenAI documents, and carry any other field through (``extra="allow"``),
so a client sending a parameter newer than these models, or a tool call shaped in a newer way,
is neither refused nor stripped::

    request = ChatCompletionRequest.model_validate_json(body)
    request.messages[-1].content          # 'Hello'
    request.model_extra                   # {'reasoning_effort': 'low'}: not lost
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

import pydantic

__all__ = [
    "ChatCompletion",
    "ChatCompletionChoice",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatMessage",
    "ChunkChoice",
    "Completion",
    "CompletionChoice",
    "CompletionRequest",
    "Delta",
    "Embedding",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "EmbeddingUsage",
    "FunctionCall",
    "Model",
    "ModelList",
    "StreamOptions",
    "ToolCall",
    "Usage",
    "new_id",
]


class _Open(pydantic.BaseModel):
    """Unknown fields are kept and sent back out as they came."""

    model_config = pydantic.ConfigDict(extra="allow")


def new_id(prefix: str) -> str:
    """An id of OpenAI's form: ``chatcmpl-<hex>``."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def _now() -> int:
    return int(time.time())


class FunctionCall(_Open):
    name: str | None = None
    arguments: str | None = None  # JSON text, as the model wrote it


class ToolCall(_Open):
    """A tool call; in a stream's delta, its parts arrive in pieces under one ``index``."""

    index: int | None = None
    id: str | None = None
    type: Literal["function"] | None = "function"
    function: FunctionCall | None = None


class ChatMessage(_Open):
    role: str
    # A string, or a list of content parts (text, images) as the client sent them.
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text: its string, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "".join(str(part.get("text", "")) for part in self.content if part.get("type") == "text")


class StreamOptions(_Open):
    include_usage: bool | None = None


class ChatCompletionRequest(_Open):
    model: str
    messages: list[ChatMessage]
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    user: str | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class Usage(_Open):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> Usage:
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )


class ChatCompletionChoice(_Open):
    index: int = 0
    message: ChatMessage
    finish_reason: str | None = "stop"
    logprobs: dict[str, Any] | None = None


class ChatCompletion(_Open):
    id: str = pydantic.Field(default_factory=lambda: new_id("chatcmpl"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = pydantic.Field(default_factory=_now)
    model: str
    choices: list[ChatCompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class Delta(_Open):
    role: str | None = None
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChunkChoice(_Open):
    index: int = 0
    delta: Delta
    finish_reason: str | None = None
    logprobs: dict[str, Any] | None = None


class ChatCompletionChunk(_Open):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = pydantic.Field(default_factory=_now)
    model: str
    choices: list[ChunkChoice]
    # Set on the last chunk only, with empty choices, when stream_options.include_usage asks.
    usage: Usage | None = None
    system_fingerprint: str | None = None


class CompletionRequest(_Open):
    model: str
    prompt: str | list[str]
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = None
    best_of: int | None = None
    echo: bool | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class CompletionChoice(_Open):
    index: int = 0
    text: str
    finish_reason: str | None = None
    logprobs: dict[str, Any] | None = None


class Completion(_Open):
    id: str = pydantic.Field(default_factory=lambda: new_id("cmpl"))
    object: Literal["text_completion"] = "text_completion"
    created: int = pydantic.Field(default_factory=_now)
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class EmbeddingRequest(_Open):
    model: str
    # Text, texts, or token ids (one list, or a list of lists).
    input: str | list[str] | list[int] | list[list[int]]
    # The official client asks for base64 unless told otherwise, and decodes it itself.
    encoding_format: Literal["float", "base64"] | None = "float"
    dimensions: int | None = None
    user: str | None = None

    def texts(self) -> list[str]:
        """The inputs as texts (token ids are given back as their decimal text)."""
        given = self.input
        if isinstance(given, str):
            return [given]
        if given and all(isinstance(x, int) for x in given):
            return [" ".join(str(x) for x in given)]
        return [x if isinstance(x, str) else " ".join(str(t) for t in x) for x in given]  # type: ignore[union-attr]


class Embedding(_Open):
    object: Literal["embedding"] = "embedding"
    index: int
    # Floats, or with encoding_format="base64" the little-endian float32 bytes in base64.
    embedding: list[float] | str


class EmbeddingUsage(_Open):
    prompt_tokens: int = 0
    total_tokens: int = 0


class EmbeddingResponse(_Open):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage = pydantic.Field(default_factory=EmbeddingUsage)


class Model(_Open):
    id: str
    object: Literal["model"] = "model"
    created: int = pydantic.Field(default_factory=_now)
    owned_by: str = "chains"


class ModelList(_Open):
    object: Literal["list"] = "list"
    data: list[Model]
