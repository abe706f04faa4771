"""Chains whose chainlets hang, block their loop, crash in a loop or leave helpers behind:
what the supervisor has to notice (tests/reliability/test_supervisor_notices.py).

Which fault a chainlet shows is switched by files the test creates (paths in the
environment), so that a restarted process shows it, or stops showing it, as the test says.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import chains


class Doubler(chains.ChainletBase):
    def __init__(self) -> None:
        # The test creates this file to make every later start fail (a crash loop).
        flag = os.environ.get("SUPERVISED_BROKEN_FLAG", "")
        if flag and os.path.exists(flag):
            raise RuntimeError("the model weights are gone")

    async def run_remote(self, x: int) -> list[int]:
        await asyncio.sleep(0.005)
        return [2 * x, os.getpid()]


class DoublerEntry(chains.ChainletBase):
    def __init__(self, doubler: Doubler = chains.depends(Doubler)) -> None:
        self._doubler = doubler

    async def run_remote(self, x: int) -> list[int]:
        return await self._doubler.run_remote(x)


class Blocker(chains.ChainletBase):
    async def run_remote(self, seconds: float) -> int:
        if seconds:
            time.sleep(seconds)  # the bug under test: a blocking call in an async body
        return os.getpid()


class Spawner(chains.ChainletBase):
    def __init__(self) -> None:
        # A helper the chainlet starts and never stops: it must not outlive the chainlet.
        self._helper = subprocess.Popen(["sleep", "600"])
        Path(os.environ["SUPERVISED_HELPER_DIR"], f"{os.getpid()}.helper").write_text(str(self._helper.pid))

    async def run_remote(self) -> list[int]:
        return [os.getpid(), self._helper.pid]


class Hog(chains.ChainletBase):
    async def run_remote(self, megabytes: int) -> int:
        block = bytearray(megabytes * 1024 * 1024)
        block[::4096] = b"x" * len(block[::4096])  # touched, so the pages are really taken
        return os.getpid()


class Chatty(chains.ChainletBase):
    async def run_remote(self, lines: int, tag: str) -> int:
        for n in range(lines):
            print(f"{tag} line {n:07d} " + "x" * 60, flush=n % 100 == 99)
        print(f"{tag} done", flush=True)
        return lines
