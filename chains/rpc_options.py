"""How a stub calls its service: retries, timeout, concurrency limit and wire format.

One options type, :class:`StubOptions`, serves both kinds of stub: a chainlet's dependency
(built from the arguments of ``chains.depends``) and a deployed model called by URL::

    llm = LLM.from_url(url, context, options=chains.StubOptions(retries=3, timeout_sec=30))

Truss Chains' name for it, an alias of the same class, is in ``chains.truss_compat.names``;
the class is named ``StubOptions`` in messages, reprs and these docs.

It depends on nothing in chains but the errors, so that the deployment context can carry
options without loading the HTTP clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from chains.errors import ChainsUsageError

__all__ = [
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT_SEC",
    "CallOptions",
    "StubOptions",
    "option_problems",
]

DEFAULT_RETRIES = 2
DEFAULT_TIMEOUT_SEC = 600.0


def option_problems(
    retries: object,
    timeout_sec: object,
    concurrency_limit: object,
    use_binary: object,
    retry_user_errors: object,
) -> list[str]:
    """What is wrong with these call options, in plain words (empty when nothing is)."""
    found = []
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        found.append(f"retries must be a whole number >= 0, got {retries!r}")
    if isinstance(timeout_sec, bool) or not isinstance(timeout_sec, int | float) or not timeout_sec > 0:
        found.append(f"timeout_sec must be a number > 0, got {timeout_sec!r}")
    limit = concurrency_limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        found.append(f"concurrency_limit must be a whole number >= 1 or None, got {limit!r}")
    if not isinstance(use_binary, bool):
        found.append(f"use_binary must be True or False, got {use_binary!r}")
    if not isinstance(retry_user_errors, bool):
        found.append(f"retry_user_errors must be True or False, got {retry_user_errors!r}")
    return found


class CallOptions(Protocol):
    """What ``chains.depends(...)`` records (``chains.model.DependencyMarker``): the options'
    fields, read by :meth:`StubOptions.from_marker` without importing the data model."""

    @property
    def retries(self) -> int: ...
    @property
    def timeout_sec(self) -> float: ...
    @property
    def concurrency_limit(self) -> int | None: ...
    @property
    def use_binary(self) -> bool: ...
    @property
    def retry_user_errors(self) -> bool: ...


@dataclass(frozen=True)
class StubOptions:
    """How a stub calls: ``chains.depends(...)`` arguments, or set by hand.

    ``retries`` counts the attempts after the first one (Truss Chains counts attempts).

    >>> StubOptions(retries=3, timeout_sec=30).concurrency_limit is None
    True
    """

    retries: int = DEFAULT_RETRIES
    timeout_sec: float = DEFAULT_TIMEOUT_SEC
    concurrency_limit: int | None = None
    use_binary: bool = False  # MessagePack instead of JSON for arguments and unary results
    # Truss Chains' semantics: an exception raised by the callee is retried too (off by
    # default: a user error usually fails the same way again, and the callee's side effects
    # would repeat). ``depends(retry_user_errors=True)`` or CHAINS_RETRY_USER_ERRORS=1.
    retry_user_errors: bool = False

    def __post_init__(self) -> None:
        problems = option_problems(
            self.retries, self.timeout_sec, self.concurrency_limit, self.use_binary, self.retry_user_errors
        )
        if problems:
            raise ChainsUsageError(f"{type(self).__name__}: {'; '.join(problems)}")

    @classmethod
    def from_marker(cls, marker: CallOptions, *, retry_user_errors: bool = False) -> StubOptions:
        return cls(
            marker.retries,
            marker.timeout_sec,
            marker.concurrency_limit,
            marker.use_binary,
            retry_user_errors or marker.retry_user_errors,
        )
