"""What does the stream framing cost next to pydantic's own JSON work, and how fast are bytes frames?

Run from the repository root: ``.venv/bin/python -m benchmarks.streaming_codec`` (about 30 s).
Every figure is the median of ``--repeats`` runs, all measured in the same process, so the
ratios compare like with like. Figures and their reading are in benchmarks/README.md.

Small items (a one-field model, ~20 bytes of JSON):

- ``bare``: ``Token.model_validate_json(token.model_dump_json())`` per item: the cost the
  target is stated against.
- ``bare-core``: the same through the model's pydantic-core serializer and validator (the
  entry points the codec itself uses), to show how much of any gain comes from those.
- ``framed``: a stream writer's ``yield_item`` per item plus ``end()``, the frames joined into
  reads of 2048 frames (~47 KiB) as a transport delivers them, then ``FrameDecoder`` and item validation:
  everything framing adds (preamble, order checks, frame headers, decoding), without asyncio.
- ``framed, a chunk per frame``: the same, the decoder fed one frame per chunk (the
  worst case: a transport that hands over exactly what the server wrote).
- ``pipeline``: ``decode_framed(encode_framed(generator))``, what ``run_local`` does, async
  generators included; next to ``bare async``, the same generator with dump and validate
  but no framing, so the difference is what framing costs in the async path.

Bytes: 64 KiB payloads framed, re-chunked at 64 KiB (so chunks and frames never line up), and
decoded by ``FrameDecoder`` and by ``decode_framed`` (the stub's path); GB/s of payload.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pydantic

from chains.streaming import StreamShape, decode_framed, encode_framed, kinds, stream_types, stream_writer
from chains.streaming.framing import FrameDecoder, FrameKind, encode_frame

CHUNK = 64 * 1024
BATCH = 2048  # small frames per transport read


class Token(pydantic.BaseModel):
    text: str


TYPES = stream_types(Token)
SHAPE = StreamShape.of(kinds.ITEMS, item_type=Token)
BYTES = StreamShape.of(kinds.BYTES)


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rechunk(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def bare(items: list[Token]) -> None:
    for token in items:
        Token.model_validate_json(token.model_dump_json())


def bare_core(items: list[Token]) -> None:
    to_json = Token.__pydantic_serializer__.to_json
    validate_json = Token.__pydantic_validator__.validate_json
    for token in items:
        validate_json(to_json(token))


def framed(items: list[Token], one_chunk_per_frame: bool) -> int:
    """Write, transport and read ``items``; returns how many came back.

    Frames go through in reads of ``BATCH`` frames (about 47 KiB here), as a transport
    coalesces writes, so that as in the bare loop nothing is kept beyond what is in flight.
    """
    writer = stream_writer(TYPES)
    feed = FrameDecoder().feed
    load = TYPES.wire.item.load
    item = FrameKind.ITEM
    received = 0
    if one_chunk_per_frame:
        for token in items:
            for kind, payload in feed(writer.yield_item(token)):
                if kind == item:
                    load(payload)
                    received += 1
    else:
        write = writer.yield_item
        for start in range(0, len(items), BATCH):
            for kind, payload in feed(b"".join([write(token) for token in items[start : start + BATCH]])):
                if kind == item:
                    load(payload)
                    received += 1
    feed(writer.end())
    return received


async def generator(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def bare_async(items: list[Token]) -> None:
    async def dumped() -> AsyncIterator[bytes]:
        async for token in generator(items):
            yield token.model_dump_json().encode()

    async for payload in dumped():
        Token.model_validate_json(payload)


async def pipeline(items: list[Token]) -> None:
    async for _ in decode_framed(SHAPE, encode_framed(SHAPE, generator(items))):
        pass


def bytes_stream(frames: int) -> tuple[bytes, int]:
    payload = os.urandom(CHUNK)
    data = BYTES.wire.preamble + b"".join(encode_frame(FrameKind.ITEM, payload) for _ in range(frames))
    return data + encode_frame(FrameKind.END, b""), frames * len(payload)


def decode_bytes(chunks: list[bytes]) -> int:
    decoder = FrameDecoder()
    total = 0
    item = FrameKind.ITEM
    for chunk in chunks:
        for kind, payload in decoder.feed(chunk):
            if kind == item:
                total += len(payload)
    return total


async def decode_bytes_async(chunks: list[bytes]) -> int:
    total = 0
    async for payload in decode_framed(BYTES, chunks):
        total += len(payload)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--items", type=int, default=50_000, help="small items per run")
    parser.add_argument("--frames", type=int, default=2_000, help="64 KiB frames per run")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)

    items = [Token(text=f"token {i}") for i in range(args.items)]
    assert framed(items, False) == framed(items, True) == len(items)  # the timed code really round-trips
    loop = asyncio.new_event_loop()
    small = {
        "bare": median_seconds(lambda: bare(items), args.repeats),
        "bare-core": median_seconds(lambda: bare_core(items), args.repeats),
        "framed": median_seconds(lambda: framed(items, False), args.repeats),
        "framed, a chunk per frame": median_seconds(lambda: framed(items, True), args.repeats),
        "bare async": median_seconds(lambda: loop.run_until_complete(bare_async(items)), args.repeats),
        "pipeline": median_seconds(lambda: loop.run_until_complete(pipeline(items)), args.repeats),
    }
    data, payload_bytes = bytes_stream(args.frames)
    chunks = rechunk(data, CHUNK)
    assert decode_bytes(chunks) == payload_bytes
    large = {
        "FrameDecoder": median_seconds(lambda: decode_bytes(chunks), args.repeats),
        "decode_framed": median_seconds(
            lambda: loop.run_until_complete(decode_bytes_async(chunks)), args.repeats
        ),
    }
    loop.close()

    per_item_ns = {name: seconds / args.items * 1e9 for name, seconds in small.items()}
    ratios = {
        "framed / bare": small["framed"] / small["bare"],
        "framed / bare-core": small["framed"] / small["bare-core"],
        "framed, a chunk per frame / bare": small["framed, a chunk per frame"] / small["bare"],
        "pipeline / bare async": small["pipeline"] / small["bare async"],
    }
    gbps = {name: payload_bytes / seconds / 1e9 for name, seconds in large.items()}
    result = {
        "python": platform.python_version(),
        "pydantic": pydantic.VERSION,
        "machine": f"{platform.machine()}, {os.cpu_count()} cpu",
        "items": args.items,
        "frames": args.frames,
        "repeats": args.repeats,
        "small_items_ns_per_item": per_item_ns,
        "small_items_per_second": {name: 1e9 / ns for name, ns in per_item_ns.items()},
        "ratios": ratios,
        "bytes_64k_GB_per_s": gbps,
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(f"python {result['python']}, pydantic {result['pydantic']}, {result['machine']}")
    print(f"small items ({args.items} per run, median of {args.repeats}):")
    for name, ns in per_item_ns.items():
        print(f"  {name:<28} {ns:8.0f} ns/item  {1e9 / ns:>12,.0f} items/s")
    for name, ratio in ratios.items():
        print(f"  {name:<36} {ratio:6.2f}  (framing adds {100 * (ratio - 1):+.0f} %)")
    print(f"64 KiB bytes frames ({args.frames} per run, re-chunked at 64 KiB):")
    for name, rate in gbps.items():
        print(f"  {name:<28} {rate:8.2f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
