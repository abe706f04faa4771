"""Minimal ASGI apps that do identical work, so framework overhead is the only difference between them.

Each serves ``POST /generate``: validate ``{"prompt": str, "max_tokens": int}`` with pydantic and answer
``{"text": ..., "tokens": ...}``. The models live here so that every app validates and serializes with
the very same schema.
"""

from pydantic import BaseModel


class GenerateRequest(BaseModel):
    prompt: str
    max_tokens: int


class GenerateResponse(BaseModel):
    text: str
    tokens: int


def respond(request: GenerateRequest) -> GenerateResponse:
    return GenerateResponse(text=request.prompt, tokens=request.max_tokens)
