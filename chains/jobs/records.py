"""What an async call is: the request Baseten's async API takes, and the job it becomes.

The request body and the status answer have Baseten's shape (``model_input``,
``webhook_endpoint``, ``priority``, ``max_time_in_queue_seconds``, ``inference_retry_config``;
``request_id``, ``status``, ``webhook_status``, ``errors``), so code written against Baseten's
async inference works unchanged; see docs/jobs.md.

>>> request = AsyncRequest.model_validate({"model_input": {"names": ["Ada"]}, "priority": 1})
>>> request.priority, request.retry.max_attempts
(1, 1)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pydantic

from chains.errors import ErrorDetail

__all__ = [
    "MAX_QUEUE_SECONDS",
    "AsyncRequest",
    "Job",
    "JobError",
    "JobStatus",
    "RetryConfig",
    "WebhookStatus",
    "iso_time",
]

# Baseten lets a request wait in the queue for up to 72 hours; the same bound here.
MAX_QUEUE_SECONDS = 72 * 3600


class JobStatus(enum.Enum):
    """Where a job is. The terminal ones never change again."""

    QUEUED = "QUEUED"
    IN_PROGRESS = "IN_PROGRESS"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    EXPIRED = "EXPIRED"
    CANCELED = "CANCELED"

    @property
    def is_terminal(self) -> bool:
        return self not in (JobStatus.QUEUED, JobStatus.IN_PROGRESS)


class WebhookStatus(enum.Enum):
    """Whether the job's result reached its webhook."""

    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    NO_WEBHOOK_PROVIDED = "NO_WEBHOOK_PROVIDED"


class RetryConfig(pydantic.BaseModel):
    """Baseten's ``inference_retry_config``: how often a failed job runs again, and when.

    A job whose body raised, or whose chainlet died while running it, runs again after
    ``initial_delay_ms``, doubling up to ``max_delay_ms``, until it has run ``max_attempts``
    times in all.
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    max_attempts: int = pydantic.Field(default=1, ge=1, le=10)
    initial_delay_ms: int = pydantic.Field(default=1000, ge=0, le=10_000)
    max_delay_ms: int = pydantic.Field(default=5000, ge=0, le=60_000)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        base: float = self.initial_delay_ms * 2 ** max(attempt - 1, 0)
        return min(base, max(self.max_delay_ms, self.initial_delay_ms)) / 1000


class AsyncRequest(pydantic.BaseModel):
    """The body of ``POST /async_run_remote``."""

    model_config = pydantic.ConfigDict(extra="forbid", populate_by_name=True)

    model_input: dict[str, Any]
    webhook_endpoint: str | None = None
    priority: int = pydantic.Field(default=0, ge=0, le=2)
    max_time_in_queue_seconds: int = pydantic.Field(default=600, ge=10, le=MAX_QUEUE_SECONDS)
    retry: RetryConfig = pydantic.Field(default_factory=RetryConfig, alias="inference_retry_config")

    @pydantic.field_validator("webhook_endpoint")
    @classmethod
    def _webhook_is_http(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("webhook_endpoint must be an http:// or https:// URL")
        return value


@dataclass(frozen=True)
class JobError:
    """One entry of a status answer's ``errors``: a code and a message, as Baseten gives them.

    ``detail`` is the failure as ``POST /run_remote`` would have answered it (its
    ``ErrorDetail``, in the form the caller may see), when the body raised: with it a client
    raises the job's error as the same ``RemoteError`` a call raises (``chains.client``).
    """

    code: str
    message: str
    detail: ErrorDetail | None = None

    def as_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.detail is not None:
            shown["detail"] = self.detail.model_dump(mode="json")
        return shown

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> JobError:
        detail = value.get("detail")
        return cls(
            str(value["code"]),
            str(value["message"]),
            ErrorDetail.model_validate(detail) if detail is not None else None,
        )


@dataclass(frozen=True)
class Job:
    """One stored async call, as the store returns it."""

    id: str
    status: JobStatus
    priority: int
    created: float
    status_at: float
    queue_deadline: float
    model_input: bytes
    webhook: str | None
    webhook_status: WebhookStatus
    retry: RetryConfig
    attempts: int = 0
    output: bytes | None = None
    errors: tuple[JobError, ...] = field(default=())
    cancel_requested: bool = False
    webhook_attempts: int = 0
    streams: bool = False  # its result is a stream of events (GET /async_request/{id}/events)
    events: int = 0  # how many events it has streamed so far

    def status_json(self, chain: str) -> dict[str, Any]:
        """The answer of ``GET /async_request/{id}``: Baseten's fields, then chains' own."""
        return {
            "request_id": self.id,
            "chain_id": chain,
            "status": self.status.value,
            "webhook_status": self.webhook_status.value,
            "created_at": iso_time(self.created),
            "status_at": iso_time(self.status_at),
            "errors": [error.as_json() for error in self.errors],
            "priority": self.priority,
            "attempts": self.attempts,
            "max_attempts": self.retry.max_attempts,
            "webhook_attempts": self.webhook_attempts,
            **({"events": self.events} if self.streams else {}),
        }


def iso_time(seconds: float) -> str:
    """A Unix time as ISO 8601 in UTC, as Baseten writes its times."""
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")
