"""The chain of benchmarks/jobs.py: one unary and one streaming endpoint, no dependencies, so
that what is measured is the job machinery and not the work."""

import time
from collections.abc import AsyncIterator

import chains


@chains.mark_entrypoint("bench-jobs")
class Stamp(chains.ChainletBase):
    async def run_remote(self, n: int) -> dict[str, float]:
        return {"n": n, "started": time.time()}


@chains.mark_entrypoint("bench-job-stream")
class Items(chains.ChainletBase):
    async def run_remote(self, count: int) -> AsyncIterator[str]:
        for i in range(count):
            yield str(i)
