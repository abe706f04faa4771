"""Every exception chains raises, and the error detail that carries a failure across hops.

The hierarchy (a builtin base in parentheses: ``except TimeoutError`` catches a
``DeadlineExceeded``)::

    Exception
    └── ChainsError                      every exception chains raises itself
        ├── ChainsUsageError             (ValueError) the chain, its configuration or an SDK call is wrong
        └── ChainsRuntimeError           (RuntimeError) something failed while a chain ran
            ├── StreamInterrupted        a stream stopped before its end frame
            ├── DependencyUnavailable    (ConnectionError) a dependency kept failing or refusing
            ├── DeadlineExceeded         (TimeoutError) a call ran out of time
            ├── StreamProtocolError      (ValueError) the bytes received are not a valid chains stream
            │   ├── FrameTooLarge        a frame over the reader's size limit
            │   ├── UnknownFrameKind     a frame kind this version does not know
            │   └── StreamSchemaMismatch the producer streams another schema (where it is read,
            │                            also a pydantic.ValidationError, as in Truss Chains)
            ├── BuildFailed              an image of a chainlet did not build
            ├── BatchSizeError           a batched body did not return one output per input
            ├── BatchQueueFull           too many calls wait for a batch (answered 503)
            ├── GenericRemoteException   a remote error of a type that is not rebuilt (Truss's name)
            └── RemoteError              raised by another chainlet, see below

A failure inside a chainlet travels to its caller as an :class:`ErrorDetail` (in a 500
response body or in a stream's error frame). The caller raises it as a :class:`RemoteError`
that is also an instance of the original type when that is a builtin or one of the classes
above, so ``except ValueError`` and ``except DeadlineExceeded`` keep working across any
number of hops; any other type (the user's own) arrives as a RemoteError that is also a
:class:`GenericRemoteException`. An ``HTTPException`` (Starlette's or FastAPI's) keeps its
status code and detail through every hop::

    try:
        await self._words.run_remote(text)
    except chains.DeadlineExceeded:   # raised two hops away
        ...
"""

from __future__ import annotations

import builtins
import os
import re
import sysconfig
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import pydantic

__all__ = [
    "BatchQueueFull",
    "BatchSizeError",
    "BuildFailed",
    "ChainsError",
    "ChainsRuntimeError",
    "ChainsUsageError",
    "DeadlineExceeded",
    "DependencyUnavailable",
    "ErrorDetail",
    "FrameTooLarge",
    "GenericRemoteException",
    "RemoteError",
    "StreamInterrupted",
    "StreamProtocolError",
    "StreamSchemaMismatch",
    "UnknownFrameKind",
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


class StreamProtocolError(ChainsRuntimeError, ValueError):
    """The bytes received are not a valid chains stream (malformed, or frames out of order)."""


class FrameTooLarge(StreamProtocolError):
    """A frame declared a length over the reader's ``max_frame_size``; it was refused unread."""


class UnknownFrameKind(StreamProtocolError):
    """A frame header carried a kind byte this version of chains does not know."""


class StreamSchemaMismatch(StreamProtocolError):
    """The producer's stream schema is not the one this reader was built for."""


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
        cause = _pip_cause(tail)
        # pip prints the requirement it could not find last of a long log: it leads here.
        headline = f"{cause} (pip; {reason})" if cause else reason
        super().__init__(
            f"the image of chainlet {chainlet} did not build: {headline}"
            + (f"\n--- last lines of its build ---\n{lines}" if lines else "")
        )
        self.chainlet = chainlet


_PIP_CAUSES = (
    re.compile(r"ERROR: (No matching distribution found for \S+)"),
    re.compile(r"ERROR: (Could not find a version that satisfies the requirement \S+.*)"),
    re.compile(r"ERROR: (ResolutionImpossible.*|Cannot install .+ because these package versions .+)"),
)


def _pip_cause(lines: Sequence[str]) -> str | None:
    """The line of a pip log that says why pip failed, if it says so plainly."""
    for pattern in _PIP_CAUSES:
        for line in reversed(lines):
            match = pattern.search(line)
            if match is not None:
                return match.group(1).strip()
    return None


class ErrorDetail(pydantic.BaseModel):
    """The wire form of an exception raised inside a chainlet.

    ``cause`` holds the detail of the remote error this one wraps, so a failure three hops
    deep arrives with the traceback of every hop. What leaves the chain for an outside caller
    is :meth:`public`: no tracebacks, and the request id to find them in the logs.
    """

    model_config = pydantic.ConfigDict(frozen=True)

    exc_type: str
    exc_module: str
    message: str
    traceback: str = ""
    chainlet: str = ""
    cause: ErrorDetail | None = None
    request_id: str = ""
    # The HTTP status the exception asked for (an HTTPException's status_code), which the
    # answer keeps at every hop: a 422 raised two hops down is a 422 at the entrypoint.
    status: int | None = None

    @classmethod
    def from_exception(cls, exc: BaseException, chainlet: str = "") -> ErrorDetail:
        """Describe ``exc`` as raised in ``chainlet``, keeping only the user's stack frames."""
        if isinstance(exc, RemoteError) and exc.detail is not None and exc.sent_as_is:
            return exc.detail
        cause = exc.detail if isinstance(exc, RemoteError) else None
        exc_type = type(exc)
        if isinstance(exc, RemoteError) and exc.detail is not None:
            # A remote error that was not caught keeps the type it had at its origin.
            name, module = exc.detail.exc_type, exc.detail.exc_module
        else:
            public = _public_type(exc_type)
            name, module = public.__qualname__, public.__module__
        message = exc.remote_message if isinstance(exc, RemoteError) else str(exc)
        if isinstance(exc, RemoteError):
            status = exc.detail.status if exc.detail is not None else None
        else:
            status = _http_status(exc)
            if status is not None:
                message = str(getattr(exc, "detail", "") or message)
        return cls(
            exc_type=name,
            exc_module=module,
            message=message,
            traceback=_user_traceback(exc),
            chainlet=chainlet,
            cause=cause,
            status=status,
        )

    def truss_fields(self) -> dict[str, Any]:
        """Truss Chains' ``RemoteErrorDetail`` fields for this failure, for callers that parse
        them: the type, its module, the message and the user's stack frames."""
        return {
            "exception_cls_name": self.exc_type,
            "exception_module_name": None if self.exc_module == "builtins" else self.exc_module,
            "exception_message": self.message,
            "user_stack_trace": [
                {"filename": file, "lineno": int(line), "name": name, "line": code or None}
                for file, line, name, code in _FRAME.findall(self.traceback)
            ],
        }

    def public(self, request_id: str = "") -> ErrorDetail:
        """What a caller outside the chain is shown of this failure: the type and message it
        had where it was raised, the chainlet that answered, and ``request_id``. Tracebacks
        (with the server's file paths) and the internal hops stay in the logs.

        >>> inner = ErrorDetail(exc_type="ValueError", exc_module="builtins", message="bad",
        ...                     traceback='  File "/srv/app.py", line 3', chainlet="Words")
        >>> outer = ErrorDetail(exc_type="ValueError", exc_module="builtins", message="bad",
        ...                     chainlet="Entry", cause=inner)
        >>> outer.public("r-1")
        ErrorDetail(exc_type='ValueError', exc_module='builtins', message='bad', traceback='', \
chainlet='Entry', cause=None, request_id='r-1')
        """
        return ErrorDetail(
            exc_type=self.exc_type,
            exc_module=self.exc_module,
            message=self.message,
            chainlet=self.chainlet,
            request_id=request_id or self.request_id,
            status=self.status,
        )

    def as_exception(self) -> RemoteError:
        """An exception that is reported as exactly this detail wherever it is raised (in an
        error frame, an SSE error event, a 500 body), instead of as a new hop wrapping it."""
        error = RemoteError.from_detail(self)
        error.sent_as_is = True
        return error

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
            if hop.traceback:
                body = hop.traceback.rstrip("\n")
            elif hop.request_id:
                body = f"  (traceback in the chain's logs, request id {hop.request_id})"
            else:
                body = "  (no user frames)"
            parts.append(f"--- in {where} ---\n{body}\n{hop.qualified_type}: {hop.message}")
        return "\n".join(parts)

    @property
    def qualified_type(self) -> str:
        if self.exc_module in ("builtins", ""):
            return self.exc_type
        return f"{self.exc_module}.{self.exc_type}"


class GenericRemoteException(ChainsRuntimeError):
    """What a remote error is an instance of when its type is neither a builtin nor one of
    chains' own (a class of the user's, say), as Truss Chains names it; the original type and
    module are in its ``detail``."""


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
    sent_as_is: bool = False  # see ErrorDetail.as_exception

    def __init__(self, message: str, detail: ErrorDetail | None = None) -> None:
        super().__init__(message)
        self.detail = detail
        self.remote_message = detail.message if detail is not None else message

    @classmethod
    def from_detail(cls, detail: ErrorDetail) -> RemoteError:
        """The exception to raise in the caller for ``detail``."""
        error_cls = _remote_class(detail.exc_module, detail.exc_type)
        message = f"{detail.qualified_type}: {detail.message}\n{detail.render()}"
        # Built by the __new__ of the class's C layout (OSError's for a ConnectionError, say):
        # error_cls.__new__ would find RuntimeError's first, which refuses to build an OSError.
        # Only RemoteError.__init__ runs: the original __init__ may want other arguments.
        new: Callable[..., RemoteError] = _layout(error_cls).__new__
        error = new(error_cls, message)
        RemoteError.__init__(error, message, detail)
        return error

    def __str__(self) -> str:
        # Some builtins (KeyError) would show a repr of the message instead.
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_remote_error, (self.detail, str(self)))


def _rebuild_remote_error(detail: ErrorDetail | None, message: str) -> RemoteError:
    return RemoteError.from_detail(detail) if detail is not None else RemoteError(message)


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, not in C


def _layout(cls: type) -> type:
    """The builtin class whose C layout ``cls`` has, the one whose ``__new__`` builds it."""
    while cls.__flags__ & _HEAP_TYPE and cls.__base__ is not None:
        cls = cls.__base__
    return cls


def _chains_errors() -> Iterator[type[ChainsError]]:
    """Every public exception class of this module, in the order of ``__all__``."""
    for name in __all__:
        value = globals()[name]
        if isinstance(value, type) and issubclass(value, ChainsError):
            yield value


@cache
def _remote_class(module: str, name: str) -> type[RemoteError]:
    """A RemoteError subclass that is also the original type: a builtin, or one of ours
    (so ``except StreamInterrupted`` holds for a stream that broke two hops away)."""
    if module == "builtins":
        base = getattr(builtins, name, None)
    elif module == __name__ or module.startswith("chains."):
        # Any chains module: a peer of an older version may name where a class used to live.
        base = next((cls for cls in _chains_errors() if cls.__name__ == name), None)
    else:
        return _RemoteGeneric
    if not (isinstance(base, type) and issubclass(base, Exception)) or issubclass(base, RemoteError):
        return _RemoteGeneric
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


class _RemoteGeneric(RemoteError, GenericRemoteException):
    """A remote error of a type that is not rebuilt here."""

    __module__ = "chains.errors"


# One frame of a traceback as traceback.format_list writes it: file, line, function, code.
_FRAME = re.compile(r'^  File "(.*)", line (\d+), in (.*)\n(?:    (.*)\n)?', re.MULTILINE)


def _public_type(cls: type) -> type:
    """The class an exception is named by on the wire: itself, or for a private class of chains
    (a StreamSchemaMismatch that is also a pydantic ValidationError, say) its first public
    base, which the caller can rebuild. The user's own private classes keep their names."""
    for base in cls.__mro__:
        if not (base.__module__.startswith("chains.") and base.__name__.startswith("_")):
            return base
    return cls


def _http_status(exc: BaseException) -> int | None:
    """The status of an HTTPException (Starlette's, or FastAPI's, which is one), known by its
    attributes so that neither needs importing."""
    status = getattr(exc, "status_code", None)
    module = type(exc).__module__
    if isinstance(status, int) and 400 <= status <= 599 and module.startswith(("starlette.", "fastapi.")):
        return status
    return None


def _user_traceback(exc: BaseException) -> str:
    """The formatted frames of ``exc`` that belong to user code, not to chains or libraries."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if _is_user_frame(frame.filename)]
    return "".join(traceback.format_list(frames))


# Generated stubs live in this package of each generated chainlet (codegen's STUBS_PACKAGE):
# their frames are the call's machinery, not the user's code.
_GENERATED_STUBS = os.sep + "chains_stubs" + os.sep


def _is_user_frame(filename: str) -> bool:
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE_DIR + os.sep) or path.startswith(_LIBRARY_DIRS) or _GENERATED_STUBS in path:
        return False
    return "site-packages" not in path and not filename.startswith("<frozen")
