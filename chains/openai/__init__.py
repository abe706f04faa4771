"""Speak OpenAI's API from a chain: its request and response models, streams, errors.

With ``@chains.route`` an entrypoint serves OpenAI's routes, and the official ``openai``
client, LangChain's ``ChatOpenAI`` and every tool that speaks that API can call the chain
(see docs/openai.md)::

    from chains import openai as oai

    class Front(chains.ChainletBase):
        @chains.route("POST", "/v1/chat/completions", errors=oai.error_body)
        async def chat(
            self, body: oai.ChatCompletionRequest
        ) -> oai.ChatCompletion | AsyncIterator[chains.SSE]:
            oai.refuse_unsupported(body)
            deltas = self.tokens.run_remote(body.messages[-1].text())
            if body.stream:
                return oai.chat_events(deltas, model=body.model, include_usage=body.include_usage)
            return await oai.chat_completion(deltas, model=body.model)

The API key the chain is pushed with is what clients send as ``Authorization: Bearer``
(``OpenAI(api_key=...)``): the server checks it, and refuses others in OpenAI's shape.
"""

from chains.openai.embeddings import embedding_response
from chains.openai.errors import OpenAIError, error_body, refuse_unsupported
from chains.openai.models import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionRequest,
    Delta,
    Embedding,
    EmbeddingRequest,
    EmbeddingResponse,
    EmbeddingUsage,
    FunctionCall,
    Model,
    ModelList,
    StreamOptions,
    ToolCall,
    Usage,
)
from chains.openai.streams import (
    DONE,
    chat_completion,
    chat_events,
    completion,
    completion_events,
    events,
)

__all__ = [
    "DONE",
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
    "OpenAIError",
    "StreamOptions",
    "ToolCall",
    "Usage",
    "chat_completion",
    "chat_events",
    "completion",
    "completion_events",
    "embedding_response",
    "error_body",
    "events",
    "refuse_unsupported",
]
