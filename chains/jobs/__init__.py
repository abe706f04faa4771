"""Durable async calls: jobs kept in a store, run by the entrypoint's workers, their results
delivered to signed webhooks and kept fetchable (docs/jobs.md).

>>> from chains.jobs import JobStatus
>>> JobStatus.SUCCEEDED.is_terminal
True
"""

from chains.jobs.records import AsyncRequest, Job, JobError, JobStatus, RetryConfig, WebhookStatus
from chains.jobs.sqlite_store import SqliteJobStore
from chains.jobs.store import JobLimits, JobRefused, JobStore
from chains.jobs.webhook import WebhookRefused, sign, verify

__all__ = [
    "AsyncRequest",
    "Job",
    "JobError",
    "JobLimits",
    "JobRefused",
    "JobStatus",
    "JobStore",
    "RetryConfig",
    "SqliteJobStore",
    "WebhookRefused",
    "WebhookStatus",
    "sign",
    "verify",
]
