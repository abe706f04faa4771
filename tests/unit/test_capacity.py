"""The server's concurrency slots and the queue before them (chains/server/capacity.py)."""

from __future__ import annotations

import asyncio

import pytest

from chains.server.capacity import Capacity
from chains.server.refusal import Refusal


async def test_calls_wait_in_order_and_one_over_the_queue_is_refused() -> None:
    capacity = Capacity(concurrency=1, max_queue=2)
    await capacity.enter()
    order: list[str] = []

    async def waits(name: str) -> None:
        await capacity.enter()
        order.append(name)

    first = asyncio.create_task(waits("first"))
    second = asyncio.create_task(waits("second"))
    await asyncio.sleep(0)
    with pytest.raises(Refusal) as refused:
        await capacity.enter()
    assert refused.value.status == 503 and "1 calls running, 2 waiting" in str(refused.value.detail)
    assert not await capacity.try_take_slot()
    capacity.leave()
    await first
    assert order == ["first"]
    capacity.leave()
    await second
    assert order == ["first", "second"]
    capacity.leave()
    assert await capacity.try_take_slot()  # every slot back
    capacity.release_slot()


async def test_a_cancelled_waiter_gives_its_turn_or_its_slot_to_the_next() -> None:
    capacity = Capacity(concurrency=1, max_queue=4)
    await capacity.enter()
    gone = asyncio.create_task(capacity.enter())
    handed = asyncio.create_task(capacity.enter())
    after = asyncio.create_task(capacity.enter())
    await asyncio.sleep(0)
    gone.cancel()  # cancelled while waiting: leaves the queue
    await asyncio.sleep(0)
    capacity.leave()  # the slot goes to `handed`...
    handed.cancel()  # ...which is cancelled before it runs: the slot passes on to `after`
    await asyncio.gather(gone, handed, return_exceptions=True)
    await asyncio.wait_for(after, 1)
    capacity.leave()
    assert await capacity.try_take_slot() and not await capacity.try_take_slot()
