"""The answer to a call whose ``run_remote`` failed before anything was sent: an ``ErrorDetail``.

What an outside caller sees of it is set by docs/concepts.md, "Errors": the entrypoint hides
the traceback unless told otherwise, and turns a dependency that stayed unavailable into a 503
it may retry.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from chains.errors import DependencyUnavailable, ErrorDetail
from chains.server.asgi import send_json
from chains.server.memory_errors import memory_message, note_failure
from chains.server.request import Request
from chains.source_map import in_user_files
from chains.truss_compat.errors import error_body

if TYPE_CHECKING:
    from chains.tracing.spans import Tracing

__all__ = ["send_error"]


async def send_error(
    request: Request,
    status: int,
    exc: BaseException,
    *,
    chainlet: str,
    entrypoint: bool,
    public: bool,
    tracing: Tracing | None,
) -> int:
    """Answer ``request`` with ``exc`` as an ``ErrorDetail`` (its public form when ``public``)
    and ``status`` or the one the error asks for; return the status sent."""
    if tracing is not None:
        tracing.record_error(exc)
    note_failure(exc)
    detail = ErrorDetail.from_exception(exc, chainlet)
    # The id the x-chains-request-id header carries, and the frames in the user's own files.
    detail = detail.model_copy(
        update={
            "request_id": request.call.request_id,
            "traceback": in_user_files(detail.traceback),
            "message": detail.message or memory_message(exc),
        }
    )
    headers = request.id_header
    if entrypoint:
        if public:
            detail = detail.public(request.call.request_id)
        if status == 500 and isinstance(exc, DependencyUnavailable):
            # A dependency was busy or unreachable through every retry of this call: a
            # later call may well succeed, so the outside caller is told to retry. Only
            # here: between chainlets a 503 would be retried at every hop, multiplying the
            # load on the dependency that is already overloaded.
            status = 503
            headers = [(b"retry-after", _retry_after(exc)), *headers]
    # Truss callers parse the same failure by their own field names (chains.truss_compat.errors).
    body: dict[str, Any] = {"error": error_body(detail)}
    if detail.status is not None and status == 500:
        # An HTTPException's status and detail, as FastAPI would answer them.
        status = detail.status
        body["detail"] = detail.message
    await send_json(request.send, status, body, headers)
    return status


def _retry_after(exc: DependencyUnavailable) -> bytes:
    """Seconds the dependency asked its callers to wait (1 when it did not say), rounded up."""
    seconds = exc.retry_after if exc.retry_after is not None else 1.0
    return str(max(1, math.ceil(seconds))).encode()
