"""The batch scheduler, driven by a body that waits for the test: no timing is asserted."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest

import chains
from chains.batcher import BatchConfig, Batcher
from chains.call_context import CallContext, serving_call
from chains.errors import BatchQueueFull, BatchSizeError
from chains.metrics import Metrics

NEVER_MS = 3_600_000.0  # a wait no test reaches: a batch then goes only when full


class Body:
    """A fake model: records each batch; while ``gate`` is clear, batches wait for it."""

    def __init__(self, gated: bool = False) -> None:
        self.batches: list[list[Any]] = []
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.running = 0
        self.most_running = 0

    async def __call__(self, items: list[Any]) -> list[Any]:
        self.batches.append(list(items))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.gate.wait()
        finally:
            self.running -= 1
        return [item * 10 for item in items]


def batcher(body: Any, size: int = 4, wait_ms: float = NEVER_MS, **kwargs: Any) -> Batcher:
    return Batcher(body, chainlet="Model", config=BatchConfig(size, wait_ms), **kwargs)


async def settle() -> None:
    """Let every ready task run until none is ready."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_full_batch_goes_and_each_caller_gets_its_own_output() -> None:
    async def main() -> None:
        body = Body()
        b = batcher(body, size=4)
        assert await asyncio.gather(*(b.submit(i) for i in (1, 2, 3, 4))) == [10, 20, 30, 40]
        assert body.batches == [[1, 2, 3, 4]]

    asyncio.run(main())


def test_calls_that_queue_while_the_model_runs_go_together_without_waiting_again() -> None:
    async def main() -> None:
        body = Body(gated=True)
        b = batcher(body, size=8, wait_ms=0)
        first = asyncio.ensure_future(b.submit(1))
        await settle()
        assert body.batches == [[1]]
        later = [asyncio.ensure_future(b.submit(i)) for i in (2, 3, 4)]
        await settle()
        assert b.queued == 3 and body.batches == [[1]]  # one batch at a time (concurrency 1)
        body.gate.set()
        assert await first == 10 and await asyncio.gather(*later) == [20, 30, 40]
        assert body.batches == [[1], [2, 3, 4]]

    asyncio.run(main())


def test_the_concurrency_limit_counts_batches() -> None:
    async def main() -> None:
        body = Body(gated=True)
        b = batcher(body, size=2, concurrency=2)
        calls = [asyncio.ensure_future(b.submit(i)) for i in range(6)]
        await settle()
        assert body.batches == [[0, 1], [2, 3]] and b.queued == 2
        body.gate.set()
        assert await asyncio.gather(*calls) == [0, 10, 20, 30, 40, 50]
        assert body.most_running == 2

    asyncio.run(main())


def test_a_cancelled_call_leaves_the_queue_and_is_never_computed() -> None:
    async def main() -> None:
        body = Body(gated=True)
        b = batcher(body, size=2)
        running = [asyncio.ensure_future(b.submit(i)) for i in (1, 2)]
        await settle()
        gone = asyncio.ensure_future(b.submit(99))
        kept = asyncio.ensure_future(b.submit(3))
        await settle()
        assert b.queued == 2
        gone.cancel()
        await settle()
        assert b.queued == 1
        more = asyncio.ensure_future(b.submit(4))
        body.gate.set()
        assert await asyncio.gather(*running, kept, more) == [10, 20, 30, 40]
        assert body.batches == [[1, 2], [3, 4]]

    asyncio.run(main())


def test_an_expired_deadline_is_a_deadline_error_and_never_computed() -> None:
    async def main() -> None:
        body = Body()
        b = batcher(body, size=2)
        with serving_call(CallContext("late", deadline=time.monotonic() - 1)):
            late = asyncio.ensure_future(b.submit(7))
        on_time = asyncio.ensure_future(b.submit(8))
        with pytest.raises(chains.DeadlineExceeded, match="Model: the caller's deadline passed"):
            await late
        assert await on_time == 80
        assert body.batches == [[8]]

    asyncio.run(main())


def test_past_max_queue_a_call_is_refused() -> None:
    async def main() -> None:
        body = Body(gated=True)
        b = batcher(body, size=1, max_queue=1)
        first = asyncio.ensure_future(b.submit(1))
        await settle()
        queued = asyncio.ensure_future(b.submit(2))
        await settle()
        assert b.full
        with pytest.raises(BatchQueueFull, match="1 calls are waiting"):
            await b.submit(3)
        body.gate.set()
        assert [await first, await queued] == [10, 20]

    asyncio.run(main())


def test_a_body_exception_fails_every_call_of_its_batch() -> None:
    async def broken(items: list[int]) -> list[Any]:
        raise RuntimeError(f"broke on {len(items)}")

    async def main() -> None:
        b = batcher(broken, size=2)
        both = await asyncio.gather(b.submit(1), b.submit(2), return_exceptions=True)
        assert both[0] is both[1]
        assert isinstance(both[0], RuntimeError) and str(both[0]) == "broke on 2"

    asyncio.run(main())


def test_a_returned_exception_fails_only_its_own_call() -> None:
    async def per_item(items: list[int]) -> list[Any]:
        return [ValueError(f"no {i}") if i < 0 else i for i in items]

    async def main() -> None:
        b = batcher(per_item, size=3)
        mixed = await asyncio.gather(b.submit(1), b.submit(-2), b.submit(3), return_exceptions=True)
        assert mixed[0] == 1 and mixed[2] == 3
        assert isinstance(mixed[1], ValueError) and str(mixed[1]) == "no -2"

    asyncio.run(main())


def test_a_wrong_number_of_outputs_fails_the_batch_naming_the_chainlet() -> None:
    async def short(items: list[int]) -> list[Any]:
        return items[:-1]

    async def main() -> None:
        b = batcher(short, size=2)
        wrong = await asyncio.gather(b.submit(1), b.submit(2), return_exceptions=True)
        assert all(isinstance(e, BatchSizeError) for e in wrong)
        assert str(wrong[0]).startswith(
            "chainlet Model: the batched run_remote got 2 inputs and returned 1 outputs"
        )

    asyncio.run(main())


def test_metrics_record_batch_sizes_waits_and_the_queue() -> None:
    async def main() -> Metrics:
        metrics = Metrics("Model")
        b = batcher(Body(), size=3, observer=metrics)
        metrics.batch_queue = lambda: b.queued
        await asyncio.gather(*(b.submit(i) for i in range(6)))
        return metrics

    text = asyncio.run(main()).render()
    assert 'chains_batch_size_count{chainlet="Model"} 2' in text
    assert 'chains_batch_size_sum{chainlet="Model"} 6.000000' in text
    assert 'chains_batch_size_bucket{chainlet="Model",le="2"} 0' in text
    assert 'chains_batch_size_bucket{chainlet="Model",le="4"} 2' in text
    assert 'chains_batch_wait_seconds_count{chainlet="Model"} 6' in text
    assert 'chains_batch_queue_length{chainlet="Model"} 0' in text
    assert "chains_batch" not in Metrics("Plain").render()


class ThreadBody:
    """A sync fake model: records each batch and the thread it ran in; the first batch waits
    until the test lets it go, so that the next batches are queued (and full) by then."""

    def __init__(self, fail_batch: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.threads: list[str] = []
        self.first = threading.Event()
        self.fail_batch = fail_batch

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        self.threads.append(threading.current_thread().name)
        if len(self.batches) == 1:
            assert self.first.wait(30), "the test never let the first batch go"
        if len(self.batches) == self.fail_batch:
            raise ValueError(f"batch {self.fail_batch} fails")
        return [item * 10 for item in items]


def test_a_sync_body_goes_on_to_the_next_full_batches_in_its_thread() -> None:
    async def main() -> tuple[ThreadBody, Metrics, list[Any]]:
        body, metrics = ThreadBody(fail_batch=2), Metrics("Model")
        b = batcher(body, size=2, observer=metrics, sync=True)
        metrics.batch_queue = lambda: b.queued
        first = [asyncio.ensure_future(b.submit(i)) for i in (1, 2)]
        for _ in range(3000):  # until the first batch is running (bounded: 30 s)
            if body.batches:
                break
            await asyncio.sleep(0.01)
        assert body.batches == [[1, 2]]
        with serving_call(CallContext("late", deadline=time.monotonic() - 1)):
            late = asyncio.ensure_future(b.submit(0))  # its deadline passes in the queue
        queued = [asyncio.ensure_future(b.submit(i)) for i in (3, 4, 5, 6, 7, 8)]
        await settle()
        assert b.queued == 7
        body.first.set()
        outcomes = await asyncio.gather(*first, late, *queued, return_exceptions=True)
        return body, metrics, outcomes

    body, metrics, outcomes = asyncio.run(main())
    # The worker thread took [0 (expired), 3, 4] as [3, 4], then [5, 6] and [7, 8], each full
    # once the batch before it ended, without handing back to the event loop in between.
    assert body.batches == [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert len(set(body.threads)) == 1
    assert outcomes[:2] == [10, 20]
    assert isinstance(outcomes[2], chains.DeadlineExceeded)  # and never computed (above)
    # Batch 2 failed: its two calls only.
    assert all(isinstance(o, ValueError) and "batch 2 fails" in str(o) for o in outcomes[3:5])
    assert outcomes[5:] == [50, 60, 70, 80]
    text = metrics.render()
    assert 'chains_batch_size_count{chainlet="Model"} 4' in text
    assert 'chains_batch_size_sum{chainlet="Model"} 8.000000' in text
    assert 'chains_batch_wait_seconds_count{chainlet="Model"} 8' in text


# -- through run_local ---------------------------------------------------------------------------


class Squares(chains.ChainletBase):
    threads: ClassVar[set[str]] = set()

    @chains.batched(max_batch_size=4, max_wait_ms=NEVER_MS)
    def run_remote(self, numbers: list[int]) -> list[int]:
        type(self).threads.add(threading.current_thread().name)
        return [n * n for n in numbers]


class Lies(chains.ChainletBase):
    @chains.batched(max_batch_size=2, max_wait_ms=NEVER_MS)
    async def run_remote(self, numbers: list[int]) -> list[int]:
        return numbers[:1]


@chains.mark_entrypoint
class Sum(chains.ChainletBase):
    def __init__(self, squares: Squares = chains.depends(Squares), lies: Lies = chains.depends(Lies)) -> None:
        self._squares = squares
        self._lies = lies

    async def run_remote(self, numbers: list[int]) -> int:
        squares = await asyncio.gather(*(self._squares.run_remote(n) for n in numbers))
        return sum(squares)

    async def lie(self, a: int, b: int) -> list[Any]:
        return await asyncio.gather(
            self._lies.run_remote(a), self._lies.run_remote(b), return_exceptions=True
        )


def test_run_local_callers_call_with_one_input_and_a_sync_body_runs_in_a_worker_thread() -> None:
    with chains.run_local():
        entry = Sum()
        assert asyncio.run(entry.run_remote([1, 2, 3, 4])) == 30
        assert asyncio.run(entry.run_remote([5, 6, 7, 8])) == 25 + 36 + 49 + 64  # a new event loop
        errors = asyncio.run(entry.lie(1, 2))
    assert threading.main_thread().name not in Squares.threads
    assert all(isinstance(e, chains.RemoteError) for e in errors)
    assert "chainlet Lies: the batched run_remote got 2 inputs and returned 1 outputs" in str(errors[0])


def test_the_body_can_be_called_with_a_list_directly() -> None:
    with chains.run_local():
        squares = Squares()
        assert asyncio.run(squares.run_remote.batch([2, 3])) == [4, 9]
        with pytest.raises(TypeError, match="run_remote takes one input, `numbers`"):
            asyncio.run(squares.run_remote(1, 2))


# -- streaming batches -------------------------------------------------------------------------


class Steps:
    """A streaming fake model: three steps, each one output per input; records when it stops."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.closed_at: list[int] = []

    async def __call__(self, prompts: list[str]) -> AsyncIterator[list[Any]]:
        self.batches.append(list(prompts))
        step = 0
        try:
            for step in range(3):
                await asyncio.sleep(0)
                yield [ValueError(f"no {p}") if p == "bad" and step == 1 else f"{p}{step}" for p in prompts]
        finally:
            self.closed_at.append(step)


async def read_all(stream: AsyncIterator[Any]) -> list[Any]:
    out: list[Any] = []
    try:
        async for item in stream:
            out.append(item)
    except ValueError as exc:
        out.append(f"error: {exc}")
    return out


def test_a_streaming_batch_gives_each_caller_its_own_items_and_errors() -> None:
    async def main() -> None:
        steps = Steps()
        b = batcher(steps, size=3, streaming=True)
        results = await asyncio.gather(*(read_all(b.stream(p)) for p in ("a", "b", "bad")))
        assert results == [["a0", "a1", "a2"], ["b0", "b1", "b2"], ["bad0", "error: no bad"]]
        assert steps.batches == [["a", "b", "bad"]]

    asyncio.run(main())


def test_a_streaming_batch_stops_when_every_caller_has_left() -> None:
    async def first_only(stream: AsyncIterator[Any]) -> Any:
        async with contextlib.aclosing(stream):  # type: ignore[type-var]
            return await anext(stream)

    async def main() -> None:
        steps = Steps()
        b = batcher(steps, size=2, streaming=True)
        assert await asyncio.gather(first_only(b.stream("x")), first_only(b.stream("y"))) == ["x0", "y0"]
        await settle()
        assert steps.closed_at == [1]  # closed at its second step, never computing the third

    asyncio.run(main())


class Classifier(chains.ModelBase):
    """A Truss model whose ``predict`` is batched: its calls are gathered like run_remote's."""

    def load(self) -> None:
        self.runs: list[list[int]] = []

    @chains.batched(max_batch_size=3, max_wait_ms=NEVER_MS)
    async def predict(self, indexes: list[int]) -> list[str]:
        self.runs.append(indexes)
        return [["cat", "dog", "owl"][i] for i in indexes]


def test_a_models_batched_predict_is_served_in_batches() -> None:
    async def main(model: Classifier) -> list[str]:
        return list(await asyncio.gather(model.run_remote(2), model.predict(0), model.run_remote(1)))

    with chains.run_local():
        model = Classifier()  # load() runs as part of building it
        assert asyncio.run(main(model)) == ["owl", "cat", "dog"]
        assert model.runs == [[2, 0, 1]]


def test_a_batch_runs_outside_the_context_of_the_call_that_started_the_dispatcher() -> None:
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="none")
    seen: list[str] = []

    async def body(items: list[int]) -> list[int]:
        seen.append(marker.get())
        return items

    async def main() -> None:
        b = batcher(body, size=1)
        marker.set("first caller")
        assert await b.submit(1) == 1

    asyncio.run(main())
    assert seen == ["none"]
