"""Chainlets with a memory bound (``Compute(memory=...)``) that go past it, leak up to it, or
leave a helper that escaped their process group (tests/reliability/test_memory_bounds.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import chains

BOUND = "192Mi"


class BoundedHog(chains.ChainletBase):
    remote_config = chains.RemoteConfig(compute=chains.Compute(memory=BOUND))

    async def run_remote(self, megabytes: int, touch: bool) -> int:
        if touch:  # taken for real, page by page: past a cgroup's bound the kernel kills it
            block = bytearray(megabytes * 1024 * 1024)
            block[::4096] = b"x" * len(block[::4096])
        else:  # address space only (calloc): nothing is taken until it is written
            bytes(megabytes * 1024 * 1024)
        return os.getpid()


class Leaky(chains.ChainletBase):
    """Keeps what each call asks for, as a cache that never forgets: once full, every call fails."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(memory=BOUND))

    def __init__(self) -> None:
        self._kept: list[bytes] = []

    async def run_remote(self, megabytes: int) -> list[int]:
        try:
            for _ in range(megabytes):
                self._kept.append(bytes(1024 * 1024))
        except MemoryError:
            # Full: a little is let go, so that the process can still answer (as a cache that
            # evicts too little), and the call fails as Python's own MemoryError, with no words.
            del self._kept[-2:]
            raise MemoryError() from None
        return [os.getpid(), len(self._kept)]


class Escaper(chains.ChainletBase):
    """Starts a helper in a session of its own, out of the chainlet's process group."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(memory="256Mi"))

    def __init__(self) -> None:
        self._helper = subprocess.Popen(["sleep", "600"], start_new_session=True)
        Path(os.environ["SUPERVISED_HELPER_DIR"], f"{os.getpid()}.helper").write_text(str(self._helper.pid))

    async def run_remote(self) -> list[int]:
        return [os.getpid(), self._helper.pid]
