"""A fake model served unbatched and batched: one call costs 5 ms + 0.2 ms per input.

The cost is a ``time.sleep`` in a sync body, which runs in a worker thread and releases the GIL,
as a GPU forward pass does. Both chainlets run one model call at a time (``concurrency=1``), as
one GPU would. The answer is the input's square, so a caller can check it got its own.
"""

import time

import chains

BASE_COST_S = 0.005
PER_ITEM_COST_S = 0.0002
MAX_BATCH_SIZE = 32
MAX_WAIT_MS = 5.0


def cost_s(batch_size: int) -> float:
    return BASE_COST_S + PER_ITEM_COST_S * batch_size


ONE_AT_A_TIME = chains.RemoteConfig(compute=chains.Compute(concurrency=1))


@chains.mark_entrypoint("bench-batching")
class Batched(chains.ChainletBase):
    remote_config = ONE_AT_A_TIME

    @chains.batched(max_batch_size=MAX_BATCH_SIZE, max_wait_ms=MAX_WAIT_MS)
    def run_remote(self, n: list[int]) -> list[int]:
        time.sleep(cost_s(len(n)))
        return [x * x for x in n]


class Unbatched(chains.ChainletBase):
    remote_config = ONE_AT_A_TIME

    def run_remote(self, n: int) -> int:
        time.sleep(cost_s(1))
        return n * n
