"""What the door (``chains/server/door.py``) costs a request, against uvicorn's own httptools
protocol, in one process: no sockets, no wrk, so the figure is the parsing and the checks alone.

Each protocol is given a fake transport and fed the same request (a ``POST /run_remote`` with
the 8 headers a stub sends) ``--requests`` times; a trivial ASGI app answers each, so that the
next can be parsed. Rounds alternate between the protocols; the figure is the median of µs per
request, and the door's ratio to uvicorn's.

Run from the repository root: ``.venv/bin/python -m benchmarks.door`` (a few seconds). With
``--tree DIR`` (a copy of another commit's ``chains/``) its door is measured beside this one.
On a machine too busy for timings, count instructions instead, which other work does not move:
run one protocol under callgrind at two sizes and divide the difference by the difference of
sizes (what starting Python costs falls out)::

    valgrind --tool=callgrind .venv/bin/python -m benchmarks.door --only door --requests 500
    valgrind --tool=callgrind .venv/bin/python -m benchmarks.door --only door --requests 2500
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

BODY = b'{"text": "hello"}'
REQUEST = (
    b"POST /run_remote HTTP/1.1\r\nHost: 127.0.0.1:8001\r\ncontent-type: application/json\r\n"
    b"accept: application/json\r\naccept-encoding: identity\r\nx-chains-request-id: 0123456789abcdef\r\n"
    b"x-chains-timeout: 30.0\r\nauthorization: Bearer 0123456789abcdef0123456789abcdef\r\n"
    b"content-length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
)


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


class _Transport:
    def __init__(self) -> None:
        self.protocol: Any = None
        self.written = 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8001)}.get(name, default)

    def write(self, data: bytes) -> None:
        self.written += 1

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_protocol(self) -> Any:
        return self.protocol

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol


def measure(protocol_class: Any, requests: int) -> float:
    """µs per request of ``protocol_class`` parsing and answering ``requests`` requests."""
    config = uvicorn.Config(_app, log_level="error", access_log=False, lifespan="off")
    config.load()
    loop = asyncio.new_event_loop()
    try:
        protocol = protocol_class(config=config, server_state=ServerState(), app_state={}, _loop=loop)
        transport = _Transport()
        transport.protocol = protocol
        protocol.connection_made(transport)
        started = time.perf_counter()
        for _ in range(requests):
            protocol.data_received(REQUEST)
            loop.run_until_complete(asyncio.sleep(0))
        elapsed = time.perf_counter() - started
        if transport.written < requests:
            raise RuntimeError(f"{protocol_class.__name__} answered {transport.written} of {requests}")
        protocol.connection_lost(None)
        return elapsed / requests * 1e6
    finally:
        loop.close()


def _door_of(tree: Path | None) -> Any:
    if tree is not None:
        sys.path.insert(0, str(tree))
        for name in [m for m in sys.modules if m == "chains" or m.startswith("chains.")]:
            del sys.modules[name]
    door = importlib.import_module("chains.server.door")
    protocol = door.guarded_http(door.DoorLimits())
    if tree is not None:
        sys.path.remove(str(tree))
        for name in [m for m in sys.modules if m == "chains" or m.startswith("chains.")]:
            del sys.modules[name]
    return protocol


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tree", type=Path, help="another tree whose door to measure beside this one")
    parser.add_argument("--only", choices=("uvicorn", "door", "tree"), help="one protocol, one round")
    args = parser.parse_args(argv)
    if args.only is not None:
        only = {"uvicorn": lambda: HttpToolsProtocol, "door": lambda: _door_of(None)}
        only["tree"] = lambda: _door_of(args.tree.resolve())
        print(f"{args.only}: {measure(only[args.only](), args.requests):.2f} µs/request")
        return 0
    protocols = {"uvicorn": HttpToolsProtocol}
    if args.tree is not None:
        protocols["door (tree)"] = _door_of(args.tree.resolve())
    protocols["door"] = _door_of(None)
    figures: dict[str, list[float]] = {name: [] for name in protocols}
    for _ in range(args.rounds):
        for name, protocol in protocols.items():
            figures[name].append(measure(protocol, args.requests))
    base = statistics.median(figures["uvicorn"])
    print(f"{args.requests} requests a round, {args.rounds} rounds, medians")
    for name, values in figures.items():
        median = statistics.median(values)
        extra = median - base
        print(f"{name:<12} {median:7.2f} µs/request  {median / base:5.2f}x uvicorn's  ({extra:+.2f} µs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
