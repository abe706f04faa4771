"""The exception classes chains raises itself, drawn in ``chains.errors``' docstring.

A builtin base says what a class also is (``except TimeoutError`` catches a
``DeadlineExceeded``). The class that carries a failure across hops, ``RemoteError``, lives with
the wire form it is built from (``chains.errors.detail``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chains.errors.pip_log import pip_cause

__all__ = [
    "BatchQueueFull",
    "BatchSizeError",
    "BuildFailed",
    "ChainsError",
    "ChainsRuntimeError",
    "ChainsUsageError",
    "DeadlineExceeded",
    "DependencyUnavailable",
    "FrameTooLarge",
    "GenericRemoteException",
    "JobCanceled",
    "JobExpired",
    "JobFailedError",
    "JobTimeout",
    "StreamInterrupted",
    "StreamProtocolError",
    "StreamSchemaMismatch",
    "UnknownFrameKind",
    "Violation",
]


class ChainsError(Exception):
    """Base class of every exception chains raises itself."""


@dataclass(frozen=True)
class Violation:
    """One broken rule found by the static checks: where, what, and how to fix it."""

    path: str
    line: int
    where: str
    message: str

    def __str__(self) -> str:
        location = f"{self.path}:{self.line}"
        return f"{location} ({self.where}): {self.message}" if self.where else f"{location}: {self.message}"


class ChainsUsageError(ChainsError, ValueError):
    """The chain, its configuration or a call into the SDK is wrong; the message says how to fix it.

    Static checks collect every violation they find and raise them together::

        try:
            chains.load_chain("chain.py")
        except chains.ChainsUsageError as exc:
            for violation in exc.violations:
                print(violation)
    """

    # A class default, so that one rebuilt from another chainlet's error detail has it too.
    violations: tuple[Violation, ...] = ()

    def __init__(self, message: str = "", violations: Sequence[Violation] = ()) -> None:
        # Sorted as they stand in the source: the order a person fixes them in.
        self.violations: tuple[Violation, ...] = tuple(sorted(violations, key=lambda v: (v.path, v.line)))
        if not message:
            count = len(self.violations)
            lines = "\n".join(f"  {v}" for v in self.violations)
            message = f"{count} problem{'s' if count != 1 else ''} found in the chain:\n{lines}"
        super().__init__(message)


class ChainsRuntimeError(ChainsError, RuntimeError):
    """Something went wrong while a chain was running."""


class StreamInterrupted(ChainsRuntimeError):
    """A stream stopped before its end frame: what arrived is incomplete, never a full result."""


class DependencyUnavailable(ChainsRuntimeError, ConnectionError):
    """A dependency could not be reached, or kept answering 429/502/503, through every retry.

    ``retry_after`` is the wait in seconds the dependency asked for in its last answer, if any.
    """

    retry_after: float | None = None


class DeadlineExceeded(ChainsRuntimeError, TimeoutError):
    """A call ran out of time: its own ``timeout_sec`` or the caller's remaining deadline."""


class JobFailedError(ChainsRuntimeError):
    """An async job ended without a result, and without an error of its body to raise in its
    place (that one is raised as a call raises it): its worker was lost, for instance.
    ``job_id`` names it, ``reasons`` holds its errors' (code, message) pairs."""

    job_id: str = ""
    reasons: tuple[tuple[str, str], ...] = ()


class JobCanceled(JobFailedError):
    """An async job was canceled before it had a result."""


class JobExpired(JobFailedError):
    """An async job waited in the queue longer than its ``max_time_in_queue_seconds``."""


class JobTimeout(ChainsRuntimeError, TimeoutError):
    """Waiting for an async job's result ran out while the job was still queued or running;
    the job goes on (``job_id`` names it)."""

    job_id: str = ""


class StreamProtocolError(ChainsRuntimeError, ValueError):
    """The bytes received are not a valid chains stream (malformed, or frames out of order)."""


class FrameTooLarge(StreamProtocolError):
    """A frame declared a length over the reader's ``max_frame_size``; it was refused unread."""


class UnknownFrameKind(StreamProtocolError):
    """A frame header carried a kind byte this version of chains does not know."""


class StreamSchemaMismatch(StreamProtocolError):
    """The producer's stream schema is not the one this reader was built for.

    Where the stream is read, the error raised is also a ``pydantic.ValidationError``
    (``chains.streaming.schema.schema_mismatch``), as Truss Chains' readers raise for items of
    another model.
    """


class BatchSizeError(ChainsRuntimeError):
    """A ``@chains.batched`` body returned something other than one output per input; every
    call of that batch fails with it."""


class BatchQueueFull(ChainsRuntimeError):
    """A batched chainlet holds as many calls waiting for a batch as it may; the server
    answers 503 with ``Retry-After``."""


class BuildFailed(ChainsRuntimeError):
    """An image did not build; the message holds the last lines of its build."""

    chainlet: str = ""

    def __init__(self, chainlet: str, reason: str, tail: Sequence[str] = ()) -> None:
        lines = "\n".join(tail)
        cause = pip_cause(tail)
        # pip prints the requirement it could not find last of a long log: it leads here.
        headline = f"{cause} (pip; {reason})" if cause else reason
        super().__init__(
            f"the image of chainlet {chainlet} did not build: {headline}"
            + (f"\n--- last lines of its build ---\n{lines}" if lines else "")
        )
        self.chainlet = chainlet


class GenericRemoteException(ChainsRuntimeError):
    """What a remote error is an instance of when its type is neither a builtin nor one of
    chains' own (a class of the user's, say), as Truss Chains names it; the original type and
    module are in its ``detail``."""
