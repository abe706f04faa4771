"""A finished job's result, sent to its webhook: signed, and retried until it arrives.

The body is Baseten's async result, ``{"request_id", "chain_id", "type", "time", "data",
"errors"}``, and it is signed the way Baseten signs it: ``X-BASETEN-SIGNATURE: v1=<hex>``, the
HMAC-SHA256 of the raw body with the chain's webhook secret (``X-Chains-Signature`` carries
the same value). The body's ``time`` is when it was sent, so a receiver refuses replays by
comparing it with its own clock; :func:`verify` does both checks::

    from chains.jobs import webhook

    def receive(body: bytes, headers: dict[str, str], secret: str) -> dict:
        return webhook.verify(body, headers["x-baseten-signature"], secret, tolerance_sec=300)

Unlike Baseten, a result whose delivery keeps failing is not lost: it stays in the job store,
fetchable at ``GET /async_request/{id}/output``, until its retention runs out.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import datetime
from typing import Any

from chains.jobs.records import Job, JobStatus, iso_time

__all__ = ["SIGNATURE_HEADER", "WebhookRefused", "payload", "retry_delay", "sign", "verify"]

SIGNATURE_HEADER = "X-BASETEN-SIGNATURE"
CHAINS_SIGNATURE_HEADER = "X-Chains-Signature"
# Deliveries are retried with a doubling delay up to this, for as long as the job is kept.
MAX_RETRY_DELAY_SEC = 60.0


class WebhookRefused(ValueError):
    """A webhook body whose signature or time does not check out."""


def payload(job: Job, chain: str, *, now: float | None = None) -> bytes:
    """The body sent to ``job``'s webhook."""
    data: Any = (
        json.loads(job.output) if job.status is JobStatus.SUCCEEDED and job.output is not None else None
    )
    body = {
        "request_id": job.id,
        "chain_id": chain,
        "type": "async_request_completed",
        "status": job.status.value,
        "time": iso_time(time.time() if now is None else now),
        "data": data,
        "errors": [error.as_json() for error in job.errors],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def sign(body: bytes, secret: str) -> str:
    """The signature header's value for ``body``: ``v1=<hex HMAC-SHA256>``."""
    return "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, header: str, secret: str, *, tolerance_sec: float = 300.0) -> dict[str, Any]:
    """The webhook body, once its signature matches ``secret`` and its time is recent.

    >>> body = b'{"request_id":"r1","time":"2100-01-01T00:00:00Z","data":1}'
    >>> verify(body, sign(body, "s3cret"), "s3cret", tolerance_sec=1e12)["data"]
    1
    """
    expected = sign(body, secret)
    given = [part.strip() for part in header.split(",")]
    if not any(hmac.compare_digest(expected, part) for part in given):
        raise WebhookRefused("the webhook's signature does not match the secret")
    content: dict[str, Any] = json.loads(body)
    sent = datetime.fromisoformat(str(content.get("time", "")).replace("Z", "+00:00")).timestamp()
    if abs(time.time() - sent) > tolerance_sec:
        raise WebhookRefused(f"the webhook was sent at {content.get('time')}, outside the tolerance")
    return content


def retry_delay(attempts: int) -> float:
    """Seconds before the next delivery, after ``attempts`` failed ones: 1, 2, 4, ... 60."""
    return float(min(2 ** max(attempts - 1, 0), MAX_RETRY_DELAY_SEC))
