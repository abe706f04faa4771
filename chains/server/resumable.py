"""Resumable ``POST /run_remote`` streams: a caller that sends ``X-Chains-Resumable: 1`` to a
streaming entrypoint gets a run that outlives its connection.

The call becomes a streaming job of the entrypoint's job store, run at once (beside the
workers, never behind the queue), and is answered with that job's events as server-sent
events, each with its number as its ``id``, and the run's id in ``X-Chains-Run-Id``. A cut does
not cancel the run: the caller (or an ``EventSource``, by itself) reads the rest at
``GET /async_request/{id}/events`` with ``Last-Event-ID``, live or until the job's retention
runs out. A call without the header never comes here, so plain streams pay nothing.
"""

from __future__ import annotations

import json

from chains.call_context import CallContext
from chains.jobs.store import JobRefused
from chains.model import ChainletSpec
from chains.server.asgi import Receive, Send, send_json
from chains.server.jobs import JobRoutes
from chains.wire import ASYNC_REQUEST, RESUMABLE_HEADER, RUN_ID_HEADER

__all__ = ["serve_resumable"]


async def serve_resumable(
    spec: ChainletSpec,
    routes: JobRoutes | None,
    headers: dict[str, str],
    receive: Receive,
    send: Send,
) -> None:
    """Answer one ``POST /run_remote`` that asked for a resumable stream."""
    value = headers[RESUMABLE_HEADER].strip()
    if value != "1":
        detail = f"{RESUMABLE_HEADER}: {value!r} is not understood: send '1' for a resumable stream"
        await send_json(send, 400, {"detail": detail})
        return
    if not spec.endpoint.is_stream:
        detail = (
            f"{spec.name} answers one value, not a stream: {RESUMABLE_HEADER} applies to streaming "
            "endpoints (for a call that outlives its request, use POST /async_run_remote)"
        )
        await send_json(send, 400, {"detail": detail})
        return
    if routes is None:
        detail = (
            f"{spec.name} keeps no job store, which a resumable stream is kept in: push the chain with "
            "CHAINS_JOBS_STORE unset (the default store) or naming a store, not 'off'; or call without "
            f"{RESUMABLE_HEADER}"
        )
        await send_json(send, 400, {"detail": detail})
        return
    refusal = routes.refusal(headers)
    if refusal is not None:
        await send_json(send, 401, {"detail": refusal})
        return
    body = await routes.read_request_body(headers, receive, send)
    if body is None:
        return
    try:
        arguments = json.loads(body or b"{}")
        if not isinstance(arguments, dict):
            raise ValueError("the body must be a JSON object of run_remote's arguments by name")
        model_input = await routes.checked_input(arguments, send)  # NaN: a ValueError too
    except ValueError as exc:
        await send_json(send, 400, {"detail": f"the body is not run_remote's arguments: {exc}"})
        return
    if model_input is None:
        return
    try:
        job, _ = await routes.start_stream(model_input, CallContext.from_headers(headers).deadline)
    except JobRefused as exc:  # the store's bounds, as for an async call
        retry = [(b"retry-after", b"5")] if exc.status == 503 else []
        await send_json(send, exc.status, {"detail": exc.message}, retry)
        return
    location = f"{ASYNC_REQUEST}/{job.id}/events".encode()
    extra = [(RUN_ID_HEADER.encode(), job.id.encode()), (b"content-location", location)]
    await routes.send_stream(job, 0, receive, send, extra)
