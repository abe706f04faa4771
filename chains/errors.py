"""Exceptions raised by chains, and the error detail that carries a failure across hops.

A failure inside a chainlet travels to its caller as an :class:`ErrorDetail` (in a 500
response body or in a stream's error frame). The caller raises it as a :class:`RemoteError`
that is also an instance of the original builtin exception type, so ``except ValueError``
keeps working across the network.
"""

from __future__ import annotations

import builtins
import os
import sysconfig
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import pydantic

__all__ = [
    "ChainsError",
    "ChainsRuntimeError",
    "ChainsUsageError",
    "DeadlineExceeded",
    "DependencyUnavailable",
    "ErrorDetail",
    "RemoteError",
    "StreamInterrupted",
    "Violation",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_DIRS = tuple(
    os.path.abspath(sysconfig.get_paths()[key]) + os.sep
    for key in ("stdlib", "platstdlib", "purelib", "platlib")
)


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


class ChainsUsageError(ChainsError):
    """The chain, its configuration or a call into the SDK is wrong; the message says how to fix it.

    Static checks collect every violation they find and raise them together::

        try:
            chains.load_chain("chain.py")
        except chains.ChainsUsageError as exc:
            for violation in exc.violations:
                print(violation)
    """

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
    """A dependency could not be reached, or kept answering 429/502/503, through every retry."""


class DeadlineExceeded(ChainsRuntimeError, TimeoutError):
    """A call ran out of time: its own ``timeout_sec`` or the caller's remaining deadline."""


class ErrorDetail(pydantic.BaseModel):
    """The wire form of an exception raised inside a chainlet.

    ``cause`` holds the detail of the remote error this one wraps, so a failure three hops
    deep arrives with the traceback of every hop.
    """

    model_config = pydantic.ConfigDict(frozen=True)

    exc_type: str
    exc_module: str
    message: str
    traceback: str = ""
    chainlet: str = ""
    cause: ErrorDetail | None = None

    @classmethod
    def from_exception(cls, exc: BaseException, chainlet: str = "") -> ErrorDetail:
        """Describe ``exc`` as raised in ``chainlet``, keeping only the user's stack frames."""
        cause = exc.detail if isinstance(exc, RemoteError) else None
        exc_type = type(exc)
        if isinstance(exc, RemoteError) and exc.detail is not None:
            # A remote error that was not caught keeps the type it had at its origin.
            name, module = exc.detail.exc_type, exc.detail.exc_module
        else:
            name, module = exc_type.__qualname__, exc_type.__module__
        message = exc.remote_message if isinstance(exc, RemoteError) else str(exc)
        return cls(
            exc_type=name,
            exc_module=module,
            message=message,
            traceback=_user_traceback(exc),
            chainlet=chainlet,
            cause=cause,
        )

    def hops(self) -> list[ErrorDetail]:
        """This detail and the ones it wraps, outermost first."""
        chain: list[ErrorDetail] = []
        detail: ErrorDetail | None = self
        while detail is not None:
            chain.append(detail)
            detail = detail.cause
        return chain

    def render(self) -> str:
        """The traceback of every hop, innermost last, as a person reads them."""
        parts = []
        for hop in self.hops():
            where = f"chainlet {hop.chainlet}" if hop.chainlet else "remote"
            body = hop.traceback.rstrip("\n") or "  (no user frames)"
            parts.append(f"--- in {where} ---\n{body}\n{hop.qualified_type}: {hop.message}")
        return "\n".join(parts)

    @property
    def qualified_type(self) -> str:
        if self.exc_module in ("builtins", ""):
            return self.exc_type
        return f"{self.exc_module}.{self.exc_type}"


class RemoteError(ChainsRuntimeError):
    """An exception raised by another chainlet (or its own server) while serving this call.

    Built with :meth:`from_detail`, it is also an instance of the original exception type when
    that is a builtin, so callers can keep their usual ``except`` clauses::

        try:
            await self._words.run_remote(text)
        except ValueError as exc:      # raised as ValueError two hops away
            print(exc.detail.chainlet)
    """

    detail: ErrorDetail | None

    def __init__(self, message: str, detail: ErrorDetail | None = None) -> None:
        super().__init__(message)
        self.detail = detail
        self.remote_message = detail.message if detail is not None else message

    @classmethod
    def from_detail(cls, detail: ErrorDetail) -> RemoteError:
        """The exception to raise in the caller for ``detail``."""
        error_cls = _remote_class(detail.exc_module, detail.exc_type)
        message = f"{detail.qualified_type}: {detail.message}\n{detail.render()}"
        error = error_cls.__new__(error_cls, message)
        RemoteError.__init__(error, message, detail)
        return error

    def __str__(self) -> str:
        # Some builtins (KeyError) would show a repr of the message instead.
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_remote_error, (self.detail, str(self)))


def _rebuild_remote_error(detail: ErrorDetail | None, message: str) -> RemoteError:
    return RemoteError.from_detail(detail) if detail is not None else RemoteError(message)


@cache
def _remote_class(module: str, name: str) -> type[RemoteError]:
    """A RemoteError subclass that is also the original type: a builtin, or one of ours
    (so ``except StreamInterrupted`` holds for a stream that broke two hops away)."""
    if module == "builtins":
        base = getattr(builtins, name, None)
    elif module == __name__:
        base = globals().get(name)
    else:
        return RemoteError
    if not (isinstance(base, type) and issubclass(base, Exception)) or issubclass(base, RemoteError):
        return RemoteError
    try:
        # The builtin goes first so that its __new__ (e.g. OSError's) builds the instance.
        namespace = {
            "__module__": __name__,
            "__str__": RemoteError.__str__,
            "__reduce__": RemoteError.__reduce__,
        }
        return type(f"Remote{name}", (base, RemoteError), namespace)
    except TypeError:  # a builtin whose C layout cannot be mixed in
        return RemoteError


def _user_traceback(exc: BaseException) -> str:
    """The formatted frames of ``exc`` that belong to user code, not to chains or libraries."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if _is_user_frame(frame.filename)]
    return "".join(traceback.format_list(frames))


def _is_user_frame(filename: str) -> bool:
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE_DIR + os.sep) or path.startswith(_LIBRARY_DIRS):
        return False
    return "site-packages" not in path and not filename.startswith("<frozen")
