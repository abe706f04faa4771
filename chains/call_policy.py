"""What every caller of a chainlet decides alike: the stubs (:mod:`chains.stubs.policy`), the
WebSocket dial (:mod:`chains.websocket.client`) and a consumer's client (:mod:`chains.client`).

Decisions only, no I/O, so that async and sync callers share them instead of copying them:

- which answers may be retried (:data:`RETRY_STATUSES`) and how long to wait before the next
  attempt (:func:`wait_before_retry`: backoff with jitter, at least a ``Retry-After``, none
  when another replica is left to try);
- the caller's deadline caps every wait (:func:`check_wait`) as it caps every attempt;
- what a ``Retry-After`` header says (:func:`retry_after_seconds`);
- what exception a non-200 answer is (:func:`answer_error`);
- how a stream cut mid-way is read on from where it stopped (:data:`RECONNECT_TRIES`,
  :func:`reconnect_delay`, :func:`read_on_headers`, :func:`read_on_refused`; the server's side
  is chains/server/reconnect.py).

Retries after the request was sent follow one rule (docs/concepts.md, "Retries after the
request was sent"): the answers 429, 502, 503 and 504 and a connection that fails or breaks
before the answer are retried; a 500 only with ``retry_user_errors``; a timeout never. Every
attempt carries the same request id (``x-chains-request-id``), so a body can tell a retry
from a first call.

>>> retry_after_seconds("2.5")
2.5
>>> wait_before_retry(1, retry_after=None, other_replica=True)
0.0
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import Mapping
from typing import Any

from chains.errors import (
    ChainsRuntimeError,
    DeadlineExceeded,
    DependencyUnavailable,
    ErrorDetail,
    RemoteError,
    StreamInterrupted,
)
from chains.wire import STREAM_CANCEL_HEADER, STREAM_ID_HEADER, STREAM_OFFSET_HEADER

__all__ = [
    "RECONNECT_TRIES",
    "RETRY_STATUSES",
    "answer_error",
    "check_wait",
    "invalid_arguments",
    "read_on_headers",
    "read_on_refused",
    "reconnect_delay",
    "retry_after_seconds",
    "stop_headers",
    "wait_before_retry",
]

RETRY_STATUSES = frozenset({429, 502, 503, 504})
"""Answers that say "not now" rather than "no": overloaded, restarting, a proxy's gateway errors."""

FIRST_BACKOFF_SEC = 0.05
MAX_BACKOFF_SEC = 2.0

_random = random.Random()

RECONNECT_TRIES = 6
"""Tries in a row, with no byte arriving between them, to read a cut stream on before it is
raised as cut: about 1.6 s of waiting in all (:func:`reconnect_delay`), well within the 10 s
a server keeps a cut stream's run waiting for its reader."""


def reconnect_delay(tries: int) -> float:
    """The wait before try number ``tries`` (from 0) to read a cut stream on: 0.05 s, doubling.

    >>> [reconnect_delay(n) for n in range(3)]
    [0.05, 0.1, 0.2]
    """
    return min(FIRST_BACKOFF_SEC * 2.0**tries, 1.0)


def read_on_headers(headers: Mapping[str, str], stream_id: str, offset: int) -> dict[str, str]:
    """``headers`` (the call's own) to ask for stream ``stream_id`` from byte ``offset`` on."""
    return {**headers, STREAM_ID_HEADER: stream_id, STREAM_OFFSET_HEADER: str(offset)}


def stop_headers(headers: Mapping[str, str], stream_id: str) -> dict[str, str]:
    """``headers`` to tell the server its reader of ``stream_id`` has stopped on purpose."""
    return {**headers, STREAM_ID_HEADER: stream_id, STREAM_CANCEL_HEADER: "1"}


def read_on_refused(
    name: str, offset: int, cut: BaseException, status: int, payload: bytes
) -> StreamInterrupted:
    """The error for a cut stream that its server would not read on (gone, or failed)."""
    body = _json_or_none(payload)
    detail = body.get("detail") if isinstance(body, dict) else None
    why = detail if isinstance(detail, str) else f"it answered {status}"
    return StreamInterrupted(
        f"the stream from {name} broke off after {offset} bytes ({cut}), and could not be read on: {why}"
    )


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: a number of seconds or an HTTP date
    (RFC 9110, 10.2.3); None when absent or unreadable, never below 0.

    >>> retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT")
    0.0
    """
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(moment.timestamp() - time.time(), 0.0)


def wait_before_retry(retry: int, *, retry_after: float | None, other_replica: bool) -> float:
    """Seconds to wait before retry number ``retry`` (1 for the first retry).

    Another replica the call has not tried is tried at once: a backoff or a ``Retry-After``
    is about the replica that failed. Else 0.05 s doubling per retry plus up to 0.05 s of
    jitter, capped at 2 s, and at least what ``Retry-After`` asked.
    """
    if other_replica:
        return 0.0
    exponential: float = FIRST_BACKOFF_SEC * 2.0 ** (retry - 1)
    backoff = min(exponential + _random.uniform(0, FIRST_BACKOFF_SEC), MAX_BACKOFF_SEC)
    return backoff if retry_after is None else max(backoff, retry_after)


def check_wait(name: str, seconds: float, remaining: float | None) -> None:
    """Raise :class:`DeadlineExceeded` when a wait of ``seconds`` would end past the caller's
    deadline (``remaining`` seconds from now; None: no deadline): better now than after it."""
    if remaining is not None and seconds >= remaining:
        raise DeadlineExceeded(
            f"{name} did not answer in time: the next retry would start after the caller's deadline"
        )


def invalid_arguments(name: str, errors: list[Any]) -> ErrorDetail:
    """The error a 422's validation errors are: a ``ValueError`` naming each invalid field."""
    lines = []
    for error in errors:
        if isinstance(error, dict):
            location = ".".join(str(part) for part in error.get("loc", ())) or "(body)"
            lines.append(f"{location}: {error.get('msg', 'invalid')}")
    message = f"invalid arguments for {name}.run_remote: " + "; ".join(lines)
    return ErrorDetail(exc_type="ValueError", exc_module="builtins", message=message, chainlet=name)


def answer_error(
    name: str,
    url: str,
    status: int,
    payload: bytes,
    headers: Mapping[str, str],
    *,
    unauthorized: str = "pass the chain's api_key",
) -> Exception:
    """The exception a non-200 answer of ``name`` at ``url`` is, for whoever called it.

    The callee's own error (a 500's ``{"error": ...}`` body, or an ``HTTPException``'s status)
    is a :class:`RemoteError` of its type; invalid arguments (422) a ``ValueError``; the
    retryable statuses :class:`DependencyUnavailable` (504: :class:`DeadlineExceeded`), with
    the ``Retry-After`` it gave; 401 says what to do (``unauthorized``).
    """
    retry_after = retry_after_seconds(headers.get("retry-after"))
    body = _json_or_none(payload)
    detail = body.get("detail") if isinstance(body, dict) else None
    if status == 422 and isinstance(detail, list):
        return RemoteError.from_detail(invalid_arguments(name, detail))
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        try:
            remote = RemoteError.from_detail(ErrorDetail.model_validate(body["error"]))
        except ValueError:  # pydantic's ValidationError is one
            pass
        else:
            if isinstance(remote, DependencyUnavailable):  # an overloaded chain's 503, passed on
                remote.retry_after = retry_after
            return remote
    reason = detail if detail is not None else payload[:300].decode("utf-8", "replace")
    if status in RETRY_STATUSES:
        if status == 504:
            return DeadlineExceeded(f"{name} at {url} answered 504: {reason}")
        error = DependencyUnavailable(f"{name} at {url} answered {status}: {reason}")
        error.retry_after = retry_after
        return error
    if status == 401:
        return ChainsRuntimeError(f"{name} at {url} refused the call (401 {reason}): {unauthorized}")
    return ChainsRuntimeError(f"{name} at {url} answered {status}: {reason}")


def _json_or_none(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        return None
