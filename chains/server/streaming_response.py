"""A streaming endpoint's answer once its first item is in: the headers, then the encoded items.

Before the first item a failure is a plain error answer (the app's); from here on the status
has gone out, so a failure is either carried in the stream (the framed form's error frame, an
SSE ``error`` event) or, for raw streams that have no such thing, the connection is cut
(:class:`StreamAborted`), so that the client sees a broken response, never a complete-looking
shorter one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from chains.errors import ErrorDetail, RemoteError
from chains.metrics import Metrics
from chains.server.body_sender import BodySender
from chains.server.request import Request, StreamCount
from chains.streaming.forms.producer import StreamEncoder
from chains.streaming.shape import StreamShape

if TYPE_CHECKING:
    from chains.tracing.spans import Tracing

__all__ = ["StreamAborted", "send_stream"]

logger = logging.getLogger("chains.server")

_NO_BUFFERING = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class StreamAborted(Exception):
    """A stream that failed after its headers went out, logged already; raised to the ASGI
    server only so that it cuts the connection."""


async def send_stream(
    request: Request,
    media_type: str,
    encoder: StreamEncoder,
    shape: StreamShape,
    items: AsyncIterator[Any],
    *,
    chainlet: str,
    public_errors: bool,
    tracing: Tracing | None,
    metrics: Metrics,
) -> None:
    """Answer ``request`` with 200 and ``items`` encoded by ``encoder`` as ``media_type``,
    counting them in ``request.stream``; a failure of ``items`` is logged here, and raises
    :class:`StreamAborted` once what went before it has been sent."""
    send = request.send
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", media_type.encode()), *_NO_BUFFERING, *request.id_header],
        }
    )
    source = _counted(items, request.stream or StreamCount())
    if public_errors:
        source = _public_failure(source, chainlet, request.call.request_id)
    on_error: Callable[[BaseException], None] = _log_stream_error
    if tracing is not None:
        source = tracing.count_items(source)
        on_error = tracing.recording(_log_stream_error)
    chunks = encoder(shape, source, chainlet=chainlet, on_error=on_error)
    sender = BodySender(send)
    try:
        async with aclosing(chunks):
            async for chunk in chunks:
                await sender.write(chunk)
        await sender.close()
    except asyncio.CancelledError:
        sender.cancel()
        metrics.streams_cancelled += 1
        raise
    except Exception as exc:
        # Raw streams have no in-band error: the connection is cut. What the stream yielded
        # before it failed goes out first, as it always has.
        with contextlib.suppress(Exception):
            await sender.close()
        on_error(exc)
        # Raised to cut the connection; logged once, above (serve.py keeps uvicorn from
        # logging it again as an "Exception in ASGI application").
        raise StreamAborted(f"run_remote raised {type(exc).__name__} while streaming") from None
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _counted(source: AsyncIterator[Any], count: StreamCount) -> AsyncIterator[Any]:
    try:
        while True:
            try:
                item = await anext(source)
            except StopAsyncIteration:
                count.ended = True
                return
            except Exception:
                count.failed = count.ended = True
                raise
            count.items += 1
            # The yield stays outside the try: what the consumer throws in is not the producer's.
            yield item
    finally:
        await source.aclose()  # type: ignore[attr-defined]


def _log_stream_error(exc: BaseException) -> None:
    if isinstance(exc, RemoteError) and exc.sent_as_is:
        return  # the public form of an error _public_failure has logged in full
    # The user's frames only: those of chains, the ASGI server and asyncio say nothing of the cause.
    detail = ErrorDetail.from_exception(exc)
    logger.error(
        "run_remote raised %s while streaming: %s\n%s",
        type(exc).__name__,
        exc,
        detail.traceback.rstrip() or "  (no user frames)",
    )


async def _public_failure(source: AsyncIterator[Any], chainlet: str, request_id: str) -> AsyncIterator[Any]:
    """``source``'s items; its failure is logged in full and goes on as its public form, which
    is what the stream's error frame or event then carries."""
    try:
        while True:
            try:
                item = await anext(source)
            except StopAsyncIteration:
                return
            except Exception as exc:
                logger.error(
                    "run_remote raised %s while streaming: %s (request id %s)",
                    type(exc).__name__,
                    exc,
                    request_id,
                    exc_info=exc,
                )
                raise ErrorDetail.from_exception(exc, chainlet).public(request_id).as_exception() from None
            # The yield stays outside the try: what the consumer throws in is not the producer's.
            yield item
    finally:
        await source.aclose()  # type: ignore[attr-defined]
