"""A failure inside a chainlet as it travels to its caller: :class:`ErrorDetail` on the wire
(a 500 response body, a stream's error frame), :class:`RemoteError` where it is raised again.

The detail of a failure that was itself a remote error keeps the detail it wraps as its
``cause``, so the caller of a chain sees the traceback of every hop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic

from chains.errors.hierarchy import ChainsRuntimeError, GenericRemoteException
from chains.errors.rebuild import PUBLIC_MODULE, layout, remote_class
from chains.errors.tracebacks import user_traceback

__all__ = ["ErrorDetail", "RemoteError"]


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
            traceback=user_traceback(exc),
            chainlet=chainlet,
            cause=cause,
            status=status,
        )

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
chainlet='Entry', cause=None, request_id='r-1', status=None)
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
        error_cls = remote_class(detail.exc_module, detail.exc_type, RemoteError, _RemoteGeneric)
        message = f"{detail.qualified_type}: {detail.message}\n{detail.render()}"
        # Built by the __new__ of the class's C layout (OSError's for a ConnectionError, say):
        # error_cls.__new__ would find RuntimeError's first, which refuses to build an OSError.
        # Only RemoteError.__init__ runs: the original __init__ may want other arguments.
        new: Callable[..., RemoteError] = layout(error_cls).__new__
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


class _RemoteGeneric(RemoteError, GenericRemoteException):
    """A remote error of a type that is not rebuilt here."""

    __module__ = PUBLIC_MODULE


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
