"""OpenAI's errors: the body its clients read, the status codes they map to exception classes.

A route declared with ``errors=chains.openai.error_body`` answers the server's refusals (a
wrong API key, a malformed body, not ready yet) and its own failures this way, and a method
raises :class:`OpenAIError` for the rest (a parameter it does not support)::

    @chains.route("POST", "/v1/chat/completions", errors=chains.openai.error_body)
    async def chat(self, body: ChatCompletionRequest) -> ...:
        chains.openai.refuse_unsupported(body)     # n > 1: 400, as OpenAI answers it
"""

from __future__ import annotations

from typing import Any

from chains.openai.models import ChatCompletionRequest, CompletionRequest
from chains.routes import HTTPError

__all__ = ["OpenAIError", "error_body", "refuse_unsupported"]

# What OpenAI calls each kind of failure; its clients raise by status, and show the type.
_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}
_CODES = {401: "invalid_api_key", 404: "not_found", 429: "rate_limit_exceeded"}


def _body(message: str, status: int, param: str | None, code: str | None) -> dict[str, Any]:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code or _CODES.get(status)}}


def error_body(status: int, message: str) -> tuple[int, Any]:
    """The status and body OpenAI would answer: a malformed request (422 here) is its 400.

    >>> error_body(422, "messages: Field required")[0]
    400
    """
    if status == 422:
        status = 400
    return status, _body(message, status, None, None)


class OpenAIError(HTTPError):
    """An error answered in OpenAI's shape: ``raise OpenAIError(400, "n must be 1", param="n")``."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(status, _body(message, status, param, code))
        self.message = message


def refuse_unsupported(request: ChatCompletionRequest | CompletionRequest) -> None:
    """Raise :class:`OpenAIError` (400) for what a chain answering one completion cannot do.

    OpenAI's clients would otherwise get one choice where they asked for several, and not know.
    """
    if request.n is not None and request.n != 1:
        raise OpenAIError(
            400,
            f"n={request.n} is not supported: this server returns one choice (n=1)",
            param="n",
            code="unsupported_parameter",
        )
    if isinstance(request, CompletionRequest):
        if request.best_of is not None and request.best_of != 1:
            raise OpenAIError(
                400,
                f"best_of={request.best_of} is not supported (best_of=1)",
                param="best_of",
                code="unsupported_parameter",
            )
        if request.echo:
            raise OpenAIError(400, "echo is not supported", param="echo", code="unsupported_parameter")
