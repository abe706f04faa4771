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

from chains.chainlet import ChainletBase, depends, depends_context, mark_entrypoint
from chains.config import Assets, Autoscale, ChainletOptions, Compute, DockerImage, RemoteConfig
from chains.context import DeploymentContext
from chains.deploy import push
from chains.errors import (
    ChainsRuntimeError,
    ChainsUsageError,
    DeadlineExceeded,
    RemoteError,
    StreamInterrupted,
)
from chains.local import run_local
from chains.streaming import SSE, StreamTypes, stream_reader, stream_types, stream_writer
from chains.stubs import StubBase

__version__ = "0.1.0"

__all__ = [
    "SSE",
    "Assets",
    "Autoscale",
    "ChainletBase",
    "ChainletOptions",
    "ChainsRuntimeError",
    "ChainsUsageError",
    "Compute",
    "DeadlineExceeded",
    "DeploymentContext",
    "DockerImage",
    "RemoteConfig",
    "RemoteError",
    "StreamInterrupted",
    "StreamTypes",
    "StubBase",
    "depends",
    "depends_context",
    "mark_entrypoint",
    "push",
    "run_local",
    "stream_reader",
    "stream_types",
    "stream_writer",
]
