"""The servers of ``benchmarks/defaults.py``, each counted in instructions per request by callgrind.

Timings on a shared machine of two cores move by twofold; instruction counts do not: callgrind
counts what the server's process executes (every thread of it, the request-log writer and the
span sink included), whatever else the machine runs. So this benchmark gives the same six servers
as ``benchmarks/defaults.py`` (the bare floors, one chainlet and one hop at the defaults and with
the request log and the trace store off), each process run under ``valgrind --tool=callgrind``
with counting off while it starts, then counted over ``--requests`` calls sent by this process on
``--connections`` keep-alive connections, after a warm-up. The figure is instructions per request
(a hop sums both of its processes), and each server's ratio to its floor's, which estimates the
ratio of throughputs that wrk would measure on a quiet machine (the kernel's part of a request,
which callgrind does not see, is about the same for all of them).

Run from the repository root (about two minutes)::

    .venv/bin/python -m benchmarks.server_instructions
    .venv/bin/python -m benchmarks.server_instructions --only echo-off --requests 2000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import chains_codegen
from benchmarks import harness
from benchmarks.asgi_frameworks import BODY
from benchmarks.chainlets import CHAINS_DIR, generate_chain, new_token, serve_chainlet
from benchmarks.defaults import BASELINE, OFF, defaults_env

KINDS = tuple(BASELINE)


def _callgrind(out: Path) -> list[str]:
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
    ]


@dataclass(frozen=True)
class Counted:
    pid: int
    out: Path


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


def _total(out: Path) -> int:
    """The instructions of the last dump of ``out`` (``callgrind_control --dump`` writes ``out.N``)."""
    dumps = sorted(glob.glob(f"{out}.*"), key=lambda name: int(name.rsplit(".", 1)[1]))
    if not dumps:
        raise RuntimeError(f"callgrind wrote no dump to {out}.N")
    for line in Path(dumps[-1]).read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dumps[-1]}")


def request_bytes(port: int, path: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY


async def _drive(port: int, path: str, requests: int, connections: int) -> None:
    """``requests`` POSTs on ``connections`` keep-alive connections, each answer read whole."""
    request = request_bytes(port, path)
    left = [requests]

    async def connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while left[0] > 0:
                left[0] -= 1
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"answered {head[:200]!r}")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(connections)))


@contextlib.contextmanager
def _servers(kind: str, folder: Path) -> Iterator[tuple[str, int, list[Counted]]]:
    """The servers of ``kind`` under callgrind: (path, port of the one called, processes counted)."""
    token = new_token()
    env: Mapping[str, str] = defaults_env(folder) if kind.endswith("-defaults") else OFF
    slow = 300.0  # starting Python under valgrind takes tens of seconds
    counted: list[Counted] = []
    with contextlib.ExitStack() as stack:

        def uvicorn(name: str, app: str, app_env: Mapping[str, str] | None = None) -> harness.RunningServer:
            out = folder / f"{kind}-{name}.callgrind"
            argv = [*_callgrind(out), *harness.UvicornOptions().argv(app, 0)]
            server = stack.enter_context(_uvicorn(argv, slow, app_env))
            counted.append(Counted(server.process.pid, out))
            return server

        def chainlet(
            name: str,
            chain: chains_codegen.GeneratedChain,
            dependencies: Mapping[str, str] | None = None,
            entrypoint: bool = True,
        ) -> harness.RunningServer:
            out = folder / f"{kind}-{name}.callgrind"
            server = stack.enter_context(
                serve_chainlet(
                    chain.chainlets[name].directory,
                    entrypoint=entrypoint,
                    token=token,
                    env=env,
                    dependency_urls={dep: [url] for dep, url in (dependencies or {}).items()},
                    argv=[*_callgrind(out), sys.executable, "server.py"],
                    startup_timeout_s=slow,
                )
            )
            counted.append(Counted(server.process.pid, out))
            return server

        if kind == "floor":
            yield "/generate", uvicorn("floor", "benchmarks.apps.bare_starlette:app").port, counted
        elif kind == "floor-1hop":
            floor = uvicorn("floor", "benchmarks.apps.bare_starlette:app")
            hop = uvicorn("hop", "benchmarks.apps.bare_hop:app", {"BENCH_HOP_URL": floor.url("/generate")})
            yield "/generate", hop.port, counted
        elif kind.startswith("echo"):
            unary = generate_chain(CHAINS_DIR / "unary.py", folder / f"{kind}-chain")
            yield "/run_remote", chainlet("Echo", unary).port, counted
        else:
            hop_chain = generate_chain(CHAINS_DIR / "one_hop.py", folder / f"{kind}-chain")
            back = chainlet("Back", hop_chain, entrypoint=False)
            yield "/run_remote", chainlet("Front", hop_chain, {"Back": back.base_url}).port, counted


@contextlib.contextmanager
def _uvicorn(
    argv: list[str], startup_timeout_s: float, env: Mapping[str, str] | None = None
) -> Iterator[harness.RunningServer]:
    port = harness.free_port()
    argv = [arg if not arg.startswith("--port=") else f"--port={port}" for arg in argv]
    with harness.serve_command(
        argv,
        port,
        ready_path="/generate",
        ready_body=BODY,
        env=env,
        startup_timeout_s=startup_timeout_s,
    ) as server:
        yield server


def count(kind: str, requests: int, connections: int, warmup: int) -> float:
    """Instructions per request of ``kind``'s processes over ``requests`` calls."""
    with (
        tempfile.TemporaryDirectory(prefix="chains-instructions-") as tmp,
        _servers(kind, Path(tmp)) as (path, port, counted),
    ):
        asyncio.run(_drive(port, path, warmup, connections))
        for process in counted:
            _control("--instr=on", str(process.pid))
        asyncio.run(_drive(port, path, requests, connections))
        # The request log and the span sink write behind the calls, a fraction of a second
        # later: their work is counted once it is done.
        time.sleep(0.5)
        for process in counted:
            _control("--dump", str(process.pid))
            _control("--instr=off", str(process.pid))
        total = sum(_total(process.out) for process in counted)
    return total / requests


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", choices=KINDS, action="append", help="one server (repeat for more)")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is needed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    kinds = args.only or list(KINDS)
    figures = {}
    for kind in kinds:
        figures[kind] = count(kind, args.requests, args.connections, args.warmup)
        print(f"{kind:<14} {figures[kind]:>10,.0f} instructions/request", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"{'server':<14} {'instr/request':>14} {'floor/server':>13}")
    for kind in kinds:
        base = BASELINE[kind]
        ratio = f"{figures[base] / figures[kind]:.2f}x" if base in figures else ""
        print(f"{kind:<14} {figures[kind]:>14,.0f} {ratio:>13}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
