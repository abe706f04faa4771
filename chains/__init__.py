"""chains: build and run multi-service chains of typed, streaming Python services.

import chains

class Upper(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        return text.upper()

@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, upper: Upper = chains.depends(Upper)) -> None:
        self._upper = upper

    async def run_remote(self, text: str) -> str:
        return await self._upper.run_remote(text)
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from chains.batching import batched
from chains.chainlet import ChainletBase, ModelBase, depends, depends_context, mark_entrypoint
from chains.config import (
    Assets,
    Autoscale,
    BasetenImage,
    ChainletOptions,
    Compute,
    CustomImage,
    DockerImage,
    RemoteConfig,
    make_abs_path_here,
)
from chains.context import DeployedServiceDescriptor, DeploymentContext
from chains.errors import (
    BatchSizeError,
    BuildFailed,
    ChainsError,
    ChainsRuntimeError,
    ChainsUsageError,
    DeadlineExceeded,
    DependencyUnavailable,
    GenericRemoteException,
    RemoteError,
    StreamInterrupted,
    StreamProtocolError,
)
from chains.routes import Header, HTTPError, Query, route
from chains.rpc_options import StubOptions
from chains.streaming import SSE, StreamTypes, stream_reader, stream_types, stream_writer
from chains.truss_compat.names import RPCOptions, baseten_only_message
from chains.websocket.protocol import WebSocketProtocol

if TYPE_CHECKING:
    from chains.deploy import StreamContents
    from chains.local import run_local
    from chains.stubs import StubBase
    from chains.truss_compat.push import push
    from chains.websocket.disconnect import WebSocketDisconnect

__version__ = "0.1.0"

# Names imported on first use, so that `import chains` stays light: a chain file or a client
# does not pay for the deploy machinery (targets, the docker SDK), nor for the HTTP clients of
# the stubs, unless it uses them. A chainlet server imports what it serves with directly.
_LAZY = {
    "StreamContents": "chains.deploy",
    "StubBase": "chains.stubs",
    # Truss Chains' push (its chain name by position, its Baseten-only options), which maps
    # onto chains.deploy.push: Truss files call chains.push so.
    "push": "chains.truss_compat.push",
    "run_local": "chains.local",
    # imports starlette when it is installed (to subclass its exception): not for every chain file
    "WebSocketDisconnect": "chains.websocket.disconnect",
}

__all__ = [
    "SSE",
    "Assets",
    "Autoscale",
    "BasetenImage",
    "BatchSizeError",
    "BuildFailed",
    "ChainletBase",
    "ChainletOptions",
    "ChainsError",
    "ChainsRuntimeError",
    "ChainsUsageError",
    "Compute",
    "CustomImage",
    "DeadlineExceeded",
    "DependencyUnavailable",
    "DeployedServiceDescriptor",
    "DeploymentContext",
    "DockerImage",
    "GenericRemoteException",
    "HTTPError",
    "Header",
    "ModelBase",
    "Query",
    "RPCOptions",
    "RemoteConfig",
    "RemoteError",
    "StreamContents",
    "StreamInterrupted",
    "StreamProtocolError",
    "StreamTypes",
    "StubBase",
    "StubOptions",
    "WebSocketDisconnect",
    "WebSocketProtocol",
    "batched",
    "depends",
    "depends_context",
    "make_abs_path_here",
    "mark_entrypoint",
    "push",
    "route",
    "run_local",
    "stream_reader",
    "stream_types",
    "stream_writer",
]


# What the protocol and the checks use, kept out of the names a chain file writes: each is
# imported from chains.errors, which the refusal below names.
_ERRORS_ONLY = frozenset(
    {
        "BatchQueueFull",
        "ErrorDetail",
        "FrameTooLarge",
        "JobCanceled",
        "JobExpired",
        "JobFailedError",
        "JobTimeout",
        "StreamSchemaMismatch",
        "UnknownFrameKind",
        "Violation",
    }
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        if name in _ERRORS_ONLY:
            raise AttributeError(
                f"module 'chains' has no attribute {name!r}: it is chains.errors.{name}, with the "
                f"errors of the protocol and the checks (from chains.errors import {name})",
                name=name,
                obj=sys.modules[__name__],
            )
        refusal = baseten_only_message(name)
        if refusal is not None:
            raise ChainsUsageError(refusal)
        raise AttributeError(f"module 'chains' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
