"""A unary entrypoint over a ``@chains.batched`` chainlet, for the dashboard's JSON tests:
concurrent calls share batches, and each batch is a trace of its own."""

import asyncio

import chains


class Squares(chains.ChainletBase):
    # Four concurrent calls make one batch: the wait is long enough for all four to queue.
    @chains.batched(max_batch_size=4, max_wait_ms=2000)
    async def run_remote(self, n: list[int]) -> list[int]:
        return [x * x for x in n]


@chains.mark_entrypoint("batched-dashboard")
class Entry(chains.ChainletBase):
    def __init__(self, squares: Squares = chains.depends(Squares)) -> None:
        self._squares = squares

    async def run_remote(self, n: int, pause: float = 0.0) -> int:
        await asyncio.sleep(min(pause, 30.0))  # a job that is seen running
        return await self._squares.run_remote(n)
