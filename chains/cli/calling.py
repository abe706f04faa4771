"""Calling a running chain's entrypoint from outside, printing what it answers as it arrives.

Used by ``chains call``. Streams are requested as server-sent events: they are plain text
a person can read, and they still carry the end (or error) event, so a stream cut short
is reported as such and never mistaken for a complete one.
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any, TextIO

import httpx

from chains.errors import ErrorDetail, RemoteError, StreamInterrupted
from chains.streaming import BYTES, SSE_EVENTS, TEXT, OutputKind, StreamKind
from chains.streaming.sse import SSE
from chains.wire import DEBUG_HEADER, JSON_MEDIA_TYPE, RUN_REMOTE, SSE_MEDIA_TYPE

__all__ = [
    "CallFailed",
    "UntrustedCertificate",
    "call_entrypoint",
    "call_route",
    "converse_with_entrypoint",
    "untrusted_certificate",
]


class CallFailed(Exception):
    """The call did not succeed; the message says why, for a person."""


class UntrustedCertificate(CallFailed):
    """The entrypoint's certificate was refused: no authority the call trusted issued it, or
    it names another host."""


def untrusted_certificate(exc: BaseException, url: str) -> UntrustedCertificate | None:
    """The certificate failure behind ``exc`` (httpx and websockets wrap it), if that is what
    it was."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            reason = seen.verify_message or seen.reason or str(seen)
            return UntrustedCertificate(f"the certificate of {url} is not trusted ({reason})")
        seen = seen.__cause__ or seen.__context__
    return None


async def call_entrypoint(
    url: str,
    arguments: dict[str, Any],
    kind: OutputKind,
    out: TextIO = sys.stdout,
    api_key: str | None = None,
    timeout: float | None = None,
    ssl_context: ssl.SSLContext | None = None,
    debug: str | None = None,
) -> None:
    """POST ``arguments`` to ``url``/run_remote and write the answer to ``out``.

    An ``https://`` entrypoint is verified with ``ssl_context``, or the system's authorities
    without one. ``debug``, the owner's proof, asks for every hop's traceback with an error.
    """
    headers = {"content-type": JSON_MEDIA_TYPE}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    if debug:
        headers[DEBUG_HEADER] = debug
    if kind.is_stream:
        headers["accept"] = SSE_MEDIA_TYPE
    verify: ssl.SSLContext | bool = ssl_context or True
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10), verify=verify) as client:
        try:
            async with client.stream("POST", url + RUN_REMOTE, json=arguments, headers=headers) as response:
                if response.status_code != 200:
                    raise CallFailed(_describe_failure(response.status_code, await response.aread()))
                if not isinstance(kind, StreamKind):
                    out.write(json.dumps(json.loads(await response.aread()), indent=2) + "\n")
                    return
                await _print_events(SSE.from_chunks(response.aiter_bytes()), kind, out)
        except httpx.TransportError as exc:
            raise untrusted_certificate(exc, url) or CallFailed(
                f"the call to {url} broke off: {type(exc).__name__}: {exc}"
            ) from None


async def call_route(
    url: str,
    method: str,
    path: str,
    body: Any,
    headers: dict[str, str],
    out: TextIO = sys.stdout,
    api_key: str | None = None,
    timeout: float | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> None:
    """Send ``method path`` (a ``@chains.route``) with ``body`` as its JSON body, and write the
    answer to ``out``: JSON pretty-printed, a stream's bytes as they arrive."""
    sent = dict(headers)
    if api_key:
        sent.setdefault("authorization", f"Bearer {api_key}")
    verify: ssl.SSLContext | bool = ssl_context or True
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10), verify=verify) as client:
        try:
            async with client.stream(method, url + path, json=body, headers=sent) as response:
                if response.status_code >= 400:
                    raise CallFailed(_describe_failure(response.status_code, await response.aread()))
                if response.headers.get("content-type", "").startswith(JSON_MEDIA_TYPE):
                    out.write(json.dumps(json.loads(await response.aread()), indent=2) + "\n")
                    return
                async for chunk in response.aiter_text():
                    out.write(chunk)
                    out.flush()
        except httpx.TransportError as exc:
            raise untrusted_certificate(exc, url) or CallFailed(
                f"the call to {url}{path} broke off: {type(exc).__name__}: {exc}"
            ) from None


def _describe_failure(status: int, body: bytes) -> str:
    try:
        payload = json.loads(body)
    except ValueError:
        return f"HTTP {status}: {body[:500].decode(errors='replace')}"
    if (
        isinstance(payload, dict)
        and isinstance(payload.get("error"), dict)
        and "exc_type" not in payload["error"]
    ):
        return f"HTTP {status}: {payload['error'].get('message', payload['error'])}"  # OpenAI's shape
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return str(RemoteError.from_detail(ErrorDetail.model_validate(payload["error"])))
    if isinstance(payload, dict) and "detail" in payload:
        detail = payload["detail"]
        if isinstance(detail, list):
            lines = [f"  {'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in detail]
            return f"HTTP {status}: invalid arguments\n" + "\n".join(lines)
        return f"HTTP {status}: {detail}"
    return f"HTTP {status}: {payload}"


async def _print_events(events: AsyncIterator[SSE], kind: StreamKind, out: TextIO) -> None:
    write = _writer(kind, out)
    async for event in events:
        name = event.event or "message"
        if name == "end":
            if kind is TEXT:
                out.write("\n")
            out.flush()
            return
        if name == "error":
            detail = ErrorDetail.model_validate_json(event.data)
            raise CallFailed(str(RemoteError.from_detail(detail)))
        if kind is SSE_EVENTS:
            out.write(event.encode())
        elif name in ("header", "footer"):
            out.write(f"{name}: {event.data}\n")
        else:
            write(event.data)
        out.flush()
    raise CallFailed(
        str(StreamInterrupted("the stream ended before its end event: the output above is incomplete"))
    )


def _writer(kind: StreamKind, out: TextIO) -> Callable[[str], None]:
    if kind is TEXT:

        def write_text(data: str) -> None:
            out.write(data)

        return write_text
    if kind is BYTES:
        binary = getattr(out, "buffer", None)

        def write_bytes(data: str) -> None:
            raw = base64.b64decode(data)
            if binary is not None:
                binary.write(raw)
                binary.flush()
            else:
                out.write(raw.decode(errors="replace"))

        return write_bytes

    def write_line(data: str) -> None:
        out.write(data + "\n")

    return write_line


async def converse_with_entrypoint(
    url: str,
    lines: TextIO = sys.stdin,
    out: TextIO = sys.stdout,
    api_key: str | None = None,
    idle_sec: float = 1.0,
    ssl_context: ssl.SSLContext | None = None,
) -> None:
    """Open a WebSocket to ``url``/run_remote, send each line of ``lines`` as a text message and
    print every message that comes back as it arrives (text as a line, binary as its bytes).

    Once ``lines`` ends, replies are still printed until none came for ``idle_sec`` seconds;
    then the socket is closed. A close with 1011 (the chain failed) is a :class:`CallFailed`.
    An ``https://`` entrypoint is reached at ``wss://``, verified with ``ssl_context`` (or the
    system's authorities).
    """
    import asyncio
    import threading

    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    ws_url = "ws" + url.removeprefix("http") + RUN_REMOTE
    # websockets refuses an SSL context for a ws:// URL; for wss:// None means the system's.
    secure: dict[str, Any] = (
        {"ssl": ssl_context} if ws_url.startswith("wss://") and ssl_context is not None else {}
    )
    loop = asyncio.get_running_loop()
    typed: asyncio.Queue[str | None] = asyncio.Queue()

    def read_lines() -> None:  # a thread: reading a terminal would block the loop
        for line in lines:
            loop.call_soon_threadsafe(typed.put_nowait, line.rstrip("\n"))
        loop.call_soon_threadsafe(typed.put_nowait, None)

    async def send_lines(ws: Any) -> None:
        while (line := await typed.get()) is not None:
            await ws.send(line)

    try:
        async with connect(ws_url, additional_headers=headers, max_size=None, **secure) as ws:
            threading.Thread(target=read_lines, daemon=True).start()
            sender = asyncio.ensure_future(send_lines(ws))
            receiving = asyncio.ensure_future(ws.recv())
            try:
                while True:
                    # The input's end is waited for together with the next reply: it may come
                    # after the last reply (Ctrl-D once it is printed), and from then on only
                    # ``idle_sec`` of silence is waited, not the next reply or the ping timeout.
                    if not sender.done():
                        await asyncio.wait({receiving, sender}, return_when=asyncio.FIRST_COMPLETED)
                        if not receiving.done():
                            continue
                    elif not (await asyncio.wait({receiving}, timeout=idle_sec))[0]:
                        return
                    message = receiving.result()
                    receiving = asyncio.ensure_future(ws.recv())
                    if isinstance(message, bytes):
                        binary = getattr(out, "buffer", None)
                        if binary is not None:
                            binary.write(message)
                            binary.flush()
                        else:
                            out.write(message.decode(errors="replace"))
                    else:
                        out.write(message + "\n")
                    out.flush()
            finally:
                sender.cancel()
                receiving.cancel()
                if sender.done() and not sender.cancelled():
                    sender.exception()  # a send the closed socket refused: the receive says why
    except InvalidStatus as exc:
        body = bytes(exc.response.body or b"")
        raise CallFailed(_describe_failure(exc.response.status_code, body)) from None
    except ConnectionClosed as exc:
        if exc.rcvd is not None and exc.rcvd.code in (1000, 1001):
            return
        code = exc.rcvd.code if exc.rcvd is not None else "none"
        reason = exc.rcvd.reason if exc.rcvd is not None else "the connection broke without a close frame"
        raise CallFailed(f"the WebSocket closed with code {code}: {reason}") from None
    except OSError as exc:
        raise untrusted_certificate(exc, ws_url) or CallFailed(
            f"could not open a WebSocket to {ws_url}: {exc}"
        ) from None
