"""Resumable ``POST /run_remote`` streams: a caller that sends ``X-Chains-Resumable: 1`` to a
streaming entrypoint gets a run that outlives its connection.

The call becomes a streaming job of the entrypoint's job store, run at once (beside the
workers, never behind the queue), and is answered with that job's events as server-sent
events, each with its number as its ``id``, and the run's id in ``X-Chains-Run-Id``. A cut does
not cancel the run: the caller (or an ``EventSource``, by itself) reads the rest at
``GET /async_request/{id}/events`` with ``Last-Event-ID``, live or until the job's retention
runs out. A call without the header never comes here, so plain streams pay nothing.

It is served as a call otherwise: it takes a concurrency slot (or waits for one, or is refused
with 503), counts in flight, and runs within its caller's deadline and trace; the slot and the
in-flight count are the run's, kept until it ends, however long its first connection lasts.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from chains.jobs.store import JobRefused
from chains.metrics import Metrics
from chains.model import ChainletSpec
from chains.server.asgi import Message, Send, send_json
from chains.server.capacity import Capacity
from chains.server.refusal import RETRY_SOON, Refusal
from chains.server.request import Request
from chains.wire import ASYNC_REQUEST, RESUMABLE_HEADER, RUN_ID_HEADER

if TYPE_CHECKING:
    from chains.server.jobs import JobRoutes
    from chains.tracing.spans import Tracing

__all__ = ["serve_resumable"]


class _Answer:
    """The status a call was answered with, seen on its way out (499: none, its caller left)."""

    __slots__ = ("_send", "status")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status = 499

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        await self._send(message)


async def serve_resumable(
    request: Request,
    spec: ChainletSpec,
    routes: JobRoutes | None,
    *,
    capacity: Capacity,
    metrics: Metrics,
    tracing: Tracing | None,
    ready: bool,
) -> int:
    """Answer one ``POST /run_remote`` that asked for a resumable stream; return its status.

    The status is the answer's: 200 once the stream began, whatever the run then does (its
    own end is its job's status and the stream's last event), or the refusal's."""
    answer = _Answer(request.send)
    send = answer.send
    headers = request.headers
    value = headers[RESUMABLE_HEADER].strip()
    if value != "1":
        detail = f"{RESUMABLE_HEADER}: {value!r} is not understood: send '1' for a resumable stream"
        await send_json(send, 400, {"detail": detail}, request.id_header)
        return 400
    if not spec.endpoint.is_stream:
        detail = (
            f"{spec.name} answers one value, not a stream: {RESUMABLE_HEADER} applies to streaming "
            "endpoints (for a call that outlives its request, use POST /async_run_remote)"
        )
        await send_json(send, 400, {"detail": detail}, request.id_header)
        return 400
    if routes is None:
        detail = (
            f"{spec.name} keeps no job store, which a resumable stream is kept in: push the chain with "
            "CHAINS_JOBS_STORE unset (the default store) or naming a store, not 'off'; or call without "
            f"{RESUMABLE_HEADER}"
        )
        await send_json(send, 400, {"detail": detail}, request.id_header)
        return 400
    refusal = routes.refusal(headers)
    if refusal is not None:
        await send_json(send, 401, {"detail": refusal}, request.id_header)
        return 401
    if not ready:
        return await Refusal(503, "not ready yet", RETRY_SOON).answer(send, request.id_header)
    body = await routes.read_request_body(headers, request.receive, send)
    if body is None:
        return answer.status  # 413, or 499: the caller left
    try:
        arguments = json.loads(body or b"{}")
        if not isinstance(arguments, dict):
            raise ValueError("the body must be a JSON object of run_remote's arguments by name")
        model_input = await routes.checked_input(arguments, send)  # NaN: a ValueError too
    except ValueError as exc:
        detail = f"the body is not run_remote's arguments: {exc}"
        await send_json(send, 400, {"detail": detail}, request.id_header)
        return 400
    if model_input is None:
        return answer.status  # 422
    try:
        # Taken before the job is stored: a call refused as over capacity leaves nothing behind.
        await capacity.enter()
    except Refusal as full:
        return await full.answer(send, request.id_header)
    metrics.in_flight += 1

    def release(_: object = None) -> None:
        metrics.in_flight -= 1
        capacity.leave()

    try:
        job, task = await routes.start_stream(model_input, request.call.deadline)
    except JobRefused as exc:  # the store's bounds, as for an async call
        release()
        retry = [(b"retry-after", b"5")] if exc.status == 503 else []
        await send_json(send, exc.status, {"detail": exc.message}, [*retry, *request.id_header])
        return exc.status
    except BaseException:
        release()
        raise
    if task is None:
        release()  # left to the workers (the server is stopping): not run here
    else:
        task.add_done_callback(release)  # the run's, not the connection's: it outlives a cut
    if tracing is not None:
        tracing.mark_run(job.id)
    location = f"{ASYNC_REQUEST}/{job.id}/events".encode()
    extra = [(RUN_ID_HEADER.encode(), job.id.encode()), (b"content-location", location), *request.id_header]
    await routes.send_stream(job, 0, request.receive, send, extra, request.stream)
    return answer.status
