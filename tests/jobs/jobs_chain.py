"""A chain for the async-call tests: every run of the dependency's body is written to a log
file named in the input, so a test counts how often each job's body started and finished."""

import asyncio
import os

import chains


class Worker(chains.ChainletBase):
    async def run_remote(self, n: int, sleep: float, log: str, tag: str, fail: bool) -> int:
        with open(log, "a") as handle:
            handle.write(f"start {tag} {os.getpid()}\n")
        await asyncio.sleep(sleep)
        if fail:
            raise RuntimeError(f"failing {tag} on purpose")
        with open(log, "a") as handle:
            handle.write(f"done {tag}\n")
        return 2 * n


@chains.mark_entrypoint("jobs")
class Entry(chains.ChainletBase):
    def __init__(self, worker: Worker = chains.depends(Worker, timeout_sec=300, retries=0)) -> None:
        self._worker = worker

    async def run_remote(
        self, n: int, log: str, sleep: float = 0.0, tag: str = "", fail: bool = False
    ) -> dict[str, int]:
        return {"doubled": await self._worker.run_remote(n, sleep, log, tag, fail)}
