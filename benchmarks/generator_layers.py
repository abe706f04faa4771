"""What one pass-through async generator costs per item, next to the work a relaying chainlet does.

A stream relayed by a chainlet (``Restream`` in benchmarks/chains/streaming.py) passes each item
through several async generators: the frame reader, ``decode_framed``, the stub's
``stream_remote``, the generated stub's ``run_remote``, the user's ``run_remote``, the server's
deadline watch and ``encode_framed``. Two of them (``decode_framed`` and the generated stub) only
pass items on. This measures, in one process and the same run:

- ``layers 0``: an async generator of ints consumed directly (the baseline);
- ``layers 1`` and ``layers 2``: the same through one and two ``async for x in g: yield x`` layers;
- ``relay``: a relaying chainlet's per-item work without the network: framed bytes decoded by
  ``decode_framed``, passed through a user generator and the server's deadline watch, and
  encoded again by ``encode_framed``.

Run from the repository root: ``.venv/bin/python -m benchmarks.generator_layers`` (under 10 s).
Medians over ``--repeats`` runs; figures in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence

import pydantic
import uvloop

from chains.errors import DeadlineExceeded
from chains.server.deadline import until_deadline
from chains.streaming import StreamShape, decode_framed, encode_framed, kinds


class Item(pydantic.BaseModel):
    index: int
    text: str


SHAPE = StreamShape.of(kinds.ITEMS, item_type=Item)


async def _ints(count: int) -> AsyncIterator[int]:
    for index in range(count):
        yield index


async def _items_of(count: int) -> AsyncIterator[Item]:
    for index in range(count):
        yield Item(index=index, text="token")


async def _passed_on(source: AsyncIterator[object]) -> AsyncIterator[object]:
    async for value in source:
        yield value


async def _layers(depth: int, count: int) -> float:
    source: AsyncIterator[object] = _ints(count)
    for _ in range(depth):
        source = _passed_on(source)
    started = time.perf_counter()
    async for _ in source:
        pass
    return (time.perf_counter() - started) / count


async def _chunks(body: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def _relay(body: bytes, count: int) -> float:
    started = time.perf_counter()
    user = _passed_on(decode_framed(SHAPE, _chunks(body)))
    first = await anext(user)
    deadline = time.monotonic() + 3600  # stubs always send one, so the watch always runs
    items = until_deadline(first, user, deadline, DeadlineExceeded("benchmark"))
    async for _ in encode_framed(SHAPE, items, chainlet="Relay"):
        pass
    return (time.perf_counter() - started) / count


async def measure(count: int, repeats: int) -> dict[str, float]:
    body = b"".join([chunk async for chunk in encode_framed(SHAPE, _items_of(count), chainlet="P")])
    runs: dict[str, list[float]] = {"layers 0": [], "layers 1": [], "layers 2": [], "relay": []}
    for _ in range(repeats):  # interleaved, so that load from elsewhere falls on all alike
        for depth in (0, 1, 2):
            runs[f"layers {depth}"].append(await _layers(depth, count))
        runs["relay"].append(await _relay(body, count))
    return {name: statistics.median(values) * 1e6 for name, values in runs.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=200_000, help="items per run")
    parser.add_argument("--repeats", type=int, default=7, help="runs of each measurement")
    args = parser.parse_args(argv)
    figures = uvloop.run(measure(args.items, args.repeats))
    base = figures["layers 0"]
    for name, micros in figures.items():
        print(f"{name:10} {micros:6.3f} us/item  {micros / base:5.2f}x layers 0")
    layer = (figures["layers 2"] - base) / 2
    print(f"one pass-through layer: {layer:.3f} us/item, {layer / figures['relay']:.1%} of the relay's work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
