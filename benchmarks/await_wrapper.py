"""What ``@awaited`` (the generated stubs' check for a forgotten ``await``) costs per call.

Two measurements, each the same stub method with and without the decorator, alternated in
rounds in one process, medians:

* ``bare``: an ``async def`` that returns at once, awaited: the wrapper's own cost;
* ``stub``: a whole stub call (arguments encoded, the call policy, the result decoded) over an
  in-memory transport that answers at once: everything of a call but the network.

    .venv/bin/python -m benchmarks.await_wrapper --rounds 15
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from chains.await_check import awaited
from chains.stubs import StubBase
from chains.stubs.transport import Response


class _Answering:
    """A transport that answers every call with the same JSON result, at once."""

    async def send(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float, *, stream: bool = False
    ) -> Response:
        return Response(200, {"content-type": "application/json"}, b'"ok"')

    async def aclose(self) -> None:
        pass


class PlainStub(StubBase):
    async def run_remote(self, text: str) -> str:
        result: str = await self.call_remote(text=text)
        return result


class AwaitedStub(StubBase):
    @awaited
    async def run_remote(self, text: str) -> str:
        result: str = await self.call_remote(text=text)
        return result


class Bare:
    async def run(self, text: str) -> str:
        return text

    @awaited
    async def run_awaited(self, text: str) -> str:
        return text


async def _per_call(call: Callable[[str], Awaitable[str]], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        await call("x")
    return (time.perf_counter() - start) / calls


async def _measure(rounds: int, calls: int) -> dict[str, Any]:
    bare = Bare()
    plain = PlainStub("http://127.0.0.1:1", name="Plain", transport=_Answering())
    checked = AwaitedStub("http://127.0.0.1:1", name="Awaited", transport=_Answering())
    pairs = {"bare": (bare.run, bare.run_awaited), "stub": (plain.run_remote, checked.run_remote)}
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in pairs}
    for name, (without, with_) in pairs.items():
        await _per_call(without, calls // 10)  # warm up
        await _per_call(with_, calls // 10)
        for _ in range(rounds):
            times[name][0].append(await _per_call(without, calls))
            times[name][1].append(await _per_call(with_, calls))
    await plain.aclose()
    await checked.aclose()
    report: dict[str, Any] = {}
    for name, (without_times, with_times) in times.items():
        base, wrapped = statistics.median(without_times), statistics.median(with_times)
        report[name] = {
            "without_us": round(base * 1e6, 3),
            "with_us": round(wrapped * 1e6, 3),
            "added_us": round((wrapped - base) * 1e6, 3),
            "ratio": round(wrapped / base, 3),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    options = parser.parse_args()
    report = asyncio.run(_measure(options.rounds, options.calls))
    if options.json:
        print(json.dumps(report))
        return
    for name, figures in report.items():
        print(
            f"{name:5} without {figures['without_us']:8.3f} µs  with {figures['with_us']:8.3f} µs  "
            f"added {figures['added_us']:6.3f} µs  ratio {figures['ratio']:.3f}"
        )


if __name__ == "__main__":
    main()
