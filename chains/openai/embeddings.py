"""OpenAI's embeddings answer from vectors, in the encoding the request asked for.

The official client asks for ``encoding_format="base64"`` unless told otherwise (the
little-endian float32 bytes of each vector, in base64) and decodes them itself::

    vectors = [await self.embedder.run_remote(text) for text in body.texts()]
    return chains.openai.embedding_response(body, vectors)
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence

from chains.openai.models import Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage

__all__ = ["embedding_response"]


def embedding_response(
    request: EmbeddingRequest, vectors: Sequence[Sequence[float]], *, prompt_tokens: int = 0
) -> EmbeddingResponse:
    """The answer to ``request``: one embedding per vector, in its order."""
    data = []
    for index, vector in enumerate(vectors):
        if request.encoding_format == "base64":
            packed = struct.pack(f"<{len(vector)}f", *vector)
            data.append(Embedding(index=index, embedding=base64.b64encode(packed).decode("ascii")))
        else:
            data.append(Embedding(index=index, embedding=[float(x) for x in vector]))
    usage = EmbeddingUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens)
    return EmbeddingResponse(data=data, model=request.model, usage=usage)
