"""Every exception chains raises, and the error detail that carries a failure across hops.

The hierarchy (a builtin base in parentheses: ``except TimeoutError`` catches a
``DeadlineExceeded``; a name marked ``*`` is only here, not at the top of ``chains``)::

    Exception
    └── ChainsError                      every exception chains raises itself
        ├── ChainsUsageError             (ValueError) the chain, its configuration or an SDK call is wrong
        └── ChainsRuntimeError           (RuntimeError) something failed while a chain ran
            ├── StreamInterrupted        a stream stopped before its end frame
            ├── DependencyUnavailable    (ConnectionError) a dependency kept failing or refusing
            ├── DeadlineExceeded         (TimeoutError) a call ran out of time
            ├── JobFailedError *         an async job ended without a result (chains.client)
            │   ├── JobCanceled *        it was canceled
            │   └── JobExpired *         it waited in the queue too long
            ├── JobTimeout *             (TimeoutError) a wait for a job's result ran out
            ├── StreamProtocolError      (ValueError) the bytes received are not a valid chains stream
            │   ├── FrameTooLarge *      a frame over the reader's size limit
            │   ├── UnknownFrameKind *   a frame kind this version does not know
            │   └── StreamSchemaMismatch *
            │                            the producer streams another schema (where it is read,
            │                            also a pydantic.ValidationError, as in Truss Chains)
            ├── BuildFailed              an image of a chainlet did not build
            ├── BatchSizeError           a batched body did not return one output per input
            ├── BatchQueueFull *         too many calls wait for a batch (answered 503)
            ├── GenericRemoteException   a remote error of a type that is not rebuilt (Truss's name)
            └── RemoteError              raised by another chainlet, see below

    ErrorDetail *                        the wire form of a failure (a pydantic model)
    Violation *                          one broken rule found by the checks (ChainsUsageError.violations)

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

The modules, one concept each: ``hierarchy`` (the classes), ``detail`` (ErrorDetail and
RemoteError), ``rebuild`` (the class a remote error is raised as), ``tracebacks`` (the user's
frames of a traceback) and ``pip_log`` (why pip failed, for BuildFailed).
"""

from __future__ import annotations

from chains.errors.detail import ErrorDetail, RemoteError
from chains.errors.hierarchy import (
    BatchQueueFull,
    BatchSizeError,
    BuildFailed,
    ChainsError,
    ChainsRuntimeError,
    ChainsUsageError,
    DeadlineExceeded,
    DependencyUnavailable,
    FrameTooLarge,
    GenericRemoteException,
    JobCanceled,
    JobExpired,
    JobFailedError,
    JobTimeout,
    StreamInterrupted,
    StreamProtocolError,
    StreamSchemaMismatch,
    UnknownFrameKind,
    Violation,
)
from chains.errors.rebuild import PUBLIC_MODULE

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
    "JobCanceled",
    "JobExpired",
    "JobFailedError",
    "JobTimeout",
    "RemoteError",
    "StreamInterrupted",
    "StreamProtocolError",
    "StreamSchemaMismatch",
    "UnknownFrameKind",
    "Violation",
]

# Each class is named where users import it from: in tracebacks, in the type an error detail
# sends to a peer (which rebuilds it by that name), and for pickle.
for _name in __all__:
    globals()[_name].__module__ = PUBLIC_MODULE
del _name
